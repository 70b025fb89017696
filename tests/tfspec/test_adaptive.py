"""`k="auto"`: the in-loop adaptive draft length and the cross-request controller.

The distribution tests of auto mode are in `test_t5_exactness.py`; here: greedy identity,
what the loop drafts, the horizon schedule and the controller's choices.
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

import tfspec
from tfspec import adaptive, decoding, generation
from tfspec.models import T5, T5Config
from tfspec.testing.wrapped_model import WrappedModel

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
    adaptive.AutoDraft(k_max=4, confidence=0.0, draft_cost=None, initial_k=1,
                       fallback=False),
    adaptive.AutoDraft(k_max=5, confidence=0.05, draft_cost=None, initial_k=5,
                       fallback=False),
    adaptive.AutoDraft(k_max=3, confidence=0.9, initial_k=2, fallback=False),
    adaptive.AutoDraft(k_max=4, confidence=0.0, draft_cost=0.05, initial_k=1,
                       fallback=False),
], ids=["hf-grow-from-1", "hf-confidence-0.05", "confidence-0.9", "formula-schedule"])
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


@pytest.mark.parametrize("sampling", [GREEDY, tfspec.Sampling(temperature=1.0)],
                         ids=["greedy", "t1"])
def test_a_window_of_one_runs_the_fixed_k1_loop(models, sampling):
    """At window 1 every row drafts one token a round whatever its horizon or confidence,
    so auto runs fixed k = 1's loop (no second program for the same rounds): a later k = 1
    call compiles nothing, greedy output is autoregressive's, and the controller learns
    horizon 1 and the request's overlap as from an adaptive loop."""
    target, draft = models
    auto = adaptive.AutoDraft(k_max=1, confidence=0.5, fallback=False)
    gen = tfspec.generate(target, PROMPTS, draft=draft, k=auto, max_new_tokens=12,
                          sampling=sampling, eos_id=None)
    loops = set(generation.compiled_loops(target))
    fixed = tfspec.generate(target, PROMPTS, draft=draft, k=1, max_new_tokens=12,
                            sampling=sampling, eos_id=None)
    assert set(generation.compiled_loops(target)) == loops
    assert gen.mode == adaptive.SPECULATIVE
    np.testing.assert_array_equal(gen.stats.drafted, gen.stats.rounds)
    if sampling is GREEDY:
        ar = tfspec.generate(target, PROMPTS, max_new_tokens=12, sampling=GREEDY, eos_id=None)
        np.testing.assert_array_equal(gen.tokens, ar.tokens)
        np.testing.assert_array_equal(fixed.tokens, ar.tokens)
    controller = adaptive.controller(target, draft, sampling, auto)
    assert controller.horizon == 1
    verified = float(np.sum(gen.stats.verified))
    assert controller.overlap() == pytest.approx(
        (float(np.sum(gen.stats.beta_sum)) + adaptive.PRIOR_OVERLAP * adaptive.PRIOR_POSITIONS)
        / (verified + adaptive.PRIOR_POSITIONS))


@pytest.mark.parametrize("eos_id", [None, 1], ids=["no-eos", "eos"])
def test_a_high_confidence_threshold_drafts_one_token_per_round(models, eos_id):
    """q(d) < 0.999 always holds for a random draft: every row stops after one draft, and
    the statistics count one drafted position per round, also with an EOS id (the slots a
    row did not draft hold the EOS filler, which once counted as a drafted EOS: a phantom
    rejected position per round, and a beta_mean near half the true one)."""
    target, draft = models
    auto = adaptive.AutoDraft(k_max=4, confidence=0.999, initial_k=4, fallback=False)
    for sampling in (GREEDY, tfspec.Sampling(temperature=1.0)):
        gen = tfspec.generate(target, PROMPTS, draft=draft, k=auto, max_new_tokens=12,
                              sampling=sampling, eos_id=eos_id)
        np.testing.assert_array_equal(gen.stats.drafted, gen.stats.rounds)
        assert (gen.stats.verified <= gen.stats.rounds).all()
        assert (gen.stats.accepted_per_position[:, 1:] == 0).all()


