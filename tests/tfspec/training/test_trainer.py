"""Tests of tfspec.training.trainer: loss goes down, checkpoints resume exactly, logs."""

import json
import os

import numpy as np
import pytest

from tfspec.models import T5, T5Config
from tfspec.training import examples as examples_lib, losses, optim, trainer as trainer_lib

from tests.tfspec.training.tiny_data import TINY_T5, random_examples

STEPS = 6


def _trainer(workdir, max_steps, examples, valid=None, eval_every=0, checkpoint_every=2):
    model = T5(T5Config(**TINY_T5), seed=0)
    optimizer = optim.make_optimizer(model, 3e-3, warmup_steps=2, decay="cosine",
                                     total_steps=2 * STEPS, weight_decay=0.01)
    # One bucket shape, so the train step traces once.
    batches = examples_lib.BucketedBatches(examples, batch_tokens=4 * 20, encoder_buckets=(12,),
                                           target_buckets=(8,), seed=5)
    valid_batches = None if valid is None else examples_lib.BucketedBatches(
        valid, 4 * 20, (12,), (8,), shuffle=False)
    return trainer_lib.Trainer(model, losses.LabelObjective(), optimizer, batches, workdir,
                               max_steps=max_steps, valid_batches=valid_batches,
                               eval_every=eval_every, checkpoint_every=checkpoint_every,
                               log_every=1, progress=False)


def _weights(trainer):
    return [v.numpy() for v in trainer.model.weights]


def test_a_few_steps_reduce_the_loss_on_a_tiny_batch(tmp_path):
    examples = random_examples(4, seed=1)  # One batch of 4 rows, seen every step.
    trainer = _trainer(tmp_path, 12, examples, valid=examples, eval_every=6)
    summary = trainer.run()
    records = trainer_lib.read_log(trainer.log_path)
    train = [r for r in records if "loss" in r]
    assert [r["step"] for r in train] == list(range(1, 13))
    assert train[-1]["loss"] < train[0]["loss"] - 0.5
    for key in ("lr", "tokens_per_s", "elapsed", "tokens_seen", "grad_norm"):
        assert key in train[0]
    valid = [r for r in records if "validation_loss" in r]
    assert [r["step"] for r in valid] == [6, 12]
    assert valid[1]["validation_loss"] < valid[0]["validation_loss"]
    assert summary["steps"] == 12 and summary["final_validation_loss"] == pytest.approx(
        valid[1]["validation_loss"])
    assert trainer_lib.is_done(str(tmp_path))
    assert os.path.exists(tmp_path / "best" / "checkpoint")


def test_resume_continues_from_the_saved_step_with_identical_state(tmp_path):
    examples = random_examples(24, seed=2)  # 6 batches of 4: epochs wrap within 2N steps.
    straight = _trainer(tmp_path / "straight", 2 * STEPS, examples)
    straight.run()

    first = _trainer(tmp_path / "resumed", STEPS, examples)
    first.run()
    # An abrupt stop after the checkpoint at STEPS: a fresh process re-runs to 2N.
    second = _trainer(tmp_path / "resumed", 2 * STEPS, examples)
    assert second.restore() is not None
    assert int(second.step.numpy()) == STEPS
    for a, b in zip(_weights(second), _weights(first)):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(second.optimizer.variables, first.optimizer.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    second.run()

    assert int(second.step.numpy()) == int(straight.step.numpy()) == 2 * STEPS
    assert (int(second.epoch.numpy()), int(second.position.numpy())) == (
        int(straight.epoch.numpy()), int(straight.position.numpy()))
    assert int(second.tokens_seen.numpy()) == int(straight.tokens_seen.numpy())
    for a, b in zip(_weights(second), _weights(straight)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    resumed_log = [r["loss"] for r in trainer_lib.read_log(second.log_path)]
    straight_log = [r["loss"] for r in trainer_lib.read_log(straight.log_path)]
    np.testing.assert_allclose(resumed_log, straight_log, rtol=1e-5)


def test_resume_drops_log_lines_past_the_checkpoint_and_keeps_two(tmp_path):
    examples = random_examples(8, seed=3)
    trainer = _trainer(tmp_path, 5, examples, checkpoint_every=2)
    trainer.run()
    assert sorted(trainer.manager.checkpoints)[-2:] == trainer.manager.checkpoints
    assert [os.path.basename(p) for p in trainer.manager.checkpoints] == ["ckpt-4", "ckpt-5"]
    # Pretend the run died after logging step 7 but before checkpointing it.
    with open(trainer.log_path, "a") as f:
        f.write(json.dumps({"step": 7, "loss": 1.0}) + "\n")
    again = _trainer(tmp_path, 6, examples)
    again.run()
    steps = [r["step"] for r in trainer_lib.read_log(again.log_path)]
    assert steps == [1, 2, 3, 4, 5, 6]


def test_restore_weights_loads_a_trained_model(tmp_path):
    examples = random_examples(4, seed=4)
    trainer = _trainer(tmp_path, 2, examples)
    trainer.run()
    model = T5(T5Config(**TINY_T5), seed=9)
    trainer_lib.restore_weights(model, str(tmp_path / "checkpoints"))
    for a, b in zip(model.weights, trainer.model.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    with pytest.raises(FileNotFoundError):
        trainer_lib.restore_weights(model, str(tmp_path / "nothing"))
