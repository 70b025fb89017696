"""The feature-draft stage: train an EAGLE-style `FeatureDraft` for a frozen target.

    train_feature_draft(config, workdir, data)   -> WORKDIR/feature_draft/
    export_feature_draft(config, workdir, zoo_dir, data)
    resize_draft_vocabulary(config, workdir, zoo_dir, data)   # an export's vocabulary

For every batch the frozen target runs teacher-forced once (no gradients) and gives its final
decoder states h, the features the draft reads (`feature_draft.feature_layers`), its encoder
output and its next-token distribution p. The draft's `rollout` predicts the features
h^(s) of pass s = 1 .. depth (pass 1 on the target's true features, later passes on the
draft's own predictions: EAGLE-3's training-time test), and the loss is, per pass,

    cross-entropy(p, q^(s)) + feature_weight x smooth-L1(h^(s), h)

with q^(s) = softmax(target LM head(h^(s))) over the draft vocabulary (p restricted to it),
averaged over real target tokens and weighted depth_decay^(s - 1) (EAGLE's choices: the
cross-entropy against the target's distribution is forward KL up to a constant, and the
regression keeps the predicted features usable as the next step's input). The metrics
include `overlap_s`: the mean of sum_x min(p, q^(s)) at temperature 1, the acceptance
probability of one sampled draft token at draft step s (held-out beta, teacher-forced).

The training examples are the corpus plus the target's own continuations of
`feature_draft.sampled_prompts` training prompts at `sampled_temperature` (default 1:
the prefixes sampled decoding verifies on), generated once and cached in
WORKDIR/feature_draft/sampled.jsonl, and of `feature_draft.greedy_prompts` other training
prompts decoded greedily (default 0; the prefixes greedy decoding verifies on, which are
more repetitive and confident than sampled ones), cached in
WORKDIR/feature_draft/greedy.jsonl.
"""

import dataclasses
import json
import os
import tempfile
from typing import Any, Dict, List, Optional

import numpy as np
import tensorflow as tf

from tfspec.models import feature_draft as feature_draft_lib
from tfspec.training import examples as examples_lib
from tfspec.training import losses
from tfspec.training import stages
from tfspec.training import trainer as trainer_lib

STAGE = "feature_draft"
EXPORT_STAGE = "feature_draft_export"
VOCABULARY_STAGE = "feature_draft_vocabulary"


class FeatureDraftObjective:
    """Loss of the feature-draft stage: `objective(draft, batch) -> (loss, metrics)`.

    Args:
      target: the frozen `tfspec.models.T5`.
      depth: rollout passes (1 = teacher forcing only).
      feature_weight: weight of the smooth-L1 feature regression.
      depth_decay: weight of pass s is depth_decay^(s - 1).
    """

    def __init__(self, target, depth: int = 1, feature_weight: float = 1.0,
                 depth_decay: float = 1.0):
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        self.target = target
        self.depth = int(depth)
        self.feature_weight = float(feature_weight)
        self.depth_decay = float(depth_decay)

    def __call__(self, draft, batch):
        states, features, context = self.target.decoder_features(
            batch["encoder_ids"], batch["encoder_lengths"], batch["decoder_input_ids"],
            draft.feature_layers)
        states = tf.stop_gradient(states)
        features = tf.stop_gradient(features)
        encoder_states = tf.stop_gradient(context.encoder_states)
        lm_head = tf.stop_gradient(draft.lm_head_subset(self.target.output_projection()))
        target_logits = tf.stop_gradient(self.target.logits_from_states(states))  # [B, T, V]
        target_probs = tf.nn.softmax(target_logits)
        subset_probs = (target_probs if draft.full_vocabulary
                        else tf.gather(target_probs, draft.draft_vocab, axis=-1))
        target_argmax = tf.argmax(target_logits, axis=-1, output_type=tf.int32)
        passes = draft.rollout(features, batch["decoder_input_ids"], encoder_states,
                               context.encoder_mask, self.depth)
        mask = batch["loss_mask"]
        positions = tf.range(tf.shape(mask)[1])[None, :]
        loss, total_weight, metrics = 0.0, 0.0, {}
        for s, predicted in enumerate(passes):
            # Pass s + 1 at position t is draft step s of a round that began at t - s.
            valid = mask & (positions >= s)
            logits = draft.draft_logits_subset(predicted, lm_head)           # [B, T, N]
            log_q = tf.nn.log_softmax(logits)
            ce = losses.masked_mean(-tf.reduce_sum(subset_probs * log_q, axis=-1), valid)
            regression = losses.masked_mean(
                tf.reduce_mean(tf.keras.losses.Huber(reduction="none")(
                    states[..., None], predicted[..., None]), axis=-1), valid)
            weight = self.depth_decay ** s
            loss += weight * (ce + self.feature_weight * regression)
            total_weight += weight
            q = tf.exp(tf.stop_gradient(log_q))
            metrics[f"ce_{s + 1}"] = ce
            metrics[f"feature_{s + 1}"] = regression
            metrics[f"overlap_{s + 1}"] = losses.masked_mean(
                tf.reduce_sum(tf.minimum(subset_probs, q), axis=-1), valid)
            draft_argmax = tf.gather(draft.draft_vocab,
                                     tf.argmax(logits, axis=-1, output_type=tf.int32))
            metrics[f"greedy_match_{s + 1}"] = losses.masked_mean(
                tf.cast(tf.equal(draft_argmax, target_argmax), tf.float32), valid)
        metrics["target_ce"] = losses.cross_entropy(target_logits, batch["target_ids"], mask)
        return loss / total_weight, metrics


