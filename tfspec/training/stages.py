"""The stages of a training recipe: target, draft (the export stage is in export.py).

A recipe is an `ml_collections.ConfigDict` (see `configs/zoo_tiny_code.py`), its tokenized
`Data` (built by the recipe, e.g. `recipes.tiny_code.data.load_data`) and a workdir:

    WORKDIR/target/   Trainer outputs of the target (label cross-entropy)
    WORKDIR/draft/    Trainer outputs of the draft (distillation from the frozen target)
    WORKDIR/export/   metrics.json of the exported pair

Every stage is resumable and skipped once its `DONE.json` exists (see `trainer.Trainer`).
"""

import dataclasses
import json
import os
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from tfspec import tokenizer as tokenizer_lib
from tfspec.models import T5, T5Config
from tfspec.training import distill
from tfspec.training import examples as examples_lib
from tfspec.training import losses
from tfspec.training import optim
from tfspec.training import trainer as trainer_lib

TARGET = "target"
DRAFT = "draft"
EXPORT = "export"
STAGES = (TARGET, DRAFT, EXPORT)


@dataclasses.dataclass
class Data:
    """The tokenized data of a recipe.

    Attributes:
      tokenizer: the `tfspec.Tokenizer`.
      corpus: the source records: `completion(split)` / `docsum(split)` lists and a
        `manifest` dict (e.g. `recipes.tiny_code.corpus.CodeCorpus`).
      train, validation: lists of `Example`.
      corpus_roots: directories the corpus was mined from.
    """

    tokenizer: Any
    corpus: Any
    train: List[examples_lib.Example]
    validation: List[examples_lib.Example]
    corpus_roots: Tuple[str, ...]


def tokenizer_path(config) -> str:
    return config.data.get("tokenizer") or tokenizer_lib.TINY_CODE_TOKENIZER


def batches(config, examples: Sequence[examples_lib.Example], train: bool,
            seed: int) -> examples_lib.BucketedBatches:
    data = config.data
    return examples_lib.BucketedBatches(
        examples, batch_tokens=data.batch_tokens, encoder_buckets=data.encoder_buckets,
        target_buckets=data.target_buckets, seed=seed, shuffle=train)


def model_config(config, role: str) -> T5Config:
    """The `T5Config` of "target" or "draft" (vocabulary from the config's model section)."""
    return T5Config(**dict(config.model[role]))


def build_model(config, role: str) -> T5:
    """A freshly initialised float32 T5 of `role` ("target" or "draft").

    HF's initialisation draws an untied LM head from N(0, 1), which makes the initial logits
    of a from-scratch model about sqrt(d_model) in scale (an initial loss of 20+ nats); here
    the head is drawn from N(0, 1/d_model) instead, so the initial logits are O(1), as they
    are for a tied head (which is rescaled by d_model**-0.5).
    """
    model_config_ = model_config(config, role)
    model = T5(model_config_, seed=config.seeds[role], dtype="float32", name=f"t5_{role}")
    if model.lm_head is not None:
        rng = np.random.default_rng([config.seeds[role], 1])
        head = rng.standard_normal(tuple(model.lm_head.shape), dtype=np.float32)
        model.lm_head.assign(head * np.float32(model_config_.d_model ** -0.5))
    return model


def parameter_count(model) -> int:
    return int(sum(int(np.prod(v.shape)) for v in model.weights))


def _optimizer(model, stage_config):
    return optim.make_optimizer(
        model, learning_rate=stage_config.learning_rate,
        warmup_steps=stage_config.warmup_steps, decay=stage_config.decay,
        total_steps=stage_config.steps, final_fraction=stage_config.get("final_fraction", 0.0),
        weight_decay=stage_config.weight_decay, clip_norm=stage_config.clip_norm)


def stage_dir(workdir: str, stage: str) -> str:
    return os.path.join(workdir, stage)


def make_trainer(config, workdir: str, role: str, model, objective, data: Data,
                 max_steps: Optional[int], progress: bool,
                 train_examples: Optional[Sequence[examples_lib.Example]] = None
                 ) -> trainer_lib.Trainer:
    """The `Trainer` of stage `role`: its config section, WORKDIR/role, its data seed."""
    stage_config = config[role]
    steps = int(max_steps if max_steps is not None else stage_config.steps)
    train_examples = data.train if train_examples is None else train_examples
    return trainer_lib.Trainer(
        model, objective, _optimizer(model, stage_config),
        batches(config, train_examples, train=True,
                seed=config.seeds.get(f"{role}_data", config.seeds["draft_data"])),
        stage_dir(workdir, role), max_steps=steps,
        valid_batches=batches(config, data.validation, train=False, seed=0),
        eval_every=stage_config.eval_every, checkpoint_every=stage_config.checkpoint_every,
        log_every=stage_config.log_every, keep=stage_config.keep, progress=progress,
        name=role)


