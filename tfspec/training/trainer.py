"""A resumable training loop: fixed-shape batches, AdamW, checkpoints, a JSONL log.

    trainer = Trainer(model, objective, optimizer, train_batches, workdir,
                      max_steps=20000, valid_batches=valid)
    summary = trainer.run()          # resumes from workdir/checkpoints if there is one

Everything a resumed run needs is in one `tf.train.Checkpoint`: the model, the optimizer
(moments and iteration count), the step, the data position `(epoch, next batch index)` (the
batch order of an epoch is a pure function of the seed and the epoch, see
`tfspec.training.examples.BucketedBatches`), the tokens seen and the training time so far.
A `tf.train.CheckpointManager` keeps the last `keep` checkpoints, written every
`checkpoint_every` steps and at the end, so an abrupt stop loses at most `checkpoint_every`
steps and resuming is re-running the same command.

Outputs under `workdir`:

    checkpoints/ckpt-STEP.*      the last `keep` full checkpoints
    best/                        model weights at the best validation loss (if validating)
    log.jsonl                    one line per `log_every` steps: step, loss, lr, tokens_per_s,
                                 target_tokens_per_s, tokens_seen, elapsed, epoch, metric means;
                                 and a line with "validation_loss" (+ metrics) per evaluation.
                                 Lines past the restored step are dropped on resume, so the log
                                 never has duplicate steps.
    DONE.json                    written when `max_steps` is reached (final summary)
"""

import json
import math
import os
import sys
import time
from typing import Any, Callable, Dict, Optional, Tuple

import tensorflow as tf

from tfspec.training.examples import Batch, BucketedBatches

LOG_FILE = "log.jsonl"
DONE_FILE = "DONE.json"
CHECKPOINT_DIR = "checkpoints"
BEST_DIR = "best"

Objective = Callable[[Any, Dict[str, tf.Tensor]], Tuple[tf.Tensor, Dict[str, tf.Tensor]]]


def batch_tensors(batch: Batch) -> Dict[str, tf.Tensor]:
    """A numpy `Batch` as the dict of tensors an objective takes."""
    return {name: tf.constant(value) for name, value in batch._asdict().items()}


def model_variables(model) -> Dict[str, Any]:
    """The model's variables keyed by stable names, for `tf.train.Checkpoint`.

    A Keras 3 model's attribute tracking does not reach layers kept in Python lists (the T5
    blocks), so `tf.train.Checkpoint(model=model)` would silently skip them. The variables
    are tracked by name instead: HF checkpoint names for a T5 (`hf_weight_map`), else
    "index:path".

    Raises:
      ValueError: the names do not cover every variable of the model.
    """
    if hasattr(model, "hf_weight_map"):
        named = {name: variable for name, (variable, _) in model.hf_weight_map().items()}
    else:
        named = {f"{i}:{v.path}": v for i, v in enumerate(model.weights)}
    if len({id(v) for v in named.values()}) != len(model.weights):
        raise ValueError(f"{len(named)} named variables for a model with "
                         f"{len(model.weights)} weights.")
    return named


def restore_weights(model, directory: str) -> str:
    """Restores the model weights of the latest checkpoint in `directory` (full or best).

    Returns:
      The checkpoint path.

    Raises:
      FileNotFoundError: no checkpoint in `directory`.
    """
    path = tf.train.latest_checkpoint(directory)
    if path is None:
        raise FileNotFoundError(f"No checkpoint in {directory}.")
    tf.train.Checkpoint(model=model_variables(model)).restore(path).expect_partial()
    return path


