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
"""

from typing import NamedTuple

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
