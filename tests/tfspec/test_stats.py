"""`DecodeStats`: what the loop counts, in particular that counting stops at EOS."""

import numpy as np
import pytest

import tfspec
from tfspec.models.ngram import NGram

VOCAB, EOS = 8, 2


def _chain(path, other=7):
    """A bigram table whose argmax walks `path` (token -> next token), else `other`."""
    probs = np.full([VOCAB, VOCAB], 0.02)
    probs[:, other] = 0.5
    for a, b in path:
        probs[a] = 0.02
        probs[a, b] = 0.9
    return np.log(probs / probs.sum(axis=1, keepdims=True))


def _greedy(target, draft, k):
    return tfspec.generate(target, [[3]], draft=draft, k=k, max_new_tokens=16,
                           sampling=tfspec.Sampling(0.0), eos_id=EOS)


@pytest.mark.parametrize("k", [3, 8])
def test_drafts_after_an_accepted_eos_are_not_counted(k):
    # Target and draft agree on 3 -> 4 -> 5 -> EOS: one round emits [4, 5, EOS], all three
    # drafts accepted. Drafts after the EOS (k - 3 of them) are neither drafted nor rejected.
    table = _chain([(3, 4), (4, 5), (5, EOS)])
    gen = _greedy(NGram(table, eos_id=EOS), NGram(table), k)
    assert gen.row_tokens(0) == [4, 5, EOS]
    s = gen.stats
    assert (s.rounds[0], s.drafted[0], s.accepted[0]) == (1, 3, 3)
    assert s.acceptance_rate == 1.0
    np.testing.assert_array_equal(s.accepted_per_position[0], [1, 1, 1] + [0] * (k - 3))


def test_drafts_past_an_eos_correction_are_not_counted():
    # The draft agrees on 4 but then proposes 6 where the target emits EOS: the round
    # verifies two drafts (one accepted, one rejected), emits [4, EOS] and counts no more.
    target = NGram(_chain([(3, 4), (4, EOS)]), eos_id=EOS)
    draft = NGram(_chain([(3, 4), (4, 6), (6, 6)]))
    gen = _greedy(target, draft, 5)
    assert gen.row_tokens(0) == [4, EOS]
    s = gen.stats
    assert (s.rounds[0], s.drafted[0], s.accepted[0], s.verified[0]) == (1, 2, 1, 2)
    assert s.acceptance_rate == 0.5


def test_rows_without_eos_count_every_draft():
    table = _chain([(3, 4), (4, 5), (5, 3)])
    gen = tfspec.generate(NGram(table), [[3]], draft=NGram(table), k=4, max_new_tokens=15,
                          sampling=tfspec.Sampling(0.0), eos_id=EOS)
    assert gen.stats.drafted[0] == 4 * gen.stats.rounds[0] == 12