def test_without_the_confidence_test_rows_draft_their_horizon(models):
    target, draft = models
    auto = adaptive.AutoDraft(k_max=4, confidence=0.0, initial_k=3, fallback=False)
    gen = tfspec.generate(target, PROMPTS[:1], draft=draft, k=auto, max_new_tokens=12,
                          sampling=GREEDY, eos_id=None)
    # The first round drafts the initial horizon, 3; later rounds between 1 and 4.
    assert 3 <= gen.stats.drafted[0] <= 4 * gen.stats.rounds[0]
    assert gen.stats.accepted_per_position[0, 3] <= gen.stats.rounds[0] - 1


class _PoisonedTail(WrappedModel):
    """A T5 that takes `live_width` (protocol.py's `LiveWidth`) and poisons everything past
    it in each row: those entries' logits become a one-hot on token 2 and the cache slots
    they write hold 1e3. A loop that read any of it would decode differently from
    autoregressive decoding. With `shift` = 1 it also poisons each live row's last live
    entry: what a loop passing one entry too few would see (the power check)."""

    decodes_live_width = True

    def __init__(self, model, shift=0):
        super().__init__(model)
        self._shift, self.live_calls = shift, 0

    def decode(self, context, cache, ids, positions, live_width=None):
        logits, cache = self._model.decode(context, cache, ids, positions)
        if live_width is None:
            return logits, cache
        self.live_calls += 1  # At trace time: counts the compiled calls that pass it.
        live = tf.maximum(live_width - self._shift, 0)[:, None]                 # [B, 1]
        past = tf.range(ids.shape[1])[None, :] >= live                         # [B, W]
        logits = tf.where(past[..., None], tf.one_hot(2, logits.shape[-1]) * 1e4, logits)
        heads = cache.values[0].shape[1]
        grid = [ids.shape[0], heads, ids.shape[1]]
        indices = tf.stack([tf.broadcast_to(tf.range(grid[0])[:, None, None], grid),
                            tf.broadcast_to(tf.range(heads)[None, :, None], grid),
                            tf.broadcast_to(positions[:, None, :], grid)], axis=-1)

        def poison(layer):  # [B, H, L, d]: the slots of entries past live_width <- 1e3
            written = tf.gather_nd(layer, indices)                            # [B, H, W, d]
            return tf.tensor_scatter_nd_update(
                layer, indices, tf.where(past[:, None, :, None], 1e3, written))

        def poison_columns(layer):  # [B, H, d, L] (a cache prepared for windows)
            return tf.transpose(poison(tf.transpose(layer, [0, 1, 3, 2])), [0, 1, 3, 2])

        return logits, type(cache)(tuple(map(poison, cache.keys)),
                                   tuple(map(poison, cache.values)),
                                   tuple(map(poison_columns, cache.keys_transposed)))


@pytest.mark.parametrize("k", [
    adaptive.AutoDraft(k_max=4, confidence=0.0, initial_k=1, fallback=False),
    adaptive.AutoDraft(k_max=5, confidence=0.3, initial_k=5, fallback=False),
    3, 0,
], ids=["auto-grow-from-1", "auto-confidence-0.3", "k3", "autoregressive"])
def test_the_loop_never_reads_past_the_live_widths_it_passes(models, k):
    """Every round passes each row's live width to a target that takes it: 1 + its drafts
    (k + 1 at a fixed k, 1 + m_b in auto mode, 1 autoregressively), 0 once it has finished.
    The rule and the cache must never need an entry past it (poisoned here), so greedy
    decoding still equals autoregressive decoding, while a loop that passed one entry too
    few per live row (shift = 1) decodes differently. The EOS is a token row 0 emits early,
    so rows finish in different rounds."""
    target, _ = models
    draft = target if k else None  # Accepts every draft: rows differ in where they stop.
    first = tfspec.generate(target, PROMPTS, max_new_tokens=16, sampling=GREEDY, eos_id=None)
    eos = int(first.tokens[0, 2])
    ar = tfspec.generate(target, PROMPTS, max_new_tokens=16, sampling=GREEDY, eos_id=eos)
    assert len(set(ar.lengths.tolist())) > 1, "rows finish together: choose another EOS"
    poisoned = _PoisonedTail(target)
    gen = tfspec.generate(poisoned, PROMPTS, draft=draft, k=k, max_new_tokens=16,
                          sampling=GREEDY, eos_id=eos)
    assert poisoned.live_calls > 0, "the loop never passed live_width"
    np.testing.assert_array_equal(gen.tokens, ar.tokens)
    np.testing.assert_array_equal(gen.lengths, ar.lengths)
    adaptive.reset()
    short = tfspec.generate(_PoisonedTail(target, shift=1), PROMPTS, draft=draft, k=k,
                            max_new_tokens=16, sampling=GREEDY, eos_id=eos)
    assert not np.array_equal(short.tokens, ar.tokens)


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


