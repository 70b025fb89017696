"""Tests of tfspec.training.losses."""

import numpy as np
import pytest
import tensorflow as tf

from tfspec.training import losses


def test_cross_entropy_is_a_mean_over_real_tokens():
    logits = tf.constant(np.random.default_rng(0).normal(size=(2, 3, 5)).astype(np.float32))
    labels = tf.constant([[1, 2, 3], [4, 0, 0]])
    mask = tf.constant([[True, True, True], [True, False, False]])
    log_probs = tf.nn.log_softmax(logits).numpy()
    expected = -np.mean([log_probs[0, 0, 1], log_probs[0, 1, 2], log_probs[0, 2, 3],
                         log_probs[1, 0, 4]])
    assert float(losses.cross_entropy(logits, labels, mask)) == pytest.approx(expected,
                                                                               rel=1e-5)
    assert float(losses.masked_mean(tf.ones([2, 2]), tf.zeros([2, 2], tf.bool))) == 0.0
