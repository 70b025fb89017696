"""Sampling transforms and the inverse-CDF categorical draw."""

import numpy as np
import pytest
import tensorflow as tf

import tfspec
from tfspec import sampling
from tfspec.testing import exact_reference as ref


@pytest.mark.parametrize("params", [
    dict(temperature=1.0), dict(temperature=0.5), dict(temperature=2.0, top_k=2),
    dict(temperature=1.0, top_p=0.6), dict(temperature=0.7, top_k=3, top_p=0.9),
    dict(temperature=0.0),
])
def test_transform_matches_reference(params):
    probs = np.random.RandomState(0).dirichlet(np.ones(6), size=4)
    got = sampling.logits_to_probs(tf.constant(np.log(probs), tf.float32),
                                   tfspec.Sampling(**params)).numpy()
    want = np.stack([ref.transform(p, params["temperature"], params.get("top_k", 0),
                                   params.get("top_p", 1.0)) for p in probs])
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_transform_keeps_one_hot_and_impossible_tokens():
    logits = tf.constant([[0.0, -np.inf, -np.inf], [-np.inf, 1.0, 2.0]])
    out = sampling.logits_to_probs(logits, tfspec.Sampling(0.7, top_p=0.9)).numpy()
    np.testing.assert_allclose(out[0], [1, 0, 0])
    assert out[1, 0] == 0.0


@pytest.mark.parametrize("bad", [dict(temperature=-0.1), dict(top_p=0.0), dict(top_p=1.5),
                                 dict(top_k=-1), dict(top_k=1.5)])
def test_invalid_sampling_is_a_value_error(bad):
    with pytest.raises(ValueError):
        tfspec.Sampling(**bad)


def test_sample_categorical_never_picks_zero_mass():
    probs = tf.constant([[0.0, 0.5, 0.0, 0.5, 0.0]] * 5)
    u = tf.constant([0.0, 0.25, 0.5, 0.999999, 1.0 - 2.0 ** -24])
    out = sampling.sample_categorical(probs, u).numpy()
    np.testing.assert_array_equal(out, [1, 1, 3, 3, 3])


@pytest.mark.parametrize("vocab_size", [1, 2, 5, 37, 1000, 8192])
def test_sample_categorical_is_the_inverse_cdf(vocab_size):
    """Both levels together pick the first token whose float64 cumulative mass exceeds
    u * total, except within float32 rounding of a boundary."""
    rng = np.random.default_rng(vocab_size)
    probs = rng.dirichlet(np.full(vocab_size, 0.3), size=2000).astype(np.float32)
    probs[:, rng.random(vocab_size) < 0.3] = 0.0       # zero-mass tokens, whole blocks too
    probs[:, -1] += 1e-3                                # every row keeps some mass
    u = rng.random(2000).astype(np.float32)
    got = sampling.sample_categorical(tf.constant(probs), tf.constant(u)).numpy()
    cdf = np.cumsum(probs.astype(np.float64), axis=-1)
    threshold = u * cdf[:, -1]
    want = (cdf <= threshold[:, None]).sum(axis=-1)
    near = np.abs(cdf - threshold[:, None]).min(axis=-1) < 1e-6 * cdf[:, -1]
    assert (probs[np.arange(2000), got] > 0).all()
    np.testing.assert_array_equal(got[~near], want[~near])
    assert near.mean() < 0.02


def test_sample_categorical_skips_zero_mass_blocks():
    # V = 16: four blocks of four; blocks 0 and 2 hold no mass.
    probs = np.zeros([4, 16], np.float32)
    probs[:, 5] = probs[:, 15] = 0.5
    u = tf.constant([0.0, 0.49, 0.5, 1.0 - 2.0 ** -24])
    got = sampling.sample_categorical(tf.constant(probs), u).numpy()
    np.testing.assert_array_equal(got, [5, 5, 15, 15])


def test_sample_categorical_frequencies():
    probs = np.array([0.1, 0.6, 0.3])
    u = (np.arange(30000) + 0.5) / 30000
    out = sampling.sample_categorical(tf.constant(np.tile(probs, (30000, 1)), tf.float32),
                                      tf.constant(u, tf.float32)).numpy()
    np.testing.assert_allclose(np.bincount(out, minlength=3) / 30000, probs, atol=1e-3)


