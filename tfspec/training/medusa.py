"""The Medusa stage: train `MedusaHeads` for a frozen target on its own features.

    train_medusa(config, workdir, data)   -> WORKDIR/medusa/
    export_medusa(config, workdir, zoo_dir, data)

For every batch the frozen target runs teacher-forced once (no gradients) and gives its final
decoder states h and its next-token distributions p. Head i (0-based) at position t reads
h_{t-1} (zeros at t = 0) and the token at t, which is what a decode round at n = t sees, and
predicts the token at t + i + 1, whose target distribution is p at position t + i. The loss
is, per head,

    cross-entropy(p_{t+i}, q_i(t))    over real target tokens t + i + 1

weighted head_decay^i (Medusa's 0.8^i), with q_i over the draft vocabulary (p restricted to
it). Along a sequence the target itself sampled, p_{t+i} averaged over the intermediate
tokens is the distribution the head must match (the target's marginal of the token i + 1
ahead), so the data are the corpus plus the target's own continuations of training prompts
at `sampled_temperature` and, optionally, its greedy continuations (the prefixes greedy
decoding verifies on). The metrics include `overlap_i`: the mean of sum_x min(p, q_i) at
temperature 1 (teacher-forced: the intermediate tokens are the data's) and `greedy_match_i`.
"""

import json
import os
from typing import Any, Dict, Optional

import tensorflow as tf

from tfspec.models import medusa as medusa_lib
from tfspec.models import target_binding
from tfspec.training import examples as examples_lib
from tfspec.training import feature_draft as feature_draft_training
from tfspec.training import losses
from tfspec.training import stages

STAGE = "medusa"
EXPORT_STAGE = "medusa_export"


def _shift(x: tf.Tensor, offset: int, fill=0) -> tf.Tensor:
    """x [B, T, ...] -> [B, T, ...] with entry t = x[:, t + offset] (`fill` past the end)."""
    if offset == 0:
        return x
    pad = [[0, 0], [0, offset]] + [[0, 0]] * (len(x.shape) - 2)
    return tf.pad(x[:, offset:], pad, constant_values=fill)


class MedusaObjective:
    """Loss of the Medusa stage: `objective(heads, batch) -> (loss, metrics)`.

    Args:
      target: the frozen `tfspec.models.T5`.
      head_decay: weight of head i is head_decay^i.
    """

    def __init__(self, target, head_decay: float = 0.8):
        self.target = target
        self.head_decay = float(head_decay)

    def __call__(self, heads, batch):
        states, _, _ = self.target.decoder_features(
            batch["encoder_ids"], batch["encoder_lengths"], batch["decoder_input_ids"], ())
        states = tf.stop_gradient(tf.cast(states, tf.float32))                 # [B, T, D]
        target_logits = tf.stop_gradient(self.target.logits_from_states(states))
        target_probs = tf.nn.softmax(target_logits)                            # [B, T, V]
        subset_probs = (target_probs if heads.full_vocabulary
                        else tf.gather(target_probs, heads.draft_vocab, axis=-1))
        target_argmax = tf.argmax(target_logits, axis=-1, output_type=tf.int32)
        lm_head = tf.stop_gradient(heads.lm_head_subset(self.target.output_projection()))
        # Position t reads h_{t-1}: the state that drew the token at t (zeros at t = 0).
        inputs = tf.pad(states, [[0, 0], [1, 0], [0, 0]])[:, :-1]
        head_states = heads.head_states(inputs, batch["decoder_input_ids"], heads.heads)
        mask = batch["loss_mask"]
        loss, total_weight, metrics = 0.0, 0.0, {}
        for i in range(heads.heads):
            # Head i at t predicts the token at t + i + 1: p at position t + i.
            labels = _shift(subset_probs, i)
            valid = _shift(mask, i, False)
            logits = heads.logits_subset(head_states[:, :, i], lm_head)           # [B, T, N]
            log_q = tf.nn.log_softmax(logits)
            ce = losses.masked_mean(-tf.reduce_sum(labels * log_q, axis=-1), valid)
            weight = self.head_decay ** i
            loss += weight * ce
            total_weight += weight
            q = tf.exp(tf.stop_gradient(log_q))
            metrics[f"ce_{i + 1}"] = ce
            metrics[f"overlap_{i + 1}"] = losses.masked_mean(
                tf.reduce_sum(tf.minimum(labels, q), axis=-1), valid)
            draft_argmax = tf.gather(heads.draft_vocab,
                                     tf.argmax(logits, axis=-1, output_type=tf.int32))
            metrics[f"greedy_match_{i + 1}"] = losses.masked_mean(
                tf.cast(tf.equal(draft_argmax, _shift(target_argmax, i, -1)), tf.float32),
                valid)
        metrics["target_ce"] = losses.cross_entropy(target_logits, batch["target_ids"], mask)
        return loss / total_weight, metrics


