"""Loop behaviour: greedy identity, determinism, batch independence, per-row EOS.

Every test runs under `--strategy` (tests/conftest.py); the one marked `strategies` runs under
the default and the mirrored strategy in every run."""

import math

import numpy as np
import pytest
import tensorflow as tf

import tfspec
from tfspec import decoding
from tfspec import sampling as sampling_lib
from tfspec.models.ngram import NGram
from tfspec.models.prompt_lookup import PromptLookup
from tfspec.testing import exact_reference as ref

VOCAB = 7
PROMPTS = [[1, 2, 3], [4], [5, 6, 5, 6, 5], [2, 2], [3, 1, 4, 1, 5, 2, 6]]


def _generate(strategy, *args, **kwargs):
    """`tfspec.generate` under the test's strategy (`--strategy`, tests/conftest.py)."""
    return tfspec.generate(*args, strategy=strategy, **kwargs)


def _models(seed=0, order=3):
    rng = np.random.RandomState(seed)
    target = NGram(ref.random_table(rng, VOCAB, order=order, concentration=0.3))
    draft = NGram(ref.random_table(rng, VOCAB, order=2))
    return target, draft


@pytest.mark.parametrize("k", [1, 3, 8])
@pytest.mark.parametrize("draft_kind", ["ngram", "prompt_lookup", "same_as_target"])
def test_greedy_speculative_equals_greedy_autoregressive(k, draft_kind, strategy):
    target, draft = _models()
    draft = {"ngram": draft, "prompt_lookup": PromptLookup(max_ngram=2),
             "same_as_target": target}[draft_kind]
    greedy = tfspec.Sampling(temperature=0.0)
    ar = _generate(strategy, target, PROMPTS, draft=None, max_new_tokens=20, sampling=greedy)
    spec = _generate(strategy, target, PROMPTS, draft=draft, k=k, max_new_tokens=20,
                           sampling=greedy)
    np.testing.assert_array_equal(spec.tokens, ar.tokens)
    np.testing.assert_array_equal(spec.lengths, ar.lengths)
    assert spec.stats.rounds.sum() <= ar.stats.rounds.sum()
    if draft_kind == "same_as_target":
        assert spec.stats.acceptance_rate == 1.0


@pytest.mark.parametrize("k", [0, 3])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_eager_graph_and_xla_agree(k, temperature, strategy):
    target, draft = _models()
    outs = [_generate(strategy, target, PROMPTS, draft=draft, k=k, max_new_tokens=12,
                            sampling=tfspec.Sampling(temperature), seed=3, jit_compile=jit)
            for jit in (True, False, None)]
    for other in outs[1:]:
        np.testing.assert_array_equal(outs[0].tokens, other.tokens)
        np.testing.assert_array_equal(outs[0].stats.accepted, other.stats.accepted)


def test_same_seed_same_tokens_other_seed_other_tokens(strategy):
    target, draft = _models()
    run = lambda seed: _generate(strategy, target, PROMPTS * 4, draft=draft, k=2,
                                       max_new_tokens=15, seed=seed).tokens
    np.testing.assert_array_equal(run(5), run(5))
    assert not np.array_equal(run(5), run(6))


@pytest.mark.parametrize("k", [0, 4])
def test_row_alone_equals_row_in_batch(k, strategy):
    target, draft = _models()
    keys = [11, 22, 33, 44, 55]
    batch = _generate(strategy, target, PROMPTS, draft=draft, k=k, max_new_tokens=16, seed=9,
                            row_keys=keys)
    for i in (0, 2, 4):
        alone = _generate(strategy, target, [PROMPTS[i]], draft=draft, k=k, max_new_tokens=16,
                                seed=9, row_keys=[keys[i]])
        np.testing.assert_array_equal(alone.tokens[0], batch.tokens[i])
        assert alone.stats.accepted[0] == batch.stats.accepted[i]


def test_eos_stops_each_row_independently(strategy):
    target, draft = _models(seed=2)
    eos = 3
    gen = _generate(strategy, target, PROMPTS * 20, draft=draft, k=4, max_new_tokens=24, seed=0,
                          eos_id=eos)
    stopped = 0
    for row, n in zip(gen.tokens, gen.lengths):
        emitted = row[:n].tolist()
        # EOS, when present, is the last emitted token; nothing after it but padding.
        assert eos not in emitted[:-1]
        assert (row[n:] == 0).all()
        stopped += emitted[-1] == eos and n < 24
    assert 0 < stopped < len(gen.lengths), "rows should finish at different times"
    assert len(set(gen.lengths.tolist())) > 3


def test_eos_in_the_middle_of_an_accepted_block(strategy):
    # A draft identical to the target accepts all k = 8 drafts every round, so rows grow in
    # blocks of 9; a row that ends at a length that is not a multiple of 9 stopped at an EOS
    # inside an accepted block, and nothing of the block after the EOS was emitted.
    target, _ = _models(seed=4)
    eos = 2
    gen = _generate(strategy, target, PROMPTS * 10, draft=target, k=8, max_new_tokens=30,
                          seed=1, eos_id=eos)
    assert gen.stats.acceptance_rate == 1.0
    mid_block = 0
    for row, n in zip(gen.tokens, gen.lengths):
        assert eos not in row[:n - 1].tolist()
        assert (row[n:] == 0).all()
        mid_block += row[n - 1] == eos and n % 9 != 0
    assert mid_block > 0


LOW, HIGH = (1, 2, 3), (4, 5, 6)
# Rows 0 and 2 start (and, greedily, stay) in LOW; row 1 in HIGH. Mixed prompt lengths.
SPLIT_PROMPTS = [[1, 2, 3], [5, 4], [2, 3, 1, 1]]