@pytest.mark.parametrize("overlap, verified, draft_cost, expected", [
    (0.95, 40, 0.35, 6),   # a draft that is nearly always right: the whole k
    (0.6, 40, 0.35, 1),    # scores [1.192, 1.166, 1.077, ...]: one draft
    (0.6, 40, 0.05, 4),    # the same overlap with drafts almost free: more
    (0.0, 40, 0.35, 1),    # never accepted: one draft, the minimum
    (1.0, 40, 0.0, 6),     # free and always right: k
    (0.0, 0, 0.35, 6),     # nothing verified yet: the optimistic prior alone, k
])
def test_formula_horizon_is_the_formulas_best(overlap, verified, draft_cost, expected):
    horizon = decoding._formula_horizon(  # pylint: disable=protected-access
        tf.constant([overlap * verified, overlap * verified]),
        tf.constant([verified, verified]), tf.constant([2, 2]), tf.constant([True, False]),
        6, draft_cost)
    assert horizon.numpy().tolist() == [expected, 2]  # A finished row keeps its horizon.
    # Against the formula itself, at the shrunk overlap the loop uses.
    a = ((overlap * verified + adaptive.PRIOR_OVERLAP * adaptive.PRIOR_POSITIONS)
         / (verified + adaptive.PRIOR_POSITIONS))
    scores = [sum(a ** i for i in range(h + 1)) / (1 + h * draft_cost) for h in range(1, 7)]
    assert expected == 1 + int(np.argmax(scores))


def test_formula_schedule_drafts_less_where_the_draft_disagrees(models):
    """Through the loop: with a draft equal to the target every row grows to the whole k
    after its first round (2 drafts) and keeps it; with the random draft (overlap ~0) rows
    fall to one draft per round."""
    target, draft = models
    auto = adaptive.AutoDraft(k_max=4, draft_cost=0.3, initial_k=2, fallback=False)
    sampling = tfspec.Sampling(temperature=1.0)
    same = tfspec.generate(target, PROMPTS, draft=target, k=auto, max_new_tokens=24,
                           sampling=sampling, eos_id=None, seed=3)
    assert same.stats.drafted.sum() / same.stats.rounds.sum() > 2.5
    adaptive.reset()
    other = tfspec.generate(target, PROMPTS, draft=draft, k=auto, max_new_tokens=24,
                            sampling=sampling, eos_id=None, seed=3)
    assert other.stats.beta_mean < 0.5
    assert other.stats.drafted.sum() / other.stats.rounds.sum() < 1.5


def test_controller_window_follows_the_measured_overlap_without_flapping():
    """A fresh controller compiles k_max (the optimistic prior); measured overlaps move the
    window to the formula's best, and a near-tie does not move it back and forth."""
    c = adaptive.Controller(adaptive.AutoDraft(k_max=4, draft_cost=0.3))
    assert c.window() == 4
    for _ in range(4):  # overlap 0.67: scores [1.285, 1.324, 1.274, 1.188] -> 2
        c.record((1, 32, 64), S, 0.1, 20, compiled=False, final_horizons=[2],
                 overlap=(6.7, 10))
    assert c.overlap() == pytest.approx((26.8 + 1.0) / 41)
    assert c.window() == 2
    for _ in range(16):  # 0.62: [1.246, 1.253, ...]: 2 still best, 1 within the margin
        c.record((1, 32, 64), S, 0.1, 20, compiled=False, overlap=(6.2, 10))
    assert adaptive.formula_horizon(c.overlap(), 4, 0.3) == 2
    assert c.window() == 2
    for _ in range(16):  # 0.4: one draft is clearly best
        c.record((1, 32, 64), S, 0.1, 20, compiled=False, overlap=(4.0, 10))
    assert c.window() == 1
    # Hugging Face's schedule: always k_max.
    assert adaptive.Controller(adaptive.AutoDraft(k_max=3, draft_cost=None)).window() == 3


def test_bad_draft_cost_is_refused():
    with pytest.raises(ValueError, match="draft_cost must be a number >= 0"):
        adaptive.AutoDraft(draft_cost=-0.1)


S, A = adaptive.SPECULATIVE, adaptive.AUTOREGRESSIVE
REPLAYS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       "fixtures", "auto_replay")


