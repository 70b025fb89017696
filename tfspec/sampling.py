"""Sampling transforms (temperature, top-k, top-p) and categorical draws from uniforms.

The same `Sampling` is applied to the target and the draft logits before any acceptance
ratio or residual is formed; mixing raw and filtered distributions breaks exactness.
"""

import dataclasses

import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class Sampling:
    """How next-token distributions are shaped.

    Attributes:
      temperature: 0 means greedy (a one-hot distribution on the argmax); > 0 divides logits.
      top_k: keep the k most likely tokens (ties at the k-th value are kept); 0 disables.
      top_p: keep the smallest most-likely set whose mass reaches top_p (nucleus); 1 disables.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self):
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0 (0 means greedy), got {self.temperature}")
        if int(self.top_k) != self.top_k or self.top_k < 0:
            raise ValueError(f"top_k must be a non-negative integer (0 disables), got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1] (1 disables), got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def logits_to_probs(logits: tf.Tensor, sampling: Sampling) -> tf.Tensor:
    """Applies the sampling transform.

    Args:
      logits: float32 [..., V]; -inf marks impossible tokens.
      sampling: the transform (static).

    Returns:
      float32 [..., V] probabilities summing to 1 over the last axis. Greedy gives a one-hot
      distribution on the first argmax, which makes the general acceptance rule reduce to
      the greedy rule (accept iff the draft token is the target argmax).
    """
    logits = tf.cast(logits, tf.float32)
    vocab_size = logits.shape[-1]
    if sampling.greedy:
        return tf.one_hot(tf.argmax(logits, axis=-1, output_type=tf.int32), vocab_size,
                          dtype=tf.float32)
    logits = logits / sampling.temperature
    if sampling.top_k and sampling.top_k < vocab_size:
        kth = tf.math.top_k(logits, k=sampling.top_k, sorted=True).values[..., -1:]
        logits = tf.where(logits < kth, tf.constant(-float("inf"), logits.dtype), logits)
    probs = tf.nn.softmax(logits, axis=-1)
    if sampling.top_p < 1:
        # Threshold form of nucleus filtering: the smallest kept probability is the cutoff.
        # One sort, no scatter back to vocabulary order (scatter is slow on TPU).
        sorted_probs = tf.math.top_k(probs, k=vocab_size, sorted=True).values
        mass_before = tf.cumsum(sorted_probs, axis=-1, exclusive=True)
        kept = tf.cast(mass_before < sampling.top_p, tf.float32)
        cutoff = tf.reduce_min(tf.where(kept > 0, sorted_probs, 2.0), axis=-1, keepdims=True)
        probs = tf.where(probs >= cutoff, probs, 0.0)
        probs = probs / tf.reduce_sum(probs, axis=-1, keepdims=True)
    return probs


def sample_categorical(probs: tf.Tensor, uniforms: tf.Tensor) -> tf.Tensor:
    """Inverse-CDF draw: one token per distribution from one uniform.

    Args:
      probs: float32 [..., V], non-negative, not necessarily normalised (mass > 0).
      uniforms: float32 [...] in [0, 1).

    Returns:
      int32 [...]: the first index whose cumulative mass exceeds u * total mass. A token of
      zero mass is never returned: its cumulative value equals its predecessor's, so it can
      only be the answer through rounding at the very top, which the clamp below prevents.
    """
    cdf = tf.cumsum(probs, axis=-1)
    threshold = uniforms[..., None] * cdf[..., -1:]
    index = tf.reduce_sum(tf.cast(cdf <= threshold, tf.int32), axis=-1)
    # u * total can round up to total; fall back to the last token with positive mass.
    vocab_size = probs.shape[-1]
    positive = tf.cast(probs > 0, tf.int32) * tf.range(vocab_size, dtype=tf.int32)
    last_positive = tf.reduce_max(positive, axis=-1)
    return tf.minimum(index, last_positive)
