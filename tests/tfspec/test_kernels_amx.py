"""tfspec.kernels on AMX: the many-row product of the encoders, its panels, and the T5
encoder and cross-attention keys/values that run through it."""

import numpy as np
import pytest
import tensorflow as tf

import tfspec
from tfspec import generation, kernels
from tfspec.models import T5, T5Config
from tfspec.models.feature_draft import FeatureDraft, FeatureDraftConfig

pytestmark = pytest.mark.skipif(not kernels.amx_available(),
                                reason=f"needs AMX and the kernel: {kernels.status()}")


def _bfloat16_values(values) -> np.ndarray:
    """float32 values rounded to bfloat16 (their low 16 bits zero), still float32."""
    return tf.cast(tf.cast(values, tf.bfloat16), tf.float32).numpy()


def _amx_matmul(x: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    panels = kernels.amx_panels(tf.constant(kernel))
    k_dim, n_dim = kernel.shape
    fn = tf.function(lambda a, p: kernels.amx_matmul(a, p, k_dim, n_dim), jit_compile=True,
                     autograph=False)
    return fn(tf.constant(x), panels).numpy()


def _problem(rows, k_dim, n_dim, seed=0):
    rng = np.random.default_rng(seed + rows * 7 + k_dim * 13 + n_dim)
    x = rng.standard_normal((rows, k_dim)).astype(np.float32)
    kernel = _bfloat16_values(rng.standard_normal((k_dim, n_dim)) / np.sqrt(k_dim))
    return x, kernel


# Shapes with partial row tiles (M % 16), partial column tiles (N % 16) and K that AMX's
# 32-deep tiles must pad; and the embedded target's encoder shapes.
SHAPES = [(1, 8, 5), (17, 40, 33), (37, 100, 50), (64, 384, 1152), (48, 1024, 384)]


@pytest.mark.parametrize("rows,k_dim,n_dim", SHAPES)
def test_amx_matmul_is_a_float32_product(rows, k_dim, n_dim):
    """The three-part split of x makes every product exact: the result is the float32 dot
    product up to summation order, as close to float64 as XLA's own float32 dot, and
    far closer than x rounded to bfloat16 once (the error this split exists to avoid)."""
    x, kernel = _problem(rows, k_dim, n_dim)
    got = _amx_matmul(x, kernel)
    want = x.astype(np.float64) @ kernel.astype(np.float64)
    scale = np.abs(x).astype(np.float64) @ np.abs(kernel).astype(np.float64)
    error = np.max(np.abs(got - want) / scale)
    assert got.shape == (rows, n_dim)
    assert error < 4 * k_dim * 2.0 ** -24  # the float32 summation bound
    rounded_once = _bfloat16_values(x).astype(np.float64) @ kernel.astype(np.float64)
    assert np.max(np.abs(rounded_once - want) / scale) > 30 * error  # the power: 1 part fails


@pytest.mark.parametrize("rows,k_dim,n_dim", [(1, 8, 5), (37, 100, 50), (309, 384, 256)])
def test_amx_matmul_split_is_a_float32_product_of_a_float32_kernel(rows, k_dim, n_dim):
    """A kernel that is not a bfloat16 value (the target-encoder projection) through the
    panels of its three parts: the float32 product up to summation order, where its
    bfloat16 rounding (what one part would give) is far off."""
    rng = np.random.default_rng(rows + k_dim)
    x = rng.standard_normal((rows, k_dim)).astype(np.float32)
    kernel = (rng.standard_normal((k_dim, n_dim)) / np.sqrt(k_dim)).astype(np.float32)
    panels = kernels.amx_panels(kernels.bfloat16_split(tf.constant(kernel)))
    fn = tf.function(lambda a, p: kernels.amx_matmul_split(a, p, k_dim, n_dim),
                     jit_compile=True, autograph=False)
    got = fn(tf.constant(x), panels).numpy()
    want = x.astype(np.float64) @ kernel.astype(np.float64)
    scale = np.abs(x).astype(np.float64) @ np.abs(kernel).astype(np.float64)
    error = np.max(np.abs(got - want) / scale)
    assert got.shape == (rows, n_dim)
    assert error < 4 * k_dim * 2.0 ** -24
    rounded = x.astype(np.float64) @ _bfloat16_values(kernel).astype(np.float64)
    assert np.max(np.abs(rounded - want) / scale) > 30 * error


@pytest.mark.parametrize("rows,k_dim,n_dim", SHAPES[1:])
def test_amx_rows_do_not_depend_on_their_companions(rows, k_dim, n_dim):
    """Every row is the same float32 additions whatever the other rows of the call (so
    a prompt's encoder output does not depend on its batch)."""
    x, kernel = _problem(rows, k_dim, n_dim, seed=1)
    together = _amx_matmul(x, kernel)
    order = np.random.default_rng(2).permutation(rows)
    shuffled = _amx_matmul(x[order], kernel)
    np.testing.assert_array_equal(shuffled, together[order])
    np.testing.assert_array_equal(_amx_matmul(x[:1], kernel), together[:1])
    np.testing.assert_array_equal(_amx_matmul(np.concatenate([x, x]), kernel),
                                  np.concatenate([together, together]))


# (width, lengths): padding that fills whole 32-row blocks, one row tile of a block, less
# than a tile, none, and prompts that share a block (width not a multiple of 32).
LENGTH_CASES = [(96, [5, 96, 33, 17]), (24, [24, 3, 1]), (384, [309, 268])]


@pytest.mark.parametrize("width,lengths", LENGTH_CASES)
def test_amx_matmul_with_lengths_zeroes_the_padding_and_keeps_every_valid_row(width,
                                                                             lengths):
    """With prompt lengths, the rows past each prompt's length are 0 (most never
    multiplied), and every valid row is the bits of the call without lengths."""
    k_dim, n_dim = 64, 40
    x, kernel = _problem(len(lengths) * width, k_dim, n_dim, seed=3)
    x = x.reshape(len(lengths), width, k_dim)
    panels = kernels.amx_panels(tf.constant(kernel))
    fn = tf.function(lambda a, p, n: kernels.amx_matmul(a, p, k_dim, n_dim, n),
                     jit_compile=True, autograph=False)
    got = fn(tf.constant(x), panels, tf.constant(lengths, tf.int32)).numpy()
    full = _amx_matmul(x.reshape(-1, k_dim), kernel).reshape(len(lengths), width, n_dim)
    for row, length in enumerate(lengths):
        np.testing.assert_array_equal(got[row, :length], full[row, :length])
        assert not np.any(got[row, length:])


def test_amx_panels_layout():
    """Panel p holds columns 16p..16p+15, the two rows of each k pair side by side."""
    kernel = np.arange(3 * 20, dtype=np.float32).reshape(3, 20)
    panels = tf.cast(kernels.amx_panels(tf.constant(kernel)), tf.float32).numpy()
    assert panels.shape == (2, kernels.AMX_DEPTH // 2, 16, 2)
    np.testing.assert_array_equal(panels[0, 0, :, 0], kernel[0, :16])
    np.testing.assert_array_equal(panels[0, 0, :, 1], kernel[1, :16])
    np.testing.assert_array_equal(panels[1, 1, :4, 0], kernel[2, 16:])
    assert not panels[1, 0, 4:].any() and not panels[:, 2:].any()  # zero past N and K


def test_panel_cache_makes_amx_panels_only_where_exact_and_allowed():
    exact = tf.Variable(_bfloat16_values(np.linspace(-1, 1, 40 * 24).reshape(40, 24)))
    inexact = tf.Variable(np.full([40, 24], 1.0 + 2.0 ** -12, np.float32))
    cache = kernels.PanelCache([lambda: tf.convert_to_tensor(exact),
                                lambda: tf.convert_to_tensor(inexact)],
                               [[exact], [inexact]], kinds=[kernels.AMX, kernels.AMX])
    cache.refresh()
    assert cache.layout == (kernels.AMX, None)
    amx_panels, missing = cache.variables()
    assert missing is None
    np.testing.assert_array_equal(amx_panels.numpy(),
                                  kernels.amx_panels(tf.convert_to_tensor(exact)).numpy())
    with kernels.amx(False):
        assert not kernels.amx_available()
        cache.refresh()
        assert cache.layout == (None, None)
    assert kernels.amx_available()


def test_panel_cache_refuses_an_unknown_kind():
    with pytest.raises(ValueError, match="kinds must be"):
        kernels.PanelCache([tf.zeros], [[]], kinds=["tiles"])


def _model(seed, vocab=37):
    # Widths that are not multiples of 16 or 32 exercise every padded tile.
    config = T5Config(vocab_size=vocab, d_model=40, d_kv=6, d_ff=52, num_layers=2,
                      num_decoder_layers=2, num_heads=3, feed_forward_proj="gated-gelu",
                      tie_word_embeddings=False)
    model = T5(config, seed=seed)
    for w in model.weights:  # bfloat16 values, as a bfloat16 checkpoint loaded as float32
        w.assign(_bfloat16_values(w.numpy()))
    return model


def _prompts(count, length, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(2, 37, size=length - i % 3).tolist() for i in range(count)]


def _compiled_with_reads(fn, prompt_ids, lengths):
    """fn(ids, lengths) in an XLA program, as the decode loop runs its prepare: (its
    outputs as numpy arrays, the `PanelReads` of the panel entries it read)."""
    reads_box = []

    @tf.function(jit_compile=True, autograph=False)
    def compiled(ids, lens):
        with kernels.recording_panel_reads() as reads:
            outputs = fn(ids, lens)
        reads_box.append(reads)
        return outputs

    outputs = compiled(tf.constant(prompt_ids, tf.int32), tf.constant(lengths, tf.int32))
    return [o.numpy() for o in outputs], reads_box[-1]


def _prepared(model, prompt_ids, lengths):
    """(encoder states, cross keys of layer 0, PanelReads) from `prepare` in an XLA
    program."""
    model.refresh_decode_panels()

    def prepare(ids, lens):
        context, _ = model.prepare(ids, lens, 8)
        return context.encoder_states, context.cross_keys[0]

    (states, keys), reads = _compiled_with_reads(prepare, prompt_ids, lengths)
    return states, keys, reads


@pytest.mark.parametrize("batch,width,min_rows", [
    (1, 8, None), (1, 48, None), (4, 16, None), (1, 8, 32), (1, 48, 32), (2, 12, 32)])
def test_the_encoder_runs_on_amx_from_amx_min_rows(batch, width, min_rows, monkeypatch):
    """At batch x bucket >= AMX_MIN_ROWS (the default, and a raised threshold) the
    encoder's and the cross keys/values' products read AMX panels (and only then does the
    program's panel check cover their weights); the states are those of XLA's float32
    products up to summation order, and below the threshold exactly XLA's."""
    if min_rows is not None:
        monkeypatch.setattr(kernels, "AMX_MIN_ROWS", min_rows)
    ids = np.array([[(3 * r + c) % 35 + 2 for c in range(width)] for r in range(batch)])
    lengths = np.full([batch], width, np.int32)
    states, keys, reads = _prepared(_model(3), ids, lengths)
    with kernels.amx(False):  # The same weights, a cache made without AMX entries.
        want_states, want_keys, _ = _prepared(_model(3), ids, lengths)
    ((cache, entries),) = reads.checks()
    uses_amx = batch * width >= kernels.AMX_MIN_ROWS
    amx_entries = [i for i in entries if cache.layout[i] == kernels.AMX]
    assert bool(amx_entries) == uses_amx
    assert len(amx_entries) == (4 * 2 + 2 if uses_amx else 0)  # 4 per encoder layer, 1 per decoder layer
    np.testing.assert_allclose(states, want_states, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(keys, want_keys, rtol=1e-5, atol=1e-5)
    if not uses_amx:
        np.testing.assert_array_equal(states, want_states)


@pytest.mark.parametrize("batch_size", [1, 3])
def test_greedy_speculative_equals_autoregressive_with_the_encoder_on_amx(batch_size):
    """Both modes read the same encoder output (one program shape per call), so greedy
    speculative decoding still emits the autoregressive tokens."""
    target, draft = _model(3), _model(4)
    prompts = _prompts(batch_size, 40)
    kwargs = dict(max_new_tokens=16, sampling=tfspec.Sampling(temperature=0.0))
    ar = tfspec.generate(target, prompts, k=0, **kwargs)
    spec = tfspec.generate(target, prompts, draft=draft, k=3, **kwargs)
    assert any(layout == kernels.AMX for layout in kernels.panel_layout(target))
    np.testing.assert_array_equal(spec.tokens, ar.tokens)
    np.testing.assert_array_equal(spec.lengths, ar.lengths)


def test_changed_encoder_weights_are_never_decoded_with_stale_amx_panels():
    """The loop's panel check covers the AMX panels it read: after an encoder weight
    changes, the next call re-packs and decodes the new weights."""
    model, other = _model(3), _model(11)
    prompt = _prompts(1, 40)

    def run(m):
        return tfspec.generate(m, prompt, k=0, max_new_tokens=12,
                               sampling=tfspec.Sampling(temperature=0.0)).tokens

    before = run(model)
    for mine, theirs in zip(model.encoder_blocks, other.encoder_blocks):
        for mine_weight, their_weight in zip(mine.weights, theirs.weights):
            mine_weight.assign(their_weight)
    changed = T5(model.config, seed=0)
    for mine, theirs in zip(changed.weights, model.weights):
        mine.assign(theirs)
    want = run(changed)  # A fresh model: nothing cached.
    assert not np.array_equal(want, before)  # The test needs outputs that differ.
    np.testing.assert_array_equal(run(model), want)
    assert len(generation.compiled_loops(model)) == 1


def _feature_draft(target, seed, cross_attention=True):
    """A random feature draft bound to `target`, with bfloat16 weight values."""
    config = FeatureDraftConfig.for_target(target, cross_attention=cross_attention)
    draft = FeatureDraft(config, seed=seed).bind(target)
    for w in draft.weights:
        if w.dtype == tf.float32:
            w.assign(_bfloat16_values(w.numpy()))
    return draft


def _draft_cross_keys_values(target, draft, prompt_ids, lengths):
    """A draft's cross keys and values (a T5 draft's of its first layer) from
    `prepare_with_target` in an XLA program, and the panel cache entries it read."""
    target.refresh_decode_panels()
    draft.refresh_decode_panels()

    def prepare(ids, lens):
        target_context, _ = target.prepare(ids, lens, 8)
        context, _ = draft.prepare_with_target(target, target_context, ids, lens, 8)
        keys, values = context.cross_keys, context.cross_values
        return (keys[0], values[0]) if isinstance(keys, tuple) else (keys, values)

    (keys, values), reads = _compiled_with_reads(prepare, prompt_ids, lengths)
    return keys, values, reads


def _padded_prompts(lengths):
    """int32 [len(lengths), max(lengths)]: left-aligned prompts of `lengths`, 0-padded."""
    ids = np.zeros([len(lengths), max(lengths)], np.int32)
    for row, length in enumerate(lengths):
        ids[row, :length] = [(5 * row + c) % 35 + 2 for c in range(length)]
    return ids


def _assert_xla_values_at_valid_positions(got, want, lengths):
    """got = want (keys, values) [B, H, S, d_kv] up to summation order at every valid
    position, 0 at the padding, and not the same bits (another summation order ran)."""
    for got_part, want_part in zip(got, want):
        for row, length in enumerate(lengths):
            np.testing.assert_allclose(got_part[row, :, :length], want_part[row, :, :length],
                                       rtol=1e-5, atol=1e-5)
            assert not np.any(got_part[row, :, length:])
    assert not np.array_equal(got[0], want[0])


@pytest.mark.parametrize("lengths", [[40], [40, 37, 12]])
def test_a_feature_drafts_cross_keys_and_values_run_on_amx(lengths):
    """The feature draft's once-per-request cross-attention keys and values read its AMX
    panel of k | v: XLA's float32 products up to summation order at every valid position,
    0 at a prompt's padding (which the attention never reads)."""
    target, ids = _model(3), _padded_prompts(lengths)
    keys, values, reads = _draft_cross_keys_values(target, _feature_draft(target, 5), ids,
                                                   lengths)
    with kernels.amx(False):  # The same weights, caches made without AMX entries.
        other_target = _model(3)
        want = _draft_cross_keys_values(other_target, _feature_draft(other_target, 5), ids,
                                        lengths)[:2]
    draft_checks = [(cache, entries) for cache, entries in reads.checks()
                    if cache.layout[entries[-1]] == kernels.AMX and len(cache) == 9]
    assert len(draft_checks) == 1  # The draft's cache: 8 decode entries, then k | v.
    _assert_xla_values_at_valid_positions((keys, values), want, lengths)


@pytest.mark.parametrize("cross_attention", [True, False])
def test_greedy_speculative_equals_autoregressive_with_a_feature_draft_on_amx(
        cross_attention):
    target = _model(3)
    draft = _feature_draft(target, 6, cross_attention)
    prompts = _prompts(2, 40)
    kwargs = dict(max_new_tokens=12, sampling=tfspec.Sampling(temperature=0.0))
    ar = tfspec.generate(target, prompts, k=0, **kwargs)
    spec = tfspec.generate(target, prompts, draft=draft, k=3, **kwargs)
    layouts = kernels.panel_layout(draft)
    assert (layouts[-1] == kernels.AMX) == cross_attention
    np.testing.assert_array_equal(spec.tokens, ar.tokens)
    np.testing.assert_array_equal(spec.lengths, ar.lengths)
    assert spec.stats.drafted.sum() > 0


def _target_encoder_draft(target, seed):
    """A random T5 draft of another width reading `target`'s encoder output through a
    float32 projection (not bfloat16 values: it takes the three-part split on AMX)."""
    config = T5Config(vocab_size=37, d_model=24, d_kv=8, d_ff=36, num_layers=1,
                      num_decoder_layers=1, num_heads=2, feed_forward_proj="gated-gelu",
                      tie_word_embeddings=False)
    draft = T5(config, seed=seed)
    for w in draft.weights:
        w.assign(_bfloat16_values(w.numpy()))
    rng = np.random.default_rng(seed)
    projection = rng.standard_normal((target.config.d_model, 24)) / np.sqrt(24)
    return draft.attach_target_encoder(projection.astype(np.float32))


@pytest.mark.parametrize("lengths", [[40], [40, 37, 12]])
def test_a_drafts_target_encoder_projection_runs_on_amx(lengths):
    """The projection of the target's encoder output reads the AMX panels of its three
    parts (the draft cache's last entry): the draft's cross keys and values are XLA's
    float32 ones up to summation order at every valid position, 0 at the padding."""
    target, ids = _model(3), _padded_prompts(lengths)
    keys, values, reads = _draft_cross_keys_values(target, _target_encoder_draft(target, 5),
                                                   ids, lengths)
    with kernels.amx(False):  # The same weights, caches made without AMX entries.
        other_target = _model(3)
        want = _draft_cross_keys_values(other_target, _target_encoder_draft(other_target, 5),
                                        ids, lengths)[:2]
    draft_entries = [entries for cache, entries in reads.checks() if len(cache) == 13]
    # The draft's cache: 7 decode entries, 4 of its own encoder, 1 cross k | v, then P.
    assert len(draft_entries) == 1 and 12 in draft_entries[0]
    _assert_xla_values_at_valid_positions((keys, values), want, lengths)


def test_greedy_speculative_equals_autoregressive_with_a_target_encoder_draft_on_amx():
    """Greedy identity with the projection on AMX; detaching the adapter drops its panels
    (the draft then runs its own encoder, and its cache has no projection entry)."""
    target = _model(3)
    draft = _target_encoder_draft(target, 6)
    prompts = _prompts(2, 40)
    kwargs = dict(max_new_tokens=12, sampling=tfspec.Sampling(temperature=0.0))
    ar = tfspec.generate(target, prompts, k=0, **kwargs)
    spec = tfspec.generate(target, prompts, draft=draft, k=3, **kwargs)
    layouts = kernels.panel_layout(draft)
    assert len(layouts) == 13 and layouts[-1] == kernels.AMX
    np.testing.assert_array_equal(spec.tokens, ar.tokens)
    np.testing.assert_array_equal(spec.lengths, ar.lengths)
    assert spec.stats.drafted.sum() > 0
    own = tfspec.generate(target, prompts, draft=draft.detach_target_encoder(), k=3, **kwargs)
    assert len(kernels.panel_layout(draft)) == 12
    np.testing.assert_array_equal(own.tokens, ar.tokens)
