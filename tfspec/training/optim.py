"""The optimizer and learning-rate schedule of the training recipes.

AdamW (Keras 3) with global-norm gradient clipping, and a schedule that warms up linearly
from 0 to `peak` over `warmup_steps`, then decays:

- "rsqrt": `peak * sqrt(warmup_steps / step)` (the T5 recipe's inverse square root),
- "cosine": `peak * (final + (1 - final) * (1 + cos(pi * progress)) / 2)` down to
  `final * peak` at `total_steps`, constant after,
- "constant": `peak`.

Weight decay is not applied to vectors (RMS-norm scales) nor to the relative position bias
tables. Every piece of optimizer state (moments, iteration count) is a variable tracked by
`tf.train.Checkpoint`, so a restored optimizer continues exactly where it stopped.
"""

import math

import keras
import tensorflow as tf

DECAYS = ("rsqrt", "cosine", "constant")


class WarmupDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up then "rsqrt", "cosine" or "constant" decay (see the module docstring).

    Args:
      peak: learning rate at the end of warm-up.
      warmup_steps: steps of linear warm-up (>= 1).
      decay: one of `DECAYS`.
      total_steps: horizon of the cosine decay (ignored by the others).
      final_fraction: cosine floor as a fraction of `peak`.
    """

    def __init__(self, peak: float, warmup_steps: int, decay: str = "rsqrt",
                 total_steps: int = 0, final_fraction: float = 0.0):
        if decay not in DECAYS:
            raise ValueError(f"Unknown decay {decay!r}; choose one of {', '.join(DECAYS)}.")
        if warmup_steps < 1:
            raise ValueError(f"warmup_steps must be >= 1, got {warmup_steps}.")
        if decay == "cosine" and total_steps <= warmup_steps:
            raise ValueError(f"cosine decay needs total_steps ({total_steps}) > warmup_steps "
                             f"({warmup_steps}).")
        self.peak = float(peak)
        self.warmup_steps = int(warmup_steps)
        self.decay = decay
        self.total_steps = int(total_steps)
        self.final_fraction = float(final_fraction)

    def __call__(self, step):
        """float32 scalar learning rate for the 0-based optimizer `step` (int or tensor)."""
        step = tf.cast(step, tf.float32) + 1.0  # The first update uses step 1 of warm-up.
        warmup = float(self.warmup_steps)
        warm = self.peak * step / warmup
        if self.decay == "rsqrt":
            decayed = self.peak * tf.sqrt(warmup / tf.maximum(step, warmup))
        elif self.decay == "cosine":
            span = float(self.total_steps - self.warmup_steps)
            progress = tf.clip_by_value((step - warmup) / span, 0.0, 1.0)
            cosine = 0.5 * (1.0 + tf.cos(math.pi * progress))
            decayed = self.peak * (self.final_fraction + (1.0 - self.final_fraction) * cosine)
        else:
            decayed = tf.constant(self.peak, tf.float32)
        return tf.where(step < warmup, warm, decayed)

    def get_config(self):
        return {"peak": self.peak, "warmup_steps": self.warmup_steps, "decay": self.decay,
                "total_steps": self.total_steps, "final_fraction": self.final_fraction}


def make_optimizer(model: keras.Model, learning_rate: float, warmup_steps: int,
                   decay: str = "rsqrt", total_steps: int = 0, final_fraction: float = 0.0,
                   weight_decay: float = 0.0, clip_norm: float = 1.0, beta_1: float = 0.9,
                   beta_2: float = 0.98, epsilon: float = 1e-8) -> keras.optimizers.AdamW:
    """Returns a built AdamW for `model.trainable_variables` (state variables exist already,
    so a checkpoint can be restored into it before the first step).

    Args:
      model: the model whose trainable variables are optimized.
      learning_rate, warmup_steps, decay, total_steps, final_fraction: see `WarmupDecay`.
      weight_decay: decoupled weight decay of matrices (vectors and position biases excluded).
      clip_norm: global gradient-norm clip; 0 disables.
      beta_1, beta_2, epsilon: Adam's.
    """
    schedule = WarmupDecay(learning_rate, warmup_steps, decay, total_steps, final_fraction)
    optimizer = keras.optimizers.AdamW(
        learning_rate=schedule, weight_decay=weight_decay, beta_1=beta_1, beta_2=beta_2,
        epsilon=epsilon, global_clipnorm=clip_norm or None)
    variables = model.trainable_variables
    optimizer.exclude_from_weight_decay(var_list=[
        v for v in variables
        if len(v.shape) < 2 or "relative_attention_bias" in v.path])
    optimizer.build(variables)
    return optimizer
