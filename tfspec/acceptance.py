"""The exact acceptance rule of speculative sampling, vectorised over a batch of rows.

Lettering: formulas in this module use Leviathan et al. (2022): p is the TARGET distribution,
q is the DRAFT distribution. (Chen et al. 2023 swap the letters; code names say target/draft.)

For drafted tokens x_1..x_k, sampled one after another from q:
  * accept x_i with probability min(1, p_i(x_i) / q_i(x_i)), left to right;
  * at the first rejection i, emit a sample of norm(max(0, p_i - q_i)) and stop;
  * if all k are accepted, emit a bonus sample of p_{k+1}, the (k+1)-th distribution of the
    same verify pass (no extra target call);
  * if the residual has no mass (p_i == q_i numerically), sample from p_i instead.
Greedy decoding needs no separate rule: with one-hot p and q (see `sampling.logits_to_probs`)
the rule accepts iff x_i is the target argmax and otherwise emits the target argmax.

The exact rule is the only default. The module also holds Medusa's typical acceptance
(`typical_accept`, `TypicalAcceptance`), an explicit opt-in of `tfspec.generate(acceptance=
"typical")` that trades exactness for longer accepted runs: it is NOT distribution-
preserving at temperature > 0.
"""

import dataclasses
import functools
from typing import NamedTuple, Optional

import tensorflow as tf

from tfspec import sampling as sampling_lib

# Below this mass the residual is treated as empty (p == q up to float32 rounding).
_RESIDUAL_EPS = 1e-6


class Acceptance(NamedTuple):
    num_accepted: tf.Tensor  # int32 [batch], leading accepted drafts, 0..k
    next_ids: tf.Tensor      # int32 [batch], the correction (or bonus) token after them
    beta: tf.Tensor          # float32 [batch, k], sum_x min(p_i(x), q_i(x)) per position


def accept(target_probs: tf.Tensor, draft_probs: tf.Tensor, draft_ids: tf.Tensor,
           accept_uniforms: tf.Tensor, final_uniforms: tf.Tensor) -> Acceptance:
    """Applies the rule to one round of every row.

    Args:
      target_probs: float32 [batch, k + 1, V], p_1..p_{k+1} from one verify pass.
      draft_probs: float32 [batch, k, V], q_1..q_k, the distributions x_i were drawn from.
      draft_ids: int32 [batch, k], the drafted tokens x_1..x_k.
      accept_uniforms: float32 [batch, k] in [0, 1), one per drafted token.
      final_uniforms: float32 [batch] in [0, 1), for the correction or bonus sample.

    Returns:
      An `Acceptance`. Example, k = 3, one row: drafts [7, 4, 9]; the ratio test passes at
      positions 0 and 1 and fails at 2, so num_accepted = 2 and next_ids is drawn from
      norm(max(0, p_3 - q_3)); the row then commits [7, 4, next_id].
    """
    k = draft_ids.shape[1]
    p_x = tf.gather(target_probs[:, :k], draft_ids, axis=2, batch_dims=2)  # [batch, k]
    q_x = tf.gather(draft_probs, draft_ids, axis=2, batch_dims=2)          # [batch, k]
    # u < p/q without dividing (q(x) > 0 for a token that was drawn from q).
    accepted_mask = accept_uniforms * q_x < p_x                             # [batch, k]
    # Leading run of acceptances: cumprod turns [1, 1, 0, 1] into [1, 1, 0, 0].
    num_accepted = tf.reduce_sum(tf.math.cumprod(tf.cast(accepted_mask, tf.int32), axis=1),
                                 axis=1)

    # Distribution of the token after the accepted run: p_{a+1} (bonus) when a == k, else
    # the residual at position a. Pad q with a zero row so position k gives p_{k+1} - 0.
    batch = tf.shape(draft_ids)[0]
    vocab_size = target_probs.shape[-1]
    draft_padded = tf.concat(
        [draft_probs, tf.zeros([batch, 1, vocab_size], draft_probs.dtype)], axis=1)
    p_next = tf.gather(target_probs, num_accepted, axis=1, batch_dims=1)   # [batch, V]
    q_next = tf.gather(draft_padded, num_accepted, axis=1, batch_dims=1)   # [batch, V]
    residual = tf.maximum(p_next - q_next, 0.0)
    has_mass = tf.reduce_sum(residual, axis=-1, keepdims=True) > _RESIDUAL_EPS
    next_probs = tf.where(has_mass, residual, p_next)
    next_ids = sampling_lib.sample_categorical(next_probs, final_uniforms)

    beta = tf.reduce_sum(tf.minimum(target_probs[:, :k], draft_probs), axis=-1)
    return Acceptance(num_accepted=num_accepted, next_ids=next_ids, beta=beta)


