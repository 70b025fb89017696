"""Tests of tfspec.models.T5: cached decoding vs the uncached forward, rollback by masking,
XLA, bfloat16, gradients, and numerical parity with HF transformers' PyTorch T5 (golden files
made by tools/make_hf_t5_golden.py; torch is not needed here)."""

import os

import numpy as np
import pytest
import tensorflow as tf

import tfspec  # noqa: F401  (sets KERAS_BACKEND)
from tfspec.checkpoints import load_model
from tfspec.models import T5, T5Config
from tfspec.models.t5_layers import relative_position_bucket

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "hf_t5")

# Small bucket settings so that sequences of ~30 reach the logarithmic buckets.
_TINY = dict(vocab_size=64, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_heads=4,
             relative_attention_num_buckets=8, relative_attention_max_distance=20)
CONFIGS = {
    "v1_0": T5Config(feed_forward_proj="relu", tie_word_embeddings=True, **_TINY),
    "v1_1": T5Config(feed_forward_proj="gated-gelu", tie_word_embeddings=False,
                     num_decoder_layers=3, **{k: v for k, v in _TINY.items()}),
}
TOL = 1e-4


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def model(request):
    return T5(CONFIGS[request.param], seed=3)


def _batch(seed, batch=3, prompt_len=9, target_len=30, vocab=64):
    """Prompts with different lengths (right-padded with 0) and decoder inputs starting at 0."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, prompt_len + 1, size=batch).astype(np.int32)
    lengths[0] = prompt_len
    prompt_ids = np.zeros((batch, prompt_len), np.int32)
    for row, n in enumerate(lengths):
        prompt_ids[row, :n] = rng.integers(2, vocab, size=n)
    decoder_ids = rng.integers(2, vocab, size=(batch, target_len)).astype(np.int32)
    decoder_ids[:, 0] = 0
    return prompt_ids, lengths, decoder_ids


def test_protocol_properties(model):
    assert model.vocab_size == 64
    assert model.eos_id == 1 and model.pad_id == 0 and model.decoder_start_id == 0
    assert model.max_prompt_length is None
    assert isinstance(model.config, T5Config)


def test_padding_does_not_change_forward(model):
    prompt_ids, lengths, decoder_ids = _batch(0)
    ref = model.forward(prompt_ids, lengths, decoder_ids).numpy()
    padded = np.concatenate([prompt_ids, np.full((3, 4), 7, np.int32)], axis=1)
    assert np.abs(model.forward(padded, lengths, decoder_ids).numpy() - ref).max() < TOL
    # ...while a real change to a valid prompt token does change the logits.
    changed = prompt_ids.copy()
    changed[:, 0] = (changed[:, 0] + 1) % 64
    assert np.abs(model.forward(changed, lengths, decoder_ids).numpy() - ref).max() > 1e-3


def test_one_token_at_a_time_matches_forward(model):
    prompt_ids, lengths, decoder_ids = _batch(1, target_len=24)
    ref = model.forward(prompt_ids, lengths, decoder_ids).numpy()
    context, cache = model.prepare(prompt_ids, lengths, max_length=24)
    assert cache.keys[0].shape == (3, 4, 24, 8)  # [B, H, max_length, d_kv]
    steps = []
    for t in range(24):
        logits, cache = model.decode(context, cache, decoder_ids[:, t:t + 1],
                                     np.full((3, 1), t, np.int32))
        assert logits.dtype == tf.float32 and logits.shape == (3, 1, 64)
        steps.append(logits.numpy())
    assert np.abs(np.concatenate(steps, axis=1) - ref).max() < TOL


def _speculative_schedule(model, decode_fn, prompt_ids, lengths, decoder_ids, windows, seed):
    """Decodes windows at per-row positions the way a speculative loop does, returns max diff.

    Each call decodes a window of W tokens per row at that row's own position. Only the first
    `accept[r]` tokens of row r's window are the true sequence; the rest are random "drafts"
    whose K/V land in the cache past the row's new length (stale slots, later overwritten).
    Logits of the true prefix of each window must equal the uncached forward.
    """
    rng = np.random.default_rng(seed)
    batch, target_len = decoder_ids.shape
    ref = model.forward(prompt_ids, lengths, decoder_ids).numpy()
    max_w = max(windows)
    context, cache = model.prepare(prompt_ids, lengths, max_length=target_len + max_w)
    position = np.zeros(batch, np.int32)
    worst, distinct_positions = 0.0, False
    for w in windows:
        if (position + w > target_len).any():
            break
        accept = rng.integers(1, w + 1, size=batch)
        positions = position[:, None] + np.arange(w, dtype=np.int32)[None]
        ids = rng.integers(2, 64, size=(batch, w)).astype(np.int32)  # drafts
        for row in range(batch):
            ids[row, :accept[row]] = decoder_ids[row, positions[row, :accept[row]]]
        logits, cache = decode_fn(context, cache, ids, positions)
        logits = np.asarray(logits)
        for row in range(batch):
            got = logits[row, :accept[row]]
            want = ref[row, positions[row, :accept[row]]]
            worst = max(worst, float(np.abs(got - want).max()))
        distinct_positions |= len(set(position.tolist())) == batch
        position = position + accept.astype(np.int32)
    assert distinct_positions, "the schedule never had all rows at different positions"
    assert position.min() >= 8, "the schedule stopped too early to mean anything"
    return worst


def test_windows_at_different_row_positions_with_stale_drafts(model):
    prompt_ids, lengths, decoder_ids = _batch(2, target_len=40)
    windows = [1, 2, 3, 4, 5, 6, 7, 8] * 3
    worst = _speculative_schedule(model, model.decode, prompt_ids, lengths, decoder_ids,
                                  windows, seed=5)
    assert worst < TOL


def test_windows_under_xla(model):
    prompt_ids, lengths, decoder_ids = _batch(3, target_len=26)
    decode = tf.function(model.decode, jit_compile=True)
    # Two window sizes keep compile time down; positions still differ per row.
    worst = _speculative_schedule(model, decode, prompt_ids, lengths, decoder_ids,
                                  [4, 1] * 12, seed=6)
    assert worst < TOL


@pytest.mark.parametrize("width", [1, 4])
def test_windows_of_several_positions_read_the_transposed_cross_keys(model, width):
    """A window of W > 1 reads `cross_keys_transposed` (the verify's fast layout), a
    one-position step `cross_keys`; the prepared transposed keys are the keys, transposed."""
    prompt_ids, lengths, decoder_ids = _batch(8, target_len=8)
    context, cache = model.prepare(prompt_ids, lengths, max_length=8)
    for keys, transposed in zip(context.cross_keys, context.cross_keys_transposed):
        np.testing.assert_array_equal(np.swapaxes(keys.numpy(), 2, 3), transposed.numpy())
    positions = np.tile(np.arange(width, dtype=np.int32), (3, 1))
    clean, _ = model.decode(context, cache, decoder_ids[:, :width], positions)
    poisoned = context._replace(cross_keys_transposed=tuple(
        k + 10.0 * tf.sign(k) for k in context.cross_keys_transposed))
    changed, _ = model.decode(poisoned, cache, decoder_ids[:, :width], positions)
    moved = float(np.abs(changed.numpy() - clean.numpy()).max())
    assert (moved > 1e-3) == (width > 1), moved


@pytest.mark.parametrize("jit", [False, True])
def test_a_cache_prepared_for_windows_holds_the_keys_transposed(model, jit):
    """`prepare(..., window=W)` lays the keys out [B, H, d_kv, L] (`keys_transposed`):
    windows at per-row positions (rows 3 apart, the last window ending at slot L) give the
    logits of the usual layout, the cache holds the same keys transposed, and the windows
    read them: poisoning a committed column changes the logits."""
    prompt_ids, lengths, decoder_ids = _batch(9, target_len=16)
    length, width = 16, 4
    plain_context, plain = model.prepare(prompt_ids, lengths, max_length=length)
    context, windowed = model.prepare(prompt_ids, lengths, max_length=length, window=width)
    assert windowed.keys == () and len(windowed.keys_transposed) == len(plain.keys)
    assert windowed.keys_transposed[0].shape == (3, 4, 8, length)  # [B, H, d_kv, L]
    decode = tf.function(model.decode, jit_compile=True) if jit else model.decode
    offsets = np.array([0, 2, 4], np.int32)[:, None]  # rows at different positions
    for start in (0, 4, 8):  # the last window of row 2 fills slots 12 .. 15
        positions = offsets + start + np.arange(width, dtype=np.int32)
        ids = np.take_along_axis(decoder_ids, positions, axis=1)
        expected, plain = decode(plain_context, plain, ids, positions)
        logits, windowed = decode(context, windowed, ids, positions)
        np.testing.assert_allclose(logits.numpy(), expected.numpy(), atol=TOL)
    for keys, transposed in zip(plain.keys, windowed.keys_transposed):
        np.testing.assert_allclose(np.swapaxes(keys.numpy(), 2, 3), transposed.numpy(),
                                   atol=TOL)
    positions = offsets + 8 + np.arange(width, dtype=np.int32)
    ids = np.take_along_axis(decoder_ids, positions, axis=1)
    clean, _ = decode(context, windowed, ids, positions)
    poisoned = [k.numpy() for k in windowed.keys_transposed]
    poisoned[0][:, :, :, 2] += 10.0  # slot 2: committed in every row
    broken = windowed._replace(keys_transposed=tuple(map(tf.constant, poisoned)))
    changed, _ = decode(context, broken, ids, positions)
    assert np.abs(changed.numpy() - clean.numpy()).max() > 1e-3


def test_stale_slots_beyond_position_are_ignored(model):
    prompt_ids, lengths, decoder_ids = _batch(4, target_len=12)
    context, cache = model.prepare(prompt_ids, lengths, max_length=16)
    positions = np.tile(np.arange(6, dtype=np.int32), (3, 1))
    _, cache = model.decode(context, cache, decoder_ids[:, :6], positions)
    window_positions = positions[:, :3] + 6
    clean, _ = model.decode(context, cache, decoder_ids[:, 6:9], window_positions)
    # Garbage (large, finite) in every slot >= 6, as rejected drafts would leave there.
    rng = np.random.default_rng(0)

    def poison(t):
        t = t.numpy()
        t[:, 6:] = rng.normal(0, 1e4, size=t[:, 6:].shape)
        return tf.constant(t)

    dirty_cache = type(cache)(tuple(map(poison, cache.keys)), tuple(map(poison, cache.values)))
    dirty, _ = model.decode(context, dirty_cache, decoder_ids[:, 6:9], window_positions)
    np.testing.assert_array_equal(dirty.numpy(), clean.numpy())
    # Poisoning a committed slot (< 6) must change the logits: the mask is not too wide.
    keys = [k.numpy() for k in cache.keys]
    keys[0][:, 2] += 10.0
    broken = type(cache)(tuple(map(tf.constant, keys)), cache.values)
    changed, _ = model.decode(context, broken, decoder_ids[:, 6:9], window_positions)
    assert np.abs(changed.numpy() - clean.numpy()).max() > 1e-3


def test_greedy_in_xla_while_loop_matches_forward():
    model = T5(CONFIGS["v1_0"], seed=4)
    prompt_ids, lengths, _ = _batch(7)
    steps = 10

    @tf.function(jit_compile=True)
    def greedy(prompt_ids, lengths):
        context, cache = model.prepare(prompt_ids, lengths, max_length=steps + 1)
        tokens = tf.zeros([3, steps + 1], tf.int32)  # column 0: decoder start (pad) id

        def body(t, tokens, cache):
            # tokens[:, t:t + 1] would have a dynamic width under XLA; index, then expand.
            ids = tokens[:, t][:, None]
            logits, cache = model.decode(context, cache, ids, tf.fill([3, 1], t))
            next_ids = tf.argmax(logits[:, 0], axis=-1, output_type=tf.int32)
            tokens = tf.tensor_scatter_nd_update(
                tokens, tf.stack([tf.range(3), tf.fill([3], t + 1)], -1), next_ids)
            return t + 1, tokens, cache

        _, tokens, _ = tf.while_loop(lambda t, *_: t < steps, body,
                                     (tf.constant(0), tokens, cache))
        return tokens

    tokens = greedy(tf.constant(prompt_ids), tf.constant(lengths)).numpy()
    expected = np.zeros((3, 1), np.int32)
    for _ in range(steps):
        logits = model.forward(prompt_ids, lengths, expected).numpy()
        expected = np.concatenate([expected, logits[:, -1].argmax(-1)[:, None]], 1)
    np.testing.assert_array_equal(tokens, expected)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_bfloat16_close_to_float32(name):
    f32 = T5(CONFIGS[name], seed=5)
    bf16 = T5(CONFIGS[name], seed=5, dtype="bfloat16")
    assert bf16.shared.dtype == "bfloat16"
    prompt_ids, lengths, decoder_ids = _batch(8, target_len=8)
    ref = f32.forward(prompt_ids, lengths, decoder_ids).numpy()
    got = bf16.forward(prompt_ids, lengths, decoder_ids)
    assert got.dtype == tf.float32
    scale = np.abs(ref).max()
    assert np.abs(got.numpy() - ref).max() < 0.05 * scale
    context, cache = bf16.prepare(prompt_ids, lengths, max_length=8)
    assert cache.keys[0].dtype == tf.bfloat16
    logits, _ = bf16.decode(context, cache, decoder_ids[:, :1], np.zeros((3, 1), np.int32))
    assert logits.dtype == tf.float32
    assert np.abs(logits.numpy()[:, 0] - ref[:, 0]).max() < 0.05 * scale


def test_forward_is_differentiable():
    model = T5(CONFIGS["v1_1"], seed=6)
    prompt_ids, lengths, decoder_ids = _batch(9, target_len=6)
    with tf.GradientTape() as tape:
        logits = model.forward(prompt_ids, lengths, decoder_ids[:, :-1])
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            decoder_ids[:, 1:], logits))
    grads = tape.gradient(loss, model.trainable_variables)
    names = [v.path for v, g in zip(model.trainable_variables, grads, strict=True) if g is None]
    assert not names, names
    assert len(model.trainable_variables) == len(model.hf_weight_map())


def test_seed_determines_weights():
    a = T5(CONFIGS["v1_0"], seed=1).shared.numpy()
    b = T5(CONFIGS["v1_0"], seed=1).shared.numpy()
    c = T5(CONFIGS["v1_0"], seed=2).shared.numpy()
    np.testing.assert_array_equal(a, b)
    assert np.abs(a - c).max() > 0.1


def test_rejects_unsupported_dtype():
    with pytest.raises(ValueError, match="float16"):
        T5(CONFIGS["v1_0"], dtype="float16")


# ------------------------------------------------------------------ parity with HF (golden)

HF_MODELS = ("v1_0", "v1_1", "v1_1_hf5_tied")


@pytest.mark.parametrize("name", HF_MODELS)
def test_hf_golden_logits_and_greedy(name):
    directory = os.path.join(FIXTURES, name)
    golden = np.load(os.path.join(directory, "golden.npz"))
    model = load_model(directory)
    args = (golden["encoder_ids"], golden["encoder_lengths"], golden["decoder_input_ids"])
    states = model.decoder_states(*args).numpy()
    assert np.abs(states - golden["decoder_states"]).max() < TOL
    logits = model.forward(*args).numpy()
    assert np.abs(logits - golden["logits"]).max() < TOL

    # Greedy with the cached decode in a plain Python loop (the real loop is not needed).
    assert golden["greedy_min_margin"] > 1e-3  # else exact-token equality would be luck
    steps = golden["greedy_tokens"].shape[1]
    batch = golden["encoder_ids"].shape[0]
    context, cache = model.prepare(golden["encoder_ids"], golden["encoder_lengths"], steps)
    ids = np.zeros((batch, 1), np.int32)
    tokens = []
    for t in range(steps):
        logits, cache = model.decode(context, cache, ids, np.full((batch, 1), t, np.int32))
        ids = logits.numpy()[:, -1].argmax(-1).astype(np.int32)[:, None]
        tokens.append(ids)
    np.testing.assert_array_equal(np.concatenate(tokens, 1), golden["greedy_tokens"])


def test_hf_golden_buckets():
    golden = np.load(os.path.join(FIXTURES, "v1_0", "golden.npz"))
    relative = tf.range(-200, 201)
    tables = [k for k in golden.files if k.startswith("buckets_")]
    assert len(tables) == 6
    for key in tables:
        _, direction, num_buckets, max_distance = key.split("_")
        got = relative_position_bucket(relative, direction == "bi", int(num_buckets),
                                       int(max_distance)).numpy()
        np.testing.assert_array_equal(got, golden[key], err_msg=key)