def _section(config):
    return config[STAGE]


def frozen_target(config, workdir: str, section) -> "tfspec.models.T5":
    """The frozen target a bound draft (feature draft, Medusa heads) trains on: the recipe
    section's `target_from` spec, else the recipe's trained target stage."""
    target_from = section.get("target_from", "") or ""
    if target_from:
        target = stages.load_spec(target_from)
    elif not trainer_lib.is_done(stages.stage_dir(workdir, stages.TARGET)):
        raise RuntimeError(f"The target stage in {stages.stage_dir(workdir, stages.TARGET)} "
                           "has not finished; set target_from in the recipe's section or "
                           "run --stage target first.")
    else:
        target = stages.load_trained(config, workdir, stages.TARGET, config.export.weights)
    target.trainable = False
    return target


def _target(config, workdir: str):
    return frozen_target(config, workdir, _section(config))


def assign_draft_vocabulary(draft, examples) -> None:
    """Sets a bound draft's reduced vocabulary to the most frequent tokens of `examples`'
    target sequences (EOS always in); nothing for a full vocabulary."""
    if draft.full_vocabulary:
        return
    vocab = examples_lib.frequent_target_tokens(
        examples, draft.vocab_size, draft.config.draft_vocab_size,
        always=[i for i in (draft.eos_id,) if i is not None])
    draft.draft_vocab.assign(vocab)


def draft_config(config, target, vocabulary_counts: Optional[np.ndarray] = None
                 ) -> feature_draft_lib.FeatureDraftConfig:
    """The `FeatureDraftConfig` of the recipe's feature draft for `target`."""
    section = _section(config)
    return feature_draft_lib.FeatureDraftConfig.for_target(
        target, d_ff=int(section.get("d_ff", target.config.d_ff)),
        feature_layers=tuple(section.get("feature_layers", (-1,))),
        draft_vocab_size=int(section.get("draft_vocab_size", 0) or target.vocab_size),
        cross_attention=bool(section.get("cross_attention", True)),
        target_fingerprint=feature_draft_lib.target_fingerprint(target),
        target_name=section.get("target_from", "") or "")


def build_draft(config, target, examples) -> feature_draft_lib.FeatureDraft:
    """A fresh feature draft bound to `target`, its vocabulary the most frequent tokens of
    `examples`' target sequences (EOS always in)."""
    draft = feature_draft_lib.FeatureDraft(draft_config(config, target),
                                           seed=int(config.seeds.get(STAGE, 3)))
    draft.bind(target)
    assign_draft_vocabulary(draft, examples)
    return draft


