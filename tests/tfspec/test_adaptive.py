"""`k="auto"`: the in-loop adaptive draft length and the cross-request controller.

The distribution tests of auto mode are in `test_t5_exactness.py`; here: greedy identity,
what the loop drafts, the horizon schedule and the controller's choices.
"""

import numpy as np
import pytest
import tensorflow as tf

import tfspec
from tfspec import adaptive, decoding
from tfspec.models import T5, T5Config

VOCAB = 96
PROMPTS = [[5, 6, 7, 8, 9, 10], [11], [12, 13, 14], [20, 21, 22, 23, 24, 25, 26, 27, 28, 29]]
GREEDY = tfspec.Sampling(temperature=0.0)


def _config(layers, d_model):
    return T5Config(vocab_size=VOCAB, d_model=d_model, d_kv=8, d_ff=2 * d_model,
                    num_layers=layers, num_decoder_layers=layers, num_heads=4,
                    relative_attention_num_buckets=8, relative_attention_max_distance=32,
                    feed_forward_proj="gated-gelu", tie_word_embeddings=False,
                    layer_norm_epsilon=1e-6, pad_token_id=0, eos_token_id=1,
                    decoder_start_token_id=0)


@pytest.fixture(scope="module")
def models():
    return T5(_config(2, 32), seed=1), T5(_config(1, 16), seed=5)


@pytest.fixture(autouse=True)
def fresh_controllers():
    adaptive.reset()
    yield
    adaptive.reset()


@pytest.mark.parametrize("auto", [
    adaptive.AutoDraft(k_max=4, confidence=0.0, initial_k=1, fallback=False),
    adaptive.AutoDraft(k_max=5, confidence=0.05, initial_k=5, fallback=False),
    adaptive.AutoDraft(k_max=3, confidence=0.9, initial_k=2, fallback=False),
], ids=["grow-from-1", "confidence-0.05", "confidence-0.9"])
@pytest.mark.parametrize("same_draft", [False, True], ids=["draft", "draft-is-target"])
def test_greedy_auto_equals_greedy_autoregressive(models, auto, same_draft):
    target, draft = models
    draft = target if same_draft else draft
    ar = tfspec.generate(target, PROMPTS, max_new_tokens=16, sampling=GREEDY, eos_id=None)
    for _ in range(2):  # The second call starts from the horizon the first ended with.
        gen = tfspec.generate(target, PROMPTS, draft=draft, k=auto, max_new_tokens=16,
                              sampling=GREEDY, eos_id=None)
        np.testing.assert_array_equal(gen.tokens, ar.tokens)
        assert gen.mode == adaptive.SPECULATIVE
        assert gen.stats.accepted_per_position.shape == (len(PROMPTS), auto.k_max)
        assert (gen.stats.drafted <= gen.stats.rounds * auto.k_max).all()
    if same_draft:
        # Every draft is the target's argmax: all accepted, so horizons only grow, and the
        # draft caught up at each row's own last draft position (else it would diverge).
        assert gen.stats.acceptance_rate == 1.0
        if auto.confidence < 0.5:
            assert adaptive.controller(target, draft, GREEDY, auto).horizon == auto.k_max


def test_a_high_confidence_threshold_drafts_one_token_per_round(models):
    """q(d) < 0.999 always holds for a random draft: every row stops after one draft."""
    target, draft = models
    auto = adaptive.AutoDraft(k_max=4, confidence=0.999, initial_k=4, fallback=False)
    for sampling in (GREEDY, tfspec.Sampling(temperature=1.0)):
        gen = tfspec.generate(target, PROMPTS, draft=draft, k=auto, max_new_tokens=12,
                              sampling=sampling, eos_id=None)
        np.testing.assert_array_equal(gen.stats.drafted, gen.stats.rounds)
        assert (gen.stats.accepted_per_position[:, 1:] == 0).all()


def test_without_the_confidence_test_rows_draft_their_horizon(models):
    target, draft = models
    auto = adaptive.AutoDraft(k_max=4, confidence=0.0, initial_k=3, fallback=False)
    gen = tfspec.generate(target, PROMPTS[:1], draft=draft, k=auto, max_new_tokens=12,
                          sampling=GREEDY, eos_id=None)
    # The first round drafts the initial horizon, 3; later rounds between 1 and 4.
    assert 3 <= gen.stats.drafted[0] <= 4 * gen.stats.rounds[0]
    assert gen.stats.accepted_per_position[0, 3] <= gen.stats.rounds[0] - 1


@pytest.mark.parametrize("horizon, drafted, accepted, live, expected", [
    (3, 3, 3, True, 5),   # the whole horizon drafted and accepted: + 2
    (3, 3, 1, True, 2),   # a rejection: - 1
    (3, 2, 2, True, 3),   # stopped early, all accepted: unchanged
    (1, 1, 0, True, 1),   # never below 1
    (5, 5, 5, True, 6),   # never above k = 6
    (3, 3, 0, False, 3),  # finished rows keep theirs
])
def test_next_horizon_follows_the_schedule(horizon, drafted, accepted, live, expected):
    result = decoding._next_horizon(tf.constant([horizon]), tf.constant([drafted]),  # pylint: disable=protected-access
                                    tf.constant([accepted]), tf.constant([live]), 6)
    assert int(result[0]) == expected


