"""tfspec.kernels.prompt_attention: the encoders' fused self-attention, against a float64
reference, row by row, and inside the T5 encoder of a compiled decode program."""

import numpy as np
import pytest
import tensorflow as tf

import tfspec
from tfspec import generation, kernels
from tfspec.models import T5, T5Config

pytestmark = pytest.mark.skipif(not kernels.prompt_attention_available(),
                                reason=f"needs AVX-512 and the kernel: {kernels.status()}")


def _problem(batch, width, heads, d_kv, seed=0):
    """qkv [B, S, 3 H d_kv] and offset_bias [H, 2S - 1], scaled like a trained encoder's
    (scores of a few units, biases of several)."""
    rng = np.random.default_rng(seed + 31 * width + d_kv)
    qkv = rng.standard_normal((batch, width, 3 * heads * d_kv)).astype(np.float32)
    qkv[..., :heads * d_kv] *= d_kv ** -0.5
    offset_bias = (4.0 * rng.standard_normal((heads, 2 * width - 1))).astype(np.float32)
    return qkv, offset_bias


def _fused(qkv, offset_bias, lengths, heads, d_kv):
    kernels.status()  # Loads and registers the kernel before the program is compiled.
    fn = tf.function(lambda a, b, c: kernels.prompt_attention(a, b, c, heads, d_kv),
                     jit_compile=True, autograph=False)
    return fn(tf.constant(qkv), tf.constant(offset_bias),
              tf.constant(lengths, tf.int32)).numpy()


def _reference(qkv, offset_bias, lengths, heads, d_kv):
    """float64 softmax(q k^T + bias[j - i]) v over each row's valid keys; 0 past them."""
    batch, width, _ = qkv.shape
    q, k, v = np.split(qkv.astype(np.float64), 3, axis=-1)
    out = np.zeros((batch, width, heads * d_kv))
    offsets = np.arange(width)[None, :] - np.arange(width)[:, None] + width - 1
    for b, length in enumerate(lengths):
        for h in range(heads):
            cols = slice(h * d_kv, (h + 1) * d_kv)
            scores = (q[b, :length, cols] @ k[b, :length, cols].T
                      + offset_bias[h][offsets[:length, :length]])
            weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
            weights /= weights.sum(axis=-1, keepdims=True)
            out[b, :length, cols] = weights @ v[b, :length, cols]
    return out


# (batch, bucket width, heads, d_kv, lengths): a width that is not a multiple of the 8
# query rows or the 32 keys of a block, d_kv not a multiple of 16 (the tiny test models' 4),
# the embedded pair's 64, t5-v1.0 11B's 128, and rows of one token.
CASES = [
    (1, 12, 2, 4, [12]),
    (2, 24, 6, 64, [18, 24]),
    (3, 40, 2, 20, [1, 33, 40]),
    (1, 96, 4, 128, [70]),
    (2, 384, 6, 64, [309, 268]),
]


@pytest.mark.parametrize("batch,width,heads,d_kv,lengths", CASES)
def test_prompt_attention_is_float32_attention(batch, width, heads, d_kv, lengths):
    qkv, offset_bias = _problem(batch, width, heads, d_kv)
    got = _fused(qkv, offset_bias, lengths, heads, d_kv)
    want = _reference(qkv, offset_bias, lengths, heads, d_kv)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    for b, length in enumerate(lengths):  # Padded positions are exactly zero.
        assert not np.any(got[b, length:])


