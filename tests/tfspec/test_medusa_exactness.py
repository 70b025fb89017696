"""Distribution tests of Medusa heads through real T5 caches: exact by default.

Medusa heads (`tfspec.models.MedusaHeads`) propose a round's k drafts at once from the
target's final decoder state at the row's last committed position, handed over by the verify
pass; head i's q ignores drafts 1 .. i - 1. That is still a proposal distribution that is a
function of the history, so the exact rule keeps the target's law. The enumerable tiny
target of `tfspec.testing.tiny_t5` (V = 5, the first LENGTH tokens, exact law from its
uncached forward pass) holds thousands of cached rows against it, at k in {1, 2, 3}, at T = 1
and with top-p, in large batches and in pooled small calls, and in adaptive mode; a power
check shows the same test rejects a wrong rule with these heads.
"""

import numpy as np
import pytest

import tfspec
from tfspec import testing
from tfspec.models.medusa import MedusaConfig, MedusaHeads
from tfspec.testing import exact_reference as ref
from tfspec.testing import tiny_t5
from tfspec.testing import wrong_rules

VOCAB, LENGTH, PROMPT = tiny_t5.VOCAB, tiny_t5.LENGTH, list(tiny_t5.PROMPT)
P_MIN = 1e-3
SAMPLINGS = {
    "t1": tfspec.Sampling(temperature=1.0),
    # As in test_t5_exactness.py: no top-p decision of the target near a tie.
    "t0.8-topp0.95": tfspec.Sampling(temperature=0.8, top_p=0.95),
}
# name -> MedusaConfig overrides; "reduced" proposes only DRAFT_VOCAB, so tokens 0 and 3
# are emitted through the residual alone.
HEADS = {
    "token": dict(heads=3, d_ff=8),
    "reduced-no-token": dict(heads=3, d_ff=8, draft_vocab_size=3, reads_token=False),
}
DRAFT_VOCAB = [1, 2, 4]
# (sampling, k) -> (heads, batch size, calls); the rows of all calls are pooled.
LAYOUTS = {
    ("t1", 1): ("reduced-no-token", 6000, 1),
    ("t1", 2): ("token", 3, 700),
    ("t1", 3): ("token", 6000, 1),
    ("t0.8-topp0.95", 1): ("token", 2, 800),
    ("t0.8-topp0.95", 2): ("reduced-no-token", 6000, 1),
    ("t0.8-topp0.95", 3): ("reduced-no-token", 1, 1200),
}
# Hugging Face's schedule: on these heads' low overlap the formula's (the default) drafts
# one per round, and the test wants the per-row cuts between 1 and k_max.
AUTO = tfspec.AutoDraft(k_max=3, confidence=0.4, initial_k=2, draft_cost=None,
                        fallback=False)


@pytest.fixture(scope="module")
def models(strategy):
    with strategy.scope():
        target, _ = tiny_t5.enumerable_pair()
        heads = {}
        for seed, (name, overrides) in enumerate(sorted(HEADS.items()), start=31):
            h = MedusaHeads(MedusaConfig.for_target(target, **overrides), seed=seed)
            rng = np.random.default_rng(seed)
            for w in h.head_out:  # Fresh heads are the identity: make them differ.
                w.assign(rng.standard_normal(w.shape).astype(np.float32))
            h.bind(target)
            if not h.full_vocabulary:
                h.draft_vocab.assign(DRAFT_VOCAB)
            heads[name] = h
    return target, heads


@pytest.fixture(scope="module")
def table(models):
    return tiny_t5.next_probs_table(models[0])


def _decode(strategy, target, heads, k, sampling, batch, calls, **overrides):
    tokens, lengths, stats = [], [], []
    generate = testing.generate_with_rules if overrides else tfspec.generate
    for call in range(calls):
        gen = generate(target, [PROMPT] * batch, draft=heads, k=k, max_new_tokens=LENGTH,
                       sampling=sampling, seed=1, eos_id=None,
                       row_keys=np.arange(call * batch, (call + 1) * batch),
                       strategy=strategy, **overrides)
        tokens.append(gen.tokens)
        lengths.append(gen.lengths)
        stats.append(gen.stats)
    return np.concatenate(tokens), np.concatenate(lengths), stats


def _pvalue(tokens, lengths, table, sampling):
    expected = ref.enumerate_distribution(table.__getitem__, VOCAB, LENGTH,
                                          sampling.temperature, sampling.top_k,
                                          sampling.top_p)
    return ref.g_test_pvalue(ref.observed_sequences(tokens, lengths, LENGTH), expected)


@pytest.mark.parametrize("sampling_name, k", list(LAYOUTS),
                         ids=[f"{s}-k{k}-{LAYOUTS[s, k][0]}-batch{LAYOUTS[s, k][1]}"
                              for s, k in LAYOUTS])
def test_medusa_heads_match_the_uncached_target_distribution(models, table, sampling_name, k,
                                                             strategy):
    target, heads = models
    sampling = SAMPLINGS[sampling_name]
    name, batch, calls = LAYOUTS[sampling_name, k]
    tokens, lengths, stats = _decode(strategy, target, heads[name], k, sampling, batch,
                                     calls)
    assert (lengths == LENGTH).all()
    pvalue = _pvalue(tokens, lengths, table, sampling)
    assert pvalue > P_MIN, f"p = {pvalue:.2e}"
    pooled = tfspec.DecodeStats.concatenate(stats)
    # Both branches of the rule carry mass, and whole rounds were accepted (so later
    # rounds started from states of positions the heads had drafted).
    assert 0.1 < pooled.acceptance_rate < 0.9, pooled.acceptance_rate
    assert pooled.accepted_per_position[:, -1].sum() > 0.02 * len(lengths)
    if not heads[name].full_vocabulary:
        outside = np.setdiff1d(np.arange(VOCAB), DRAFT_VOCAB)
        assert np.isin(tokens, outside).mean() > 0.05  # The residual emitted them.


@pytest.mark.parametrize("sampling_name", list(SAMPLINGS))
def test_medusa_heads_in_auto_mode_match_the_target_distribution(models, table,
                                                                 sampling_name, strategy):
    """Adaptive draft length with Medusa heads: per-row horizons and a confidence stop cut
    the parallel proposals (drafts per round strictly between 1 and 3)."""
    target, heads = models
    sampling = SAMPLINGS[sampling_name]
    tokens, lengths, stats = _decode(strategy, target, heads["token"], AUTO, sampling, 6000,
                                     1)
    pvalue = _pvalue(tokens, lengths, table, sampling)
    assert pvalue > P_MIN, f"p = {pvalue:.2e}"
    pooled = tfspec.DecodeStats.concatenate(stats)
    per_round = pooled.drafted.sum() / pooled.rounds.sum()
    assert 1.0 < per_round < 2.9, per_round


@pytest.mark.parametrize("name, k, wrong", [
    ("token", 2, "inverted_ratio"),
    ("reduced-no-token", 1, "argmax_draft"),
])
def test_power_wrong_rules_are_rejected_with_medusa_heads(models, table, name, k, wrong,
                                                          strategy):
    overrides = ({"accept_fn": wrong_rules.inverted_ratio} if wrong == "inverted_ratio"
                 else {"draft_sample_fn": wrong_rules.argmax_draft})
    sampling = SAMPLINGS["t1"]
    target, heads = models
    tokens, lengths, _ = _decode(strategy, target, heads[name], k, sampling, 6000, 1,
                                 **overrides)
    pvalue = _pvalue(tokens, lengths, table, sampling)
    assert pvalue < P_MIN, f"wrong rule {wrong} not detected (p = {pvalue:.3g})"