def read_log(path: str):
    """The records of a JSONL log (a missing file is an empty log)."""
    if not os.path.exists(path):
        return []
    with open(path, "r", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


class Trainer:
    """Trains `model` on `objective` over `train_batches` (see the module docstring).

    Args:
      model: a Keras model (a `tfspec.models.T5`).
      objective: `objective(model, batch_dict) -> (loss scalar, {name: scalar})`; the dict has
        the `Batch` fields as tensors. Metrics are means over the batch's real target tokens.
      optimizer: a built Keras optimizer for `model.trainable_variables`
        (`tfspec.training.optim.make_optimizer`).
      train_batches: `BucketedBatches` to train on.
      workdir: where checkpoints and logs go.
      max_steps: total optimizer steps (including those of earlier, resumed runs).
      valid_batches: optional `BucketedBatches` for the validation loss.
      eval_every: validation cadence in steps (0: only at the end).
      checkpoint_every: checkpoint cadence in steps.
      log_every: JSONL log cadence in steps.
      keep: checkpoints kept.
      progress: show a tqdm progress bar (stderr).
      name: label of the progress bar.
      jit_compile: compile the train step with XLA (slower than plain graphs on CPU).
    """

    def __init__(self, model, objective: Objective, optimizer, train_batches: BucketedBatches,
                 workdir: str, max_steps: int, valid_batches: Optional[BucketedBatches] = None,
                 eval_every: int = 1000, checkpoint_every: int = 200, log_every: int = 50,
                 keep: int = 2, progress: bool = True, name: str = "train",
                 jit_compile: bool = False):
        self.model = model
        self.objective = objective
        self.optimizer = optimizer
        self.train_batches = train_batches
        self.valid_batches = valid_batches
        self.workdir = os.fspath(workdir)
        self.max_steps = int(max_steps)
        self.eval_every = int(eval_every)
        self.checkpoint_every = max(1, int(checkpoint_every))
        self.log_every = max(1, int(log_every))
        self.progress = progress
        self.name = name
        os.makedirs(self.workdir, exist_ok=True)

        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        self.position = tf.Variable(0, dtype=tf.int64, trainable=False, name="position")
        self.tokens_seen = tf.Variable(0, dtype=tf.int64, trainable=False, name="tokens_seen")
        self.input_tokens_seen = tf.Variable(0, dtype=tf.int64, trainable=False,
                                             name="input_tokens_seen")
        self.elapsed = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="elapsed")
        self.best_validation = tf.Variable(math.inf, dtype=tf.float64, trainable=False,
                                           name="best_validation")
        self.checkpoint = tf.train.Checkpoint(
            model=model_variables(model), optimizer=optimizer, step=self.step, epoch=self.epoch,
            position=self.position, tokens_seen=self.tokens_seen,
            input_tokens_seen=self.input_tokens_seen, elapsed=self.elapsed,
            best_validation=self.best_validation)
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, os.path.join(self.workdir, CHECKPOINT_DIR), max_to_keep=keep)
        self._best = tf.train.Checkpoint(model=model_variables(model))
        self.log_path = os.path.join(self.workdir, LOG_FILE)
        # autograph=False: the steps have no tensor-dependent Python control flow, and
        # converting everything they reach costs seconds per process (see generation.py).
        self._train_step = tf.function(self._train_step_fn, jit_compile=jit_compile,
                                       autograph=False)
        self._eval_step = tf.function(self._eval_step_fn, jit_compile=jit_compile,
                                      autograph=False)

    # ---------------------------------------------------------------------------- steps

    def _train_step_fn(self, batch: Dict[str, tf.Tensor]):
        variables = self.model.trainable_variables
        # Only the trained model's variables are watched: a frozen teacher inside the
        # objective costs no tape memory. (`.value` is the backing tf.Variable.)
        backing = [getattr(v, "value", v) for v in variables]
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(backing)
            loss, metrics = self.objective(self.model, batch)
        gradients = tape.gradient(loss, backing)
        grad_norm = tf.linalg.global_norm(gradients)
        self.optimizer.apply_gradients(zip(gradients, variables))
        return loss, metrics, grad_norm

    def _eval_step_fn(self, batch: Dict[str, tf.Tensor]):
        return self.objective(self.model, batch)

    # ------------------------------------------------------------------------ utilities

    def restore(self) -> Optional[str]:
        """Restores the latest checkpoint, if any, and trims the log past its step."""
        path = self.manager.latest_checkpoint
        if path is None:
            return None
        self.checkpoint.restore(path).assert_existing_objects_matched()
        step = int(self.step.numpy())
        records = read_log(self.log_path)
        kept = [r for r in records if r.get("step", 0) <= step]
        if len(kept) != len(records):
            with open(self.log_path, "w", encoding="utf-8") as f:
                f.writelines(json.dumps(r) + "\n" for r in kept)
        return path

    def _log(self, record: Dict[str, Any]):
        with open(self.log_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")

    def learning_rate(self) -> float:
        lr = self.optimizer.learning_rate
        return float(lr.numpy() if hasattr(lr, "numpy") else lr)

    def evaluate(self) -> Dict[str, float]:
        """Token-weighted means of the loss and metrics over one pass of `valid_batches`."""
        return evaluate(self._eval_step, self.valid_batches)

    def _validate(self):
        results = self.evaluate()
        step = int(self.step.numpy())
        record = {"step": step, "validation_loss": results["loss"],
                  **{f"validation_{k}": v for k, v in results.items() if k != "loss"},
                  "elapsed": float(self.elapsed.numpy())}
        if results["loss"] < float(self.best_validation.numpy()):
            self.best_validation.assign(results["loss"])
            self._best.write(os.path.join(self.workdir, BEST_DIR, "weights"))
            with open(os.path.join(self.workdir, BEST_DIR, "checkpoint"), "w") as f:
                f.write('model_checkpoint_path: "weights"\n')
            record["best"] = True
        self._log(record)
        return results

    # ----------------------------------------------------------------------------- loop

    def run(self) -> Dict[str, Any]:
        """Trains to `max_steps` (resuming if a checkpoint exists); returns the summary.

        The summary (also written to DONE.json): steps, epochs, tokens seen, elapsed seconds,
        final train loss (mean of the last logged window), final and best validation loss.
        """
        restored = self.restore()
        start = int(self.step.numpy())
        if restored:
            print(f"[{self.name}] resumed from {restored} at step {start} (epoch "
                  f"{int(self.epoch.numpy())}, batch {int(self.position.numpy())})",
                  file=sys.stderr, flush=True)
        bar = None
        if self.progress:
            from tqdm import tqdm
            bar = tqdm(total=self.max_steps, initial=start, desc=self.name, dynamic_ncols=True,
                       mininterval=1.0 if sys.stderr.isatty() else 30.0, file=sys.stderr)
        batches = self.train_batches.iterate(int(self.epoch.numpy()),
                                             int(self.position.numpy()))
        window: Dict[str, float] = {}
        window_tokens = window_inputs = 0
        window_start = time.perf_counter()
        last_train_loss = None
        validation = None
        while int(self.step.numpy()) < self.max_steps:
            epoch, index, batch = next(batches)
            tokens = int(batch.loss_mask.sum())
            inputs = int(batch.encoder_lengths[batch.loss_mask.any(axis=1)].sum())
            loss, metrics, grad_norm = self._train_step(batch_tensors(batch))
            loss = float(loss.numpy())
            if not math.isfinite(loss):
                raise FloatingPointError(f"[{self.name}] non-finite loss {loss} at step "
                                         f"{int(self.step.numpy()) + 1}.")
            for key, value in [("loss", loss), ("grad_norm", grad_norm)] + sorted(
                    metrics.items()):
                window[key] = window.get(key, 0.0) + float(value) * tokens
            window_tokens += tokens
            window_inputs += inputs
            self.step.assign_add(1)
            self.epoch.assign(epoch)
            self.position.assign(index + 1)
            self.tokens_seen.assign_add(tokens)
            self.input_tokens_seen.assign_add(inputs)
            step = int(self.step.numpy())
            now = time.perf_counter()
            self.elapsed.assign_add(now - window_start)
            seconds, window_start = now - window_start, now
            window["_seconds"] = window.get("_seconds", 0.0) + seconds
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{loss:.3f}", epoch=epoch, refresh=False)
            if step % self.log_every == 0 or step == self.max_steps:
                span = max(window.pop("_seconds"), 1e-9)
                means = {k: v / max(window_tokens, 1) for k, v in window.items()}
                last_train_loss = means["loss"]
                self._log({"step": step, "loss": means["loss"],
                           "lr": self.learning_rate(),
                           "tokens_per_s": (window_tokens + window_inputs) / span,
                           "target_tokens_per_s": window_tokens / span,
                           "tokens_seen": int(self.tokens_seen.numpy()),
                           "elapsed": float(self.elapsed.numpy()), "epoch": epoch,
                           **{k: v for k, v in means.items() if k != "loss"}})
                window, window_tokens, window_inputs = {}, 0, 0
            if (self.valid_batches is not None and self.eval_every
                    and step % self.eval_every == 0 and step != self.max_steps):
                self._validate()
                window_start = time.perf_counter()  # Validation time is not training time.
            if step % self.checkpoint_every == 0 or step == self.max_steps:
                self.manager.save(checkpoint_number=step)
        if bar is not None:
            bar.close()
        if self.valid_batches is not None:
            records = [r for r in read_log(self.log_path) if "validation_loss" in r]
            if records and records[-1]["step"] == self.max_steps:
                validation = {"loss": records[-1]["validation_loss"]}
            else:
                validation = self._validate()
        if last_train_loss is None:
            train = [r for r in read_log(self.log_path) if "loss" in r]
            last_train_loss = train[-1]["loss"] if train else None
        summary = {
            "steps": int(self.step.numpy()),
            "epochs": int(self.epoch.numpy()) + (
                int(self.position.numpy()) / max(len(self.train_batches), 1)),
            "tokens_seen": int(self.tokens_seen.numpy()),
            "input_tokens_seen": int(self.input_tokens_seen.numpy()),
            "elapsed_s": float(self.elapsed.numpy()),
            "final_train_loss": last_train_loss,
            "final_validation_loss": None if validation is None else validation["loss"],
            "best_validation_loss": (None if self.valid_batches is None
                                     else float(self.best_validation.numpy())),
        }
        with open(os.path.join(self.workdir, DONE_FILE), "w", encoding="utf-8") as f:
            json.dump(summary, f, indent=2)
            f.write("\n")
        return summary


def evaluate(step_fn, valid_batches: BucketedBatches) -> Dict[str, float]:
    """Token-weighted means of `step_fn(batch) -> (loss, metrics)` over one pass.

    Args:
      step_fn: maps a batch dict to (loss scalar, {name: scalar}), e.g. a `tf.function` of
        `objective(model, batch)`.
      valid_batches: the batches (their epoch-0 order).

    Returns:
      {"loss": ..., **metrics}, each a mean over all real target tokens.
    """
    totals: Dict[str, float] = {}
    weight = 0.0
    for batch in valid_batches.one_epoch():
        tokens = float(batch.loss_mask.sum())
        if tokens == 0:
            continue
        loss, metrics = step_fn(batch_tensors(batch))
        for key, value in [("loss", loss)] + sorted(metrics.items()):
            totals[key] = totals.get(key, 0.0) + float(value.numpy()) * tokens
        weight += tokens
    return {key: value / weight for key, value in totals.items()}


def is_done(workdir: str) -> bool:
    """Whether a `Trainer` run in `workdir` reached its `max_steps`."""
    return os.path.exists(os.path.join(workdir, DONE_FILE))


def read_done(workdir: str) -> Dict[str, Any]:
    with open(os.path.join(workdir, DONE_FILE), "r", encoding="utf-8") as f:
        return json.load(f)