def _feed(c, mode, seconds, tokens, shape=(1, 32, 64), compiled=False):
    c.record(shape, mode, seconds, tokens, compiled=compiled)


def test_controller_explores_then_keeps_the_faster_and_revisits():
    c = adaptive.Controller(adaptive.AutoDraft(explore=3, revisit=8))
    cost = {S: lambda n: 0.02 + 0.001 * n, A: lambda n: 0.02 + 0.002 * n}
    assert c.choose(None) == S
    c.record((1, 32, 64), S, 9.0, 40, compiled=True, final_horizons=[2])
    assert c.horizon == 2
    assert not c.measurements[S]  # The compiling call is not a measurement...
    modes = []
    for n in (40, 41, 50, 51, 60, 61):  # ...so exploration starts again: S, A, S, A, ...
        modes.append(c.choose(None))
        _feed(c, modes[-1], cost[modes[-1]](n), n)
    assert modes == [S, A] * 3
    log_ratio, error = c.log_ratio()
    mean_n = (40 + 41 + 50 + 51 + 60 + 61) / 6
    assert log_ratio == pytest.approx(np.log(cost[S](mean_n) / cost[A](mean_n)), abs=1e-6)
    assert error < 1e-6  # Exact fits.
    # Requests 8..19: the faster mode, the slower at requests 8 and 16.
    assert [c.choose(None) for _ in range(12)] == [
        A if request in (8, 16) else S for request in range(8, 20)]


def test_controller_compares_fitted_request_times_not_ms_per_token():
    """Speculation measured on short answers and autoregressive decoding on long ones: per
    request, the short answers' ms per token is mostly the shared per-request cost
    (6 ms/token against 2.5), which made the first version pick the slower mode; the fits
    compare both at the workload's mean request."""
    c = adaptive.Controller(adaptive.AutoDraft(explore=4, revisit=1000))
    for n_spec, n_ar in ((8, 90), (10, 100), (12, 110), (14, 120)):
        _feed(c, S, 0.05 + 0.001 * n_spec, n_spec)
        _feed(c, A, 0.05 + 0.002 * n_ar, n_ar)
    assert c.log_ratio()[0] < 0
    assert c.choose(None) == S


def test_controller_explores_while_the_modes_are_within_noise():
    rng = np.random.default_rng(0)
    c = adaptive.Controller(adaptive.AutoDraft(explore=2, revisit=1000))
    modes = []
    for _ in range(2 * adaptive._EXPLORE_CAP):  # pylint: disable=protected-access
        modes.append(c.choose(None))
        n = int(rng.integers(20, 120))
        _feed(c, modes[-1], (0.03 + 0.002 * n) * rng.uniform(0.8, 1.2), n)
    # Equal costs under 20% noise: the modes alternate up to the cap.
    assert modes == [S, A] * adaptive._EXPLORE_CAP  # pylint: disable=protected-access


def test_running_sums_fit_like_least_squares_over_the_window():
    """The controller keeps running sums (a decision is inside the timed request); after
    the window slid, they still give the least-squares fit of the last `_WINDOW`."""
    rng = np.random.default_rng(1)
    fit = adaptive._WindowFit()  # pylint: disable=protected-access
    rows = [(float(rng.choice([24, 96, 384])), float(rng.integers(4, 128)),
             float(rng.uniform(0.01, 0.5))) for _ in range(adaptive._WINDOW + 44)]  # pylint: disable=protected-access
    for row in rows:
        fit.add(*row)
    window = np.array(rows[-adaptive._WINDOW:])  # pylint: disable=protected-access
    design = np.stack([np.ones(len(window)), window[:, 1], window[:, 0]], axis=1)
    coef, *_ = np.linalg.lstsq(design, window[:, 2], rcond=None)
    features = np.array([1.0, 50.0, 96.0])
    predicted, variance = fit.predict(features)
    assert len(fit) == adaptive._WINDOW  # pylint: disable=protected-access
    assert predicted == pytest.approx(float(coef @ features), rel=1e-9)
    residual = np.sum((window[:, 2] - design @ coef) ** 2) / (len(window) - 3)
    assert variance == pytest.approx(
        residual * features @ np.linalg.inv(design.T @ design) @ features, rel=1e-6)


