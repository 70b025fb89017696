"""Threefry-2x32 known answers and the per-row stream properties the loop relies on."""

import numpy as np
import pytest
import tensorflow as tf

from tfspec import rng


@pytest.mark.parametrize("key, counter, expected", [
    # Known-answer vectors of Threefry-2x32-20 (Random123; also used by JAX's tests).
    ((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
    ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
])
@pytest.mark.parametrize("jit", [False, True])
def test_threefry_known_answers(key, counter, expected, jit):
    fn = tf.function(rng.threefry2x32, jit_compile=True) if jit else rng.threefry2x32
    out = fn(tf.constant(key, tf.uint32), tf.constant(counter, tf.uint32)).numpy()
    assert tuple(int(x) for x in out) == expected


def test_uniforms_depend_only_on_row_key():
    keys = rng.row_keys_for(7, tf.constant([5, 9, 11], tf.int64))
    alone = rng.row_keys_for(7, tf.constant([9], tf.int64))
    batch_u = rng.uniform(keys, tf.constant(3), stream=1, num=4).numpy()
    alone_u = rng.uniform(alone, tf.constant(3), stream=1, num=4).numpy()
    np.testing.assert_array_equal(batch_u[1], alone_u[0])


@pytest.mark.parametrize("change", ["seed", "round", "stream"])
def test_streams_differ(change):
    base = dict(seed=1, round_idx=0, stream=0)
    other = dict(base)
    other[{"seed": "seed", "round": "round_idx", "stream": "stream"}[change]] = 2
    def draw(seed, round_idx, stream):
        keys = rng.row_keys_for(seed, tf.constant([0], tf.int64))
        return rng.uniform(keys, tf.constant(round_idx), stream=stream, num=8).numpy()
    assert not np.allclose(draw(**base), draw(**other))


def test_uniform_is_uniform():
    keys = rng.row_keys_for(0, tf.range(2000, dtype=tf.int64))
    u = rng.uniform(keys, tf.constant(0), stream=0, num=16).numpy().ravel()
    assert 0.0 <= u.min() and u.max() < 1.0
    counts, _ = np.histogram(u, bins=10, range=(0, 1))
    from scipy import stats
    assert stats.chisquare(counts).pvalue > 1e-3
