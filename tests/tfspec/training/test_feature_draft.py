"""Tests of tfspec.training.feature_draft: the EAGLE-style loss of a `FeatureDraft`."""

import numpy as np
import pytest
import tensorflow as tf

from tfspec.models import T5, T5Config
from tfspec.models.feature_draft import FeatureDraft, FeatureDraftConfig
from tfspec.training import examples as examples_lib
from tfspec.training.feature_draft import FeatureDraftObjective

from tests.tfspec.training.tiny_data import TINY_T5, random_examples

# Two decoder layers, so that a draft can read an inner layer (0) as well as the top (-1).
TARGET = T5Config(**{**TINY_T5, "num_decoder_layers": 2})
DRAFTS = {
    "top": dict(),
    "fused-reduced": dict(feature_layers=(0, -1), draft_vocab_size=40),
    "nocross": dict(cross_attention=False, feed_forward_proj="relu"),
}


@pytest.fixture(scope="module")
def target():
    model = T5(TARGET, seed=0)
    model.trainable = False
    return model


@pytest.fixture(scope="module")
def batch():
    """One padded batch of 4 random examples (ragged encoder and target lengths)."""
    examples = random_examples(4, vocab_size=TARGET.vocab_size, seed=3)
    padded = examples_lib.pad_batch(examples, 4, 12, 8)
    assert not padded.loss_mask.all()  # Some target positions are padding.
    return {key: tf.constant(value) for key, value in padded._asdict().items()}


def _draft(target, name, seed=1):
    config = FeatureDraftConfig.for_target(target, **DRAFTS[name])
    draft = FeatureDraft(config, seed=seed).bind(target)
    if not draft.full_vocabulary:
        rng = np.random.default_rng(seed)
        vocab = np.sort(rng.choice(TARGET.vocab_size, config.draft_vocab_size, replace=False))
        draft.draft_vocab.assign(vocab.astype(np.int32))
    return draft


@pytest.mark.parametrize("name", sorted(DRAFTS))
@pytest.mark.parametrize("depth", [1, 3])
def test_loss_is_finite_with_every_metric(target, batch, name, depth):
    loss, metrics = FeatureDraftObjective(target, depth=depth)(_draft(target, name), batch)
    assert np.isfinite(float(loss)) and float(loss) > 0
    expected = {"target_ce"} | {f"{metric}_{s}" for s in range(1, depth + 1)
                                for metric in ("ce", "feature", "overlap", "greedy_match")}
    assert set(metrics) == expected
    for key, value in metrics.items():
        assert np.isfinite(float(value)), key
    for s in range(1, depth + 1):
        assert 0.0 <= float(metrics[f"overlap_{s}"]) <= 1.0
        assert 0.0 <= float(metrics[f"greedy_match_{s}"]) <= 1.0
        assert float(metrics[f"feature_{s}"]) >= 0.0


def test_the_loss_weights_the_passes(target, batch):
    draft = _draft(target, "top")
    loss, metrics = FeatureDraftObjective(target, depth=2, feature_weight=0.5,
                                          depth_decay=0.25)(draft, batch)
    per_pass = [float(metrics[f"ce_{s}"]) + 0.5 * float(metrics[f"feature_{s}"])
                for s in (1, 2)]
    assert float(loss) == pytest.approx((per_pass[0] + 0.25 * per_pass[1]) / 1.25, rel=1e-5)
    # Pass 1 of a deeper rollout is the depth-1 loss.
    one, metrics_one = FeatureDraftObjective(target, depth=1, feature_weight=0.5)(draft, batch)
    assert float(one) == pytest.approx(per_pass[0], rel=1e-5)
    assert float(metrics_one["ce_1"]) == pytest.approx(float(metrics["ce_1"]), rel=1e-5)


def _nonzero(gradient) -> bool:
    return gradient is not None and bool(np.any(np.asarray(tf.convert_to_tensor(gradient))))


@pytest.mark.parametrize("name", sorted(DRAFTS))
def test_gradients_reach_every_draft_variable_and_no_target_variable(target, batch, name):
    """As the stage trains it (the target frozen with `trainable = False`, which in Keras 3
    does not stop a tape from watching its variables): every trainable draft variable gets
    a gradient, and no target variable does."""
    draft = _draft(target, name)
    assert not target.trainable_variables
    objective = FeatureDraftObjective(target, depth=2)
    with tf.GradientTape() as tape:
        loss, _ = objective(draft, batch)
    variables = list(draft.trainable_variables) + list(target.weights)
    grads = tape.gradient(loss, variables)
    mine = len(draft.trainable_variables)
    missing = [v.path for v, g in zip(variables[:mine], grads[:mine]) if not _nonzero(g)]
    assert not missing, missing
    leaked = [v.path for v, g in zip(target.weights, grads[mine:], strict=True)
              if g is not None]
    assert not leaked, leaked
    assert not {id(v) for v in draft.trainable_variables} & {id(v) for v in target.weights}
    assert id(draft.draft_vocab) not in {id(v) for v in draft.trainable_variables}


@pytest.mark.parametrize("name", sorted(DRAFTS))
def test_the_objective_stops_gradients_into_the_target(target, batch, name):
    """Even with every target variable watched explicitly, none gets a gradient: not
    through the features, encoder output, p or LM head the objective takes from the
    target, nor through the target's embedding the draft reads its tokens with."""
    draft = _draft(target, name)
    objective = FeatureDraftObjective(target, depth=2)
    watched = [v.value for v in target.weights]
    with tf.GradientTape() as tape:
        tape.watch(watched)
        loss, _ = objective(draft, batch)
    grads = tape.gradient(loss, watched)
    leaked = [v.path for v, g in zip(target.weights, grads, strict=True) if _nonzero(g)]
    assert not leaked, leaked


@pytest.mark.parametrize("name", ["top", "fused-reduced"])
def test_a_few_adam_steps_reduce_the_loss_on_a_fixed_batch(target, batch, name):
    draft = _draft(target, name)
    objective = FeatureDraftObjective(target, depth=2)
    optimizer = tf.keras.optimizers.Adam(3e-3)
    before = [v.numpy() for v in target.weights]

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss, metrics = objective(draft, batch)
        grads = tape.gradient(loss, draft.trainable_variables)
        optimizer.apply_gradients(zip(grads, draft.trainable_variables))
        return loss, metrics

    losses = [float(step()[0]) for _ in range(30)]
    assert losses[-1] < 0.8 * losses[0], losses
    _, first = objective(_draft(target, name), batch)
    _, last = objective(draft, batch)
    for s in (1, 2):
        assert float(last[f"ce_{s}"]) < float(first[f"ce_{s}"])
        assert float(last[f"overlap_{s}"]) > float(first[f"overlap_{s}"])
    # The frozen target did not move.
    for value, variable in zip(before, target.weights):
        np.testing.assert_array_equal(value, variable.numpy())


@pytest.mark.parametrize("depth", [0, -1])
def test_depth_must_be_at_least_one(target, depth):
    with pytest.raises(ValueError, match="depth must be >= 1"):
        FeatureDraftObjective(target, depth=depth)
