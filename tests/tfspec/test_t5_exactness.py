"""Statistical exactness through real T5 models, whose decoders read their whole KV cache.

An order-2 NGram target (`test_exactness.py`) reads only the token its decode was just
given, so whatever earlier rounds left in its cache (stale entries of rejected drafts, the
accepted drafts, positions) cannot change its output; order 3 reads one column more. A T5
decoder attends to every earlier decoder position through its self-attention KV cache, so a
loop that leaves a wrong entry in a slot a later query reads, or decodes a row at the wrong
position, changes the distribution of the tokens after it.

What no distribution test can see: a wrong DRAFT cache (e.g. a broken draft catch-up) only
makes the draft worse, and the rule stays exact for any draft. `test_t5_decoding.py` catches
those through acceptance with draft == target.

A tiny random T5 target (V = 5) and a different tiny T5 draft are enumerable: ONE uncached
`T5.forward` over all 5**4 decoder inputs gives the target's next-token distribution after
every prefix, the numpy `exact_reference.transform` applies temperature / top-p, and
`exact_reference.enumerate_distribution` gives the exact joint law of the first LENGTH
tokens. A G-test compares thousands of speculative rows with it.

LENGTH = 5 > k + 1 for every k tested, so rows that accept all k drafts in a round go on to
a round that reads what the draft catch-up wrote. Compiling the loop for one (batch shape,
k, sampling) takes ~5 s on CPU, so each case below uses one batch shape; across the cases
every k runs both as one large batch (rows at many different positions in every round, some
stopping their drafts early) and as many small calls of batch 1, 2 or 3 whose rows are
pooled (where one row's state decides whether the draft loop runs its k steps).
"""

import dataclasses
import itertools

import numpy as np
import pytest
import tensorflow as tf

import tfspec
from tfspec.models.feature_draft import FeatureDraft, FeatureDraftConfig
from tfspec import testing
from tfspec.testing import exact_reference as ref
from tfspec.testing import tiny_t5
from tfspec.testing import wrong_rules

# The enumerable pair (tfspec/testing/tiny_t5.py, shared with bench.typical_bias).
VOCAB = tiny_t5.VOCAB
LENGTH = tiny_t5.LENGTH
PROMPT = list(tiny_t5.PROMPT)
P_MIN = 1e-3
SAMPLINGS = {
    "t1": tfspec.Sampling(temperature=1.0),
    # Chosen so that no top-p decision of the target is near a tie (see the margin check).
    "t0.8-topp0.95": tfspec.Sampling(temperature=0.8, top_p=0.95),
}
# float32 probabilities of the cached loop and the float64 reference differ by ~1e-7; a top-p
# decision closer than this to flipping could keep different tokens in the two.
TOP_P_MARGIN = 1e-5
# (sampling, k) -> (batch size, calls); the rows of all calls are pooled.
# Small calls cost ~1.5 ms each, so they pool fewer rows than the large batches.
LAYOUTS = {
    ("t1", 1): (6000, 1),
    ("t1", 2): (2, 1000),
    ("t1", 3): (6000, 1),
    ("t0.8-topp0.95", 1): (3, 700),
    ("t0.8-topp0.95", 2): (6000, 1),
    ("t0.8-topp0.95", 3): (1, 1500),
}


# k="auto": per-row horizons in [1, 3] moved by Hugging Face's schedule, and a confidence
# threshold that stops about a third of the rows' drafting early. fallback=False: the
# autoregressive fallback is exact by construction, and would leave the adaptive loop
# untested.
AUTO = tfspec.AutoDraft(k_max=3, confidence=0.45, initial_k=2, draft_cost=None,
                        fallback=False)
