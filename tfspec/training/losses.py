"""Token-level losses of the training recipes (masked, averaged over real target tokens)."""

from typing import Dict, Tuple

import tensorflow as tf


def masked_mean(values: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
    """Mean of `values` over the True entries of `mask`.

    Args:
      values: float32 [B, T] per-token values.
      mask: bool [B, T].

    Returns:
      float32 scalar; 0 when the mask is empty.
    """
    weights = tf.cast(mask, tf.float32)
    return tf.math.divide_no_nan(tf.reduce_sum(values * weights), tf.reduce_sum(weights))


def token_cross_entropy(logits: tf.Tensor, target_ids: tf.Tensor) -> tf.Tensor:
    """Per-token cross-entropy of the labels.

    Args:
      logits: float32 [B, T, V].
      target_ids: int32 [B, T].

    Returns:
      float32 [B, T], `-log softmax(logits)[target_ids]` (nats).
    """
    return tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.cast(target_ids, tf.int32), logits=tf.cast(logits, tf.float32))


def cross_entropy(logits: tf.Tensor, target_ids: tf.Tensor, loss_mask: tf.Tensor) -> tf.Tensor:
    """Mean label cross-entropy over real target tokens.

    Args:
      logits: float32 [B, T, V]; target_ids: int32 [B, T]; loss_mask: bool [B, T].

    Returns:
      float32 scalar (nats per token).
    """
    return masked_mean(token_cross_entropy(logits, target_ids), loss_mask)


class LabelObjective:
    """Loss function of the target stage: label cross-entropy, `objective(model, batch)`."""

    def __call__(self, model, batch) -> Tuple[tf.Tensor, Dict[str, tf.Tensor]]:
        logits = model.forward(batch["encoder_ids"], batch["encoder_lengths"],
                               batch["decoder_input_ids"])
        loss = cross_entropy(logits, batch["target_ids"], batch["loss_mask"])
        return loss, {"ce": loss}
