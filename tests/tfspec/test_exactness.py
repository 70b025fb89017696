"""Statistical exactness: speculative samples follow the target's (transformed) distribution.

NGram targets with V = 5 are enumerable, so the exact joint distribution of the first few
emitted tokens is known. Thousands of rows run in one batch (each row its own random stream)
and a G-test compares the observed sequences with it. The power checks feed deliberately
wrong rules through the same loop and require the same test to reject them.

Order 2 vs order 3: an order-2 NGram target reads only the history column its own decode
call just wrote, so it cannot see what earlier rounds left in its cache (entries of rejected
drafts, of accepted drafts, columns written at the wrong position). An order-3 NGram also
reads the column before, which an earlier round wrote: `ForgetfulCache` (a target that drops
the cache entries of accepted drafts) is invisible at order 2 and must be rejected at
order 3. `test_t5_exactness.py` does the same through T5 models, which read every column.
"""

import numpy as np
import pytest

import tfspec
from tfspec.models.ngram import NGram
from tfspec import testing
from tfspec.testing import exact_reference as ref
from tfspec.testing import wrong_rules

VOCAB = 5
ROWS = 6000
PROMPT = [3, 1]
P_MIN = 1e-3
# Emitted tokens compared per row, by n-gram order. Order-3 rows are one token longer so
# that more of each row is decoded from history columns an earlier round wrote.
LENGTHS = {2: 3, 3: 4}
SAMPLINGS = {
    "t1": tfspec.Sampling(temperature=1.0),
    "t0.7": tfspec.Sampling(temperature=0.7),
    "topk3": tfspec.Sampling(temperature=1.0, top_k=3),
    "topp0.8": tfspec.Sampling(temperature=0.9, top_p=0.8),
}


def _pair(seed=0, order=2):
    rng = np.random.RandomState(seed)
    target = ref.random_table(rng, VOCAB, order=order)
    draft = ref.random_table(rng, VOCAB, order=order, concentration=0.5)
    return target, draft


def _assert_top_p_is_robust(table, sampling):
    """The float32 nucleus of tfspec and the float64 one of `ref` keep the same tokens."""
    rows = np.exp(np.asarray(table, np.float64)).reshape(-1, VOCAB)
    margin = min(ref.transform_margin(row, sampling.temperature, sampling.top_p)
                 for row in rows)
    assert margin > 1e-4, f"a top-p decision is within {margin:.1e} of flipping"


def _pvalue(strategy, target_table, draft_model, k, sampling, eos_id=None, seed=1,
            wrap_target=None, **overrides):
    """G-test p-value of ROWS rows against the exact distribution, and the Generation."""
    _assert_top_p_is_robust(target_table, sampling)
    length = LENGTHS[np.ndim(target_table)]
    target = NGram(target_table, eos_id=eos_id)
    if wrap_target is not None:
        target = wrap_target(target)
    # Replaced rules (power checks) reach the loop only through tfspec.testing.
    generate = testing.generate_with_rules if overrides else tfspec.generate
    gen = generate(target, [PROMPT] * ROWS, draft=draft_model, k=k, max_new_tokens=length,
                   sampling=sampling, seed=seed, strategy=strategy, **overrides)
    expected = ref.sequence_distribution(target_table, PROMPT, length, sampling.temperature,
                                         sampling.top_k, sampling.top_p, eos_id=eos_id)
    observed = ref.observed_sequences(gen.tokens, gen.lengths, length)
    return ref.g_test_pvalue(observed, expected), gen


# Order 2: every k with every transform. Order 3 (whose target reads cache columns written by
# earlier rounds): a subset, to keep the time down.
_CASES = ([(2, k, name) for name in SAMPLINGS for k in (1, 2, 4, 7)]
          + [(3, k, name) for name in ("t1", "topp0.8") for k in (1, 2, 4)])


@pytest.mark.parametrize("order, k, sampling_name", _CASES,
                         ids=[f"order{o}-{name}-k{k}" for o, k, name in _CASES])
def test_speculative_matches_target_distribution(order, k, sampling_name, strategy):
    """Rows decoded with a different draft follow the exact transformed joint distribution."""
    target_table, draft_table = _pair(order=order)
    pvalue, gen = _pvalue(strategy, target_table, NGram(draft_table), k,
                          SAMPLINGS[sampling_name])
    assert pvalue > P_MIN, f"p = {pvalue:.2e}"
    # The draft differs from the target, so both paths of the rule were exercised.
    assert 0.05 < gen.stats.acceptance_rate < 0.95
    if k + 1 < LENGTHS[order]:
        # Rounds that accepted all k drafts happened; such a row still needed tokens, so the
        # draft had to catch up on d_k, which it sampled but never decoded.
        assert gen.stats.accepted_per_position[:, -1].sum() > 0.05 * ROWS