# The same with the formula's horizon schedule: each row's horizon follows its own running
# overlap (c = 0.1 puts rows of this pair's overlaps on every horizon in [1, 3]).
AUTO_FORMULA = dataclasses.replace(AUTO, draft_cost=0.1)
# name: (settings, sampling, batch, calls)
AUTO_CASES = {"t1": (AUTO, "t1", 6000, 1), "t0.8-topp0.95": (AUTO, "t0.8-topp0.95", 2, 1000),
              "t1-formula": (AUTO_FORMULA, "t1", 6000, 1)}


@pytest.fixture(scope="module")
def models(strategy):
    """(target, draft): different widths and seeds, in the test's strategy scope. The
    target's gains on its decoder self-attention make it depend strongly on earlier decoder
    positions, i.e. on its KV cache (see
    `test_models_are_random_different_and_read_their_history`); without them a loop that
    verified every row at the batch's smallest position went unnoticed."""
    with strategy.scope():
        return tiny_t5.enumerable_pair()


_next_probs_table = tiny_t5.next_probs_table


@pytest.fixture(scope="module")
def tables(models):
    """(target table, draft table), see `_next_probs_table`."""
    return tuple(_next_probs_table(model) for model in models)


def _expected(table, sampling):
    return ref.enumerate_distribution(table.__getitem__, VOCAB, LENGTH, sampling.temperature,
                                      sampling.top_k, sampling.top_p)


def _decode(strategy, target, draft, k, sampling, batch, calls, **overrides):
    """Pooled rows of `calls` generate() calls of `batch` rows, each row its own key.

    Returns:
      (tokens int [rows, LENGTH], lengths int [rows], per-call `DecodeStats` list).
    """
    tokens, lengths, stats = [], [], []
    for call in range(calls):
        # Replaced rules (power checks) reach the loop only through tfspec.testing.
        generate = testing.generate_with_rules if overrides else tfspec.generate
        gen = generate(target, [PROMPT] * batch, draft=draft, k=k, max_new_tokens=LENGTH,
                       sampling=sampling, seed=1, eos_id=None,
                       row_keys=np.arange(call * batch, (call + 1) * batch),
                       strategy=strategy, **overrides)
        tokens.append(gen.tokens)
        lengths.append(gen.lengths)
        stats.append(gen.stats)
    return np.concatenate(tokens), np.concatenate(lengths), stats


def _pvalue(tokens, lengths, table, sampling):
    observed = ref.observed_sequences(tokens, lengths, LENGTH)
    return ref.g_test_pvalue(observed, _expected(table, sampling))


def test_models_are_random_different_and_read_their_history(tables):
    """The premises of the distribution tests below.

    Not near-deterministic (else few sequences carry all the mass); the draft differs from
    the target; the target's next token depends strongly on the FIRST emitted token even
    three tokens later, which reaches the decoder only through its KV cache; and no top-p
    decision is close enough to a tie to flip between float32 and float64.
    """
    target, draft = tables
    prefixes = sorted(target)
    target_probs = np.stack([target[p] for p in prefixes])
    draft_probs = np.stack([draft[p] for p in prefixes])
    entropy = -np.sum(target_probs * np.log(target_probs), axis=-1)
    assert entropy.mean() > 0.8, f"mean entropy {entropy.mean():.2f} nats"
    assert target_probs.max() < 0.95
    overlap = np.minimum(target_probs, draft_probs).sum(axis=-1).mean()
    assert 0.3 < overlap < 0.8, f"mean overlap {overlap:.2f}"
    # Total variation between the distributions after (a, b, c, d) and (a', b, c, d).
    last = np.stack([target[p] for p in prefixes if len(p) == LENGTH - 1])
    last = last.reshape([VOCAB] * (LENGTH - 1) + [VOCAB])
    spread = 0.5 * np.abs(last[:, None] - last[None, :]).sum(axis=-1).max(axis=(0, 1))
    assert spread.mean() > 0.3, f"mean total variation {spread.mean():.3f}"
    for sampling in SAMPLINGS.values():
        margin = min(ref.transform_margin(row, sampling.temperature, sampling.top_p)
                     for row in target_probs)
        assert margin > TOP_P_MARGIN, f"a top-p decision is within {margin:.1e} of flipping"


