"""The draft's distillation loss: match the frozen target's next-token distribution.

For every real target position t the draft (q) is trained on a divergence D(p, q) from the
frozen target's distribution p, both at temperature `temperature` (1 by default: the
distributions that speculative sampling at temperature 1 compares), plus `label_weight` times
the draft's cross-entropy on the corpus labels. The divergences (`DIVERGENCES`):

    forward_kl   KL(p || q) = sum_x p (log p - log q)           mass-covering (the default)
    reverse_kl   KL(q || p) = sum_x q (log q - log p)           mode-seeking
    jsd          (KL(p || m) + KL(q || m)) / 2, m = (p + q) / 2  bounded by log 2
    tv           TV(p, q) = sum_x |p - q| / 2

TV is the divergence the acceptance rule rewards: one sampled draft token is accepted with
probability beta = sum_x min(p, q) = 1 - TV(p, q) (Leviathan et al. 2022), so minimising TV
maximises the expected acceptance at that temperature directly (DistillSpec, Zhou et al.
2023, compares these objectives for speculative decoding). The target's logits
are computed on the fly by the frozen target on the same teacher-forced batch (nothing is
stored), so the target costs one forward pass per step and no gradients.

The batches can also hold generated continuations of training prompts (`generated_examples`):
the target's own (greedy) outputs, which are the contexts the draft meets when speculative
decoding verifies it, and the draft's own samples ("on-policy" data in DistillSpec's sense),
which are the prefixes the draft proposes from. Either kind is scored by the target on the
fly like corpus text.
"""

import json
import os
import sys
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from tfspec.training import losses
from tfspec.training.examples import Example


def token_kl(target_logits: tf.Tensor, draft_logits: tf.Tensor,
             temperature: float = 1.0) -> tf.Tensor:
    """Per-token KL(softmax(target / tau) || softmax(draft / tau)).

    Args:
      target_logits: float32 [B, T, V] (treated as constants).
      draft_logits: float32 [B, T, V].
      temperature: tau > 0.

    Returns:
      float32 [B, T], >= 0 (nats); exactly 0 where the two logit rows differ by a constant.
    """
    target_log_probs = tf.nn.log_softmax(
        tf.stop_gradient(tf.cast(target_logits, tf.float32)) / temperature, axis=-1)
    draft_log_probs = tf.nn.log_softmax(tf.cast(draft_logits, tf.float32) / temperature,
                                        axis=-1)
    target_probs = tf.exp(target_log_probs)
    kl = tf.reduce_sum(target_probs * (target_log_probs - draft_log_probs), axis=-1)
    return tf.maximum(kl, 0.0)  # Clamp float round-off below zero.


DIVERGENCES = ("forward_kl", "reverse_kl", "jsd", "tv")


def token_divergence(target_logits: tf.Tensor, draft_logits: tf.Tensor,
                     divergence: str = "forward_kl", temperature: float = 1.0) -> tf.Tensor:
    """Per-token D(softmax(target / tau), softmax(draft / tau)), one of `DIVERGENCES`.

    Args:
      target_logits: float32 [B, T, V] (treated as constants).
      draft_logits: float32 [B, T, V].
      divergence: "forward_kl", "reverse_kl", "jsd" or "tv" (see the module docstring).
      temperature: tau > 0.

    Returns:
      float32 [B, T], >= 0; exactly 0 where the two logit rows differ by a constant.

    Raises:
      ValueError: an unknown divergence.
    """
    if divergence not in DIVERGENCES:
        raise ValueError(f"Unknown divergence {divergence!r}; choose one of "
                         f"{', '.join(DIVERGENCES)}.")
    if divergence == "forward_kl":
        return token_kl(target_logits, draft_logits, temperature)
    target_log_probs = tf.nn.log_softmax(
        tf.stop_gradient(tf.cast(target_logits, tf.float32)) / temperature, axis=-1)
    draft_log_probs = tf.nn.log_softmax(tf.cast(draft_logits, tf.float32) / temperature,
                                        axis=-1)
    target_probs, draft_probs = tf.exp(target_log_probs), tf.exp(draft_log_probs)
    if divergence == "tv":
        return 0.5 * tf.reduce_sum(tf.abs(target_probs - draft_probs), axis=-1)
    if divergence == "reverse_kl":
        value = tf.reduce_sum(draft_probs * (draft_log_probs - target_log_probs), axis=-1)
    else:
        # log m = log((p + q) / 2) through a stable log-add-exp of the two log-probabilities
        # (p + q underflows to 0 where both are tiny, and 0 * log 0 would give NaN).
        high = tf.maximum(target_log_probs, draft_log_probs)
        low = tf.minimum(target_log_probs, draft_log_probs)
        log_mean = high + tf.math.log1p(tf.exp(low - high)) - tf.math.log(2.0)
        value = 0.5 * tf.reduce_sum(target_probs * (target_log_probs - log_mean)
                                    + draft_probs * (draft_log_probs - log_mean), axis=-1)
    return tf.maximum(value, 0.0)  # Clamp float round-off below zero.