def train_feature_draft(config, workdir: str, data, max_steps: Optional[int] = None,
                        progress: bool = True) -> Dict[str, Any]:
    """Trains the recipe's feature draft for its frozen target; returns the summary."""
    target = _target(config, workdir)
    sampled, greedy = stages.bound_draft_continuations(config, workdir, STAGE, target, data)
    examples = list(data.train) + sampled + greedy
    draft = build_draft(config, target, examples)
    section = _section(config)
    directory = stages.stage_dir(workdir, STAGE)
    os.makedirs(directory, exist_ok=True)
    info = {"role": STAGE, "parameters": stages.parameter_count(draft),
            "model_config": draft.config.to_dict(),
            "train": examples_lib.token_counts(examples),
            "validation": examples_lib.token_counts(data.validation),
            "sampled_examples": len(sampled),
            "greedy_examples": len(greedy),
            "recipe": json.loads(config.to_json())}
    with open(os.path.join(directory, "stage.json"), "w", encoding="utf-8") as f:
        json.dump(info, f, indent=2, default=str)
        f.write("\n")
    objective = FeatureDraftObjective(
        target, depth=int(section.get("depth", 1)),
        feature_weight=float(section.get("feature_weight", 1.0)),
        depth_decay=float(section.get("depth_decay", 1.0)))
    trainer = stages.make_trainer(config, workdir, STAGE, draft, objective, data, max_steps,
                                  progress, train_examples=examples)
    return trainer.run()


def restore_trained(draft, workdir: str, stage: str, weights: str = "best"):
    """Restores stage `stage`'s trained weights of WORKDIR into `draft` ("best": the best
    validation checkpoint if there is one, else the last); returns `draft`."""
    directory = stages.stage_dir(workdir, stage)
    best = os.path.join(directory, trainer_lib.BEST_DIR)
    if weights == "best" and os.path.exists(os.path.join(best, "checkpoint")):
        trainer_lib.restore_weights(draft, best)
    else:
        trainer_lib.restore_weights(draft, os.path.join(directory, trainer_lib.CHECKPOINT_DIR))
    return draft


def load_trained_feature_draft(config, workdir: str, target,
                               weights: str = "best") -> feature_draft_lib.FeatureDraft:
    """The trained feature draft of `workdir`, bound to `target`."""
    draft = feature_draft_lib.FeatureDraft(draft_config(config, target),
                                           initialize="zeros")
    draft.bind(target)
    return restore_trained(draft, workdir, STAGE, weights)


_MB = 1024 * 1024


def export_feature_draft(config, workdir: str, zoo_dir: Optional[str], data,
                         measure_speed: bool = True) -> Dict[str, Any]:
    """Exports the trained feature draft to ZOO_DIR/<export.feature_draft_name>, measures
    it against the recipe's T5 draft on the same held-out prompts, writes its model card.

    What ships is what is measured: the draft is saved (bfloat16, the target's weights not
    included), reloaded with `tfspec.load_model` and bound to the target.

    Returns:
      The metrics (also WORKDIR/feature_draft_export/metrics.json).

    Raises:
      RuntimeError: the feature-draft stage has not finished.
      ValueError: the exported weights exceed `export.feature_draft_max_mb`.
    """
    del measure_speed
    target = _target(config, workdir)
    return export_bound_draft(
        config, workdir, zoo_dir, data, stage=STAGE, export_stage=EXPORT_STAGE,
        name=config.export.feature_draft_name, max_mb=config.export.feature_draft_max_mb,
        target=target,
        load_fn=lambda: load_trained_feature_draft(config, workdir, target,
                                                   config.export.weights),
        objective=FeatureDraftObjective(target, depth=int(_section(config).get("depth", 1))),
        card_fn=_model_card)