@pytest.mark.parametrize("sampling_name, k", list(LAYOUTS),
                         ids=[f"{name}-k{k}-batch{LAYOUTS[name, k][0]}"
                              for name, k in LAYOUTS])
def test_speculative_t5_matches_uncached_target_distribution(models, tables, sampling_name,
                                                            k, strategy):
    """Cached speculative rows follow the exact law of the uncached target.

    Covers the target's rollback (stale entries of rejected drafts, overwritten later),
    the accepted drafts' entries and per-row positions within one batch.
    """
    target, draft = models
    sampling = SAMPLINGS[sampling_name]
    batch, calls = LAYOUTS[sampling_name, k]
    tokens, lengths, stats = _decode(strategy, target, draft, k, sampling, batch, calls)
    assert (lengths == LENGTH).all()
    pvalue = _pvalue(tokens, lengths, tables[0], sampling)
    assert pvalue > P_MIN, f"p = {pvalue:.2e}"
    pooled = tfspec.DecodeStats.concatenate(stats)
    assert 0.1 < pooled.acceptance_rate < 0.9, pooled.acceptance_rate
    # Rounds that accepted all k drafts happened. A row whose first round did so has
    # k + 1 < LENGTH tokens, so the draft had to catch up on d_k in its next round.
    assert pooled.accepted_per_position[:, -1].sum() > 0.05 * len(lengths)
    if 1 < batch < len(lengths):
        # Rows of one call took different numbers of rounds, so they sat at different
        # positions in the same round.
        assert any(len(set(s.rounds.tolist())) > 1 for s in stats)


@pytest.mark.parametrize("case", list(AUTO_CASES),
                         ids=[f"{name}-batch{AUTO_CASES[name][2]}" for name in AUTO_CASES])
def test_auto_draft_length_matches_uncached_target_distribution(models, tables, case,
                                                                strategy):
    """k="auto": rows that stop drafting early (their horizon, or an unsure draft) are
    judged on their own drafts only, and the token after them comes from the target."""
    tfspec.adaptive.reset()
    target, draft = models
    auto, sampling_name, batch, calls = AUTO_CASES[case]
    sampling = SAMPLINGS[sampling_name]
    tokens, lengths, stats = _decode(strategy, target, draft, auto, sampling, batch, calls)
    assert (lengths == LENGTH).all()
    pvalue = _pvalue(tokens, lengths, tables[0], sampling)
    assert pvalue > P_MIN, f"p = {pvalue:.2e}"
    pooled = tfspec.DecodeStats.concatenate(stats)
    per_round = pooled.drafted / np.maximum(pooled.rounds, 1)
    # Early stops happened, and rows drafted different amounts per round.
    assert 1.0 < per_round.mean() < auto.k_max - 0.3, per_round.mean()
    assert len(set(np.round(per_round, 3).tolist())) > 3
    # Some rounds accepted all three drafts (the horizon had grown to 3).
    assert pooled.accepted_per_position[:, -1].sum() > 0


@pytest.fixture(scope="module")
def reduced_draft(strategy):
    """The draft of `models` (same weights) restricted to the draft vocabulary {1, 2, 3}
    (EOS 1 is always added): q is 0 on tokens 0 and 4, which the target gives real mass."""
    with strategy.scope():
        _, draft = tiny_t5.enumerable_pair()
    return draft.set_draft_vocabulary([2, 3])  # + EOS 1


@pytest.mark.parametrize("sampling_name, k, batch, calls",
                         [("t1", 2, 6000, 1), ("t0.8-topp0.95", 3, 3, 700)],
                         ids=["t1-k2-batch6000", "t0.8-topp0.95-k3-batch3"])
