"""Tests of tfspec.training.distill: the KL-to-target loss of the draft."""

import numpy as np
import pytest
import tensorflow as tf

from tfspec.models import T5, T5Config
from tfspec.training import distill

from tests.tfspec.training.tiny_data import TINY_T5

MASK = tf.constant([[True, True, False]])


def _logits(seed, shape=(1, 3, 7)):
    return tf.constant(np.random.default_rng(seed).normal(size=shape).astype(np.float32) * 3)


def test_kl_is_zero_when_draft_equals_target():
    target = _logits(0)
    loss, metrics = distill.distillation_loss(target, target, MASK)
    assert float(loss) == pytest.approx(0.0, abs=1e-6)
    assert float(metrics["overlap"]) == pytest.approx(1.0, abs=1e-6)
    # Logits that differ by a per-position constant are the same distribution.
    loss, _ = distill.distillation_loss(target, target + 5.0, MASK)
    assert float(loss) == pytest.approx(0.0, abs=1e-5)


def test_kl_is_positive_otherwise_and_matches_numpy():
    target, draft = _logits(0), _logits(1)
    loss, metrics = distill.distillation_loss(target, draft, MASK)
    p = tf.nn.softmax(target).numpy()[0, :2]
    q = tf.nn.softmax(draft).numpy()[0, :2]
    expected = np.mean(np.sum(p * (np.log(p) - np.log(q)), axis=-1))
    assert float(loss) > 0
    assert float(loss) == pytest.approx(expected, rel=1e-4)
    assert float(metrics["overlap"]) == pytest.approx(
        np.mean(np.minimum(p, q).sum(-1)), rel=1e-5)


def test_masked_positions_do_not_count():
    target, draft = _logits(0), _logits(1)
    changed = tf.concat([draft[:, :2], draft[:, 2:] + _logits(2)[:, 2:]], axis=1)
    a, _ = distill.distillation_loss(target, draft, MASK)
    b, _ = distill.distillation_loss(target, changed, MASK)
    assert float(a) == pytest.approx(float(b), rel=1e-6)


def test_label_term_is_added_with_its_weight():
    target, draft = _logits(0), _logits(1)
    labels = tf.constant([[1, 4, 0]])
    kl, metrics = distill.distillation_loss(target, draft, MASK, labels, label_weight=0.0)
    both, _ = distill.distillation_loss(target, draft, MASK, labels, label_weight=0.5)
    assert float(both) == pytest.approx(float(kl) + 0.5 * float(metrics["ce"]), rel=1e-5)
    with pytest.raises(ValueError, match="target_ids"):
        distill.distillation_loss(target, draft, MASK, None, label_weight=0.5)


def test_gradient_flows_to_the_draft_only():
    target = tf.Variable(_logits(0))
    draft = tf.Variable(_logits(1))
    with tf.GradientTape() as tape:
        loss, _ = distill.distillation_loss(target, draft, MASK)
    grad_target, grad_draft = tape.gradient(loss, [target, draft])
    assert grad_target is None or not np.any(grad_target.numpy())
    assert np.any(grad_draft.numpy())


def test_objective_runs_the_frozen_target_on_the_batch():
    config = T5Config(**TINY_T5)
    target, draft = T5(config, seed=0), T5(config, seed=1)
    batch = {"encoder_ids": tf.constant([[5, 6, 7]]), "encoder_lengths": tf.constant([3]),
             "decoder_input_ids": tf.constant([[0, 8, 9]]),
             "target_ids": tf.constant([[8, 9, 1]]), "loss_mask": tf.ones([1, 3], tf.bool)}
    objective = distill.DistillationObjective(target, label_weight=0.0)
    loss, metrics = objective(draft, batch)
    assert float(loss) > 0 and set(metrics) == {"kl", "ce", "overlap", "target_ce"}
    same, _ = distill.DistillationObjective(target)(target, batch)
    assert float(same) == pytest.approx(0.0, abs=1e-5)


