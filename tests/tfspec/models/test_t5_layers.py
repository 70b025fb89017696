"""tfspec.models.t5_layers: the encoder's attention with the mask folded into the bias."""

import numpy as np
import pytest
import tensorflow as tf

import tfspec  # noqa: F401  (sets KERAS_BACKEND)
from tfspec.models.t5_layers import attend, attend_with_masked_bias, mask_into_bias

B, H, S, D = 3, 2, 7, 4
LENGTHS = [7, 4, 1]  # A full row, a padded one, and one with a single valid key.


def _inputs(seed):
    rng = np.random.default_rng(seed)
    q, k, v = (tf.constant(rng.standard_normal([B, H, S, D]).astype(np.float32) * 2)
               for _ in range(3))
    bias = tf.constant(rng.standard_normal([1, H, S, S]).astype(np.float32))
    mask = tf.sequence_mask(LENGTHS, S)[:, None, None, :]  # [B, 1, 1, S]
    return q, k, v, bias, mask


@pytest.mark.parametrize("seed", [0, 1])
def test_it_is_attend_with_the_mask(seed):
    q, k, v, bias, mask = _inputs(seed)
    np.testing.assert_allclose(attend_with_masked_bias(q, k, v, mask_into_bias(bias, mask)),
                               attend(q, k, v, bias, mask), rtol=1e-5, atol=1e-6)


def test_masked_keys_get_no_weight_whatever_their_values():
    """Each row equals attention over its valid keys alone, although the padded keys' values
    are huge and their keys would dominate the scores."""
    q, k, v, bias, mask = _inputs(2)
    padded = ~tf.broadcast_to(tf.sequence_mask(LENGTHS, S)[:, None, :, None], [B, H, S, D])
    k = tf.where(padded, 50.0, k)
    v = tf.where(padded, 1e30, v)
    out = attend_with_masked_bias(q, k, v, mask_into_bias(bias, mask)).numpy()
    for row, n in enumerate(LENGTHS):
        alone = attend(q[row:row + 1], k[row:row + 1, :, :n], v[row:row + 1, :, :n],
                       bias[:, :, :, :n], tf.ones([1, 1, 1, n], tf.bool))
        np.testing.assert_allclose(out[row:row + 1], alone, rtol=1e-5, atol=1e-6)


def test_its_gradients_are_attends():
    q, k, v, bias, mask = _inputs(3)
    masked_bias = mask_into_bias(bias, mask)

    def gradients(fn):
        with tf.GradientTape() as tape:
            tape.watch([q, k, v])
            loss = tf.reduce_sum(fn() ** 2)
        return tape.gradient(loss, [q, k, v])

    for ours, theirs in zip(gradients(lambda: attend_with_masked_bias(q, k, v, masked_bias)),
                            gradients(lambda: attend(q, k, v, bias, mask))):
        np.testing.assert_allclose(ours, theirs, rtol=1e-3, atol=1e-4)


def test_bfloat16_values_give_bfloat16_heads():
    q, k, v, bias, mask = _inputs(4)
    q, k, v = (tf.cast(t, tf.bfloat16) for t in (q, k, v))
    out = attend_with_masked_bias(q, k, v, mask_into_bias(bias, mask))
    assert out.dtype == tf.bfloat16
    np.testing.assert_allclose(tf.cast(out, tf.float32),
                               tf.cast(attend(q, k, v, bias, mask), tf.float32),
                               rtol=2e-2, atol=2e-2)
