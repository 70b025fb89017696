"""Statistical exactness: speculative samples follow the target's (transformed) distribution.

NGram targets with V = 5 are enumerable, so the exact joint distribution of the first three
emitted tokens is known. Thousands of rows run in one batch (each row its own random stream)
and a G-test compares the observed sequences with it. The power checks feed deliberately
wrong rules through the same loop and require the same test to reject them.
"""

import numpy as np
import pytest
import tensorflow as tf

import tfspec
from tfspec import acceptance
from tfspec.models.ngram import NGram
from tests.tfspec import exact_reference as ref

VOCAB = 5
ROWS = 6000
LENGTH = 3
PROMPT = [3, 1]
P_MIN = 1e-3


def _pair(seed=0):
    rng = np.random.RandomState(seed)
    target = ref.random_table(rng, VOCAB, order=2)
    draft = ref.random_table(rng, VOCAB, order=2, concentration=0.5)
    return target, draft


def _pvalue(target_table, draft_model, k, sampling, eos_id=None, seed=1, **overrides):
    target = NGram(target_table, eos_id=eos_id)
    gen = tfspec.generate(target, [PROMPT] * ROWS, draft=draft_model, k=k,
                          max_new_tokens=LENGTH, sampling=sampling, seed=seed, **overrides)
    expected = ref.sequence_distribution(target_table, PROMPT, LENGTH, sampling.temperature,
                                         sampling.top_k, sampling.top_p, eos_id=eos_id)
    observed = ref.observed_sequences(gen.tokens, gen.lengths, LENGTH)
    return ref.g_test_pvalue(observed, expected), gen


@pytest.mark.parametrize("k", [1, 2, 4, 7])
@pytest.mark.parametrize("sampling", [
    tfspec.Sampling(temperature=1.0),
    tfspec.Sampling(temperature=0.7),
    tfspec.Sampling(temperature=1.0, top_k=3),
    tfspec.Sampling(temperature=0.9, top_p=0.8),
], ids=["t1", "t0.7", "topk3", "topp0.8"])
def test_speculative_matches_target_distribution(k, sampling):
    target_table, draft_table = _pair()
    pvalue, gen = _pvalue(target_table, NGram(draft_table), k, sampling)
    assert pvalue > P_MIN, f"p = {pvalue:.2e}"
    # The draft differs from the target, so both paths of the rule were exercised.
    assert 0.05 < gen.stats.acceptance_rate < 0.95


@pytest.mark.parametrize("k", [1, 3])
def test_exact_with_eos_inside_accepted_blocks(k):
    target_table, draft_table = _pair(seed=3)
    pvalue, gen = _pvalue(target_table, NGram(draft_table), k, tfspec.Sampling(1.0), eos_id=2)
    assert pvalue > P_MIN, f"p = {pvalue:.2e}"
    assert (gen.lengths < LENGTH).any(), "no row stopped at EOS: the case was not exercised"


def test_autoregressive_matches_target_distribution():
    target_table, _ = _pair()
    pvalue, _ = _pvalue(target_table, None, 0, tfspec.Sampling(0.8))
    assert pvalue > P_MIN


def test_identical_draft_accepts_everything_and_stays_exact():
    # Zero-mass residual guard: draft == target means every ratio is 1.
    target_table, _ = _pair()
    pvalue, gen = _pvalue(target_table, NGram(target_table), 3, tfspec.Sampling(1.0))
    assert pvalue > P_MIN
    assert gen.stats.acceptance_rate == pytest.approx(1.0)


# --- Power checks: the same test must reject deliberately wrong rules. ---------------------

def _inverted_ratio(target_probs, draft_probs, draft_ids, accept_uniforms, final_uniforms):
    """Wrong: accepts with min(1, q/p) (letters swapped between the papers)."""
    k = draft_ids.shape[1]
    swapped_target = tf.concat([draft_probs, target_probs[:, k:]], axis=1)
    wrong = acceptance.accept(swapped_target, target_probs[:, :k], draft_ids,
                              accept_uniforms, final_uniforms)
    right = acceptance.accept(target_probs, draft_probs, draft_ids, accept_uniforms,
                              final_uniforms)
    # Keep the wrong acceptance decision, with the correct residual machinery otherwise.
    return right._replace(num_accepted=wrong.num_accepted)


def _argmax_draft(probs, uniforms):
    """Wrong: drafts are the draft argmax but are scored as if they had been sampled."""
    del uniforms
    return tf.argmax(probs, axis=-1, output_type=tf.int32)


@pytest.mark.parametrize("k", [1, 4])
@pytest.mark.parametrize("wrong", ["inverted_ratio", "argmax_draft"])
def test_power_wrong_rules_are_rejected(k, wrong):
    target_table, draft_table = _pair()
    overrides = ({"accept_fn": _inverted_ratio} if wrong == "inverted_ratio"
                 else {"draft_sample_fn": _argmax_draft})
    pvalue, _ = _pvalue(target_table, NGram(draft_table), k, tfspec.Sampling(1.0),
                        **overrides)
    assert pvalue < P_MIN, f"wrong rule {wrong} not detected (p = {pvalue:.3g})"


@pytest.mark.parametrize("k", [4, 7])
def test_later_positions_span_several_rounds(k):
    """Pairs (x_t, x_t+1) deep in the sequence, where rounds, bonus tokens and draft
    catch-up have all happened, still follow the exact Markov-chain marginals."""
    target_table, draft_table = _pair(seed=5)
    sampling = tfspec.Sampling(1.0)
    length = 2 * k + 3
    gen = tfspec.generate(NGram(target_table), [PROMPT] * ROWS, draft=NGram(draft_table),
                          k=k, max_new_tokens=length, sampling=sampling, seed=7)
    assert gen.stats.mean_tokens_per_round > 1.2
    positions = [k, k + 1, 2 * k + 1]
    for t in positions:
        expected = ref.pair_marginal(target_table, PROMPT, t, 1.0)
        pairs = [(int(a), int(b)) for a, b in gen.tokens[:, t - 1:t + 1]]
        expected_dict = {(a, b): expected[a, b] for a in range(VOCAB) for b in range(VOCAB)}
        pvalue = ref.g_test_pvalue(pairs, expected_dict)
        assert pvalue > P_MIN / len(positions), f"position {t}: p = {pvalue:.2e}"