def export_bound_draft(config, workdir: str, zoo_dir: Optional[str], data, *, stage: str,
                       export_stage: str, name: str, max_mb: float, target, load_fn,
                       objective, card_fn) -> Dict[str, Any]:
    """Exports a trained bound draft (feature draft, Medusa heads) of stage `stage` to
    ZOO_DIR/`name`: saves it (the target's weights not included), checks its size, reloads
    it with `tfspec.load_model` and binds it to `target` (what ships is what is measured),
    evaluates `objective` on the validation split, measures acceptance on held-out prompts
    at T = 0 and 1 beside the section's `compare_draft`, and writes `card_fn(config,
    metrics, stage_info)` as its MODEL_CARD.md and WORKDIR/`export_stage`/metrics.json."""
    from tfspec import checkpoints  # Local: the checkpoint formats load only here.
    from tfspec.training import export as export_lib

    directory = stages.stage_dir(workdir, stage)
    if not trainer_lib.is_done(directory):
        raise RuntimeError(f"The {stage} stage in {directory} has not finished; run "
                           f"--stage {stage} first.")
    export = config.export
    trained = load_fn()
    out_dir = os.path.join(os.fspath(zoo_dir or checkpoints.ZOO_DIR), name)
    os.makedirs(out_dir, exist_ok=True)
    checkpoints.save_model(trained, out_dir, dtype=export.dtype)
    size_mb = os.path.getsize(os.path.join(out_dir, checkpoints.WEIGHTS_FILE)) / _MB
    if size_mb > max_mb:
        raise ValueError(f"The exported {stage} is {size_mb:.1f} MB, more than the recipe's "
                         f"limit of {max_mb} MB.")
    draft = checkpoints.load_model(out_dir).bind(target)
    validation = trainer_lib.evaluate(tf.function(lambda batch: objective(draft, batch),
                                                  autograph=False),
                                      stages.batches(config, data.validation, False, 0))
    prompts = export_lib.heldout_prompts(data, export.num_prompts)
    drafts = {name: draft}
    section = config[stage]
    compare = section.get("compare_draft", "") or ""
    if compare:  # The T5 draft of the same target, measured on the same prompts.
        drafts[compare] = checkpoints.load_model(compare)
    acceptance = {label: export_lib.measure_both_temperatures(target, model, prompts, export)
                  for label, model in drafts.items()}
    done = trainer_lib.read_done(directory)
    with open(os.path.join(directory, "stage.json"), encoding="utf-8") as f:
        info = json.load(f)
    metrics = {"name": name, "target": section.get("target_from", ""),
               "size_mb": size_mb, "parameters": info["parameters"],
               "validation": validation, "acceptance": acceptance, "training": done,
               "sampled_examples": info.get("sampled_examples", 0),
               "greedy_examples": info.get("greedy_examples", 0)}
    with open(os.path.join(out_dir, "MODEL_CARD.md"), "w", encoding="utf-8") as f:
        f.write(card_fn(config, metrics, info))
    write_stage_result(stages.stage_dir(workdir, export_stage), metrics, {"zoo_dir": out_dir})
    return metrics