def test_draft_vocabulary_matches_uncached_target_distribution(models, tables, reduced_draft,
                                                               sampling_name, k, batch,
                                                               calls, strategy):
    """A draft with a draft vocabulary (logits, transform and sampling over 3 of the 5
    tokens, probabilities laid out over V for the rule) keeps the target's law: the
    residual supplies the tokens q never proposes."""
    target, _ = models
    sampling = SAMPLINGS[sampling_name]
    tokens, lengths, stats = _decode(strategy, target, reduced_draft, k, sampling, batch,
                                     calls)
    pvalue = _pvalue(tokens, lengths, tables[0], sampling)
    assert pvalue > P_MIN, f"p = {pvalue:.2e}"
    pooled = tfspec.DecodeStats.concatenate(stats)
    # q misses two of the five tokens (at T = 0.8 with top-p it is peaked on what is left),
    # so acceptance is low; it must still happen.
    assert 0.01 < pooled.acceptance_rate < 0.9, pooled.acceptance_rate
    emitted = set(tokens[:, :LENGTH].reshape(-1).tolist())
    assert {0, 4} <= emitted  # Tokens outside the draft vocabulary still come out.


def test_power_draft_vocabulary_with_a_wrong_rule_is_rejected(models, tables, reduced_draft,
                                                              strategy):
    target, _ = models
    sampling = SAMPLINGS["t1"]
    tokens, lengths, _ = _decode(strategy, target, reduced_draft, 2, sampling, 6000, 1,
                                 accept_fn=wrong_rules.inverted_ratio)
    pvalue = _pvalue(tokens, lengths, tables[0], sampling)
    assert pvalue < P_MIN, f"wrong rule not detected with a draft vocabulary (p = {pvalue:.3g})"


@pytest.fixture(scope="module")
def adapter_draft(models, strategy):
    """The draft of `models` (same weights) reading the target's encoder output through a
    random projection (`T5.attach_target_encoder`) instead of its own encoder."""
    target, _ = models
    rng = np.random.default_rng(7)
    with strategy.scope():
        _, draft = tiny_t5.enumerable_pair()
        projection = rng.normal(0.0, target.config.d_model ** -0.5,
                                [target.config.d_model, draft.config.d_model])
        return draft.attach_target_encoder(projection)


@pytest.mark.parametrize("sampling_name, k, batch, calls",
                         [("t1", 2, 6000, 1), ("t0.8-topp0.95", 3, 3, 700)],
                         ids=["t1-k2-batch6000", "t0.8-topp0.95-k3-batch3"])
def test_target_encoder_draft_matches_uncached_target_distribution(
        models, tables, adapter_draft, sampling_name, k, batch, calls, strategy):
    """A draft whose context comes from the target's encoder output (no draft encoder)
    keeps the target's law."""
    target, _ = models
    sampling = SAMPLINGS[sampling_name]
    tokens, lengths, stats = _decode(strategy, target, adapter_draft, k, sampling, batch,
                                     calls)
    pvalue = _pvalue(tokens, lengths, tables[0], sampling)
    assert pvalue > P_MIN, f"p = {pvalue:.2e}"
    assert 0.05 < tfspec.DecodeStats.concatenate(stats).acceptance_rate < 0.95


def test_power_a_wrong_rule_is_rejected_with_a_target_encoder_draft(models, tables,
                                                                    adapter_draft, strategy):
    target, _ = models
    sampling = SAMPLINGS["t1"]
    tokens, lengths, _ = _decode(strategy, target, adapter_draft, 2, sampling, 6000, 1,
                                 accept_fn=wrong_rules.inverted_ratio)
    pvalue = _pvalue(tokens, lengths, tables[0], sampling)
    assert pvalue < P_MIN, f"wrong rule not detected (p = {pvalue:.3g})"