def distillation_loss(target_logits: tf.Tensor, draft_logits: tf.Tensor, loss_mask: tf.Tensor,
                      target_ids: Optional[tf.Tensor] = None, label_weight: float = 0.0,
                      temperature: float = 1.0, divergence: str = "forward_kl"
                      ) -> Tuple[tf.Tensor, Dict[str, tf.Tensor]]:
    """A divergence from the target (plus optional label cross-entropy), over real tokens.

    Args:
      target_logits: float32 [B, T, V] of the frozen target.
      draft_logits: float32 [B, T, V] of the draft being trained.
      loss_mask: bool [B, T], True at real target tokens.
      target_ids: int32 [B, T] corpus labels; needed when `label_weight` > 0, and used for
        the reported `ce` metric when given.
      label_weight: weight of the label cross-entropy term.
      temperature: softmax temperature of both distributions in the divergence.
      divergence: one of `DIVERGENCES`.

    Returns:
      (loss float32 scalar, metrics {"kl", "ce" (when target_ids is given), "overlap", and
      the divergence's name when it is not forward KL}): `kl` is always the forward KL (a
      common yardstick across objectives) and `overlap` the mean of sum_x min(p_target,
      p_draft) at temperature 1, the expected acceptance rate of one sampled draft token.
    """
    kl = losses.masked_mean(token_kl(target_logits, draft_logits, temperature), loss_mask)
    if divergence == "forward_kl":
        value = kl
    else:
        value = losses.masked_mean(
            token_divergence(target_logits, draft_logits, divergence, temperature), loss_mask)
    target_probs = tf.nn.softmax(tf.stop_gradient(tf.cast(target_logits, tf.float32)))
    draft_probs = tf.nn.softmax(tf.stop_gradient(tf.cast(draft_logits, tf.float32)))
    overlap = losses.masked_mean(
        tf.reduce_sum(tf.minimum(target_probs, draft_probs), axis=-1), loss_mask)
    metrics = {"kl": kl, "overlap": overlap}
    if divergence != "forward_kl":
        metrics[divergence] = value
    loss = value
    if target_ids is not None:
        ce = losses.cross_entropy(draft_logits, target_ids, loss_mask)
        metrics["ce"] = ce
        if label_weight:
            loss = loss + label_weight * ce
    elif label_weight:
        raise ValueError("label_weight > 0 needs target_ids.")
    return loss, metrics