@pytest.mark.parametrize("k", [1, 3])
def test_exact_with_eos_inside_accepted_blocks(k, strategy):
    target_table, draft_table = _pair(seed=3)
    pvalue, gen = _pvalue(strategy, target_table, NGram(draft_table), k,
                          tfspec.Sampling(1.0), eos_id=2)
    assert pvalue > P_MIN, f"p = {pvalue:.2e}"
    assert (gen.lengths < LENGTHS[2]).any(), "no row stopped at EOS: the case was not exercised"


def test_autoregressive_matches_target_distribution(strategy):
    target_table, _ = _pair()
    pvalue, _ = _pvalue(strategy, target_table, None, 0, tfspec.Sampling(0.8))
    assert pvalue > P_MIN


def test_identical_draft_accepts_everything_and_stays_exact(strategy):
    # Zero-mass residual guard: draft == target means every ratio is 1.
    target_table, _ = _pair()
    pvalue, gen = _pvalue(strategy, target_table, NGram(target_table), 3, tfspec.Sampling(1.0))
    assert pvalue > P_MIN
    assert gen.stats.acceptance_rate == pytest.approx(1.0)


# --- Power checks: the same test must reject deliberately wrong rules. ---------------------

_WRONG = {
    "inverted_ratio": {"accept_fn": wrong_rules.inverted_ratio},
    "argmax_draft": {"draft_sample_fn": wrong_rules.argmax_draft},
    "forgetful_cache": {"wrap_target": wrong_rules.ForgetfulCache},
}


@pytest.mark.parametrize("order, k, wrong", [
    (2, 1, "inverted_ratio"), (2, 4, "inverted_ratio"),
    (2, 1, "argmax_draft"), (2, 4, "argmax_draft"),
    (3, 2, "inverted_ratio"),
    # Invisible at order 2 (see the module docstring); order 3 must see it.
    (3, 1, "forgetful_cache"), (3, 2, "forgetful_cache"),
])
def test_power_wrong_rules_are_rejected(order, k, wrong, strategy):
    """The distribution test rejects each deliberately wrong rule or model."""
    target_table, draft_table = _pair(order=order)
    pvalue, _ = _pvalue(strategy, target_table, NGram(draft_table), k, SAMPLINGS["t1"],
                        **_WRONG[wrong])
    assert pvalue < P_MIN, f"wrong rule {wrong} not detected (p = {pvalue:.3g})"


@pytest.mark.strategies
def test_exact_and_powerful_under_every_strategy(strategy):
    """The CI part of the strategy matrix: with the batch split across replicas (mirrored),
    rows still follow the exact distribution, and the same test still rejects a wrong
    rule."""
    target_table, draft_table = _pair(order=3)
    pvalue, gen = _pvalue(strategy, target_table, NGram(draft_table), 2, SAMPLINGS["t1"])
    assert pvalue > P_MIN, f"p = {pvalue:.2e}"
    assert 0.05 < gen.stats.acceptance_rate < 0.95
    pvalue, _ = _pvalue(strategy, target_table, NGram(draft_table), 2, SAMPLINGS["t1"],
                        accept_fn=wrong_rules.inverted_ratio)
    assert pvalue < P_MIN, f"wrong rule not detected (p = {pvalue:.3g})"


@pytest.mark.parametrize("k", [4, 7])
def test_later_positions_span_several_rounds(k, strategy):
    """Pairs (x_t, x_t+1) deep in the sequence, where rounds, bonus tokens and draft
    catch-up have all happened, still follow the exact Markov-chain marginals."""
    target_table, draft_table = _pair(seed=5)
    sampling = tfspec.Sampling(1.0)
    length = 2 * k + 3
    gen = tfspec.generate(NGram(target_table), [PROMPT] * ROWS, draft=NGram(draft_table),
                          strategy=strategy,
                          k=k, max_new_tokens=length, sampling=sampling, seed=7)
    assert gen.stats.mean_tokens_per_round > 1.2
    positions = [k, k + 1, 2 * k + 1]
    for t in positions:
        expected = ref.pair_marginal(target_table, PROMPT, t, 1.0)
        pairs = [(int(a), int(b)) for a, b in gen.tokens[:, t - 1:t + 1]]
        expected_dict = {(a, b): expected[a, b] for a in range(VOCAB) for b in range(VOCAB)}
        pvalue = ref.g_test_pvalue(pairs, expected_dict)
        assert pvalue > P_MIN / len(positions), f"position {t}: p = {pvalue:.2e}"
