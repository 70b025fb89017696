"""The acceptance rule on hand-computed cases (Leviathan lettering: p target, q draft)."""

import numpy as np
import pytest
import tensorflow as tf

from tfspec import acceptance


def _run(p, q, drafts, u_accept, u_final):
    return acceptance.accept(tf.constant([p], tf.float32), tf.constant([q], tf.float32),
                             tf.constant([drafts], tf.int32), tf.constant([u_accept], tf.float32),
                             tf.constant([u_final], tf.float32))


P = [[0.5, 0.3, 0.2], [0.1, 0.1, 0.8], [0.2, 0.2, 0.6]]  # p_1, p_2, p_3 (k = 2)
Q = [[0.25, 0.25, 0.5], [0.6, 0.2, 0.2]]                # q_1, q_2


@pytest.mark.parametrize("u_accept, expect_accepted", [
    # x_1 = 0: p/q = 2 -> always accepted. x_2 = 1: p/q = 0.5.
    ([0.99, 0.49], 2), ([0.99, 0.51], 1),
])
def test_accepts_with_ratio(u_accept, expect_accepted):
    result = _run(P, Q, [0, 1], u_accept, 0.0)
    assert int(result.num_accepted[0]) == expect_accepted


def test_rejection_samples_residual():
    # x_1 = 2: p/q = 0.4, u = 0.9 rejects. Residual max(0, p_1 - q_1) = [0.25, 0.05, 0] -> /0.3.
    for u_final, token in [(0.0, 0), (0.8, 0), (0.84, 1), (0.99, 1)]:
        result = _run(P, Q, [2, 0], [0.9, 0.0], u_final)
        assert int(result.num_accepted[0]) == 0
        assert int(result.next_ids[0]) == token


def test_all_accepted_samples_bonus_from_last_target_distribution():
    # Both accepted; the bonus comes from p_3 = [0.2, 0.2, 0.6].
    for u_final, token in [(0.1, 0), (0.3, 1), (0.5, 2)]:
        result = _run(P, Q, [0, 1], [0.0, 0.0], u_final)
        assert int(result.num_accepted[0]) == 2
        assert int(result.next_ids[0]) == token


def test_zero_mass_residual_falls_back_to_target():
    p = [[0.0, 1.0, 0.0], [0.3, 0.3, 0.4]]
    q = [[0.0, 1.0, 0.0]]
    # Cannot reject (ratio 1) unless forced: u = 1 - eps still accepts; residual untouched.
    result = _run(p, q, [1], [0.999], 0.5)
    assert int(result.num_accepted[0]) == 1
    # Force the residual path through a draft token with q > p mass equal: p == q numerically.
    result = acceptance.accept(tf.constant([[[0.5, 0.5], [0.5, 0.5]]]),
                               tf.constant([[[0.5, 0.5]]]), tf.constant([[0]]),
                               tf.constant([[2.0]]), tf.constant([0.75]))
    assert int(result.num_accepted[0]) == 0
    assert int(result.next_ids[0]) == 1  # sampled from p, not from an empty residual


def test_greedy_one_hot_reduces_to_argmax_rule():
    onehot = lambda i: np.eye(3)[i].tolist()
    p = [onehot(2), onehot(0), onehot(1)]
    q = [onehot(2), onehot(1)]
    result = _run(p, q, [2, 1], [0.99, 0.99], 0.3)
    assert int(result.num_accepted[0]) == 1   # position 2 mismatches the target argmax 0
    assert int(result.next_ids[0]) == 0       # ...so the target argmax is emitted


def test_beta_is_overlap():
    result = _run(P, Q, [0, 1], [0.0, 0.0], 0.0)
    np.testing.assert_allclose(result.beta.numpy()[0], [0.25 + 0.25 + 0.2, 0.1 + 0.1 + 0.2],
                               atol=1e-6)


@pytest.mark.parametrize("seed", range(5))
def test_greedy_rule_equals_general_rule_on_one_hot(seed):
    rng = np.random.RandomState(seed)
    batch, k, vocab = 64, 4, 3
    target_ids = rng.randint(vocab, size=(batch, k + 1))
    draft_ids = np.where(rng.rand(batch, k) < 0.6, target_ids[:, :k],
                         rng.randint(vocab, size=(batch, k)))
    onehot = lambda ids: tf.one_hot(ids, vocab, dtype=tf.float32)
    general = acceptance.accept(onehot(target_ids), onehot(draft_ids),
                                tf.constant(draft_ids, tf.int32),
                                tf.constant(rng.rand(batch, k), tf.float32),
                                tf.constant(rng.rand(batch), tf.float32))
    greedy = acceptance.accept_greedy(tf.constant(target_ids, tf.int32),
                                      tf.constant(draft_ids, tf.int32))
    np.testing.assert_array_equal(general.num_accepted, greedy.num_accepted)
    np.testing.assert_array_equal(general.next_ids, greedy.next_ids)
    np.testing.assert_allclose(general.beta, greedy.beta)