class DistillationObjective:
    """Loss function of the draft stage: `objective(draft, batch) -> (loss, metrics)`.

    Args:
      target: the frozen target model (its `forward` gives float32 [B, T, V] logits).
      label_weight: weight of the label cross-entropy term.
      temperature: temperature of the divergence.
      divergence: one of `DIVERGENCES`.
    """

    def __init__(self, target, label_weight: float = 0.0, temperature: float = 1.0,
                 divergence: str = "forward_kl"):
        if divergence not in DIVERGENCES:
            raise ValueError(f"Unknown divergence {divergence!r}; choose one of "
                             f"{', '.join(DIVERGENCES)}.")
        self.target = target
        self.label_weight = float(label_weight)
        self.temperature = float(temperature)
        self.divergence = divergence

    def __call__(self, draft, batch) -> Tuple[tf.Tensor, Dict[str, tf.Tensor]]:
        target_logits = tf.stop_gradient(self.target.forward(
            batch["encoder_ids"], batch["encoder_lengths"], batch["decoder_input_ids"]))
        draft_logits = draft.forward(batch["encoder_ids"], batch["encoder_lengths"],
                                     batch["decoder_input_ids"])
        loss, metrics = distillation_loss(target_logits, draft_logits, batch["loss_mask"],
                                          batch["target_ids"], self.label_weight,
                                          self.temperature, self.divergence)
        metrics["target_ce"] = losses.cross_entropy(target_logits, batch["target_ids"],
                                                    batch["loss_mask"])
        return loss, metrics



def generated_examples(model, sources: Sequence[Example], max_new_tokens: int,
                       batch_size: int = 32, temperature: float = 0.0, seed: int = 0,
                       progress: bool = False, id_prefix: str = "generated") -> List[Example]:
    """Distillation examples on a model's own outputs.

    Speculative decoding verifies drafts on prefixes the *target* produced, which differ
    from the corpus text the target was trained on; distilling on the target's own
    continuations as well puts the draft's training contexts where it will be used. The
    draft's own samples (at temperature 1) are the prefixes it proposes from: DistillSpec's
    "on-policy" data (Zhou et al. 2023). Each source's encoder input is decoded by `model`
    with `tfspec.generate` (greedy at temperature 0); the output (EOS included when emitted
    within `max_new_tokens`) becomes the decoder sequence of a new example, which the
    distillation objective scores with the target on the fly.

    Args:
      model: the model that writes the continuations (a `DecodeModel`: the trained target,
        or the draft for on-policy data).
      sources: examples whose `encoder_ids` are used as prompts.
      max_new_tokens: longest continuation.
      batch_size: prompts per `generate` call (prompts are sorted by length first).
      temperature: sampling temperature of the continuations.
      seed: `generate` seed (rows are keyed by their index in `sources`).
      progress: show a tqdm bar.
      id_prefix: the new examples' ids are `id_prefix:` + source id.

    Returns:
      One `Example` per source, in the order of `sources`.
    """
    import tfspec  # Local: tfspec imports the training package only on demand.

    order = sorted(range(len(sources)), key=lambda i: len(sources[i].encoder_ids))
    outputs: Dict[int, np.ndarray] = {}
    starts = range(0, len(order), batch_size)
    if progress:
        from tqdm import tqdm
        starts = tqdm(starts, desc="generate", file=sys.stderr,
                      mininterval=1.0 if sys.stderr.isatty() else 30.0)
    sampling = tfspec.Sampling(temperature=temperature)
    for start in starts:
        rows = order[start:start + batch_size]
        gen = tfspec.generate(model, [sources[i].encoder_ids.tolist() for i in rows],
                              k=0, max_new_tokens=max_new_tokens, sampling=sampling,
                              seed=seed, row_keys=rows)
        for j, i in enumerate(rows):
            outputs[i] = gen.tokens[j, :max(int(gen.lengths[j]), 1)].astype(np.int32)
    return [Example(id=f"{id_prefix}:{s.id}", task=s.task, encoder_ids=s.encoder_ids,
                    target_ids=outputs[i]) for i, s in enumerate(sources)]


def save_examples(path: str, examples: Sequence[Example]):
    """Writes examples as JSONL (id, task, encoder_ids, target_ids), atomically."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for e in examples:
            f.write(json.dumps({"id": e.id, "task": e.task,
                                "encoder_ids": e.encoder_ids.tolist(),
                                "target_ids": e.target_ids.tolist()}) + "\n")
    os.replace(tmp, path)


def load_examples(path: str) -> List[Example]:
    """Reads examples written by `save_examples`."""
    with open(path, "r", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [Example(r["id"], r["task"], np.asarray(r["encoder_ids"], np.int32),
                    np.asarray(r["target_ids"], np.int32)) for r in rows]
