"""tfspec.kernels: the few-row product custom call, its fingerprint, and the panel cache."""

import gc
import os
import subprocess
import sys
import threading
import weakref

import numpy as np
import pytest
import tensorflow as tf

import tfspec
from tfspec import generation, kernels
from tfspec.models import T5, T5Config

pytestmark = pytest.mark.skipif(not kernels.usable_outside_trace(),
                                reason=f"needs the kernel: {kernels.status()}")


def _xla_matmul(x, kernel):
    kernel_panels = kernels.panels(tf.constant(kernel))
    fn = tf.function(lambda a: kernels.matmul(a, kernel_panels, kernel.shape[1]),
                     jit_compile=True, autograph=False)
    return fn(tf.constant(x)).numpy()


@pytest.mark.parametrize("rows", [1, 2, 5, 6, 7, 13, 48])
@pytest.mark.parametrize("k_dim,n_dim", [(8, 5), (32, 16), (40, 40), (384, 1024)])
def test_matmul_matches_float64_product(rows, k_dim, n_dim):
    rng = np.random.default_rng(rows * 1000 + n_dim)
    x = rng.standard_normal((rows, k_dim)).astype(np.float32)
    kernel = rng.standard_normal((k_dim, n_dim)).astype(np.float32)
    got = _xla_matmul(x, kernel)
    want = x.astype(np.float64) @ kernel.astype(np.float64)
    assert got.shape == (rows, n_dim)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.sqrt(k_dim))