def _section(config):
    return config[STAGE]


def heads_config(config, target) -> medusa_lib.MedusaConfig:
    """The `MedusaConfig` of the recipe's heads for `target`."""
    section = _section(config)
    return medusa_lib.MedusaConfig.for_target(
        target, heads=int(section.get("heads", 4)), d_ff=int(section.get("d_ff", 1024)),
        reads_token=bool(section.get("reads_token", True)),
        draft_vocab_size=int(section.get("draft_vocab_size", 0) or target.vocab_size),
        target_fingerprint=target_binding.target_fingerprint(target),
        target_name=section.get("target_from", "") or "")


def train_medusa(config, workdir: str, data, max_steps: Optional[int] = None,
                 progress: bool = True) -> Dict[str, Any]:
    """Trains the recipe's Medusa heads for its frozen target; returns the summary."""
    section = _section(config)
    target = feature_draft_training.frozen_target(config, workdir, section)
    sampled, greedy = stages.bound_draft_continuations(config, workdir, STAGE, target, data)
    examples = list(data.train) + sampled + greedy
    heads = medusa_lib.MedusaHeads(heads_config(config, target),
                                   seed=int(config.seeds.get(STAGE, 5)))
    heads.bind(target)
    feature_draft_training.assign_draft_vocabulary(heads, examples)
    directory = stages.stage_dir(workdir, STAGE)
    os.makedirs(directory, exist_ok=True)
    info = {"role": STAGE, "parameters": stages.parameter_count(heads),
            "model_config": heads.config.to_dict(),
            "train": examples_lib.token_counts(examples),
            "validation": examples_lib.token_counts(data.validation),
            "sampled_examples": len(sampled),
            "greedy_examples": len(greedy),
            "recipe": json.loads(config.to_json())}
    with open(os.path.join(directory, "stage.json"), "w", encoding="utf-8") as f:
        json.dump(info, f, indent=2, default=str)
        f.write("\n")
    objective = MedusaObjective(target, head_decay=float(section.get("head_decay", 0.8)))
    trainer = stages.make_trainer(config, workdir, STAGE, heads, objective, data, max_steps,
                                  progress, train_examples=examples)
    return trainer.run()


def load_trained_medusa(config, workdir: str, target,
                        weights: str = "best") -> medusa_lib.MedusaHeads:
    """The trained heads of `workdir`, bound to `target`."""
    heads = medusa_lib.MedusaHeads(heads_config(config, target), initialize="zeros")
    heads.bind(target)
    return feature_draft_training.restore_trained(heads, workdir, STAGE, weights)


def export_medusa(config, workdir: str, zoo_dir: Optional[str], data) -> Dict[str, Any]:
    """Exports the trained heads to ZOO_DIR/<export.medusa_name> with a model card, measured
    beside the recipe's T5 draft on the same held-out prompts
    (`feature_draft.export_bound_draft`)."""
    section = _section(config)
    target = feature_draft_training.frozen_target(config, workdir, section)
    return feature_draft_training.export_bound_draft(
        config, workdir, zoo_dir, data, stage=STAGE, export_stage=EXPORT_STAGE,
        name=config.export.medusa_name, max_mb=config.export.medusa_max_mb, target=target,
        load_fn=lambda: load_trained_medusa(config, workdir, target, config.export.weights),
        objective=MedusaObjective(target, head_decay=float(section.get("head_decay", 0.8))),
        card_fn=_model_card)