def _write_stage_info(config, workdir: str, role: str, model, data: Data):
    directory = stage_dir(workdir, role)
    os.makedirs(directory, exist_ok=True)
    info = {"role": role, "parameters": parameter_count(model),
            "model_config": model_config(config, role).to_dict(),
            "train": examples_lib.token_counts(data.train),
            "validation": examples_lib.token_counts(data.validation),
            "corpus_roots": list(data.corpus_roots),
            "corpus_counts": data.corpus.manifest.get("counts"),
            "recipe": json.loads(config.to_json())}
    with open(os.path.join(directory, "stage.json"), "w", encoding="utf-8") as f:
        json.dump(info, f, indent=2, default=str)
        f.write("\n")


def load_trained(config, workdir: str, role: str, weights: str = "best") -> T5:
    """A model of `role` with the weights of its finished stage.

    Args:
      weights: "best" (best validation loss; falls back to the last checkpoint when the stage
        never validated) or "final" (the last checkpoint).
    """
    model = build_model(config, role)
    directory = stage_dir(workdir, role)
    best = os.path.join(directory, trainer_lib.BEST_DIR)
    if weights == "best" and os.path.exists(os.path.join(best, "checkpoint")):
        trainer_lib.restore_weights(model, best)
    else:
        trainer_lib.restore_weights(model, os.path.join(directory, trainer_lib.CHECKPOINT_DIR))
    return model


def train_target(config, workdir: str, data: Data, max_steps: Optional[int] = None,
                 progress: bool = True) -> Dict[str, Any]:
    """Trains the target on the label cross-entropy of both tasks; returns the summary."""
    model = build_model(config, TARGET)
    _write_stage_info(config, workdir, TARGET, model, data)
    trainer = make_trainer(config, workdir, TARGET, model, losses.LabelObjective(), data,
                       max_steps, progress)
    return trainer.run()


def train_draft(config, workdir: str, data: Data, max_steps: Optional[int] = None,
                progress: bool = True) -> Dict[str, Any]:
    """Distills the draft from the frozen target; returns the summary.

    The recipe's draft section chooses (all optional, defaults in brackets):
      divergence        one of `distill.DIVERGENCES` ["forward_kl"]
      target_from       a `tfspec.load_model` spec of the frozen target ["": this workdir's
                        finished target stage]
      init_from         a `tfspec.load_model` spec whose weights start the draft ["": fresh]
      generated_prompts the target's continuations of this many training prompts [0]
      on_policy_prompts the draft's own samples (at `on_policy_temperature`, default 1) of
                        this many training prompts, drawn from its weights at the start of
                        the stage [0]
    """
    target_from = config.draft.get("target_from", "") or ""
    if target_from:
        target = load_spec(target_from)
    elif not trainer_lib.is_done(stage_dir(workdir, TARGET)):
        raise RuntimeError(f"The target stage in {stage_dir(workdir, TARGET)} has not "
                           "finished; run --stage target first (or --stage all).")
    else:
        target = load_trained(config, workdir, TARGET, config.export.weights)
    target.trainable = False
    model = build_model(config, DRAFT)
    init_from = config.draft.get("init_from", "") or ""
    if init_from:
        copy_weights(load_spec(init_from), model, init_from)
    _write_stage_info(config, workdir, DRAFT, model, data)
    objective = distill.DistillationObjective(
        target, label_weight=config.draft.label_weight, temperature=config.draft.temperature,
        divergence=config.draft.get("divergence", "forward_kl"))
    generated = target_generated(config, workdir, target, data, progress)
    on_policy = draft_sampled(config, workdir, model, data, progress)
    trainer = make_trainer(config, workdir, DRAFT, model, objective, data, max_steps, progress,
                       train_examples=list(data.train) + generated + on_policy)
    return trainer.run()


def load_spec(spec: str) -> T5:
    """A float32 T5 from a `tfspec.load_model` spec (a directory, zoo:NAME, ...)."""
    from tfspec import checkpoints  # Local: loading pulls in the checkpoint formats.
    return checkpoints.load_model(spec, dtype="float32")