def test_generated_examples_are_the_targets_greedy_outputs(tmp_path):
    import tfspec
    from tfspec.training.examples import Example

    target = T5(T5Config(**TINY_T5), seed=0)
    sources = [Example(f"x:{i}", "completion", np.arange(3, 3 + n, dtype=np.int32),
                       np.array([1], np.int32)) for i, n in enumerate([5, 2, 9])]
    generated = distill.generated_examples(target, sources, max_new_tokens=6, batch_size=2)
    assert [g.id for g in generated] == ["generated:x:0", "generated:x:1", "generated:x:2"]
    for source, example in zip(sources, generated):
        np.testing.assert_array_equal(example.encoder_ids, source.encoder_ids)
        gen = tfspec.generate(target, [source.encoder_ids.tolist()], k=0, max_new_tokens=6,
                              sampling=tfspec.Sampling(temperature=0.0))
        np.testing.assert_array_equal(example.target_ids, gen.row_tokens(0))
    path = str(tmp_path / "generated.jsonl")
    distill.save_examples(path, generated)
    for a, b in zip(distill.load_examples(path), generated):
        assert a.id == b.id and a.task == b.task
        np.testing.assert_array_equal(a.target_ids, b.target_ids)


def _probs(logits):
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("divergence", distill.DIVERGENCES)
def test_divergences_vanish_only_where_the_distributions_agree(divergence):
    rng = np.random.default_rng(0)
    target = rng.normal(size=(2, 3, 7)).astype(np.float32)
    same = distill.token_divergence(target, target + 3.0, divergence).numpy()
    np.testing.assert_allclose(same, 0.0, atol=1e-6)
    other = distill.token_divergence(target, rng.normal(size=(2, 3, 7)).astype(np.float32),
                                     divergence).numpy()
    assert (other > 1e-3).all()


def test_divergences_match_their_definitions():
    rng = np.random.default_rng(1)
    target = rng.normal(size=(1, 4, 6)).astype(np.float32) * 2
    draft = rng.normal(size=(1, 4, 6)).astype(np.float32) * 2
    p, q = _probs(target.astype(np.float64)), _probs(draft.astype(np.float64))
    m = (p + q) / 2
    expected = {
        "forward_kl": (p * np.log(p / q)).sum(-1),
        "reverse_kl": (q * np.log(q / p)).sum(-1),
        "jsd": 0.5 * (p * np.log(p / m)).sum(-1) + 0.5 * (q * np.log(q / m)).sum(-1),
        # TV = 1 - the overlap sum_x min(p, q), the acceptance rate of one draft token.
        "tv": 1.0 - np.minimum(p, q).sum(-1),
    }
    for name, value in expected.items():
        np.testing.assert_allclose(distill.token_divergence(target, draft, name).numpy(),
                                   value, rtol=1e-4, atol=1e-6, err_msg=name)
    assert (expected["jsd"] <= np.log(2.0)).all()


@pytest.mark.parametrize("divergence", distill.DIVERGENCES)
def test_divergence_gradients_are_finite_on_extreme_logits(divergence):
    target = tf.constant([[[80.0, -80.0, 0.0, 0.0]]])
    draft = tf.Variable([[[-80.0, 80.0, 0.0, 0.0]]])
    with tf.GradientTape() as tape:
        loss, metrics = distill.distillation_loss(target, draft, MASK[:1, :1],
                                                  divergence=divergence)
    grad = tape.gradient(loss, draft).numpy()
    assert np.isfinite(loss.numpy()) and np.isfinite(grad).all() and np.abs(grad).sum() > 0
    assert ("kl" in metrics) and (divergence == "forward_kl" or divergence in metrics)


def test_unknown_divergence_is_refused():
    with pytest.raises(ValueError, match="Unknown divergence 'l2'"):
        distill.DistillationObjective(None, divergence="l2")
