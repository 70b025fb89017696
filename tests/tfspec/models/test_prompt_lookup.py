"""PromptLookup proposals on worked token examples."""

import numpy as np
import pytest
import tensorflow as tf

from tfspec.models import PromptLookup


def _proposals(prompt, generated, max_ngram, vocab=10):
    model = PromptLookup(max_ngram=max_ngram, vocab_size=vocab)
    context, cache = model.prepare(tf.constant([prompt]), tf.constant([len(prompt)]), 16)
    ids = [0] + generated  # position 0 is the start token (not written)
    logits, _ = model.decode(context, cache, tf.constant([ids]),
                             tf.constant([list(range(len(ids)))]))
    probs = tf.nn.softmax(logits).numpy()[0]
    assert np.allclose(probs.max(axis=-1), 1.0), "a deterministic draft is one-hot"
    return probs.argmax(axis=-1).tolist()


def test_copies_what_followed_the_latest_match():
    # History a b c d | a b -> after "a b" comes c; after c comes d.
    a, b, c, d = 1, 2, 3, 4
    out = _proposals([a, b, c, d], [a, b], max_ngram=2)
    # Entries: after d (start, position 0) -> no earlier "d": repeat d; after a -> b;
    # after "a b" -> c.
    assert out == [d, b, c]


def test_prefers_the_longest_suffix():
    # "5 6" occurs twice: followed by 7 then by 8; suffix "4 5 6" only before 8.
    out = _proposals([4, 5, 6, 8, 5, 6, 7, 4, 5, 6], [], max_ngram=3)
    assert out == [8]
    assert _proposals([4, 5, 6, 8, 5, 6, 7, 4, 5, 6], [], max_ngram=2) == [7]


def test_needs_a_vocabulary():
    with pytest.raises(ValueError, match="vocab_size"):
        PromptLookup().prepare(tf.constant([[1]]), tf.constant([1]), 4)
    with pytest.raises(ValueError, match="max_ngram"):
        PromptLookup(max_ngram=0)