def resize_draft_vocabulary(config, workdir: str, zoo_dir: Optional[str], data
                            ) -> Dict[str, Any]:
    """Gives the exported feature draft ZOO_DIR/<export.feature_draft_name> the draft
    vocabulary of the section's `draft_vocab_size` without retraining it: the same weights,
    the most frequent target tokens of the stage's training examples (the corpus plus the
    target's continuations cached in WORKDIR/feature_draft, generated if missing), EOS in.
    Measures acceptance on the held-out prompts with the old and the new vocabulary, then
    rewrites the export's config.json and model.safetensors (each written beside and
    renamed into place, so neither is ever half-written).

    Why: q = 0 outside the vocabulary, so the target's mass there is never accepted. The
    head predicts the target's features and scores them with the target's whole LM head,
    so columns it was not trained to rank still get the target's own ordering of them:
    `zoo:tiny-code-eagle`, trained with 2048 tokens, reads held-out T = 1 beta 0.743 with
    them, 0.762 with 4096 and 0.772 with all 8192, greedy 0.957 with each.

    Returns:
      The metrics (also WORKDIR/feature_draft_vocabulary/metrics.json): the sizes and
      `acceptance` {"before": [T = 0, T = 1], "after": [...]}.

    Raises:
      FileNotFoundError: no exported draft.
      ValueError: a draft_vocab_size outside 1..V.
    """
    from tfspec import checkpoints  # pylint: disable=g-import-not-at-top
    from tfspec.training import export as export_lib  # pylint: disable=g-import-not-at-top
    export = config.export
    directory = export_lib.exported_directory(zoo_dir, export.feature_draft_name,
                                              EXPORT_STAGE, "feature draft")
    before = checkpoints.load_model(directory, dtype="float32")
    if not isinstance(before, feature_draft_lib.FeatureDraft):
        raise ValueError(f"{directory} holds a {type(before).__name__}, not a feature draft")
    size = int(_section(config).get("draft_vocab_size", 0) or 0)
    if not 1 <= size <= before.vocab_size:
        raise ValueError(f"{STAGE}.draft_vocab_size is {size}; expected 1..{before.vocab_size} "
                         "(the target's vocabulary size)")
    target = _target(config, workdir)
    before.bind(target)
    after = feature_draft_lib.FeatureDraft(
        dataclasses.replace(before.config, draft_vocab_size=size), initialize="zeros")
    after.bind(target)
    old_weights, new_weights = before.weight_map(), after.weight_map()
    for name, (variable, _) in new_weights.items():
        if name != "draft_vocab":  # The only weight whose shape follows the size.
            variable.assign(old_weights[name][0])
    sampled, greedy = stages.bound_draft_continuations(config, workdir, STAGE, target, data)
    assign_draft_vocabulary(after, list(data.train) + sampled + greedy)
    prompts = export_lib.heldout_prompts(data, export.num_prompts)
    acceptance = {label: export_lib.measure_both_temperatures(target, draft, prompts, export)
                  for label, draft in (("before", before), ("after", after))}
    with open(os.path.join(directory, checkpoints.CONFIG_FILE), encoding="utf-8") as f:
        saved_dtype = json.load(f).get("dtype", "bfloat16")  # Saved as it was exported.
    with tempfile.TemporaryDirectory(dir=directory) as scratch:
        checkpoints.save_model(after, scratch, dtype=saved_dtype)
        for name in (checkpoints.WEIGHTS_FILE, checkpoints.CONFIG_FILE):
            path = os.path.join(directory, name)
            os.chmod(os.path.join(scratch, name), os.stat(path).st_mode)  # The old file's.
            os.replace(os.path.join(scratch, name), path)
    metrics = {"draft": directory, "size_before": before.config.draft_vocab_size,
               "size_after": size, "acceptance": acceptance}
    write_stage_result(stages.stage_dir(workdir, VOCABULARY_STAGE), metrics,
                       {"path": directory})
    return metrics


