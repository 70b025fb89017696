"""The target-encoder draft stage: a T5 draft that reads its target's encoder output.

    train_target_encoder_draft(config, workdir, data)   -> WORKDIR/target_encoder_draft/
    export_target_encoder_draft(config, workdir, zoo_dir, data)
    resize_draft_vocabulary(config, workdir, zoo_dir, data)  (an export's draft vocabulary)

Why: a speculative request runs both encoders over its whole prompt bucket, and the draft's
is overhead that autoregressive decoding does not pay: 2 ms of a ~15 ms request at a 24-wide
bucket for the embedded pair, 13-15 ms of ~60 ms at 384 (see `TargetEncoderDraft` in
`tfspec/models/protocol.py`). A draft with a target-encoder adapter
(`T5.attach_target_encoder`) cross-attends to the target's encoder output times a
projection [D_target, D] instead, which the target computes for the request anyway.

The stage starts from the recipe section's `init_from` draft (e.g. a draft with its own
encoder; one that already reads the target's encoder, an export of this stage, is continued
with its own adapter, skipping step 1):

1. Its projection is fitted by least squares: P = argmin ||T P - E||^2 over the valid
   positions of `fit_prompts` training prompts, T the target's encoder output, E the draft's
   own. On the embedded pair this alone keeps T = 1 acceptance (0.378 -> 0.377 on 64
   held-out prompts, k = 4) and costs greedy acceptance 0.734 -> 0.658: the draft's encoder
   states are only ~30% linearly predictable from the target's (R^2).
2. Then its decoder and the projection are distilled from the frozen target as in the draft
   stage (`distill.distillation_loss`: the section's divergence, temperature and label
   weight), the draft reading T P; its own encoder is frozen (unused). The target's encoder
   runs once per batch and serves both models (`T5.forward_from_encoder`).

The export is the draft's checkpoint with its adapter beside it
(`checkpoints.TARGET_ENCODER_FILE`), bound by fingerprint to the target it was trained for.
"""

import json
import os
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import tensorflow as tf

from tfspec.models import target_binding
from tfspec.training import depth
from tfspec.training import distill
from tfspec.training import examples as examples_lib
from tfspec.training import feature_draft as feature_draft_training
from tfspec.training import losses
from tfspec.training import stages
from tfspec.training import trainer as trainer_lib

STAGE = "target_encoder_draft"
EXPORT_STAGE = "target_encoder_draft_export"
ADAPTER_STAGE = "target_encoder_adapter"
VOCABULARY_STAGE = "target_encoder_draft_vocabulary"
PROJECTION_NAME = "target_encoder.projection"


class AdaptedDraft:
    """What the stage trains: a T5 draft and its adapter's projection, as one model for
    `trainer.Trainer` (trainable variables, weights, checkpoint names). The draft's own
    encoder is left out of the trainable variables: it is never run."""

    def __init__(self, draft, draft_vocabulary=None, continued: bool = False,
                 grown_from: Optional[int] = None):
        if not draft.reads_target_encoder:
            raise ValueError("AdaptedDraft needs a draft with a target-encoder adapter "
                             "(attach_target_encoder)")
        self.draft = draft
        # The draft vocabulary the exported draft decodes with (trained on all tokens).
        self.draft_vocabulary = draft_vocabulary
        # Whether the adapter is the starting draft's own (an export continued), not a fit.
        self.continued = continued
        # The starting draft's decoder layers when the stage grew it (`depth`), else None.
        self.grown_from = grown_from

    @property
    def projection(self):
        return self.draft.target_encoder_projection

    @property
    def weights(self) -> list:
        return list(self.draft.weights) + [self.projection]

    @property
    def trainable_variables(self) -> list:
        encoder = {id(v) for block in self.draft.encoder_blocks for v in block.weights}
        encoder |= {id(v) for v in self.draft.encoder_final_norm.weights}
        return ([v for v in self.draft.trainable_variables if id(v) not in encoder]
                + [self.projection])

    def hf_weight_map(self) -> dict:
        named = dict(self.draft.hf_weight_map())
        named[PROJECTION_NAME] = (self.projection, False)
        return named


