"""NGram tables: fitting, lookups by context, validation."""

import numpy as np
import pytest
import tensorflow as tf

from tfspec.models import NGram


def test_fit_counts_bigrams_with_start_context():
    model = NGram.fit([[1, 2, 1, 2], [2, 2]], order=2, vocab_size=3, smoothing=0.0)
    probs = np.exp(model.log_probs)
    # After 1: always 2. After 2: 1 once, 2 once. Start context (0): 1 once, 2 once.
    np.testing.assert_allclose(probs[1], [0, 0, 1])
    np.testing.assert_allclose(probs[2], [0, 0.5, 0.5])
    np.testing.assert_allclose(probs[0], [0, 0.5, 0.5])


def test_decode_looks_up_the_previous_tokens():
    table = np.log(np.random.RandomState(0).dirichlet(np.ones(4), size=(4, 4)))
    model = NGram(table)
    context, cache = model.prepare(tf.constant([[3, 0]]), tf.constant([1]), max_length=6)
    # Position 0 maps onto the last prompt token (3); its context is (0 = before start, 3).
    logits, cache = model.decode(context, cache, tf.constant([[0, 2]]),
                                 tf.constant([[0, 1]]))
    np.testing.assert_allclose(logits[0, 0], table[0, 3], rtol=1e-6)
    np.testing.assert_allclose(logits[0, 1], table[3, 2], rtol=1e-6)


@pytest.mark.parametrize("bad", [np.zeros([3, 4]), np.zeros([])])
def test_table_must_be_square(bad):
    with pytest.raises(ValueError, match="shape"):
        NGram(bad)


def test_fit_rejects_out_of_vocabulary_tokens():
    with pytest.raises(ValueError, match="token ids must be in"):
        NGram.fit([[1, 5]], order=2, vocab_size=3)