@pytest.mark.parametrize("wrong", ["inverted_ratio", "forgetful_cache"])
def test_power_wrong_rules_are_rejected(models, tables, wrong, strategy):
    """The same G-test rejects a wrong acceptance rule and a target that drops the cache
    entries of accepted drafts (`wrong_rules.ForgetfulCache`)."""
    target, draft = models
    overrides = {}
    if wrong == "inverted_ratio":
        overrides["accept_fn"] = wrong_rules.inverted_ratio
    else:
        target = wrong_rules.ForgetfulCache(target)
    sampling = SAMPLINGS["t1"]
    tokens, lengths, _ = _decode(strategy, target, draft, 2, sampling, 6000, 1, **overrides)
    pvalue = _pvalue(tokens, lengths, tables[0], sampling)
    assert pvalue < P_MIN, f"wrong rule {wrong} not detected (p = {pvalue:.3g})"


def test_power_a_wrong_rule_is_rejected_in_auto_mode(models, tables, strategy):
    """The auto-mode test above keeps its power: the inverted ratio is rejected there too."""
    tfspec.adaptive.reset()
    target, draft = models
    sampling = SAMPLINGS["t1"]
    tokens, lengths, _ = _decode(strategy, target, draft, AUTO, sampling, 6000, 1,
                                 accept_fn=wrong_rules.inverted_ratio)
    pvalue = _pvalue(tokens, lengths, tables[0], sampling)
    assert pvalue < P_MIN, f"wrong rule not detected in auto mode (p = {pvalue:.3g})"


# ------------------------------------------------------- typical acceptance (Medusa), biased
#
# `tfspec.generate(acceptance="typical")` keeps a drafted argmax token d whenever the
# target's p(d) > min(0.09, 0.3 exp(-H(p))): not distribution-preserving above temperature
# 0. The same G-test must reject its rows, and their total-variation distance from the
# exact law (first TYPICAL_LENGTH tokens, 125 sequences) must exceed a bound that the exact
# rule stays under with the same rows. With 3000 rows the exact rule's TV sits at the
# sampling floor (~0.05-0.06); typical acceptance's is ~0.8 on this pair
# (`bench.typical_bias`), so the bound 0.2 is far from both.
TYPICAL_SAMPLINGS = {"t1": tfspec.Sampling(temperature=1.0),
                     "t0.7": tfspec.Sampling(temperature=0.7)}
TYPICAL_ROWS = 3000
TYPICAL_K = 2
TYPICAL_LENGTH = 3
TYPICAL_TV_BOUND = 0.2
TYPICAL_P_MAX = 1e-6


@pytest.mark.parametrize("sampling_name", list(TYPICAL_SAMPLINGS))
def test_typical_acceptance_bias_is_detected(models, tables, sampling_name, strategy):
    target, draft = models
    sampling = TYPICAL_SAMPLINGS[sampling_name]
    expected = ref.enumerate_distribution(tables[0].__getitem__, VOCAB, TYPICAL_LENGTH,
                                          sampling.temperature)
    floor, floor_std = ref.total_variation_noise(expected, TYPICAL_ROWS)
    assert floor + 10 * floor_std < TYPICAL_TV_BOUND
    results = {}
    for rule in ("exact", "typical"):
        gen = tfspec.generate(target, [PROMPT] * TYPICAL_ROWS, draft=draft, k=TYPICAL_K,
                              max_new_tokens=TYPICAL_LENGTH, sampling=sampling, seed=1,
                              eos_id=None, strategy=strategy, acceptance=rule,
                              jit_compile=None)  # Eager: 3 tokens, nothing to compile.
        assert gen.acceptance == rule
        observed = ref.observed_sequences(gen.tokens, gen.lengths, TYPICAL_LENGTH)
        results[rule] = (ref.g_test_pvalue(observed, expected),
                         ref.total_variation(observed, expected), gen.stats)
    (exact_p, exact_tv, exact_stats), (typical_p, typical_tv, typical_stats) = (
        results["exact"], results["typical"])
    assert exact_p > P_MIN, f"exact rule: p = {exact_p:.2e}"
    assert exact_tv < TYPICAL_TV_BOUND, f"exact rule: TV {exact_tv:.3f} (floor {floor:.3f})"
    assert typical_p < TYPICAL_P_MAX, f"typical acceptance not detected (p = {typical_p:.2e})"
    assert typical_tv > TYPICAL_TV_BOUND, f"typical acceptance: TV {typical_tv:.3f}"
    # What it trades the bias for: more accepted drafts than the exact rule.
    assert typical_stats.acceptance_rate > exact_stats.acceptance_rate