def copy_weights(source: T5, model: T5, name: str = "the source"):
    """Copies every weight of `source` into `model` (same architecture), by checkpoint name.

    Raises:
      ValueError: the two models' weights differ in names or shapes.
    """
    have, want = source.hf_weight_map(), model.hf_weight_map()
    if set(have) != set(want):
        raise ValueError(f"{name} does not match the recipe's draft: weights "
                         f"{sorted(set(have) ^ set(want))[:3]} are in only one of them.")
    for key, (variable, _) in want.items():
        value = have[key][0]
        if tuple(value.shape) != tuple(variable.shape):
            raise ValueError(f"{name} does not match the recipe's draft: {key} is "
                             f"{tuple(value.shape)}, the recipe's is {tuple(variable.shape)}.")
        variable.assign(value.numpy() if hasattr(value, "numpy") else value)


GENERATED_FILE = "generated.jsonl"
ON_POLICY_FILE = "on_policy.jsonl"


def target_generated(config, workdir: str, target, data: Data, progress: bool = False,
                     stage: str = DRAFT) -> List[examples_lib.Example]:
    """The target's continuations of `generated_prompts` training prompts, as the recipe's
    `stage` section asks (keys `generated_prompts` [0], `generated_temperature` [0],
    `generated_max_new_tokens` [128], `generated_batch_size` [32]).

    Generated once and cached in WORKDIR/<stage>/generated.jsonl, so a resumed stage trains
    on the very same examples. The prompts are a seeded sample of the training examples
    (both tasks).
    """
    section = config[stage]
    return continuations(
        config, target, data, os.path.join(stage_dir(workdir, stage), GENERATED_FILE),
        "target's continuations", count=int(section.get("generated_prompts", 0) or 0),
        salt=7, temperature=float(section.get("generated_temperature", 0.0)),
        max_new_tokens=int(section.get("generated_max_new_tokens", 128)),
        batch_size=int(section.get("generated_batch_size", 32)), id_prefix="generated",
        progress=progress)


def draft_sampled(config, workdir: str, draft_model, data: Data,
                  progress: bool = False) -> List[examples_lib.Example]:
    """The draft's own samples ("on-policy" data) of `draft.on_policy_prompts` prompts.

    Sampled from the draft's weights at the start of the stage (fresh or `init_from`) at
    `draft.on_policy_temperature` (default 1), cached in WORKDIR/draft/on_policy.jsonl; the
    target scores them on the fly like any other example. Another seeded sample of the
    training prompts than the target's continuations.
    """
    draft = config.draft
    return continuations(
        config, draft_model, data, os.path.join(stage_dir(workdir, DRAFT), ON_POLICY_FILE),
        "draft's own samples", count=int(draft.get("on_policy_prompts", 0) or 0), salt=11,
        temperature=float(draft.get("on_policy_temperature", 1.0)),
        max_new_tokens=int(draft.get("on_policy_max_new_tokens",
                                     draft.get("generated_max_new_tokens", 128))),
        batch_size=draft.generated_batch_size, id_prefix="on_policy", progress=progress)


SAMPLED_FILE = "sampled.jsonl"
GREEDY_FILE = "greedy.jsonl"


def bound_draft_continuations(config, workdir: str, stage: str, target, data: Data
                              ) -> Tuple[List[examples_lib.Example],
                                         List[examples_lib.Example]]:
    """(sampled, greedy): the target's continuations a bound draft's stage (feature draft,
    Medusa heads) trains on, as the recipe's `stage` section asks: `sampled_prompts` [0]
    training prompts at `sampled_temperature` [1] (the prefixes sampled decoding verifies
    on) and `greedy_prompts` [0] other ones decoded greedily (the prefixes greedy decoding
    verifies on: more repetitive and confident), at most `sampled_max_new_tokens` [128]
    tokens each, `sampled_batch_size` [32] prompts per call. Generated once and cached in
    WORKDIR/<stage>/sampled.jsonl and greedy.jsonl."""
    section, directory = config[stage], stage_dir(workdir, stage)
    common = dict(max_new_tokens=int(section.get("sampled_max_new_tokens", 128)),
                  batch_size=int(section.get("sampled_batch_size", 32)), progress=False)
    sampled = continuations(
        config, target, data, os.path.join(directory, SAMPLED_FILE),
        "target's sampled continuations", count=int(section.get("sampled_prompts", 0) or 0),
        salt=13, temperature=float(section.get("sampled_temperature", 1.0)),
        id_prefix="sampled", **common)
    greedy = continuations(
        config, target, data, os.path.join(directory, GREEDY_FILE),
        "target's greedy continuations", count=int(section.get("greedy_prompts", 0) or 0),
        salt=17, temperature=0.0, id_prefix="greedy", **common)
    return sampled, greedy