def _replay(requests, seed):
    """Replays recorded requests (shuffled) through a controller: (speed-up over
    autoregressive of what it ran, speed-up of always speculating)."""
    order = list(requests)
    np.random.default_rng(seed).shuffle(order)
    c = adaptive.Controller(adaptive.AutoDraft())
    seen, seconds, tokens = set(), 0.0, 0
    for request in order:
        shape = (1, request["bucket"], 128)
        mode = c.choose(shape)
        n, t = request[mode]
        # A shape's first call in a mode compiles (no measurement), as in tfspec.generate.
        c.record(shape, mode, t, n, compiled=(shape, mode) not in seen)
        seen.add((shape, mode))
        seconds, tokens = seconds + t, tokens + n
    ar = sum(r[A][1] for r in order) / sum(r[A][0] for r in order)
    spec = sum(r[S][1] for r in order) / sum(r[S][0] for r in order)
    return ar / (seconds / tokens), ar / spec


@pytest.mark.parametrize("name", ["humaneval_t0", "humaneval_t1", "docsum_t0"])
def test_controller_on_recorded_requests_nears_the_better_mode(name):
    """The per-request times of both modes in the example report's sweeps (k = 4;
    speculation 1.20x at HumanEval T = 0, 0.85x at T = 1, 0.88x at docsum T = 0), replayed
    in 10 orders: auto reaches >= 95% of the better fixed mode on average and >= 85% in
    every order (in one docsum order the early requests favoured speculation, and it
    stayed there: 0.89x). The first version (per-shape ms per token) failed the mean at
    HumanEval T = 0 (1.09x against 1.20x) and T = 1 (0.94x)."""
    with open(os.path.join(REPLAYS, name + ".json"), encoding="utf-8") as f:
        requests = [{"bucket": r["bucket"], S: r["speculative"], A: r["autoregressive"]}
                    for r in json.load(f)["requests"]]
    results = [_replay(requests, seed) for seed in range(10)]
    best = max(1.0, results[0][1])
    speedups = np.array([r[0] for r in results])
    assert speedups.mean() >= 0.95 * best
    assert speedups.min() >= 0.85 * best


def test_controller_without_fallback_always_speculates():
    c = adaptive.Controller(adaptive.AutoDraft(fallback=False))
    for _ in range(3):
        assert c.choose((1, 8, 8)) == adaptive.SPECULATIVE
        c.record((1, 8, 8), adaptive.SPECULATIVE, 1.0, 1, compiled=False)


def test_auto_falls_back_to_autoregressive_where_it_measured_faster(models):
    """Through tfspec.generate (draft = target, so the modes cost about the same): the
    controller runs and measures both modes (a call that compiled is no measurement), with
    the same greedy tokens in either; which one it then keeps is the unit tests' above."""
    target, _ = models
    auto = adaptive.AutoDraft(k_max=2, confidence=0.0, fallback=True, explore=1)
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
    # 6 calls, one compiled (the autoregressive loop compiled for `ar` above).
    assert len(c.measurements[S]) + len(c.measurements[A]) == 5
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


@pytest.mark.auto_default
def test_auto_resolves_to_the_formulas_schedule():
    """`k="auto"` ships the walltime formula's schedule at draft_cost 0.5 (the rest of the
    suite runs "auto" in one window: tests/conftest.py's `_auto_in_one_window`)."""
    assert adaptive.resolve("auto") == adaptive.AutoDraft()
    assert adaptive.AutoDraft().draft_cost == 0.5
    assert adaptive.resolve("auto") is not None and adaptive.resolve(3) is None


def test_the_suite_runs_auto_in_one_window():
    assert adaptive.resolve("auto").draft_cost is None
    assert adaptive.resolve(adaptive.AutoDraft()).draft_cost == 0.5


def test_untracked_controllers_are_fresh_and_not_kept(models):
    target, draft = models
    auto = adaptive.AutoDraft(k_max=3)
    sampling = tfspec.Sampling()
    kept = adaptive.controller(target, draft, sampling, auto)
    kept.record((1, 8, 4), adaptive.SPECULATIVE, 0.01, 4, compiled=False, overlap=(0.0, 4.0))
    with adaptive.untracked():
        fresh = adaptive.controller(target, draft, sampling, auto)
        assert fresh is not kept and fresh.window() == 3  # Its k_max: nothing learnt.
        assert adaptive.controller(target, draft, sampling, auto) is not fresh
    assert adaptive.controller(target, draft, sampling, auto) is kept
    assert kept.window() == 1  # What it learnt (overlap 0) is still there.