def accept_greedy(target_ids: tf.Tensor, draft_ids: tf.Tensor) -> Acceptance:
    """The rule at temperature 0, on argmax ids instead of one-hot distributions.

    Identical to `accept` with one-hot p and q (tested), without V-wide work.

    Args:
      target_ids: int32 [batch, k + 1], the target argmax after each window position.
      draft_ids: int32 [batch, k], the draft argmaxes.

    Returns:
      An `Acceptance`; beta is 1 where the argmaxes agree (the overlap of two one-hots).
    """
    k = draft_ids.shape[1]
    matches = tf.equal(draft_ids, target_ids[:, :k])                        # [batch, k]
    num_accepted = tf.reduce_sum(tf.math.cumprod(tf.cast(matches, tf.int32), axis=1), axis=1)
    next_ids = tf.gather(target_ids, num_accepted, batch_dims=1)             # [batch]
    return Acceptance(num_accepted=num_accepted, next_ids=next_ids,
                      beta=tf.cast(matches, tf.float32))


# --------------------------------------------------------------------- typical acceptance
#
# Medusa (Cai et al. 2024, "Medusa: Simple LLM Inference Acceleration Framework with Multiple
# Decoding Heads", section 3.3.1; `evaluate_posterior` in FasterDecoding/Medusa,
# medusa/model/utils.py). An explicit opt-in, never a default: above temperature 0 it does
# NOT preserve the target's distribution.

# Medusa's defaults: `posterior_threshold` 0.09 and `posterior_alpha` 0.3 (its
# `medusa_generate`, where alpha is "recommended to be sqrt(posterior_threshold)").
TYPICAL_EPSILON = 0.09
TYPICAL_DELTA = 0.3

EXACT = "exact"
TYPICAL = "typical"
RULES = (EXACT, TYPICAL)


@dataclasses.dataclass(frozen=True)
class TypicalAcceptance:
    """Medusa's typical acceptance, the opt-in `tfspec.generate(acceptance=...)` rule.

    A drafted token x at position i is kept if p_i(x) > min(epsilon, delta * exp(-H(p_i))),
    H the entropy (nats) of the target's transformed distribution p_i; see `typical_accept`.
    NOT distribution-preserving at temperature > 0 (at 0 it is the exact greedy rule).

    Attributes:
      epsilon: the hard threshold, in (0, 1] (Medusa's `posterior_threshold`).
      delta: the entropy-scaled threshold's factor, > 0 (Medusa's `posterior_alpha`).
    """

    epsilon: float = TYPICAL_EPSILON
    delta: float = TYPICAL_DELTA

    def __post_init__(self):
        epsilon, delta = _number(self.epsilon, "epsilon"), _number(self.delta, "delta")
        if not 0 < epsilon <= 1:
            raise ValueError(f"TypicalAcceptance epsilon must be in (0, 1], got {self.epsilon!r}")
        if not delta > 0:
            raise ValueError(f"TypicalAcceptance delta must be > 0, got {self.delta!r}")
        object.__setattr__(self, "epsilon", epsilon)
        object.__setattr__(self, "delta", delta)

    @property
    def accept_fn(self):
        """The rule as an `accept`-like callable (the same object for equal settings)."""
        return typical_accept_fn(self.epsilon, self.delta)