def continuations(config, model, data: Data, path: str, what: str, count: int, salt: int,
                  temperature: float, max_new_tokens: int, batch_size: int, id_prefix: str,
                  progress: bool) -> List[examples_lib.Example]:
    """`count` continuations by `model` of a seeded sample of training prompts, cached in
    `path` (JSONL; a resumed stage reads the very same examples back)."""
    if not count:
        return []
    wanted = min(count, len(data.train))
    if os.path.exists(path):
        cached = distill.load_examples(path)
        if len(cached) != wanted:
            # A resumed stage must train on what it started with; a changed count would
            # otherwise be silently ignored (and misreported in the model card).
            raise ValueError(f"{path} holds the {what} of {len(cached)} prompts but the "
                             f"recipe asks for {wanted}; restore the recipe's count or "
                             "delete the file to generate them again.")
        return cached
    rng = np.random.default_rng([config.seeds["draft_data"], salt])
    picked = np.sort(rng.choice(len(data.train), size=wanted, replace=False))
    log(f"[train] generating the {what} of {len(picked)} training prompts "
        f"(temperature {temperature:g})")
    generated = distill.generated_examples(
        model, [data.train[i] for i in picked],
        max_new_tokens=min(max_new_tokens, config.data.max_target_length),
        batch_size=batch_size, temperature=temperature,
        seed=config.seeds["draft_data"], progress=progress, id_prefix=id_prefix)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    distill.save_examples(path, generated)
    return generated


def validate_config(config):
    """Checks a recipe's consistency; returns it, or raises ValueError naming the problem."""
    for section in ("data", "model", "seeds", TARGET, DRAFT, EXPORT):
        if section not in config:
            raise ValueError(f"The recipe has no {section!r} section.")
    data = config.data
    for task in data.tasks:
        if task not in examples_lib.TASKS:
            raise ValueError(f"Unknown task {task!r} in data.tasks; tasks: "
                             f"{', '.join(examples_lib.TASKS)}.")
    if max(data.encoder_buckets) < data.max_encoder_length:
        raise ValueError(f"The largest encoder bucket ({max(data.encoder_buckets)}) must hold "
                         f"data.max_encoder_length ({data.max_encoder_length}).")
    if max(data.target_buckets) < data.max_target_length:
        raise ValueError(f"The largest target bucket ({max(data.target_buckets)}) must hold "
                         f"data.max_target_length ({data.max_target_length}).")
    target, draft = model_config(config, TARGET), model_config(config, DRAFT)
    if target.vocab_size != draft.vocab_size:
        raise ValueError(f"Target and draft must share the vocabulary: target vocab_size "
                         f"{target.vocab_size} != draft vocab_size {draft.vocab_size}.")
    for role in (TARGET, DRAFT):
        stage = config[role]
        if not 1 <= stage.warmup_steps < stage.steps:
            raise ValueError(f"{role}.warmup_steps ({stage.warmup_steps}) must be in "
                             f"[1, {role}.steps = {stage.steps}).")
        if stage.decay not in optim.DECAYS:
            raise ValueError(f"{role}.decay must be one of {optim.DECAYS}.")
    divergence = config.draft.get("divergence", "forward_kl")
    if divergence not in distill.DIVERGENCES:
        raise ValueError(f"draft.divergence must be one of {', '.join(distill.DIVERGENCES)}; "
                         f"got {divergence!r}.")
    if config.export.weights not in ("best", "final"):
        raise ValueError("export.weights must be 'best' or 'final'.")
    if config.export.dtype not in ("bfloat16", "float32"):
        raise ValueError("export.dtype must be 'bfloat16' or 'float32'.")
    return config


def stage_done(workdir: str, stage: str, max_steps: Optional[int] = None,
               config=None) -> bool:
    """Whether `stage` finished in `workdir`.

    With `config` (and optionally `max_steps`), a training stage counts as finished only if
    it reached the steps this invocation asks for, so a run capped by `--max_steps` is
    continued, not skipped, by a later run with more steps.
    """
    directory = stage_dir(workdir, stage)
    if not trainer_lib.is_done(directory):
        return False
    if stage == EXPORT or config is None:
        return True
    wanted = int(max_steps if max_steps is not None else config[stage].steps)
    return trainer_lib.read_done(directory)["steps"] >= wanted


def log(message: str):
    print(message, file=sys.stderr, flush=True)