# ------------------------------------------------------------ feature drafts (EAGLE-style)
#
# A `FeatureDraft` reads the target's own features: the verify pass hands them over, and
# its draft steps feed it its own predicted features. Its q after a prefix depends on the
# target's states along that prefix and, within a round, on the draft's own random draws,
# which is all the rule needs; these tests check the loop that carries the features
# (feature hand-off, the feature catch-up of the draft cache, a draft vocabulary smaller
# than V whose other tokens only the residual max(0, p - q) can emit) keeps the law exact.
# The draft is random, so its q is far from p (see the premise test).

# name -> FeatureDraftConfig overrides. "top-reduced" proposes only DRAFT_VOCAB: tokens 0
# and 3 are emitted through the residual alone.
FEATURE_DRAFTS = {
    "fused": dict(feature_layers=(0, -1)),
    "top-reduced": dict(draft_vocab_size=3, cross_attention=False),
}
DRAFT_VOCAB = [1, 2, 4]
FEATURE_SEEDS = {"fused": 21, "top-reduced": 22}
# (sampling, k) -> (feature draft, batch size, calls); as LAYOUTS, every k as one large
# batch and as pooled small calls, each draft at both samplings.
FEATURE_LAYOUTS = {
    ("t1", 1): ("top-reduced", 6000, 1),
    ("t1", 2): ("fused", 3, 700),
    ("t1", 3): ("fused", 6000, 1),
    ("t0.8-topp0.95", 1): ("fused", 2, 800),
    ("t0.8-topp0.95", 2): ("top-reduced", 6000, 1),
    ("t0.8-topp0.95", 3): ("top-reduced", 1, 1200),
}


@pytest.fixture(scope="module")
def feature_drafts(models, strategy):
    """{name: random FeatureDraft bound to the target}, in the test's strategy scope."""
    target = models[0]
    drafts = {}
    with strategy.scope():
        for name, overrides in FEATURE_DRAFTS.items():
            config = FeatureDraftConfig.for_target(target, **overrides)
            draft = FeatureDraft(config, seed=FEATURE_SEEDS[name]).bind(target)
            if not draft.full_vocabulary:
                draft.draft_vocab.assign(DRAFT_VOCAB)
            drafts[name] = draft
    return drafts


def _feature_draft_step0_table(target, draft):
    """{emitted prefix: float64 [V]}: the q of draft step 0 after every prefix shorter than
    LENGTH (pass 1 of the draft's uncached `rollout` on the target's true features)."""
    tails = list(itertools.product(range(VOCAB), repeat=LENGTH - 1))
    decoder_ids = np.array([[target.decoder_start_id, *tail] for tail in tails], np.int32)
    encoder_ids = np.tile(np.array([PROMPT], np.int32), [len(tails), 1])
    _, features, context = target.decoder_features(encoder_ids, None, decoder_ids,
                                                   draft.feature_layers)
    (predicted,) = draft.rollout(features, decoder_ids, context.encoder_states,
                                 context.encoder_mask, depth=1)
    logits = draft.scatter_logits(draft.draft_logits_subset(
        predicted, draft.lm_head_subset(target.output_projection())))
    probs = tf.nn.softmax(tf.cast(logits, tf.float64)).numpy()
    table = {}
    for tail, row in zip(tails, probs):
        for i in range(LENGTH):
            table[tail[:i]] = row[i]
    return table