def _model_card(config, metrics: Dict[str, Any], info: Dict[str, Any]) -> str:
    section, export = _section(config), config.export
    model = info["model_config"]
    done, validation = metrics["training"], metrics["validation"]

    fmt = feature_draft_training.format_metric

    lines = [
        f"# {metrics['name']}",
        "",
        f"Medusa heads (`tfspec.models.MedusaHeads`) for `{metrics['target'] or 'its target'}`: "
        f"{model['heads']} heads on the target's final decoder state at position n - 1"
        + (" and the embedding of the last committed token" if model["reads_token"] else "")
        + "; head i proposes the token at n + i, all in one call per round, scored by the "
        "target's own LM head. Verified by the exact rule by default: the output "
        "distribution is the target's. (Medusa's typical acceptance is an opt-in of "
        "`tfspec.generate` and is not distribution-preserving above temperature 0.)",
        "",
        "```python",
        "target = tfspec.load_model(\"zoo:tiny-code-target\")",
        f"draft = tfspec.load_model(\"zoo:{metrics['name']}\")",
        f"tfspec.generate(target, prompts, draft=draft, k={model['heads']})",
        "```",
        "",
        "It stores none of the target's weights (embedding and LM head are read from the "
        "target it is bound to at `generate` time) and refuses any other target with a "
        f"one-line error (fingerprint `{model['target_fingerprint']}`). k is at most "
        f"{model['heads']}.",
        "",
        "## Model",
        "",
        f"- Parameters: {metrics['parameters']:,} ({metrics['size_mb']:.1f} MB as "
        f"{export.dtype} safetensors).",
        f"- Each head: a residual block y = x + W_out SiLU(W_in x) of hidden width "
        f"{model['d_ff']}, an RMSNorm, then the target's LM head.",
        f"- Draft vocabulary: the {model['draft_vocab_size']} most frequent target tokens of "
        "the training data, shared by the heads (q = 0 elsewhere; exact, the residual covers "
        "the rest).",
        "",
        "## Data and training",
        "",
        f"- The recipe's code corpus (both tasks) plus "
        f"{metrics['sampled_examples'] + metrics.get('greedy_examples', 0)} of the "
        f"target's own continuations of training prompts ({section.get('sampled_prompts', 0)} "
        f"sampled at temperature {section.get('sampled_temperature', 1.0)}, "
        f"{section.get('greedy_prompts', 0)} greedy; at most "
        f"{section.get('sampled_max_new_tokens', 128)} tokens).",
        f"- Loss: cross-entropy of head i against the target's distribution of the token i + 1 "
        f"ahead (teacher-forced), head weights {section.get('head_decay', 0.8)}^i.",
        f"- AdamW, peak lr {section.learning_rate}, {section.warmup_steps} warm-up steps, "
        f"{section.decay} decay, about {config.data.batch_tokens} padded tokens per batch; "
        f"{done['steps']} steps ({done['epochs']:.2f} epochs), "
        f"{done['elapsed_s'] / 60:.0f} min on a 2-core CPU.",
        "- Held-out (validation split, teacher-forced, shipped weights): "
        + ", ".join(f"head {i}: overlap {fmt(validation.get(f'overlap_{i}'))}, greedy match "
                    f"{fmt(validation.get(f'greedy_match_{i}'))}"
                    for i in range(1, model["heads"] + 1)) + ".",
        "",
        "## Speculative decoding",
        "",
        f"`tfspec.generate` on {export.num_prompts} held-out completion prompts, k = "
        f"{export.k}, max_new_tokens {export.max_new_tokens}, exact rule, beside the T5 draft "
        "on the same prompts:",
        "",
    ]
    lines += feature_draft_training.acceptance_table(metrics["acceptance"])
    lines += [
        "",
        "Speed: `python -m bench.draft_kinds` (the README's draft-kinds table).",
        "",
        "## Reproduce",
        "",
        "```",
        "python -m recipes.tiny_code.train --config CONFIG --stage medusa",
        "python -m recipes.tiny_code.train --config CONFIG --stage medusa_export",
        "```",
        "",
    ]
    return "\n".join(lines)