def test_a_row_depends_on_its_own_prompt_alone():
    """The same prompt gives the same bits alone, beside other rows, and in a wider
    bucket: the kernel reads only a row's valid positions, in an order set by its length."""
    heads, d_kv, length = 6, 64, 21
    qkv, offset_bias = _problem(3, 24, heads, d_kv)
    batched = _fused(qkv, offset_bias, [length, 24, 5], heads, d_kv)
    alone = _fused(qkv[:1], offset_bias, [length], heads, d_kv)
    # Bucket 32: the row's positions and the biases of its offsets, padded differently.
    wide = np.zeros((1, 32, qkv.shape[-1]), np.float32)
    wide[0, :24] = qkv[0]
    wide_bias = np.zeros((heads, 63), np.float32)
    wide_bias[:, 32 - 24:32 + 23] = offset_bias  # offset o at o + S - 1 in each
    in_wider = _fused(wide, wide_bias, [length], heads, d_kv)
    np.testing.assert_array_equal(alone[0, :length], batched[0, :length])
    np.testing.assert_array_equal(in_wider[0, :length], batched[0, :length])


def test_a_wrong_bias_offset_is_caught():
    """The reference test has the power to see a bias read one offset off."""
    heads, d_kv, lengths = 2, 16, [20]
    qkv, offset_bias = _problem(1, 24, heads, d_kv)
    shifted = np.roll(offset_bias, 1, axis=1)
    got = _fused(qkv, shifted, lengths, heads, d_kv)
    want = _reference(qkv, offset_bias, lengths, heads, d_kv)
    assert not np.allclose(got, want, rtol=2e-5, atol=2e-5)


def _model(seed, d_kv=16):
    config = T5Config(vocab_size=64, d_model=32, d_kv=d_kv, d_ff=64, num_layers=2,
                      num_decoder_layers=1, num_heads=2, relative_attention_num_buckets=8,
                      relative_attention_max_distance=16, feed_forward_proj="relu",
                      tie_word_embeddings=True, pad_token_id=0, eos_token_id=1,
                      decoder_start_token_id=0)
    return T5(config, seed=seed)


def _encoded(model, ids, lengths, fused: bool):
    with kernels.fused_prompt_attention(fused):
        fn = tf.function(lambda i, n: model.encode(i, n, for_decode=True)[0],
                         jit_compile=True, autograph=False)
        hlo = fn.experimental_get_compiler_ir(ids, lengths)(stage="hlo")
        return fn(ids, lengths).numpy(), kernels.PROMPT_ATTENTION_TARGET_NAME in hlo


@pytest.mark.parametrize("d_kv", [4, 16])
def test_the_encoder_of_a_decode_program_runs_fused_attention(d_kv):
    """With the kernel on, a compiled decode program's encoder calls it, and its valid
    positions are the states of XLA's attention up to float32 rounding; with
    `fused_prompt_attention(False)` it keeps XLA's."""
    model = _model(3, d_kv)
    ids = tf.constant([[(5 * c + r) % 60 + 2 for c in range(24)] for r in range(2)], tf.int32)
    lengths = tf.constant([17, 24], tf.int32)
    fused, calls_kernel = _encoded(model, ids, lengths, True)
    plain, plain_calls_kernel = _encoded(model, ids, lengths, False)
    assert calls_kernel and not plain_calls_kernel
    for row, length in enumerate(lengths.numpy()):
        np.testing.assert_allclose(fused[row, :length], plain[row, :length], rtol=1e-5,
                                   atol=1e-5)


def test_greedy_speculative_equals_autoregressive_with_fused_attention():
    """Both modes of a call read the one encoder output, so greedy speculative decoding
    emits the autoregressive tokens; the compiled loops are cached per setting."""
    target, draft = _model(5, 16), _model(6, 16)
    prompts = [[(7 * c + r) % 60 + 2 for c in range(9 + 5 * r)] for r in range(3)]
    kwargs = dict(max_new_tokens=12, sampling=tfspec.Sampling(temperature=0.0))
    ar = tfspec.generate(target, prompts, k=0, **kwargs)
    spec = tfspec.generate(target, prompts, draft=draft, k=3, **kwargs)
    np.testing.assert_array_equal(spec.tokens, ar.tokens)
    np.testing.assert_array_equal(spec.lengths, ar.lengths)
    before = len(generation.compiled_loops(target))
    with kernels.fused_prompt_attention(False):
        tfspec.generate(target, prompts, k=0, **kwargs)
    assert len(generation.compiled_loops(target)) == before + 1