class TargetEncoderDistillation(distill.DistillationObjective):
    """The stage's objective: `objective(model, batch) -> (loss, metrics)`, the draft
    stage's distillation (same arguments) with both models reading the frozen target's
    encoder output of the batch.

    `model` is an `AdaptedDraft` (training) or a T5 draft with an adapter (validation of the
    exported draft).
    """

    def __call__(self, model, batch):
        draft = getattr(model, "draft", model)
        states, mask = self.target.encode(batch["encoder_ids"], batch["encoder_lengths"])
        states = tf.stop_gradient(tf.cast(states, tf.float32))
        target_logits = tf.stop_gradient(self.target.forward_from_encoder(
            states, mask, batch["decoder_input_ids"]))
        projected = tf.einsum("bsd,de->bse", states, draft.target_encoder_projection)
        draft_logits = draft.forward_from_encoder(projected, mask, batch["decoder_input_ids"])
        loss, metrics = distill.distillation_loss(
            target_logits, draft_logits, batch["loss_mask"], batch["target_ids"],
            self.label_weight, self.temperature, self.divergence)
        metrics["target_ce"] = losses.cross_entropy(target_logits, batch["target_ids"],
                                                    batch["loss_mask"])
        return loss, metrics


def _section(config):
    return config[STAGE]