def _to_bfloat16_values(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to bfloat16 (their low 16 bits zero), still float32."""
    return tf.cast(tf.cast(values, tf.bfloat16), tf.float32).numpy()


@pytest.mark.parametrize("rows", [1, 5, 7, 13])
@pytest.mark.parametrize("k_dim,n_dim", [(8, 5), (40, 40), (384, 1024)])
def test_half_width_panels_give_the_float32_products_bit_for_bit(rows, k_dim, n_dim):
    rng = np.random.default_rng(rows * 100 + n_dim)
    x = tf.constant(rng.standard_normal((rows, k_dim)).astype(np.float32))
    kernel = tf.constant(_to_bfloat16_values(rng.standard_normal((k_dim, n_dim))))
    full, half = kernels.panels(kernel), kernels.panels(kernel, half_width=True)
    assert half.dtype == tf.bfloat16 and half.shape == full.shape
    fn = tf.function(lambda a, p: kernels.matmul(a, p, n_dim), jit_compile=True,
                     autograph=False)
    np.testing.assert_array_equal(fn(x, half).numpy(), fn(x, full).numpy())


@pytest.mark.parametrize("values,exact", [
    ([1.0, -2.5, 0.0, -0.0, 2.0 ** 127, float("inf")], True),
    ([1.0, 1.0 + 2.0 ** -10], False),          # needs more than bfloat16's 8 mantissa bits
    ([1.0e-40], False),                        # a float32 denormal below bfloat16's range
])
def test_bfloat16_exact(values, exact):
    assert kernels.bfloat16_exact(tf.constant(values, tf.float32)) is exact


@pytest.mark.parametrize("scale", [1.0, 1e-3, 1e20, 1e-25])
def test_bfloat16_split_parts_are_bfloat16_and_sum_to_the_kernel(scale):
    """hi | mid | lo: each part a bfloat16 value, their sum exactly the float32 kernel
    (down to magnitudes whose last part is still a normal float32), and two parts are
    not enough (the third carries bits)."""
    rng = np.random.default_rng(7)
    kernel = (rng.standard_normal((24, 10)) * scale).astype(np.float32)
    split = kernels.bfloat16_split(tf.constant(kernel)).numpy()
    assert split.shape == (24, 30)
    parts = np.split(split, kernels.SPLIT_PARTS, axis=1)
    assert all(kernels.bfloat16_exact(tf.constant(part)) for part in parts)
    total = parts[0].astype(np.float64) + parts[1] + parts[2]
    np.testing.assert_array_equal(total, kernel.astype(np.float64))
    assert np.any(parts[0].astype(np.float64) + parts[1] != kernel)


def test_panel_cache_packs_half_width_only_where_exact():
    exact = tf.Variable(_to_bfloat16_values(np.linspace(-1, 1, 80).reshape(4, 20)))
    inexact = tf.Variable(np.linspace(-1, 1, 160, dtype=np.float32).reshape(20, 8) / 3)
    cache = kernels.PanelCache([lambda: tf.convert_to_tensor(exact),
                                lambda: tf.convert_to_tensor(inexact)], [[exact], [inexact]])
    cache.refresh()
    assert cache.layout == (True, False)
    assert [v.dtype for v in cache.variables()] == [tf.bfloat16, tf.float32]
    np.testing.assert_array_equal(tf.cast(cache.variables()[0], tf.float32).numpy(),
                                  kernels.panels(exact).numpy())
    # Training moves the weights off the bfloat16 grid: that matrix goes back to float32.
    exact[0, 0].assign(1.0 + 2.0 ** -12)
    assert cache.refresh() == 1 and cache.layout == (False, False)
    np.testing.assert_array_equal(cache.variables()[0].numpy(), kernels.panels(exact).numpy())
    with kernels.half_width(False):
        assert cache.refresh() == 0
    exact[0, 0].assign(1.0)
    with kernels.half_width(False):
        assert cache.refresh() == 1 and cache.layout == (False, False)
        assert cache.refresh() == 0
    assert cache.refresh() == 1 and cache.layout == (True, False)
    assert cache.refresh() == 0
    # Switching widths with unchanged weights selects the other width's panels, no re-pack.
    with kernels.half_width(False):
        assert cache.refresh() == 0 and cache.layout == (False, False)
        assert cache.variables()[0].dtype == tf.float32
    assert cache.refresh() == 0 and cache.layout == (True, False)


@pytest.mark.parametrize("isa", kernels.INSTRUCTION_SETS)
def test_rows_do_not_depend_on_their_companions(isa):
    """Row r of a 13-row call (two register blocks under AVX2, 12 + 1 under AVX-512) is
    bitwise the 1-row call of row r (same FMA chain), on every code path."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((13, 384)).astype(np.float32)
    kernel = rng.standard_normal((384, 1024)).astype(np.float32)
    with kernels.instruction_set(isa):
        together = _xla_matmul(x, kernel)
        for r in range(13):
            np.testing.assert_array_equal(_xla_matmul(x[r:r + 1], kernel)[0], together[r])


@pytest.mark.parametrize("half_width", [False, True])
@pytest.mark.parametrize("rows", [1, 5, 9, 12, 13, 25])
def test_every_instruction_set_gives_the_same_products_bit_for_bit(rows, half_width):
    """The portable, AVX2 and AVX-512 paths (whichever this CPU has) compute each element as
    the same FMA chain over k, so a row decodes identically whichever path a machine takes;
    a width of 1000 leaves a partial last panel (the masked store)."""
    rng = np.random.default_rng(rows)
    x = rng.standard_normal((rows, 200)).astype(np.float32)
    kernel = rng.standard_normal((200, 1000)).astype(np.float32)
    if half_width:
        kernel = _to_bfloat16_values(kernel)
    kernel_panels = kernels.panels(tf.constant(kernel), half_width=half_width)
    products = {}
    for isa in kernels.INSTRUCTION_SETS:
        with kernels.instruction_set(isa):
            fn = tf.function(lambda a: kernels.matmul(a, kernel_panels, 1000),
                             jit_compile=True, autograph=False)
            products[kernels.current_instruction_set()] = fn(tf.constant(x)).numpy()
    assert len(products) >= 2, "this CPU has no vector path to compare with the portable one"
    first = products["portable"]
    np.testing.assert_allclose(first, x.astype(np.float64) @ kernel.astype(np.float64),
                               rtol=1e-4, atol=1e-4)
    for isa, product in products.items():
        np.testing.assert_array_equal(product, first, err_msg=isa)


@pytest.mark.parametrize("half_width", [False, True])
@pytest.mark.parametrize("live_widths", [[0], [3], [5], [2, 5, 0], [5, 5, 1], [0, 0, 0],
                                         [1, 3, 5, 2], [9, 9, 9, 9]])
def test_live_width_computes_the_live_entries_bit_for_bit_and_zeros_the_rest(
        live_widths, half_width):
    """`matmul(..., live_width)` on x [B, W, K]: entries [b, :live_width[b]] are the bits of
    the full product, the rest are 0. Rows' live entries are gathered into one block (or
    used in place when they already are one, as with [5, 5, 1]), so each must land back in
    its own place; a scalar live width applies to every row."""
    batch, width = len(live_widths), 5
    rng = np.random.default_rng(sum(live_widths) + batch)
    x = rng.standard_normal((batch, width, 200)).astype(np.float32)
    kernel = _to_bfloat16_values(rng.standard_normal((200, 1000)))
    kernel_panels = kernels.panels(tf.constant(kernel), half_width=half_width)
    full = tf.function(lambda a: kernels.matmul(a, kernel_panels, 1000), jit_compile=True,
                       autograph=False)(tf.constant(x)).numpy()
    live_fn = tf.function(lambda a, w: kernels.matmul(a, kernel_panels, 1000, w),
                          jit_compile=True, autograph=False)
    got = live_fn(tf.constant(x), tf.constant(live_widths)).numpy()
    for b, live in enumerate(live_widths):
        np.testing.assert_array_equal(got[b, :live], full[b, :live], err_msg=f"row {b}")
        assert not got[b, live:].any(), f"row {b}: entries past live_width {live} are not 0"
    scalar = live_fn(tf.constant(x), tf.constant(live_widths[0])).numpy()
    np.testing.assert_array_equal(scalar[:, :live_widths[0]], full[:, :live_widths[0]])
    assert not scalar[:, live_widths[0]:].any()


def test_live_width_needs_a_window_axis():
    kernel_panels = kernels.panels(tf.ones([8, 16]))
    with pytest.raises(ValueError, match="rank 3"):
        kernels.matmul(tf.ones([4, 8]), kernel_panels, 16, tf.constant(2))


def test_an_unknown_instruction_set_is_refused():
    with pytest.raises(ValueError, match="is not one of"):
        with kernels.instruction_set("sse9"):
            pass


@pytest.mark.parametrize("spin_us", [0, kernels.DEFAULT_HELPER_SPIN_US, 100000])
def test_concurrent_calls_each_get_their_own_product(spin_us):
    """Threads calling at once (Beam workers do) share one helper pool: every call must see
    only its own chunks, whichever thread takes the pool, whichever helper joins late, and
    whether the helpers sleep after each product, poll briefly, or stay awake throughout
    (100 ms)."""
    with kernels.helper_spin(spin_us):
        _check_concurrent_calls()


def test_helper_spin_restores_the_setting():
    before = kernels._helper_spin_us  # pylint: disable=protected-access
    with kernels.helper_spin(7):
        assert kernels._helper_spin_us == 7  # pylint: disable=protected-access
        with kernels.helper_spin(-5):
            assert kernels._helper_spin_us == 0  # pylint: disable=protected-access
    assert kernels._helper_spin_us == before  # pylint: disable=protected-access


def _check_concurrent_calls():
    rng = np.random.default_rng(4)
    kernel = rng.standard_normal((384, 1024)).astype(np.float32)  # above the parallel size
    kernel_panels = kernels.panels(tf.constant(kernel))
    fn = tf.function(lambda a: kernels.matmul(a, kernel_panels, 1024), jit_compile=True,
                     autograph=False)
    inputs = [rng.standard_normal((5, 384)).astype(np.float32) for _ in range(4)]
    wants = [fn(tf.constant(x)).numpy() for x in inputs]
    failures = []

    def worker(i):
        for _ in range(50):
            got = fn(tf.constant(inputs[i])).numpy()
            if not np.array_equal(got, wants[i]):
                failures.append(i)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
    np.testing.assert_allclose(wants[0], inputs[0].astype(np.float64) @ kernel, rtol=1e-4,
                               atol=1e-3)


def test_matmul_rejects_a_width_the_panels_cannot_hold():
    kernel_panels = kernels.panels(tf.zeros([8, 40]))  # 3 panels: 33..48 columns
    with pytest.raises(ValueError, match="3 panels cannot hold 20 columns"):
        kernels.matmul(tf.zeros([1, 8]), kernel_panels, 20)


def _fingerprints(*arrays):
    fn = tf.function(lambda *a: kernels.fingerprints(list(a)), jit_compile=True,
                     autograph=False)
    return [tuple(row) for row in fn(*[tf.constant(a) for a in arrays]).numpy().tolist()]


def _fingerprint(values):
    return _fingerprints(values)[0]


def test_fingerprints_of_several_tensors_are_each_tensors_own():
    rng = np.random.default_rng(2)
    a, b = (rng.standard_normal(n).astype(np.float32) for n in (300_001, 17))
    assert _fingerprints(a, b) == [_fingerprint(a), _fingerprint(b)]
    assert _fingerprint(a) != _fingerprint(b)


@pytest.mark.parametrize("index", [0, 1, 777, 300_000, 300_001 * 2 - 1])
def test_fingerprint_sees_a_one_ulp_change_anywhere(index):
    values = np.random.default_rng(1).standard_normal(600_002).astype(np.float32)
    changed = values.copy()
    changed[index] = np.nextafter(changed[index], np.float32(np.inf))
    assert _fingerprint(values) == _fingerprint(values.copy())
    assert _fingerprint(changed) != _fingerprint(values)


def _documented_fingerprint(values):
    """The pair of sums `kernels.fingerprints` documents, in NumPy (as int32)."""
    size = values.size
    bits = values.view(np.uint32).astype(np.uint64)
    odd = 2 * np.arange(size, dtype=np.uint64) + 1
    mask = np.uint64(0xFFFFFFFF)
    a = int(np.sum((bits * ((odd * np.uint64(0x9E3779B9)) & mask)) & mask) & mask)
    b = int(np.sum(((bits ^ np.uint64(0x5BD1E995)) * ((odd * np.uint64(0x85EBCA6B)) & mask))
                   & mask) & mask)
    as_int32 = lambda x: x - (1 << 32) if x >= 1 << 31 else x  # noqa: E731
    return as_int32(a), as_int32(b)


@pytest.mark.parametrize("isa", kernels.INSTRUCTION_SETS)
@pytest.mark.parametrize("size", [1, 13, 31, 32, 33, 300_001])  # 300_001: split across threads
def test_fingerprint_is_the_documented_pair_of_sums(size, isa):
    """On every code path (portable, AVX2, AVX-512, as far as this CPU has them), below,
    at and above the AVX-512 loop's 32 elements per iteration."""
    values = np.random.default_rng(4).standard_normal(size).astype(np.float32)
    with kernels.instruction_set(isa):
        assert _fingerprint(values) == _documented_fingerprint(values)


@pytest.mark.parametrize("isa", kernels.INSTRUCTION_SETS)
def test_fingerprints_of_many_tensors_split_across_threads_are_each_documented(isa):
    """One call's tensors are hashed as one job whose chunks span tensor boundaries: each
    tensor's pair must still be its own, whatever the chunk it starts or ends in."""
    rng = np.random.default_rng(6)
    arrays = [rng.standard_normal(n).astype(np.float32)
              for n in (5, 150_007, 3, 64, 200_001, 1, 99_999, 47)]
    with kernels.instruction_set(isa):
        assert _fingerprints(*arrays) == [_documented_fingerprint(a) for a in arrays]


def test_fingerprint_sees_swapped_elements():
    values = np.arange(1000, dtype=np.float32)
    swapped = values.copy()
    swapped[[3, 500]] = swapped[[500, 3]]
    assert _fingerprint(swapped) != _fingerprint(values)


def test_panel_cache_repacks_only_what_changed():
    a = tf.Variable(np.ones((4, 20), np.float32))
    b = tf.Variable(np.full((20, 8), 2.0, np.float32))
    cache = kernels.PanelCache([lambda: tf.convert_to_tensor(a), lambda: tf.convert_to_tensor(b)],
                               [[a], [b]])
    assert cache.refresh() == 2
    assert cache.refresh() == 0
    b[3, 3].assign(5.0)
    assert cache.refresh() == 1
    np.testing.assert_array_equal(cache.variables()[1].numpy(), kernels.panels(b).numpy())


def _model(seed, vocab=37):
    # Widths that are not multiples of 16 exercise the padded last panel.
    config = T5Config(vocab_size=vocab, d_model=24, d_kv=6, d_ff=40, num_layers=1,
                      num_decoder_layers=2, num_heads=2, feed_forward_proj="gated-gelu",
                      tie_word_embeddings=False)
    return T5(config, seed=seed)


def _batched(x, y, isa="avx512"):
    with kernels.instruction_set(isa):
        fn = tf.function(kernels.batched_matmul, jit_compile=True, autograph=False)
        return fn(tf.constant(x), tf.constant(y)).numpy()


# (leading, M, K, N): decode attention's scores ([B, H, W, d_kv] x [B, H, d_kv, L]) and
# values ([B, H, W, L] x [B, H, L, d_kv]); N not a multiple of 16 or 64 leaves masked columns,
# M = 13 takes three AVX-512 row blocks, and 12 x 5 x 64 x 60 MACs split across threads.
_BATCHED_SHAPES = [((12,), 5, 64, 60), ((1, 6), 5, 300, 64), ((2, 3), 13, 64, 17),
                   ((3,), 7, 5, 129), ((1,), 1, 64, 1)]


@pytest.mark.parametrize("leading,m,k,n", _BATCHED_SHAPES)
def test_batched_matmul_rows_are_the_same_bits_alone_on_every_path(leading, m, k, n):
    """Each output is the FMA chain over K in order: row w of a window is bitwise the row
    computed alone, on every instruction set, and close to the float64 product."""
    rng = np.random.default_rng(m * 1000 + n)
    x = rng.standard_normal(leading + (m, k)).astype(np.float32)
    y = rng.standard_normal(leading + (k, n)).astype(np.float32)
    together = _batched(x, y)
    np.testing.assert_allclose(together, np.matmul(x.astype(np.float64), y.astype(np.float64)),
                               rtol=1e-5, atol=1e-5 * np.sqrt(k))
    for isa in kernels.INSTRUCTION_SETS:
        np.testing.assert_array_equal(_batched(x, y, isa), together, err_msg=isa)
    for w in range(m):
        np.testing.assert_array_equal(_batched(x[..., w:w + 1, :], y)[..., 0, :],
                                      together[..., w, :])


def test_batched_matmul_refuses_mismatched_operands():
    with pytest.raises(ValueError, match="per leading index"):
        kernels.batched_matmul(tf.zeros([2, 3, 4]), tf.zeros([2, 5, 6]))
    with pytest.raises(ValueError, match="per leading index"):
        kernels.batched_matmul(tf.zeros([2, 3, 4]), tf.zeros([3, 4, 6]))


def test_t5_decode_with_and_without_the_kernel_agree():
    model = _model(3)
    prompts = [[5, 6, 7, 8], [9, 10]]
    with kernels.use(False):
        plain = tfspec.generate(model, prompts, k=0, max_new_tokens=12, seed=0,
                                sampling=tfspec.Sampling(temperature=0.0))
    assert not kernels.existing_panel_cache(model)
    fast = tfspec.generate(model, prompts, k=0, max_new_tokens=12, seed=0,
                           sampling=tfspec.Sampling(temperature=0.0))
    assert kernels.existing_panel_cache(model).ready
    np.testing.assert_array_equal(fast.tokens, plain.tokens)


@pytest.mark.parametrize("live_widths", [[1, 1], [2, 4], [4, 0], [3, 3]])
def test_t5_decode_live_width_keeps_the_live_entries_and_the_cache_they_write(live_widths):
    """`T5.decode(..., live_width)` through the kernel: per row, the logits of entries
    < live_width[b] and the cache slots they write are the bits of the full-width call, so
    a loop that reads only those cannot tell the calls apart."""
    model = _model(7)
    model.refresh_decode_panels()
    ids, lengths = tf.constant([[5, 6, 7, 8], [9, 10, 0, 0]]), tf.constant([4, 2])
    window = tf.constant([[3, 11, 12, 13], [4, 14, 15, 16]])
    positions = tf.constant([[2, 3, 4, 5], [0, 1, 2, 3]])

    def run(width):
        context, cache = model.prepare(ids, lengths, 8)
        assert context.panels is not None
        logits, cache = model.decode(context, cache, window, positions, width)
        return logits, cache.keys, cache.values

    full = tf.function(lambda: run(None), jit_compile=True)()
    live = tf.function(lambda: run(tf.constant(live_widths)), jit_compile=True)()
    for row, width in enumerate(live_widths):
        np.testing.assert_array_equal(live[0].numpy()[row, :width],
                                      full[0].numpy()[row, :width])
        slots = positions.numpy()[row, :width]
        for got_layers, want_layers in zip(live[1:], full[1:]):
            for got, want in zip(got_layers, want_layers):
                np.testing.assert_array_equal(got.numpy()[row][:, slots],
                                              want.numpy()[row][:, slots])
        # The skipped entries were skipped: their logits are not the full call's.
        if width < 4:
            assert not np.array_equal(live[0].numpy()[row, width:],
                                      full[0].numpy()[row, width:])


def test_a_context_prepared_in_xla_decodes_outside_it():
    """`prepare` inside an XLA program gives a context with panels; decoding it eagerly (as
    bench.component_loops does) must use ordinary products, not the custom call, which has
    no kernel outside XLA."""
    model = _model(5)
    model.refresh_decode_panels()
    ids, lengths = tf.constant([[5, 6, 7, 8]]), tf.constant([4])
    context, cache = tf.function(lambda i, n: model.prepare(i, n, 8), jit_compile=True)(
        ids, lengths)
    assert context.panels is not None
    step = (tf.constant([[model.decoder_start_id]]), tf.constant([[0]]))
    eager_logits, _ = model.decode(context, cache, *step)
    xla_logits, _ = tf.function(lambda c, k, t, p: model.decode(c, k, t, p),
                                jit_compile=True)(context, cache, *step)
    np.testing.assert_allclose(eager_logits.numpy(), xla_logits.numpy(), rtol=1e-4, atol=1e-5)


def _greedy_tokens(model):
    """The stale-panel tests' probe: 12 greedy tokens of one prompt, int32 [1, 12]."""
    return tfspec.generate(model, [[5, 6, 7, 8]], k=0, max_new_tokens=12, seed=0,
                           sampling=tfspec.Sampling(temperature=0.0)).tokens


def test_changed_weights_are_never_decoded_with_stale_panels(monkeypatch):
    """After the weights change (as training does), generate equals a model built with the
    new weights; with the refresh disabled (a planted bug) it does not."""
    model, other = _model(3), _model(11)
    run = _greedy_tokens

    before = run(model)
    for mine, theirs in zip(model.weights, other.weights):
        mine.assign(theirs)
    want = run(_copy_of(other))
    assert not np.array_equal(want, before)  # The test needs outputs that differ.
    np.testing.assert_array_equal(run(model), want)

    for mine, theirs in zip(model.weights, _model(3).weights):
        mine.assign(theirs)
    monkeypatch.setattr(kernels.PanelCache, "refresh", lambda self: 0)
    assert not np.array_equal(run(model), before)  # Stale panels: the bug is visible.


def test_the_compiled_loop_checks_its_panels_and_reruns_when_weights_changed(monkeypatch):
    """After its first call a model's panels are not refreshed before each call: the
    compiled loop checks them against the weights itself (`PanelCache.current`), and a call
    whose weights changed re-packs and runs again, so it decodes the new weights. A loop
    whose check always passes (a planted bug) decodes the stale panels."""
    model, other = _model(3), _model(11)
    run = _greedy_tokens

    before = run(model)
    want = run(_copy_of(other))
    assert not np.array_equal(want, before)  # The test needs outputs that differ.
    refreshes = []
    refresh = kernels.PanelCache.refresh
    monkeypatch.setattr(kernels.PanelCache, "refresh",
                        lambda self: refreshes.append(self) or refresh(self))
    np.testing.assert_array_equal(run(model), before)
    assert not refreshes  # Checked inside the loop, not by a refresh before it.
    for mine, theirs in zip(model.weights, other.weights):
        mine.assign(theirs)
    np.testing.assert_array_equal(run(model), want)
    assert len(refreshes) == 1  # The loop saw the change: one re-pack, then a second run.
    np.testing.assert_array_equal(run(model), want)
    assert len(refreshes) == 1
    # The first call (packed before it) and the later ones (checked) ran one program.
    assert len(generation.compiled_loops(model)) == 1

    monkeypatch.setattr(kernels.PanelCache, "current",
                        lambda self, entries=None: tf.constant(True))
    blind = _model(3)
    run(blind)
    np.testing.assert_array_equal(run(blind), before)  # traced with the blind check
    for mine, theirs in zip(blind.weights, other.weights):
        mine.assign(theirs)
    # Stale panels (the encoder and the norms read the new weights): the bug is visible.
    assert not np.array_equal(run(blind), want)


def _bfloat16_valued(model):
    """`model` with every weight rounded to bfloat16 values (as a bfloat16 checkpoint loaded
    as float32 has), so that all its panels are half-width."""
    for w in model.weights:
        w.assign(_to_bfloat16_values(w.numpy()))
    return model


def _half_widths(model) -> list:
    """Per few-row (ROWS) panel matrix of the model, whether it is half-width (AMX entries,
    the encoders', are left out)."""
    return [layout for layout in kernels.panel_layout(model) if layout in (True, False)]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_half_width_panels_decode_what_float32_panels_decode(temperature):
    target, draft = _bfloat16_valued(_model(3)), _bfloat16_valued(_model(4))
    prompts = [[5, 6, 7, 8], [9, 10]]
    kwargs = dict(draft=draft, k=3, max_new_tokens=12, seed=2,
                  sampling=tfspec.Sampling(temperature=temperature))
    with kernels.half_width(False):
        full = tfspec.generate(target, prompts, **kwargs)
        assert not any(_half_widths(target))
    half = tfspec.generate(target, prompts, **kwargs)
    assert all(_half_widths(target)) and all(_half_widths(draft))
    np.testing.assert_array_equal(half.tokens, full.tokens)
    np.testing.assert_array_equal(half.stats.accepted, full.stats.accepted)


def test_switching_panel_widths_never_decodes_stale_weights():
    """A program traced with half-width panels, then weights changed while another width was
    in use, then the first width again: the first program must read the new weights."""
    model, other = _bfloat16_valued(_model(3)), _bfloat16_valued(_model(11))
    run = _greedy_tokens

    before = run(model)                          # traced with half-width panels
    with kernels.half_width(False):
        run(model)                               # traced with float32 panels
        for mine, theirs in zip(model.weights, other.weights):
            mine.assign(theirs)
        run(model)
    want = run(_copy_of(other))
    assert not np.array_equal(want, before)      # The test needs outputs that differ.
    np.testing.assert_array_equal(run(model), want)


def _copy_of(model):
    copy = T5(model.config, seed=0)
    for mine, theirs in zip(copy.weights, model.weights):
        mine.assign(theirs)
    return copy


@pytest.mark.parametrize("switch,want", [
    (None, "rows_matmul kernel: on ("),
    ("0", "rows_matmul kernel: off (turned off by TFSPEC_ROWS_MATMUL=0)"),
    ("maybe", "rows_matmul kernel: off (TFSPEC_ROWS_MATMUL='maybe' is not understood"),
])
def test_on_by_default_and_switched_by_the_environment(switch, want):
    code = "from tfspec import kernels; print(kernels.status())"
    env = {k: v for k, v in os.environ.items() if k != "TFSPEC_ROWS_MATMUL"}
    if switch is not None:
        env["TFSPEC_ROWS_MATMUL"] = switch
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True, timeout=300).stdout
    assert want in out


