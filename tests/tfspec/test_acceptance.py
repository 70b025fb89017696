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


# ------------------------------------------------------------ typical acceptance (Medusa)


def _typical(p, q, drafts, u_final, epsilon=acceptance.TYPICAL_EPSILON,
             delta=acceptance.TYPICAL_DELTA):
    fn = acceptance.typical_accept_fn(epsilon, delta)
    return fn(tf.constant([p], tf.float32), tf.constant([q], tf.float32),
              tf.constant([drafts], tf.int32), tf.zeros([1, len(drafts)], tf.float32),
              tf.constant([u_final], tf.float32))


def _threshold(p, epsilon, delta):
    p = np.asarray(p, np.float64)
    entropy = -np.sum(p[p > 0] * np.log(p[p > 0]))
    return min(epsilon, delta * np.exp(-entropy))


# The docstring's example: p_1 = [0.6, 0.3, 0.1] (threshold 0.09), p_2 = [0.05, 0.05, 0.9]
# (threshold 0.09), bonus p_3 = [0.2, 0.2, 0.6]; q only enters beta.
TP = [[0.6, 0.3, 0.1], [0.05, 0.05, 0.9], [0.2, 0.2, 0.6]]
TQ = [[0.3, 0.4, 0.3], [0.9, 0.05, 0.05]]


@pytest.mark.parametrize("drafts, epsilon, delta, expect_accepted", [
    ([1, 0], 0.09, 0.3, 1),   # 0.3 > 0.09 kept; 0.05 < 0.09 not.
    ([2, 2], 0.09, 0.3, 2),   # 0.1 > 0.09 and 0.9 > 0.09: both kept (bonus next).
    ([2, 2], 0.2, 0.3, 0),    # Position 1's threshold is now min(0.2, 0.122) = 0.122 > 0.1.
    ([0, 0], 0.09, 0.3, 1),
    ([0, 0], 0.01, 0.3, 2),   # min(0.01, ...) = 0.01 < 0.05.
    ([2, 2], 0.2, 0.2, 2),    # A smaller delta: min(0.2, 0.2 * 0.407) = 0.081 < 0.1.
])
def test_typical_keeps_drafts_above_the_threshold(drafts, epsilon, delta, expect_accepted):
    kept = [TP[i][d] > _threshold(TP[i], epsilon, delta) for i, d in enumerate(drafts)]
    assert int(np.cumprod(kept).sum()) == expect_accepted  # The criterion, in numpy.
    result = _typical(TP, TQ, drafts, 0.0, epsilon, delta)
    assert int(result.num_accepted[0]) == expect_accepted


def test_typical_thresholds_are_the_ones_of_the_docstring():
    assert _threshold(TP[0], 0.09, 0.3) == pytest.approx(0.09)
    assert _threshold(TP[0], 1.0, 0.3) == pytest.approx(0.1222, abs=1e-3)
    assert _threshold(TP[1], 1.0, 0.3) == pytest.approx(0.2022, abs=1e-3)
    assert _threshold(TP[1], 0.09, 0.3) == pytest.approx(0.09)


@pytest.mark.parametrize("u_final, token", [(0.0, 0), (0.049, 0), (0.051, 1), (0.2, 2),
                                            (0.99, 2)])
def test_typical_samples_the_next_token_from_p_at_the_first_rejection(u_final, token):
    # d_2 = 0 is not kept: the next token is a sample of p_2 = [0.05, 0.05, 0.9] itself,
    # not of a residual (the exact rule's max(0, p_2 - q_2) = [0, 0, 0.85] has no mass on
    # tokens 0 and 1).
    result = _typical(TP, TQ, [1, 0], u_final)
    assert int(result.num_accepted[0]) == 1
    assert int(result.next_ids[0]) == token


@pytest.mark.parametrize("u_final, token", [(0.1, 0), (0.3, 1), (0.5, 2)])
def test_typical_samples_the_bonus_when_all_are_kept(u_final, token):
    result = _typical(TP, TQ, [2, 2], u_final)
    assert int(result.num_accepted[0]) == 2
    assert int(result.next_ids[0]) == token  # From p_3 = [0.2, 0.2, 0.6].


def test_typical_ignores_the_accept_uniforms_and_reports_beta_as_the_exact_rule():
    p, q, d = (tf.constant([TP], tf.float32), tf.constant([TQ], tf.float32),
               tf.constant([[1, 0]], tf.int32))
    fn = acceptance.typical_accept_fn()
    low = fn(p, q, d, tf.zeros([1, 2]), tf.constant([0.5]))
    high = fn(p, q, d, tf.fill([1, 2], 0.999), tf.constant([0.5]))
    assert int(low.num_accepted[0]) == int(high.num_accepted[0]) == 1
    exact = acceptance.accept(p, q, d, tf.zeros([1, 2]), tf.constant([0.5]))
    np.testing.assert_allclose(low.beta, exact.beta)


@pytest.mark.parametrize("seed", range(3))
def test_typical_equals_the_greedy_rule_on_one_hot(seed):
    rng = np.random.RandomState(seed)
    batch, k, vocab = 64, 4, 5
    target_ids = rng.randint(vocab, size=(batch, k + 1))
    draft_ids = np.where(rng.rand(batch, k) < 0.6, target_ids[:, :k],
                         rng.randint(vocab, size=(batch, k)))
    onehot = lambda ids: tf.one_hot(ids, vocab, dtype=tf.float32)
    typical = acceptance.typical_accept_fn()(
        onehot(target_ids), onehot(draft_ids), tf.constant(draft_ids, tf.int32),
        tf.constant(rng.rand(batch, k), tf.float32), tf.constant(rng.rand(batch), tf.float32))
    greedy = acceptance.accept_greedy(tf.constant(target_ids, tf.int32),
                                      tf.constant(draft_ids, tf.int32))
    np.testing.assert_array_equal(typical.num_accepted, greedy.num_accepted)
    np.testing.assert_array_equal(typical.next_ids, greedy.next_ids)
    np.testing.assert_allclose(typical.beta, greedy.beta)


def test_typical_accept_fn_is_cached_per_setting():
    default = acceptance.typical_accept_fn()
    assert acceptance.typical_accept_fn(0.09, 0.3) is default
    assert acceptance.typical_accept_fn(epsilon=0.09, delta=0.3) is default
    assert acceptance.TypicalAcceptance().accept_fn is default
    assert acceptance.typical_accept_fn(0.1, 0.3) is not default


@pytest.mark.parametrize("kwargs, message", [
    (dict(epsilon=0), r"epsilon must be in \(0, 1\], got 0"),
    (dict(epsilon=1.5), r"epsilon must be in \(0, 1\]"),
    (dict(epsilon=float("nan")), r"epsilon must be in \(0, 1\]"),
    (dict(delta=0), "delta must be > 0, got 0"),
    (dict(delta=-1), "delta must be > 0"),
    (dict(epsilon="big"), "epsilon must be a number"),
    (dict(delta=True), "delta must be a number"),
])
def test_typical_acceptance_settings_are_validated(kwargs, message):
    with pytest.raises(ValueError, match=message) as info:
        acceptance.TypicalAcceptance(**kwargs)
    assert "\n" not in str(info.value)


def test_typical_acceptance_defaults_are_medusas():
    settings = acceptance.TypicalAcceptance()
    assert (settings.epsilon, settings.delta) == (0.09, 0.3)
    assert acceptance.TypicalAcceptance(1, 2) == acceptance.TypicalAcceptance(1.0, 2.0)