def _nucleus_cutoff_by_sort(probs, top_p):
    """The textbook form of `sampling.nucleus_cutoff`: sort, exclusive cumsum, threshold."""
    sorted_probs = tf.math.top_k(probs, k=probs.shape[-1], sorted=True).values
    mass_before = tf.cumsum(sorted_probs, axis=-1, exclusive=True)
    kept = mass_before < top_p
    return tf.reduce_min(tf.where(kept, sorted_probs, 2.0), axis=-1, keepdims=True)


@pytest.mark.parametrize("top_p", [0.05, 0.3, 0.5, 0.8, 0.95, 0.999])
@pytest.mark.parametrize("concentration", [0.05, 0.5, 5.0])
def test_nucleus_cutoff_equals_the_sorted_definition(top_p, concentration):
    rng = np.random.RandomState(int(top_p * 1000) + int(concentration * 10))
    probs = rng.dirichlet(np.full(257, concentration), size=64).astype(np.float32)
    probs[:8, :16] = probs[:8, :1]  # Ties, including at the cutoff.
    probs[8:12, 100:] = 0.0         # Impossible tokens.
    probs /= probs.sum(axis=1, keepdims=True)
    probs = tf.constant(probs)
    fast = sampling.nucleus_cutoff(probs, top_p).numpy()
    slow = _nucleus_cutoff_by_sort(probs, top_p).numpy()
    # Both are entries of probs; they may differ only where float rounding of the two
    # summation orders straddles top_p, which these draws do not hit.
    np.testing.assert_array_equal(fast, slow)
    assert np.isin(fast, probs.numpy()).all()


def test_nucleus_cutoff_keeps_the_argmax_even_for_tiny_top_p():
    probs = tf.constant([[0.1, 0.7, 0.2], [1 / 3, 1 / 3, 1 / 3]])
    cutoff = sampling.nucleus_cutoff(probs, 1e-6).numpy()
    np.testing.assert_allclose(cutoff[:, 0], [0.7, 1 / 3], rtol=1e-6)


@pytest.mark.parametrize("shape", [[3, 8192], [2, 5, 1024], [4, 100], [1, 2049], [7],
                                   [5, 32128], [2, 1000]])
@pytest.mark.parametrize("jit_compile", [True, False], ids=["xla", "graph"])
def test_argmax_is_the_first_maximum(shape, jit_compile):
    """Blocked two-level argmax: the first maximum, ties included (rounded values tie often;
    one row's maximum is planted in two blocks)."""
    rng = np.random.RandomState(sum(shape))
    logits = np.round(rng.normal(size=shape) * 3).astype(np.float32)
    flat = logits.reshape(-1, shape[-1])
    if shape[-1] >= 1024:
        flat[0, [shape[-1] - 1, 700]] = flat[0].max() + 1  # Later block first in the row.
    logits = flat.reshape(shape)
    got = tf.function(sampling.argmax, jit_compile=jit_compile)(tf.constant(logits))
    np.testing.assert_array_equal(got.numpy(), np.argmax(logits, axis=-1))


@pytest.mark.parametrize("vocab_size", [32128, 32100, 2049, 8192, 1000])
def test_argmax_finds_the_last_entry_and_the_first_of_ties(vocab_size):
    """Whatever blocks V splits into (t5's 32128: 251 of 128; 32100 and 2049: none, plain
    tf.argmax): a maximum in the very last entry is found, a tie between the first block
    and the last entry goes to the earlier index, and a row of -inf (all ties) gives 0."""
    logits = np.full([3, vocab_size], -np.inf, np.float32)
    logits[1, :] = 0.0
    logits[1, vocab_size - 1] = 1.0
    logits[2, :] = -1.0
    logits[2, [5, vocab_size - 1]] = 2.0
    got = tf.function(sampling.argmax, jit_compile=True)(tf.constant(logits)).numpy()
    np.testing.assert_array_equal(got, [0, vocab_size - 1, 5])
    np.testing.assert_array_equal(got, np.argmax(logits, axis=-1))