@pytest.mark.parametrize("name", sorted(FEATURE_DRAFTS))
def test_feature_drafts_are_random_and_far_from_the_target(models, tables, feature_drafts,
                                                           name):
    """The premises of the feature-draft distribution tests: q differs clearly from p (so
    both branches of the rule, and the residual, carry mass), and the reduced draft puts
    no mass outside its vocabulary."""
    draft = feature_drafts[name]
    table = _feature_draft_step0_table(models[0], draft)
    prefixes = sorted(table)
    q = np.stack([table[p] for p in prefixes])
    p = np.stack([tables[0][p] for p in prefixes])
    overlap = np.minimum(p, q).sum(axis=-1).mean()
    assert 0.3 < overlap < 0.8, f"mean overlap {overlap:.2f}"
    if not draft.full_vocabulary:
        outside = np.setdiff1d(np.arange(VOCAB), DRAFT_VOCAB)
        assert np.all(q[:, outside] == 0)
        # The residual carries the mass of the tokens q never proposes.
        assert p[:, outside].sum(axis=-1).mean() > 0.1


@pytest.mark.parametrize("sampling_name, k", list(FEATURE_LAYOUTS),
                         ids=[f"{name}-k{k}-{FEATURE_LAYOUTS[name, k][0]}"
                              f"-batch{FEATURE_LAYOUTS[name, k][1]}"
                              for name, k in FEATURE_LAYOUTS])
def test_feature_draft_matches_uncached_target_distribution(models, tables, feature_drafts,
                                                            sampling_name, k, strategy):
    """Rows drafted by a feature draft follow the exact law of the uncached target."""
    target = models[0]
    sampling = SAMPLINGS[sampling_name]
    name, batch, calls = FEATURE_LAYOUTS[sampling_name, k]
    draft = feature_drafts[name]
    tokens, lengths, stats = _decode(strategy, target, draft, k, sampling, batch, calls)
    assert (lengths == LENGTH).all()
    pvalue = _pvalue(tokens, lengths, tables[0], sampling)
    assert pvalue > P_MIN, f"p = {pvalue:.2e}"
    pooled = tfspec.DecodeStats.concatenate(stats)
    assert 0.1 < pooled.acceptance_rate < 0.9, pooled.acceptance_rate
    # Rounds that accepted all k drafts happened, so later rounds read what the feature
    # catch-up wrote and started from the feature of a position the draft had predicted.
    assert pooled.accepted_per_position[:, -1].sum() > 0.05 * len(lengths)
    if 1 < batch < len(lengths):
        assert any(len(set(s.rounds.tolist())) > 1 for s in stats)
    if not draft.full_vocabulary:
        outside = np.setdiff1d(np.arange(VOCAB), DRAFT_VOCAB)
        assert np.isin(tokens, outside).mean() > 0.05  # The residual emitted them.


@pytest.mark.parametrize("name, k, wrong", [
    ("top-reduced", 2, "inverted_ratio"),
    ("fused", 1, "argmax_draft"),
])
def test_power_wrong_rules_are_rejected_with_a_feature_draft(models, tables, feature_drafts,
                                                              name, k, wrong, strategy):
    """The same G-test rejects a wrong acceptance rule, and drafts scored as sampled that
    were the argmax, when the draft is a feature draft."""
    overrides = ({"accept_fn": wrong_rules.inverted_ratio} if wrong == "inverted_ratio"
                 else {"draft_sample_fn": wrong_rules.argmax_draft})
    sampling = SAMPLINGS["t1"]
    tokens, lengths, _ = _decode(strategy, models[0], feature_drafts[name], k, sampling,
                                 6000, 1, **overrides)
    pvalue = _pvalue(tokens, lengths, tables[0], sampling)
    assert pvalue < P_MIN, f"wrong rule {wrong} not detected (p = {pvalue:.3g})"