def write_stage_result(directory: str, metrics: Dict[str, Any], done: Dict[str, Any]) -> None:
    """Writes an export-like stage's DIRECTORY/metrics.json, then its done marker (last, so
    a stage that died before it is not taken for finished)."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "metrics.json"), "w", encoding="utf-8") as f:
        json.dump(metrics, f, indent=2, default=str)
        f.write("\n")
    with open(os.path.join(directory, trainer_lib.DONE_FILE), "w", encoding="utf-8") as f:
        json.dump(done, f)


def _model_card(config, metrics: Dict[str, Any], info: Dict[str, Any]) -> str:
    section, export = _section(config), config.export
    model = info["model_config"]
    done, validation = metrics["training"], metrics["validation"]
    depth = int(section.get("depth", 1))

    fmt = format_metric

    lines = [
        f"# {metrics['name']}",
        "",
        f"An EAGLE-style feature draft (`tfspec.models.FeatureDraft`) for "
        f"`{metrics['target'] or 'its target'}`: one T5 decoder block that reads the "
        "target's final decoder state at position t - 1 and the embedding of the token at t, "
        "predicts the target's state at t, and scores the next token with the target's own "
        "LM head. It cross-attends to the target's encoder output, so a request runs no "
        "draft encoder. Verified by the exact rule: the output distribution is the "
        "target's.",
        "",
        "```python",
        "target = tfspec.load_model(\"zoo:tiny-code-target\")",
        f"draft = tfspec.load_model(\"zoo:{metrics['name']}\")",
        "tfspec.generate(target, prompts, draft=draft, k=3)",
        "```",
        "",
        "It stores none of the target's weights (embedding and LM head are read from the "
        "target it is bound to at `generate` time) and refuses any other target with a "
        f"one-line error (fingerprint `{model['target_fingerprint']}`).",
        "",
        "## Model",
        "",
        f"- Parameters: {metrics['parameters']:,} ({metrics['size_mb']:.1f} MB as "
        f"{export.dtype} safetensors).",
        f"- Block: d_model {model['d_model']}, {model['num_heads']} heads x d_kv "
        f"{model['d_kv']}, d_ff {model['d_ff']} ({model['feed_forward_proj']}), "
        f"cross-attention {model['cross_attention']}; target features read: layers "
        f"{model['feature_layers']} (-1 = final decoder states).",
        f"- Draft vocabulary: the {model['draft_vocab_size']} most frequent target tokens of "
        "the training data (q = 0 elsewhere; exact, the residual covers the rest).",
        "",
        "## Data and training",
        "",
        f"- The recipe's code corpus (both tasks) plus the target's own continuations of "
        f"{metrics['sampled_examples']} training prompts sampled at temperature "
        f"{section.get('sampled_temperature', 1.0)} (at most "
        f"{section.get('sampled_max_new_tokens', 128)} tokens)"
        + (f" and its greedy continuations of {metrics['greedy_examples']} other training "
           "prompts" if metrics.get("greedy_examples") else "") + ".",
        f"- Loss: cross-entropy against the target's next-token distribution plus "
        f"{section.get('feature_weight', 1.0)} x smooth-L1 on the predicted state, over "
        f"{depth} rollout pass(es) (pass s > 1 feeds the draft its own predictions with the "
        f"attention a decode round sees: EAGLE-3's training-time test), pass weights "
        f"{section.get('depth_decay', 1.0)}^(s-1).",
        f"- AdamW, peak lr {section.learning_rate}, {section.warmup_steps} warm-up steps, "
        f"{section.decay} decay, about {config.data.batch_tokens} padded tokens per batch; "
        f"{done['steps']} steps ({done['epochs']:.2f} epochs), "
        f"{done['elapsed_s'] / 60:.0f} min on a 2-core CPU.",
        "- Held-out (validation split, teacher-forced, shipped weights): "
        + ", ".join(f"overlap at draft step {s} {fmt(validation.get(f'overlap_{s}'))}, "
                    f"greedy match {fmt(validation.get(f'greedy_match_{s}'))}"
                    for s in range(1, depth + 1)) + ".",
        "",
        "## Speculative decoding",
        "",
        f"`tfspec.generate` on {export.num_prompts} held-out completion prompts, k = "
        f"{export.k}, max_new_tokens {export.max_new_tokens}, beside the T5 draft on the same "
        "prompts:",
        "",
    ]
    lines += acceptance_table(metrics["acceptance"])
    lines += [
        "",
        "Speed: `python -m bench.draft_kinds` (the README's draft-kinds table).",
        "",
        "## Reproduce",
        "",
        "```",
        "python -m recipes.tiny_code.train --config configs/zoo_tiny_code_eagle.py "
        "--stage feature_draft",
        "python -m recipes.tiny_code.train --config configs/zoo_tiny_code_eagle.py "
        "--stage feature_draft_export",
        "```",
        "",
    ]
    return "\n".join(lines)


def format_metric(value, digits: int = 3) -> str:
    """A model card's number: `digits` decimals, "n/a" for None."""
    return "n/a" if value is None else f"{value:.{digits}f}"


def acceptance_table(acceptance: Dict[str, List[Dict[str, Any]]]) -> List[str]:
    """Markdown lines of a model card's acceptance table: one row per (draft label,
    temperature) of `export.measure_acceptance` results."""
    lines = ["| draft | temperature | acceptance_rate | worst request | beta_mean "
             "| mean_tokens_per_round |",
             "| --- | --- | --- | --- | --- | --- |"]
    for label, rows in acceptance.items():
        for row in rows:
            lines.append(f"| {label} | {row['temperature']} "
                         f"| {format_metric(row['acceptance_rate'])} "
                         f"| {format_metric(row.get('worst_row_acceptance'))} "
                         f"| {format_metric(row['beta_mean'])} "
                         f"| {format_metric(row['mean_tokens_per_round'])} |")
    return lines