def _number(value, name: str) -> float:
    if isinstance(value, bool):
        raise ValueError(f"TypicalAcceptance {name} must be a number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"TypicalAcceptance {name} must be a number, got {value!r}") from None


def resolve(acceptance) -> Optional[TypicalAcceptance]:
    """`generate`'s `acceptance` argument -> None (the exact rule) or a `TypicalAcceptance`.

    Raises:
      ValueError: anything but "exact", "typical" or a `TypicalAcceptance`.
    """
    if isinstance(acceptance, TypicalAcceptance):
        return acceptance
    if isinstance(acceptance, str) and acceptance in RULES:
        return None if acceptance == EXACT else TypicalAcceptance()
    raise ValueError(f'acceptance must be "exact", "typical" or a tfspec.TypicalAcceptance, '
                     f"got {acceptance!r}")


NOT_DISTRIBUTION_PRESERVING = ("typical acceptance (Medusa): above temperature 0 the output "
                                "does NOT follow the target's distribution")


def describe(acceptance) -> dict:
    """The JSON record of a rule, as summaries and reports carry it: {"rule": "exact",
    "distribution_preserving": True} or {"rule": "typical", "epsilon", "delta",
    "distribution_preserving": False, "note"}. `acceptance`: as `generate` takes it (a
    record goes through `from_record` first)."""
    typical = resolve(acceptance)
    if typical is None:
        return {"rule": EXACT, "distribution_preserving": True}
    return {"rule": TYPICAL, "epsilon": typical.epsilon, "delta": typical.delta,
            "distribution_preserving": False, "note": NOT_DISTRIBUTION_PRESERVING}


def from_record(record: Optional[dict]):
    """`generate`'s `acceptance` argument from a `describe` record (or one with only "rule"
    and optional "epsilon" / "delta"; None = exact). Raises ValueError on a bad record."""
    if record is None or record.get("rule", EXACT) == EXACT:
        return EXACT
    if record.get("rule") != TYPICAL:
        raise ValueError(f'acceptance rule must be "exact" or "typical", got '
                         f'{record.get("rule")!r}')
    epsilon, delta = record.get("epsilon"), record.get("delta")
    return TypicalAcceptance(epsilon=TYPICAL_EPSILON if epsilon is None else epsilon,
                             delta=TYPICAL_DELTA if delta is None else delta)


def typical_accept(target_probs: tf.Tensor, draft_probs: tf.Tensor, draft_ids: tf.Tensor,
                   accept_uniforms: tf.Tensor, final_uniforms: tf.Tensor,
                   epsilon: float = TYPICAL_EPSILON,
                   delta: float = TYPICAL_DELTA) -> Acceptance:
    """Medusa's typical acceptance on one round of every row: NOT distribution-preserving.

    Drafts are meant to be the draft's top-1 (argmax) tokens, as Medusa's candidates are
    (`draft_argmax`). Each d_i is kept iff p_i(d_i) > min(epsilon, delta * exp(-H(p_i))),
    with p_i the target's temperature/top-k/top-p transformed distribution and H its entropy
    in nats; the leading run of kept drafts is accepted, and the next token is sampled from
    the target's p at the first position not kept (p_{k+1}, the bonus, when all are kept).
    No uniform decides a kept draft: a plausible enough draft is always emitted, so the
    output over-represents what the draft proposes. At temperature 0 (one-hot p, H = 0, and
    min(epsilon, delta) < 1) it keeps d_i iff d_i is the target argmax and emits the target
    argmax next: the exact greedy rule. Above 0 the emitted tokens do NOT follow the
    target's distribution (`bench.typical_bias` measures by how much).

    Medusa computes H with log(p + 1e-5); here H = -sum_x p log p exactly (0 log 0 = 0).

    Args:
      target_probs: float32 [batch, k + 1, V], p_1..p_{k+1} from one verify pass.
      draft_probs: float32 [batch, k, V], the draft's distributions (only for `beta`).
      draft_ids: int32 [batch, k], the drafted tokens d_1..d_k.
      accept_uniforms: float32 [batch, k]; unused (the test is deterministic), kept for the
        signature of `accept`.
      final_uniforms: float32 [batch] in [0, 1), for the next (correction or bonus) token.
      epsilon: hard threshold (Medusa's `posterior_threshold`).
      delta: factor of the entropy-scaled threshold (Medusa's `posterior_alpha`).

    Returns:
      An `Acceptance` (beta = sum_x min(p_i(x), q_i(x)), as in `accept`, for statistics).
      Example, k = 2, V = 3, one row, defaults (epsilon 0.09, delta 0.3): drafts [1, 0],
      p_1 = [0.6, 0.3, 0.1] (H = 0.898, delta exp(-H) = 0.122, threshold 0.09): p_1(1) = 0.3
      is kept; p_2 = [0.05, 0.05, 0.9] (H = 0.394, delta exp(-H) = 0.202, threshold 0.09):
      p_2(0) = 0.05 is not. So num_accepted = 1 and next_ids is a sample of p_2 itself
      (the exact rule would accept d_1 only with probability min(1, 0.3 / q_1(1)) and
      resample from the residual max(0, p_2 - q_2)).
    """
    del accept_uniforms
    k = draft_ids.shape[1]
    window = target_probs[:, :k]                                             # [batch, k, V]
    p_x = tf.gather(window, draft_ids, axis=2, batch_dims=2)                 # [batch, k]
    entropy = -tf.reduce_sum(tf.math.xlogy(window, window), axis=-1)         # [batch, k]
    threshold = tf.minimum(tf.constant(epsilon, tf.float32),
                           tf.constant(delta, tf.float32) * tf.exp(-entropy))
    kept = p_x > threshold                                                   # [batch, k]
    num_accepted = tf.reduce_sum(tf.math.cumprod(tf.cast(kept, tf.int32), axis=1), axis=1)
    p_next = tf.gather(target_probs, num_accepted, axis=1, batch_dims=1)     # [batch, V]
    next_ids = sampling_lib.sample_categorical(p_next, final_uniforms)
    beta = tf.reduce_sum(tf.minimum(window, draft_probs), axis=-1)
    return Acceptance(num_accepted=num_accepted, next_ids=next_ids, beta=beta)


def typical_accept_fn(epsilon: float = TYPICAL_EPSILON, delta: float = TYPICAL_DELTA):
    """`typical_accept` at (epsilon, delta), with the signature of `accept`.

    Cached: equal settings give the same function object, so `tfspec.generate`, which keys
    its compiled loops on the rule, compiles each setting once. Validated as
    `TypicalAcceptance`.
    """
    settings = TypicalAcceptance(epsilon, delta)
    return _typical_accept_fn(settings.epsilon, settings.delta)


@functools.lru_cache(maxsize=None)
def _typical_accept_fn(epsilon: float, delta: float):
    def accept_fn(target_probs, draft_probs, draft_ids, accept_uniforms, final_uniforms):
        return typical_accept(target_probs, draft_probs, draft_ids, accept_uniforms,
                              final_uniforms, epsilon=epsilon, delta=delta)

    accept_fn.__name__ = f"typical_accept_eps{epsilon:g}_delta{delta:g}"
    accept_fn.__qualname__ = accept_fn.__name__
    return accept_fn


def draft_argmax(probs: tf.Tensor, uniforms: tf.Tensor) -> tf.Tensor:
    """The draft's tokens under typical acceptance: its top-1, as Medusa's candidates.

    Args:
      probs: float32 [batch, V], the draft's transformed distribution.
      uniforms: float32 [batch]; unused.

    Returns:
      int32 [batch], the first argmax of each row.
    """
    del uniforms
    return tf.argmax(probs, axis=-1, output_type=tf.int32)