def fit_projection(target, draft, examples: List[examples_lib.Example], count: int,
                   batch_size: int = 16, seed: int = 0) -> np.ndarray:
    """float32 [D_target, D]: the least-squares map from the target's encoder output to the
    draft's own over the valid positions of `count` of `examples`' encoder inputs."""
    rng = np.random.default_rng(seed)
    chosen = rng.choice(len(examples), size=min(int(count), len(examples)), replace=False)
    prompts = sorted((examples[i].encoder_ids.tolist() for i in chosen), key=len)

    @tf.function(jit_compile=True, reduce_retracing=True, autograph=False)
    def both(ids, lengths):
        return target.encode(ids, lengths)[0], draft.encode(ids, lengths)[0]

    gram = cross = None
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start:start + batch_size]
        width = -(-max(len(p) for p in chunk) // 32) * 32  # few shapes to compile
        ids = np.zeros([len(chunk), width], np.int32)
        for row, prompt in enumerate(chunk):
            ids[row, :len(prompt)] = prompt
        lengths = np.array([len(p) for p in chunk], np.int32)
        t_states, d_states = (x.numpy().astype(np.float64) for x in both(ids, lengths))
        valid = np.arange(width)[None, :] < lengths[:, None]
        t_valid, d_valid = t_states[valid], d_states[valid]
        gram = t_valid.T @ t_valid + (0 if gram is None else gram)
        cross = t_valid.T @ d_valid + (0 if cross is None else cross)
    # A tiny ridge keeps the solve defined for directions the data never spans.
    ridge = 1e-6 * np.trace(gram) / gram.shape[0]
    return np.linalg.solve(gram + ridge * np.eye(gram.shape[0]), cross).astype(np.float32)


def _initial_draft(config, workdir: str) -> Tuple[Any, Optional[int]]:
    """(draft, grown_from): the draft the stage starts from, the section's `init_from` spec,
    else the recipe's finished draft stage. An `init_from` that already reads a target's
    encoder (an export of this stage) is continued: its adapter is the start, not a
    least-squares fit. With the section's `decoder_layers` above its own count, it is grown
    by identity blocks (`grown_from`: its own count; else None)."""
    section = _section(config)
    init_from = section.get("init_from", "") or ""
    if init_from:
        draft = stages.load_spec(init_from)
    elif not trainer_lib.is_done(stages.stage_dir(workdir, stages.DRAFT)):
        raise RuntimeError(f"The draft stage in {stages.stage_dir(workdir, stages.DRAFT)} has "
                           f"not finished; set init_from in the recipe's {STAGE} section or "
                           "run --stage draft first.")
    else:
        draft = stages.load_trained(config, workdir, stages.DRAFT, config.export.weights)
    layers, have = int(section.get("decoder_layers", 0) or 0), draft.config.num_decoder_layers
    if not layers or layers == have:
        return draft, None
    # Deeper: the starting draft plus identity blocks (`depth.grow_decoder`).
    return depth.grow_decoder(draft, layers, seed=int(config.seeds.get("grow", 0))), have


def build_adapted_draft(config, workdir: str, target, data, fit: bool = True
                        ) -> AdaptedDraft:
    """The draft to start from (`_initial_draft`) with an adapter for `target`: its own
    when it already has one (checked against `target`), else fitted by least squares on the
    training prompts when `fit`, else zeros (to be restored from a checkpoint)."""
    section = _section(config)
    draft, grown_from = _initial_draft(config, workdir)
    vocabulary = _draft_vocabulary(config, draft, data)
    draft.set_draft_vocabulary(None)  # Trained on all tokens; export restores the vocabulary.
    continued = draft.reads_target_encoder
    if continued:
        draft.bind(target)  # one line if its adapter was fitted to another target
        projection = draft.target_encoder_projection.numpy()
    elif fit:
        projection = fit_projection(target, draft, data.train,
                                    int(section.get("fit_prompts", 1500)))
    else:
        projection = np.zeros([target.config.d_model, draft.config.d_model], np.float32)
    draft.attach_target_encoder(projection, target_binding.target_fingerprint(target),
                                section.get("target_from", "") or "")
    return AdaptedDraft(draft, vocabulary, continued, grown_from)


def _draft_vocabulary(config, draft, data) -> Optional[np.ndarray]:
    """The draft vocabulary of the stage's export: the section's `draft_vocab_size` most
    frequent target tokens of the training examples (EOS always in), or with no size (0),
    the starting draft's own (None: all tokens). int32 [size] sorted, or None."""
    size = _draft_vocab_size(config, draft)
    if not size:
        return draft.draft_vocab_ids
    return examples_lib.frequent_target_tokens(
        data.train, draft.vocab_size, size,
        always=[i for i in (draft.eos_id,) if i is not None])


def _configured_vocab_size(section) -> int:
    """The section's `draft_vocab_size`; 0 when unset (keep the starting draft's)."""
    return int(section.get("draft_vocab_size", 0) or 0)


def _draft_vocab_size(config, draft) -> int:
    """The section's `draft_vocab_size` (0: none), checked against `draft`'s vocabulary."""
    size = _configured_vocab_size(_section(config))
    if not 0 <= size <= draft.vocab_size:
        raise ValueError(f"{STAGE}.draft_vocab_size is {size}; expected 1..{draft.vocab_size} "
                         "(the draft's vocabulary size), or 0 to keep the starting draft's")
    return size


def resize_draft_vocabulary(config, workdir: str, zoo_dir: Optional[str], data
                            ) -> Dict[str, Any]:
    """Gives the exported draft ZOO_DIR/<export.target_encoder_draft_name> the draft
    vocabulary of the section's `draft_vocab_size` (`_draft_vocabulary`) without retraining
    it: its decoder was trained on all tokens, so the vocabulary only chooses which of its
    columns a decode step computes. Measures acceptance on the held-out prompts with the
    draft's vocabulary before and after, then rewrites its draft_vocabulary.json.

    Why: q = 0 outside the vocabulary, so the target's mass there is never accepted. At
    T = 1 that mass is not small: the embedded draft's 2048 tokens cover 93% of the
    training targets' tokens and hold its held-out beta at 0.649 where all 8192 give 0.671
    (the draft's model card, "Draft vocabulary").

    Returns:
      The metrics (also WORKDIR/target_encoder_draft_vocabulary/metrics.json): the sizes
      and `acceptance` {"before": [T = 0, T = 1], "after": [...]}.
    """
    from tfspec import checkpoints  # pylint: disable=g-import-not-at-top
    from tfspec.training import export as export_lib  # pylint: disable=g-import-not-at-top
    export = config.export
    directory = export_lib.exported_directory(zoo_dir, export.target_encoder_draft_name,
                                              EXPORT_STAGE, "draft checkpoint")
    draft = checkpoints.load_model(directory, dtype="float32")
    if not _draft_vocab_size(config, draft):
        raise ValueError(f"set {STAGE}.draft_vocab_size (e.g. --set "
                         f"{STAGE}.draft_vocab_size=4096) to give the draft a new vocabulary")
    target = feature_draft_training.frozen_target(config, workdir, _section(config))
    draft.bind(target)
    before = draft.draft_vocab_ids
    after = _draft_vocabulary(config, draft, data)
    prompts = export_lib.heldout_prompts(data, export.num_prompts)
    acceptance = {}
    for label, vocabulary in (("before", before), ("after", after)):
        draft.set_draft_vocabulary(vocabulary)
        acceptance[label] = export_lib.measure_both_temperatures(target, draft, prompts,
                                                                 export)
    path = checkpoints.save_draft_vocabulary(draft, directory)
    metrics = {"draft": directory, "path": path,
               "size_before": None if before is None else len(before), "size_after": len(after),
               "acceptance": acceptance}
    feature_draft_training.write_stage_result(stages.stage_dir(workdir, VOCABULARY_STAGE),
                                              metrics, {"path": path})
    return metrics


def _objective(config, target) -> TargetEncoderDistillation:
    section = _section(config)
    return TargetEncoderDistillation(
        target, label_weight=section.get("label_weight", 0.1),
        temperature=section.get("temperature", 1.0),
        divergence=section.get("divergence", "forward_kl"))


def train_target_encoder_draft(config, workdir: str, data, max_steps: Optional[int] = None,
                               progress: bool = True) -> Dict[str, Any]:
    """Fits the adapter and distills the draft reading it; returns the trainer's summary.
    Resumable: the trainer restores its last checkpoint (the fitted start is then
    overwritten by it)."""
    target = feature_draft_training.frozen_target(config, workdir, _section(config))
    model = build_adapted_draft(config, workdir, target, data)
    directory = stages.stage_dir(workdir, STAGE)
    os.makedirs(directory, exist_ok=True)
    info = {"role": STAGE, "parameters": stages.parameter_count(model),
            "model_config": model.draft.config.to_dict(), "continued": model.continued,
            "grown_from": model.grown_from,
            "train": examples_lib.token_counts(data.train),
            "validation": examples_lib.token_counts(data.validation),
            "recipe": json.loads(config.to_json())}
    with open(os.path.join(directory, "stage.json"), "w", encoding="utf-8") as f:
        json.dump(info, f, indent=2, default=str)
        f.write("\n")
    # The target's greedy continuations too: the corpus alone never shows the draft the
    # target's own habits (a token repeated to the end of the window), and a draft
    # fine-tuned without them is rejected on almost every token of such a request.
    generated = stages.target_generated(config, workdir, target, data, progress, stage=STAGE)
    # Optionally its sampled ones (and greedy ones of other prompts): the prefixes sampled
    # decoding verifies on, which the corpus and greedy text rarely show.
    sampled, greedy = stages.bound_draft_continuations(config, workdir, STAGE, target, data)
    trainer = stages.make_trainer(config, workdir, STAGE, model, _objective(config, target),
                                  data, max_steps, progress,
                                  train_examples=list(data.train) + generated + sampled
                                  + greedy)
    return trainer.run()


def load_trained_draft(config, workdir: str, target, data, weights: str = "best"):
    """The trained draft of `workdir` (with its adapter and the init draft's vocabulary)."""
    model = build_adapted_draft(config, workdir, target, data, fit=False)
    feature_draft_training.restore_trained(model, workdir, STAGE, weights)
    return model.draft.set_draft_vocabulary(model.draft_vocabulary)


def export_target_encoder_draft(config, workdir: str, zoo_dir: Optional[str], data
                                ) -> Dict[str, Any]:
    """Exports the trained draft to ZOO_DIR/<export.target_encoder_draft_name>, measured
    (reloaded, bound) beside the section's `compare_draft`; writes its model card."""
    from tfspec import checkpoints  # pylint: disable=g-import-not-at-top
    target = feature_draft_training.frozen_target(config, workdir, _section(config))
    name = config.export.target_encoder_draft_name
    card_path = os.path.join(os.fspath(zoo_dir or checkpoints.ZOO_DIR), name, "MODEL_CARD.md")
    before = _card_before(card_path)
    return feature_draft_training.export_bound_draft(
        config, workdir, zoo_dir, data, stage=STAGE, export_stage=EXPORT_STAGE,
        name=name, max_mb=config.export.target_encoder_draft_max_mb, target=target,
        load_fn=lambda: load_trained_draft(config, workdir, target, data,
                                           config.export.weights),
        objective=_objective(config, target),
        card_fn=lambda *args: _model_card(*args) + before)


BEFORE_HEADING = "## The draft before this fine-tune"


def _card_before(path: str) -> str:
    """The model card section that keeps what an export over an existing draft would lose:
    the card already at `path` (the draft stage's export, when this stage replaces the
    embedded draft), under `BEFORE_HEADING`; from a card this stage wrote, its own such
    section. "" when there is no card."""
    if not os.path.isfile(path):
        return ""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if BEFORE_HEADING in text:
        body = text.split(BEFORE_HEADING, 1)[1]
    else:
        lines = text.splitlines()
        body = "\n".join(lines[1:] if lines and lines[0].startswith("# ") else lines)
        # Its headings one level down, under ours.
        body = "\n".join("#" + line if line.startswith("## ") else line
                         for line in body.splitlines())
    return f"\n{BEFORE_HEADING}\n\n{body.strip()}\n"


def fit_target_encoder_adapter(config, workdir: str, zoo_dir: Optional[str], data
                               ) -> Dict[str, Any]:
    """Step 1 alone, for a draft that keeps its weights: fits the least-squares projection of
    the section's `init_from` draft for its target and writes it beside that draft as
    ZOO_DIR/<export.adapter_draft_name>/target_encoder.safetensors (the draft's own files
    are not touched). Measures acceptance of the draft reloaded from there (with the
    adapter) and of the same draft running its own encoder, on the same held-out prompts.

    Returns:
      The metrics (also WORKDIR/target_encoder_adapter/metrics.json).
    """
    from tfspec import checkpoints  # pylint: disable=g-import-not-at-top
    from tfspec.training import export as export_lib  # pylint: disable=g-import-not-at-top
    section, export = _section(config), config.export
    target = feature_draft_training.frozen_target(config, workdir, section)
    draft, _ = _initial_draft(config, workdir)
    projection = fit_projection(target, draft, data.train, int(section.get("fit_prompts", 1500)))
    draft.attach_target_encoder(projection, target_binding.target_fingerprint(target),
                                section.get("target_from", "") or "")
    out_dir = os.path.join(os.fspath(zoo_dir or checkpoints.ZOO_DIR), export.adapter_draft_name)
    if not os.path.isfile(os.path.join(out_dir, checkpoints.CONFIG_FILE)):
        raise FileNotFoundError(f"{out_dir} holds no draft checkpoint to put the adapter "
                                "beside; export the draft there first")
    if os.path.isfile(os.path.join(out_dir, checkpoints.TARGET_ENCODER_FILE)):
        # The shipped draft's decoder was fine-tuned for its adapter: a least-squares fit
        # for its own encoder would silently replace it.
        raise FileExistsError(f"{out_dir} already reads its target's encoder; export the "
                              "draft stage afresh (--stage export --zoo_dir DIR) and pass the "
                              "same --zoo_dir here")
    path = checkpoints.save_target_encoder(draft, out_dir)
    adapted = checkpoints.load_model(out_dir, dtype="float32")
    own = checkpoints.load_model(out_dir, dtype="float32").detach_target_encoder()
    prompts = export_lib.heldout_prompts(data, export.num_prompts)
    acceptance = {label: export_lib.measure_both_temperatures(target, model, prompts, export)
                  for label, model in (("target encoder", adapted), ("own encoder", own))}
    metrics = {"adapter": path, "fit_prompts": int(section.get("fit_prompts", 1500)),
               "acceptance": acceptance}
    feature_draft_training.write_stage_result(stages.stage_dir(workdir, ADAPTER_STAGE),
                                              metrics, {"adapter": path})
    return metrics


def _continuations_text(section) -> str:
    """What the stage's recipe adds to the corpus, for the model card."""
    parts = []
    for key, temperature in (("generated_prompts", section.get("generated_temperature", 0.0)),
                             ("sampled_prompts", section.get("sampled_temperature", 1.0)),
                             ("greedy_prompts", 0.0)):
        count = int(section.get(key, 0) or 0)
        if count:
            what = "greedy" if not temperature else f"sampled (T = {temperature:g})"
            parts.append(f"{what} continuations of {count} training prompts")
    return ("the target's " + " and ".join(parts)) if parts else "nothing else"


def _vocabulary_text(section) -> str:
    """The model card's line on the export's draft vocabulary."""
    size = _configured_vocab_size(section)
    if not size:
        return "- Draft vocabulary: the starting draft's (`draft_vocabulary.json`, if any)."
    return (f"- Draft vocabulary: the {size} most frequent target tokens of the training "
            "examples, EOS included (`draft_vocabulary.json`; decode steps compute only "
            "those columns, q = 0 elsewhere; `set_draft_vocabulary(None)` restores all).")


def _model_card(config, metrics: Dict[str, Any], info: Dict[str, Any]) -> str:
    section, export = _section(config), config.export
    model = info["model_config"]
    done, validation = metrics["training"], metrics["validation"]
    compare = section.get("compare_draft", "") or ""
    fmt = feature_draft_training.format_metric

    lines = [
        f"# {metrics['name']}",
        "",
        f"A T5 draft for `{metrics['target'] or 'its target'}` that reads the target's "
        "encoder output instead of running an encoder of its own: its cross-attention "
        "reads encoder_states @ P, with P [target d_model, draft d_model] in "
        "`target_encoder.safetensors` (`T5.attach_target_encoder`), so a speculative "
        "request runs one encoder, not two. Verified by the exact rule: the output "
        "distribution is the target's.",
        "",
        "```python",
        "target = tfspec.load_model(\"zoo:tiny-code-target\")",
        f"draft = tfspec.load_model(\"zoo:{metrics['name']}\")",
        "tfspec.generate(target, prompts, draft=draft, k=4)",
        "```",
        "",
        "It refuses any other target with a one-line error (fingerprint of its target in "
        "the adapter's metadata); `draft.detach_target_encoder()` runs its own encoder "
        "again, which its decoder was not fine-tuned for.",
        "",
        "## Model",
        "",
        f"- Parameters: {metrics['parameters']:,} ({metrics['size_mb']:.1f} MB as "
        f"{export.dtype} safetensors, the adapter beside it in float32).",
        f"- Shape: d_model {model['d_model']}, {model['num_heads']} heads x d_kv "
        f"{model['d_kv']}, d_ff {model['d_ff']}, {model['num_decoder_layers']} decoder "
        f"layer(s); started from `{section.get('init_from', '') or 'the recipe draft'}`"
        + (f" ({info['grown_from']} decoder layer(s)), grown by identity blocks "
           "(`tfspec.training.depth.grow_decoder`)." if info.get("grown_from") else "."),
        _vocabulary_text(section),
        "",
        "## Training",
        "",
        ("- Continued from that draft's adapter (it already read the target's encoder), "
         if info.get("continued") else
         f"- Projection fitted by least squares from the target's encoder output to the "
         f"draft's own over {section.get('fit_prompts', 1500)} training prompts, then ")
        + f"the decoder and the projection distilled from the frozen target "
        f"({section.get('divergence', 'forward_kl')} at temperature "
        f"{section.get('temperature', 1.0)} plus {section.get('label_weight', 0.1)} x label "
        "cross-entropy) with the draft reading the projected target encoder output, on the "
        f"training examples plus {_continuations_text(section)}.",
        f"- AdamW, peak lr {section.learning_rate}, {section.warmup_steps} warm-up steps, "
        f"{section.decay} decay, about {config.data.batch_tokens} padded tokens per batch; "
        f"{done['steps']} steps ({done['epochs']:.2f} epochs), "
        f"{done['elapsed_s'] / 60:.0f} min on a 2-core CPU.",
        f"- Held-out (validation split, teacher-forced): KL(target || draft) "
        f"{fmt(validation.get('kl'))}, overlap sum_x min(p, q) "
        f"{fmt(validation.get('overlap'))}.",
        "",
        "## Speculative decoding",
        "",
        f"`tfspec.generate` on {export.num_prompts} held-out completion prompts, k = "
        f"{export.k}, max_new_tokens {export.max_new_tokens}"
        + (f", beside `{compare}` on the same prompts:" if compare
           else ":"),
        "",
    ]
    lines += feature_draft_training.acceptance_table(metrics["acceptance"])
    lines += [
        "",
        "Speed: `python -m bench.speedup --draft zoo:" + metrics["name"] + "`.",
        "",
        "## Reproduce",
        "",
        "```",
    ] + ([] if section.get("init_from", "") else [
        "python -m recipes.tiny_code.train --config configs/zoo_tiny_code.py --stage all",
    ]) + [
        "python -m recipes.tiny_code.train --config configs/zoo_tiny_code_draft_te.py "
        f"--stage {STAGE}",
        "python -m recipes.tiny_code.train --config configs/zoo_tiny_code_draft_te.py "
        f"--stage {EXPORT_STAGE}",
        "```",
        "",
    ]
    return "\n".join(lines)