@pytest.mark.parametrize("draft_kind", ["t5", "feature", "medusa"])
def test_models_with_panels_are_freed_when_dropped(draft_kind):
    """A panel cache is the value of a table weakly keyed by its model: none of its sources
    may reach the model (or a draft's bound target), or neither would ever be freed, with
    every panel (and, on AMX CPUs, the encoder's panels) they hold."""
    from tfspec.models import FeatureDraft, FeatureDraftConfig, MedusaConfig, MedusaHeads
    target = _bfloat16_valued(_model(3))
    if draft_kind == "t5":
        draft = _bfloat16_valued(_model(4))
    elif draft_kind == "feature":
        draft = FeatureDraft(FeatureDraftConfig.for_target(target, d_ff=16), seed=2)
    else:
        draft = MedusaHeads(MedusaConfig.for_target(target, heads=2, d_ff=16), seed=2)
    if draft_kind != "t5":
        draft.bind(target)
    tfspec.generate(target, [[5, 6, 7, 8] * 10], draft=draft, k=2, max_new_tokens=4)
    assert kernels.existing_panel_cache(target) and kernels.existing_panel_cache(draft)
    refs = [weakref.ref(target), weakref.ref(draft)]
    del target, draft
    gc.collect()
    assert [r() is None for r in refs] == [True, True]