def _split_pair():
    """An order-3 target and a draft that agree on LOW contexts only.

    The target's greedy next token lies in the group of the last token, so a row stays in
    the group its prompt ends in. The draft's argmax equals the target's on every context
    except a third of the HIGH x HIGH ones: LOW rows accept every draft, HIGH rows some.
    """
    rng = np.random.RandomState(0)
    target = 0.5 * rng.dirichlet(np.ones(VOCAB), size=(VOCAB, VOCAB))
    draft = target.copy()
    for a in range(VOCAB):
        for b in range(VOCAB):
            group = HIGH if b in HIGH else LOW
            target[a, b, group[(a + b) % 3]] += 0.5
            shift = int(a in HIGH and b in HIGH and (a + 2 * b) % 3 == 0)
            draft[a, b, group[(a + b + shift) % 3]] += 0.5
    return NGram(np.log(target)), NGram(np.log(draft))


@pytest.mark.parametrize("k", [2, 4])
def test_rows_advance_by_their_own_acceptance(k, strategy):
    """Each row of a batch takes the rounds its OWN acceptance implies.

    Rows 0 and 2 accept every draft, so they finish in ceil(N / (k + 1)) rounds; row 1
    rejects some drafts and needs more. In the batch every row takes exactly the rounds,
    accepted drafts and tokens it takes decoded alone. A loop that advanced every row by the
    batch's smallest accepted count would hold rows 0 and 2 back to row 1's pace.
    """
    target, draft = _split_pair()
    max_new = 24
    kwargs = dict(draft=draft, k=k, max_new_tokens=max_new,
                  sampling=tfspec.Sampling(0.0), eos_id=None)
    batch = _generate(strategy, target, SPLIT_PROMPTS, **kwargs)
    rounds, accepted = batch.stats.rounds, batch.stats.accepted
    full_rounds = math.ceil(max_new / (k + 1))
    assert rounds[0] == rounds[2] == full_rounds
    assert accepted[0] == batch.stats.drafted[0]
    assert 0 < accepted[1] < batch.stats.drafted[1]
    assert rounds[1] > full_rounds
    for i, prompt in enumerate(SPLIT_PROMPTS):
        alone = _generate(strategy, target, [prompt], **kwargs)
        assert alone.stats.rounds[0] == rounds[i], f"row {i}"
        assert alone.stats.accepted[0] == accepted[i], f"row {i}"
        np.testing.assert_array_equal(alone.tokens[0], batch.tokens[i])
    ar = _generate(strategy, target, SPLIT_PROMPTS, max_new_tokens=max_new,
                         sampling=tfspec.Sampling(0.0), eos_id=None)
    np.testing.assert_array_equal(batch.tokens, ar.tokens)


@pytest.mark.strategies
def test_stats_are_consistent(strategy):
    target, draft = _models()
    gen = _generate(strategy, target, PROMPTS * 3, draft=draft, k=3, max_new_tokens=18, seed=2)
    s = gen.stats
    np.testing.assert_array_equal(s.drafted, 3 * s.rounds)
    assert (s.accepted <= s.drafted).all() and (s.verified <= s.drafted).all()
    np.testing.assert_array_equal(s.accepted_per_position.sum(axis=1), s.accepted)
    # Position i can only be accepted when position i - 1 was.
    assert (np.diff(s.accepted_per_position, axis=1) <= 0).all()
    assert 0 < s.beta_mean < 1
    assert s.per_position_acceptance.shape == (3,)


@pytest.mark.parametrize("k", [1, 3])
def test_acceptance_rate_estimates_beta(k, strategy):
    # P(accept a drafted x ~ q) = sum_x min(p, q) = beta, so over many verified positions the
    # acceptance frequency matches the mean overlap (for k = 1 every drafted position is
    # verified; for k > 1 compare accepted / verified-and-judged positions).
    target, draft = _models(seed=6)
    gen = _generate(strategy, target, [[1, 2]] * 3000, draft=draft, k=k, max_new_tokens=6,
                          seed=2)
    s = gen.stats
    judged = s.verified.sum()
    assert abs(s.accepted.sum() / judged - s.beta_mean) < 0.02
    if k == 1:
        assert abs(s.acceptance_rate - s.beta_mean) < 0.02


@pytest.mark.parametrize("sampling", [tfspec.Sampling(1.0), tfspec.Sampling(0.7, top_k=3),
                                      tfspec.Sampling(0.8, top_p=0.6)],
                         ids=["t1", "topk", "topp"])
def test_draft_vocabulary_q_is_the_transform_of_minus_inf_filled_logits(sampling):
    """What the loop hands the rule for a draft vocabulary (transform over N columns, then
    laid out over V) equals the transform of V-wide logits that are -inf outside it."""
    vocab_ids = tf.constant([1, 4, 5, 9], tf.int32)
    subset_logits = tf.constant(np.random.RandomState(0).normal(size=(3, 4)), tf.float32)
    full_logits = tf.tensor_scatter_nd_update(
        tf.fill([3, 12], -np.inf), tf.stack([tf.repeat(tf.range(3), 4),
                                            tf.tile(vocab_ids, [3])], axis=1),
        tf.reshape(subset_logits, [-1]))
    got = decoding.to_full_vocabulary(sampling_lib.logits_to_probs(subset_logits, sampling),
                                      vocab_ids, 12)
    want = sampling_lib.logits_to_probs(full_logits, sampling)
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-6)
    assert np.all(got.numpy()[:, [0, 2, 3, 6, 7, 8, 10, 11]] == 0)
