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
        cutoff = nucleus_cutoff(probs, sampling.top_p)                      # [..., 1]
        probs = tf.where(probs >= cutoff, probs, 0.0)
        probs = probs / tf.reduce_sum(probs, axis=-1, keepdims=True)
    return probs


# Halvings that take the search range of `nucleus_cutoff`, [-1, bits(1.0)], to one value.
_CUTOFF_HALVINGS = 31


def nucleus_cutoff(probs: tf.Tensor, top_p: float) -> tf.Tensor:
    """The smallest probability top-p keeps, without sorting the vocabulary.

    Nucleus filtering keeps the smallest set of most likely tokens whose mass reaches top_p,
    and every token tied with the least likely of them. With m(t) = the mass of the
    probabilities strictly above t (non-increasing in t), the cutoff is the smallest
    probability c with m(c) < top_p: the tokens above c hold less than top_p, and c is the
    token that reaches it. That is also the smallest float t with m(t) < top_p, and for
    non-negative floats the int32 bit patterns are ordered like the values, so a binary
    search over bit patterns finds c exactly in 31 masked sums. A sort of V values (XLA's
    comparator sort) costs far more per call; this costs 31 passes over V.

    Args:
      probs: float32 [..., V], non-negative, summing to 1.
      top_p: float in (0, 1).

    Returns:
      float32 [..., 1], an entry of `probs` for every row: keep tokens with probs >= cutoff.
    """
    bits = tf.bitcast(probs, tf.int32)                                     # [..., V]
    # Invariant: m(lo) >= top_p (lo = -1 stands for "below 0": m = total mass) and
    # m(hi) < top_p (m(max prob) = 0).
    hi = tf.reduce_max(bits, axis=-1, keepdims=True)                       # [..., 1]
    lo = tf.fill(tf.shape(hi), -1)

    def halve(lo, hi):
        mid = lo + (hi - lo) // 2
        mass = tf.reduce_sum(tf.where(bits > mid, probs, 0.0), axis=-1, keepdims=True)
        below = mass < top_p
        return tf.where(below, lo, mid), tf.where(below, mid, hi)

    lo, hi = tf.while_loop(lambda lo, hi: True, halve, (lo, hi),
                           maximum_iterations=_CUTOFF_HALVINGS)
    return tf.bitcast(hi, tf.float32)


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
