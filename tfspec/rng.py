"""Counter-based, per-row random numbers that are identical in eager, graph and XLA code.

Why not `tf.random.stateless_uniform` directly: its XLA lowering and its TensorFlow kernel
produce different streams for the same seed (measured on TF 2.21, `alg="philox"` included),
so an XLA-compiled run would sample different tokens than an eager run of the same request;
and it takes one seed per call, while every row of a batch needs its own stream so that a
row's tokens never depend on the rows beside it. Threefry-2x32 (Salmon et al. 2011, the
generator JAX uses) is 20 rounds of 32-bit add/rotate/xor, so it is the same bits on every
device and every execution mode, and it vectorises over any batch of (key, counter) pairs.

Streams: a row's key is threefry(seed, row_key); its uniforms for round r, stream s and
index j come from counter (r, s * 2**16 + j). Nothing depends on timing or batch layout.
"""

import tensorflow as tf

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = 0x1BD11BDA  # Threefry's key-schedule constant.


def _rotl(x: tf.Tensor, r: int) -> tf.Tensor:
    return tf.bitwise.left_shift(x, tf.constant(r, tf.uint32)) | tf.bitwise.right_shift(
        x, tf.constant(32 - r, tf.uint32))


def threefry2x32(key: tf.Tensor, counter: tf.Tensor) -> tf.Tensor:
    """Threefry-2x32 with 20 rounds.

    Args:
      key: uint32 [..., 2].
      counter: uint32 [..., 2], broadcastable against `key`.

    Returns:
      uint32 [..., 2] random bits.
    """
    key = tf.convert_to_tensor(key, tf.uint32)
    counter = tf.convert_to_tensor(counter, tf.uint32)
    k0, k1 = key[..., 0], key[..., 1]
    schedule = (k0, k1, k0 ^ k1 ^ tf.constant(_PARITY, tf.uint32))
    x0 = counter[..., 0] + schedule[0]
    x1 = counter[..., 1] + schedule[1]
    for block in range(5):
        for r in _ROTATIONS[block % 2]:
            x0 = x0 + x1
            x1 = _rotl(x1, r) ^ x0
        inject = block + 1
        x0 = x0 + schedule[inject % 3]
        x1 = x1 + schedule[(inject + 1) % 3] + tf.constant(inject, tf.uint32)
    return tf.stack([x0, x1], axis=-1)


def _split64(x: tf.Tensor) -> tf.Tensor:
    """int64 [...] -> uint32 [..., 2] (low word, high word)."""
    x = tf.cast(x, tf.int64)
    low = tf.cast(tf.bitwise.bitwise_and(x, 0xFFFFFFFF), tf.uint32)
    high = tf.cast(tf.bitwise.bitwise_and(tf.bitwise.right_shift(x, 32), 0xFFFFFFFF), tf.uint32)
    return tf.stack([low, high], axis=-1)


def row_keys_for(seed, row_keys: tf.Tensor) -> tf.Tensor:
    """Derives one Threefry key per row.

    Args:
      seed: int64 scalar (Python int or tensor), the request seed.
      row_keys: int64 [batch], stable per-row identifiers.

    Returns:
      uint32 [batch, 2].
    """
    seed_key = _split64(tf.convert_to_tensor(seed, tf.int64))
    return threefry2x32(seed_key[None, :], _split64(row_keys))


def uniform(keys: tf.Tensor, round_idx: tf.Tensor, stream: int, num: int) -> tf.Tensor:
    """Uniform floats in [0, 1), `num` per row, for one (round, stream).

    Args:
      keys: uint32 [batch, 2] from `row_keys_for`.
      round_idx: int32 scalar, the loop round.
      stream: static int < 2**15, which use the numbers are for.
      num: static int < 2**16, how many per row.

    Returns:
      float32 [batch, num].
    """
    index = tf.cast(tf.range(num), tf.uint32) + tf.constant(stream * 2**16, tf.uint32)
    round_word = tf.fill([num], tf.cast(round_idx, tf.uint32))
    counter = tf.stack([round_word, index], axis=-1)  # [num, 2]
    bits = threefry2x32(keys[:, None, :], counter[None, :, :])[..., 0]  # [batch, num]
    # The top 24 bits fill a float32 mantissa exactly, so every value is < 1.
    return tf.cast(tf.bitwise.right_shift(bits, tf.constant(8, tf.uint32)),
                   tf.float32) * (1.0 / (1 << 24))