def test_controller_measures_both_modes_then_keeps_the_faster_and_revisits():
    auto = adaptive.AutoDraft(revisit=4)
    c = adaptive.Controller(auto)
    shape = (1, 32, 64)
    assert c.choose(shape) == adaptive.SPECULATIVE
    c.record(shape, adaptive.SPECULATIVE, 1.0, 64, compiled=True, final_horizons=[2])
    assert c.horizon == 2
    assert c.choose(shape) == adaptive.SPECULATIVE  # The compiling call did not count.
    c.record(shape, adaptive.SPECULATIVE, 0.2, 64, compiled=False)
    assert c.choose(shape) == adaptive.AUTOREGRESSIVE
    c.record(shape, adaptive.AUTOREGRESSIVE, 0.1, 64, compiled=False)
    assert c.pooled_log_ratio() == pytest.approx(np.log(2.0))
    modes = [c.choose(shape) for _ in range(14)]
    # Requests 4..17 (1-based) in all: the slower (speculative) mode at requests 4, 8, 16.
    assert modes == [adaptive.SPECULATIVE if 4 + i in (4, 8, 16) else adaptive.AUTOREGRESSIVE
                     for i in range(14)]
    # A shape never measured follows the pooled decision at once (request 18).
    assert c.choose((1, 64, 64)) == adaptive.AUTOREGRESSIVE


def test_controller_pools_the_ratio_over_shapes():
    c = adaptive.Controller(adaptive.AutoDraft(revisit=1000))
    for shape, spec_s, ar_s in (((1, 8, 8), 0.9, 1.0), ((1, 16, 8), 0.8, 1.0),
                                ((1, 24, 8), 1.05, 1.0)):
        c.choose(shape)
        c.record(shape, adaptive.SPECULATIVE, spec_s, 10, compiled=False)
        c.choose(shape)
        c.record(shape, adaptive.AUTOREGRESSIVE, ar_s, 10, compiled=False)
    # Two shapes say speculation is faster, one (slightly) not: all three speculate.
    assert c.pooled_log_ratio() < 0
    assert {c.choose(s) for s in ((1, 8, 8), (1, 16, 8), (1, 24, 8))} == {
        adaptive.SPECULATIVE}


def test_controller_without_fallback_always_speculates():
    c = adaptive.Controller(adaptive.AutoDraft(fallback=False))
    for _ in range(3):
        assert c.choose((1, 8, 8)) == adaptive.SPECULATIVE
        c.record((1, 8, 8), adaptive.SPECULATIVE, 1.0, 1, compiled=False)


def test_auto_falls_back_to_autoregressive_where_it_measured_faster(models):
    """After measuring both modes (draft = target, so they cost about the same), requests
    of that shape run in the mode that measured faster, with the same greedy tokens."""
    target, _ = models
    auto = adaptive.AutoDraft(k_max=2, confidence=0.0, fallback=True)
    ar = tfspec.generate(target, PROMPTS, max_new_tokens=8, sampling=GREEDY, eos_id=None)
    c = adaptive.controller(target, target, GREEDY, auto)
    modes = []
    for _ in range(6):
        gen = tfspec.generate(target, PROMPTS, draft=target, k=auto, max_new_tokens=8,
                              sampling=GREEDY, eos_id=None)
        np.testing.assert_array_equal(gen.tokens, ar.tokens)
        modes.append(gen.mode)
    assert modes[:3] == [adaptive.SPECULATIVE, adaptive.SPECULATIVE,
                         adaptive.AUTOREGRESSIVE]
    assert set(modes) == {adaptive.SPECULATIVE, adaptive.AUTOREGRESSIVE}
    chosen = min((c.ms_per_token[(s, m)], m) for (s, m) in c.ms_per_token)[1]
    assert modes[-1] == chosen
    stats = tfspec.DecodeStats.concatenate([gen.stats])  # Same width in either mode.
    assert stats.accepted_per_position.shape[1] == auto.k_max


@pytest.mark.parametrize("k, message", [
    ("fast", 'k must be a non-negative integer or "auto"'),
    (-1, 'k must be a non-negative integer'),
    (2.5, 'k must be a non-negative integer'),
])
def test_bad_k_is_refused(models, k, message):
    target, draft = models
    with pytest.raises(ValueError, match=message):
        tfspec.generate(target, PROMPTS, draft=draft, k=k)


@pytest.mark.parametrize("kwargs, message", [
    (dict(k_max=0), "k_max"), (dict(confidence=1.0), "confidence"),
    (dict(k_max=3, initial_k=4), "initial_k"), (dict(revisit=1), "revisit"),
])
def test_bad_auto_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        adaptive.AutoDraft(**kwargs)


def test_auto_without_a_draft_is_autoregressive(models):
    target, _ = models
    gen = tfspec.generate(target, PROMPTS, k="auto", max_new_tokens=6, sampling=GREEDY)
    assert gen.mode is None and gen.stats.drafted.sum() == 0


@pytest.mark.strategies
def test_auto_under_every_strategy(strategy):
    """k="auto" with the batch split across replicas (each gets its rows' horizons): the
    greedy autoregressive tokens, and every draft accepted when the draft is the target."""
    with strategy.scope():
        target = T5(_config(2, 32), seed=1)
    auto = adaptive.AutoDraft(k_max=3, confidence=0.0, initial_k=2, fallback=False)
    kwargs = dict(max_new_tokens=10, sampling=GREEDY, eos_id=None, strategy=strategy)
    ar = tfspec.generate(target, PROMPTS, **kwargs)
    gen = tfspec.generate(target, PROMPTS, draft=target, k=auto, **kwargs)
    np.testing.assert_array_equal(gen.tokens, ar.tokens)
    np.testing.assert_array_equal(gen.stats.accepted, gen.stats.drafted)
