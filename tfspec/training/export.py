"""The export stage: ship the trained pair to the zoo, measure it, write the model cards.

    export_pair(config, workdir, zoo_dir, data)

writes `ZOO_DIR/<target name>/` and `ZOO_DIR/<draft name>/` in the common checkpoint layout
(`config.json`, bfloat16 `model.safetensors`, `spiece.model`) plus a `MODEL_CARD.md` each,
reloads both with `tfspec.load_model` (so what is measured is what ships), and measures the
pair with `tfspec.generate` on held-out completion prompts (the validation split): the
acceptance rate at temperature 0 and 1, and, at batch 1, ms per token of the target alone
(k = 0) and of speculative decoding. The numbers go to the model cards and to
`WORKDIR/export/metrics.json`.
"""

import json
import os
import platform
import shutil
import time
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import tensorflow as tf

import tfspec
from tfspec import checkpoints
from tfspec.training import distill
from tfspec.training import examples as examples_lib
from tfspec.training import stages
from tfspec.training import trainer as trainer_lib

_MB = 1024 * 1024


def _directory_bytes(directory: str) -> int:
    return sum(os.path.getsize(os.path.join(directory, n)) for n in os.listdir(directory))


def heldout_prompts(data: "stages.Data", count: int, seed: int = 0) -> List[List[int]]:
    """Encoder ids of `count` validation completion prompts, a seeded sample.

    A sample rather than the first `count`: the corpus is sorted by id, so its head is a
    handful of modules.
    """
    prompts = [e.encoder_ids.tolist() for e in data.validation
               if e.task == examples_lib.COMPLETION]
    if len(prompts) <= count:
        return prompts
    picked = np.sort(np.random.default_rng(seed).choice(len(prompts), count, replace=False))
    return [prompts[i] for i in picked]


def measure_acceptance(target, draft, prompts: Sequence[Sequence[int]], k: int,
                       max_new_tokens: int, temperature: float, batch_size: int = 16,
                       seed: int = 0) -> Dict[str, float]:
    """Decodes `prompts` speculatively and returns the pooled `DecodeStats` numbers."""
    parts = []
    for start in range(0, len(prompts), batch_size):
        chunk = list(prompts[start:start + batch_size])
        gen = tfspec.generate(target, chunk, draft=draft, k=k, max_new_tokens=max_new_tokens,
                              sampling=tfspec.Sampling(temperature=temperature), seed=seed,
                              row_keys=list(range(start, start + len(chunk))))
        parts.append(gen.stats)
    stats = tfspec.DecodeStats.concatenate(parts)
    return {"temperature": temperature, "k": k, "max_new_tokens": max_new_tokens,
            "prompts": len(prompts), "acceptance_rate": stats.acceptance_rate,
            "worst_row_acceptance": worst_row_acceptance(stats),
            "beta_mean": stats.beta_mean, "mean_tokens_per_round": stats.mean_tokens_per_round,
            "tokens": int(np.sum(stats.tokens)),
            "per_position_acceptance": [float(x) for x in stats.per_position_acceptance]}


def measure_both_temperatures(target, draft, prompts: Sequence[Sequence[int]],
                              export) -> List[Dict[str, float]]:
    """`measure_acceptance` greedy and at T = 1 with the recipe's `export` settings (k,
    max_new_tokens, batch_size; seed 0): what an export stage records per draft."""
    return [measure_acceptance(target, draft, prompts, export.k, export.max_new_tokens,
                               temperature, batch_size=export.batch_size, seed=0)
            for temperature in (0.0, 1.0)]


def exported_directory(zoo_dir: Optional[str], name: str, export_stage: str,
                       what: str) -> str:
    """ZOO_DIR/`name` (default zoo), which must hold an exported checkpoint.

    Raises:
      FileNotFoundError: it holds none (the message names `what` and `export_stage`).
    """
    directory = os.path.join(os.fspath(zoo_dir or checkpoints.ZOO_DIR), name)
    if not os.path.isfile(os.path.join(directory, checkpoints.CONFIG_FILE)):
        raise FileNotFoundError(f"{directory} holds no {what}; export one there first "
                                f"(--stage {export_stage})")
    return directory


def worst_row_acceptance(stats) -> Optional[float]:
    """The lowest acceptance rate of one request (a row that drafted at all), or None.

    A pooled rate can hide a draft that fails one kind of request outright: a fine-tuned draft
    that lost the target's repetition habit averaged 0.80 over 64 prompts while one of them
    accepted 8 of 203 drafted tokens. This number shows it.
    """
    drafted = np.asarray(stats.drafted, np.float64)
    accepted = np.asarray(stats.accepted, np.float64)
    rows = drafted > 0
    return float(np.min(accepted[rows] / drafted[rows])) if rows.any() else None


def measure_latency(target, draft, prompts: Sequence[Sequence[int]], k: int,
                    max_new_tokens: int) -> Dict[str, float]:
    """Greedy batch-1 ms/token: target alone (k=0), draft alone and speculative (k).

    Each prompt is decoded once to compile, then timed; times are summed over prompts.
    """
    greedy = tfspec.Sampling(temperature=0.0)
    results = {}
    for mode, model, other, kk in (("target_alone", target, None, 0),
                                   ("draft_alone", draft, None, 0),
                                   ("speculative", target, draft, k)):
        seconds = tokens = 0
        for prompt in prompts:
            tfspec.generate(model, [prompt], draft=other, k=kk, max_new_tokens=max_new_tokens,
                            sampling=greedy, eos_id=None)  # Compile this prompt bucket.
            start = time.perf_counter()
            gen = tfspec.generate(model, [prompt], draft=other, k=kk,
                                  max_new_tokens=max_new_tokens, sampling=greedy, eos_id=None)
            seconds += time.perf_counter() - start
            tokens += int(gen.lengths.sum())
        results[f"{mode}_ms_per_token"] = 1000.0 * seconds / max(tokens, 1)
    results["draft_cost_ratio"] = (results["draft_alone_ms_per_token"] /
                                   results["target_alone_ms_per_token"])
    results["speedup"] = (results["target_alone_ms_per_token"] /
                          results["speculative_ms_per_token"])
    results.update({"k": k, "max_new_tokens": max_new_tokens, "prompts": len(prompts),
                    "note": "batch 1, greedy, eos disabled; indicative only (shared CPU)"})
    return results


def _fmt(value, digits=3):
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _model_card(name: str, role: str, info: Dict[str, Any], done: Dict[str, Any],
                other_name: str, metrics: Dict[str, Any],
                config, size_bytes: int) -> str:
    counts = info["train"]
    corpus = info.get("corpus_counts") or {}
    model_config = info["model_config"]
    stage = config[role]
    acceptance = metrics["acceptance"]
    latency = metrics.get("latency") or {}
    lines = [
        f"# {name}",
        "",
        f"The {'target' if role == 'target' else 'draft'} of tfspec's embedded default pair "
        f"(`zoo:{metrics['target_name']}` + `zoo:{metrics['draft_name']}`): a T5 trained from "
        "scratch on Python source code that every machine has offline. Loaded with "
        f"`tfspec.load_model(\"zoo:{name}\")`; tokenizer: `spiece.model` in this directory "
        "(SentencePiece, vocabulary 8192, pad 0, EOS 1, UNK 2, round-trips code exactly).",
        "",
        "## Intended use",
        "",
        "A small, real model pair for running tfspec and its evaluations end to end without a "
        "network: code completion (encoder input = a HumanEval-style prompt as is: imports, "
        "signature, docstring; output = the function body) and one-line docstring "
        "summarisation (encoder input = `summarize: ` + function code). Its quality is that of "
        f"a {metrics['target']['parameters'] / 1e6:.0f}M-parameter target trained for "
        f"{metrics['target']['elapsed_s'] / 60:.0f} CPU minutes: useful to measure "
        "speculative decoding (acceptance, speed-up), not to write code.",
        "",
        "## Data",
        "",
        "`recipes.tiny_code.corpus`: functions with docstrings mined with `ast` from the Python "
        f"{platform.python_version()} standard library and these installed packages: "
        f"{', '.join(config.data.extra_packages) or 'none'} (test directories skipped; "
        "deduplicated by body AST; anything resembling a HumanEval problem excluded; "
        f"train/validation split by a hash of (seed={config.data.corpus_seed}, id)).",
        "",
        f"- Corpus pairs: {json.dumps(corpus)}",
        f"- Training examples (both tasks): {counts['examples']}, {counts['encoder_tokens']} "
        f"encoder tokens, {counts['target_tokens']} target tokens per epoch.",
        f"- Caps: encoder {config.data.max_encoder_length} tokens (completion keeps the end of "
        f"the prompt, docsum the start of the code), target {config.data.max_target_length} "
        "tokens (EOS only when not truncated).",
        "",
        "## Model",
        "",
        f"- Parameters: {info['parameters']:,} ({size_bytes / _MB:.1f} MB as bfloat16 "
        "safetensors).",
        f"- Shape: d_model {model_config['d_model']}, {model_config['num_heads']} heads x "
        f"d_kv {model_config['d_kv']}, d_ff {model_config['d_ff']} "
        f"({model_config['feed_forward_proj']}), {model_config['num_layers']} encoder / "
        f"{model_config['num_decoder_layers']} decoder layers, vocabulary "
        f"{model_config['vocab_size']}, tied embeddings: "
        f"{model_config['tie_word_embeddings']}. Full `config.json` beside this card.",
        "",
        "## Training",
        "",
    ]
    if role == stages.TARGET:
        lines.append("Label cross-entropy on both tasks, teacher forcing.")
    else:
        lines.append(
            f"Distilled from `{other_name}` (frozen): per-token KL(target || draft) on the "
            f"target's softmax at temperature {config.draft.temperature}, plus "
            f"{config.draft.label_weight} x label cross-entropy; the target's logits are "
            "computed on the fly on the same teacher-forced batches.")
    lines += [
        "",
        f"- Optimizer: AdamW (peak lr {stage.learning_rate}, {stage.warmup_steps} warm-up "
        f"steps, {stage.decay} decay, weight decay {stage.weight_decay}, clip "
        f"{stage.clip_norm}), about {config.data.batch_tokens} padded tokens per batch.",
        f"- Steps: {done['steps']} ({done['epochs']:.2f} epochs), target tokens seen "
        f"{done['tokens_seen']:,}, encoder tokens seen {done['input_tokens_seen']:,}, "
        f"training time {done['elapsed_s'] / 60:.0f} min on a 2-core CPU.",
        f"- Exported weights: {config.export.weights} (best validation loss, else last).",
        f"- Final train loss: {_fmt(done['final_train_loss'])}; final validation loss: "
        f"{_fmt(done['final_validation_loss'])}; best validation loss: "
        f"{_fmt(done['best_validation_loss'])} (nats/token"
        + (", KL + label term" if role == stages.DRAFT else "") + ").",
    ]
    lines += [
        f"- Held-out label cross-entropy: target {_fmt(metrics['validation']['target_ce'])}, "
        f"draft {_fmt(metrics['validation']['draft_ce'])} nats/token; draft KL to target "
        f"{_fmt(metrics['validation']['kl'])}; mean overlap sum_x min(p, q) "
        f"{_fmt(metrics['validation']['overlap'])}.",
        "",
        "## Speculative decoding with the pair",
        "",
        f"Measured at export with `tfspec.generate` on a seeded sample of "
        f"{acceptance[0]['prompts']} held-out "
        f"(validation) completion prompts, k = {acceptance[0]['k']}, max_new_tokens "
        f"{acceptance[0]['max_new_tokens']}, bfloat16 weights loaded as float32:",
        "",
        "| temperature | acceptance_rate | beta_mean | mean_tokens_per_round |",
        "| --- | --- | --- | --- |",
    ]
    for row in acceptance:
        lines.append(f"| {row['temperature']} | {_fmt(row['acceptance_rate'])} | "
                     f"{_fmt(row['beta_mean'])} | {_fmt(row['mean_tokens_per_round'])} |")
    if latency:
        lines += [
            "",
            f"Batch-1 greedy latency on {latency['prompts']} prompts ({latency['note']}): "
            f"target alone {_fmt(latency['target_alone_ms_per_token'], 2)} ms/token, draft "
            f"alone {_fmt(latency['draft_alone_ms_per_token'], 2)} ms/token (c = "
            f"{_fmt(latency['draft_cost_ratio'])}), speculative k={latency['k']} "
            f"{_fmt(latency['speculative_ms_per_token'], 2)} ms/token (speed-up "
            f"{_fmt(latency['speedup'], 2)}x). Use `python -m bench.speedup` for the "
            "benchmark.",
        ]
    lines += [
        "",
        "## Reproduce",
        "",
        "```",
        "python -m recipes.tiny_code.train --config configs/zoo_tiny_code.py --stage all",
        "```",
        "",
        "Resumable: re-running the same command continues from the last checkpoint "
        "(`~/.cache/tfspec/train/zoo_tiny_code` by default).",
        "",
    ]
    return "\n".join(lines)


def export_pair(config, workdir: str, zoo_dir: str, data: "stages.Data",
                measure_speed: bool = True) -> Dict[str, Any]:
    """Exports the trained target and draft, measures them, writes cards and metrics.

    Args:
      config: the recipe.
      workdir: the recipe's workdir (both training stages finished).
      zoo_dir: parent of the exported model directories; None = `tfspec/zoo`.
      data: the recipe's `stages.Data`.
      measure_speed: also time batch-1 decoding (skipped in tests).

    Returns:
      The metrics dict (also written to WORKDIR/export/metrics.json).

    Raises:
      RuntimeError: a training stage has not finished.
      ValueError: the exported pair exceeds `config.export.max_total_mb`.
    """
    for role in (stages.TARGET, stages.DRAFT):
        if not stages.stage_done(workdir, role):
            raise RuntimeError(f"The {role} stage in {stages.stage_dir(workdir, role)} has "
                               "not finished; run --stage all.")
    zoo_dir = os.fspath(zoo_dir or checkpoints.ZOO_DIR)
    export = config.export
    names = {stages.TARGET: export.target_name, stages.DRAFT: export.draft_name}
    spm = stages.tokenizer_path(config)
    directories, sizes = {}, {}
    for role in (stages.TARGET, stages.DRAFT):
        model = stages.load_trained(config, workdir, role, export.weights)
        model.tokenizer_path = spm
        directory = os.path.join(zoo_dir, names[role])
        if os.path.isdir(directory):
            shutil.rmtree(directory)
        checkpoints.save_model(model, directory, dtype=export.dtype)
        directories[role] = directory
        sizes[role] = _directory_bytes(directory) - os.path.getsize(
            os.path.join(directory, checkpoints.TOKENIZER_FILE))
    total_mb = sum(sizes.values()) / _MB
    if total_mb > export.max_total_mb:
        raise ValueError(f"The exported pair is {total_mb:.1f} MB of weights, more than "
                         f"export.max_total_mb = {export.max_total_mb}.")

    target = checkpoints.load_model(directories[stages.TARGET])
    draft = checkpoints.load_model(directories[stages.DRAFT])

    # Held-out losses of the shipped (bfloat16-rounded) weights, on the validation split.
    objective = distill.DistillationObjective(target, label_weight=0.0)
    validation = trainer_lib.evaluate(tf.function(lambda batch: objective(draft, batch),
                                                  autograph=False),
                                      stages.batches(config, data.validation, False, 0))
    validation = {"target_ce": validation["target_ce"], "draft_ce": validation["ce"],
                  "kl": validation["kl"], "overlap": validation["overlap"]}

    prompts = heldout_prompts(data, export.num_prompts)
    acceptance = measure_both_temperatures(target, draft, prompts, export)
    latency = None
    if measure_speed and export.latency_prompts:
        latency = measure_latency(target, draft, prompts[:export.latency_prompts], export.k,
                                  export.max_new_tokens)
    metrics = {"target_name": names[stages.TARGET], "draft_name": names[stages.DRAFT],
               "sizes_mb": {r: s / _MB for r, s in sizes.items()}, "total_mb": total_mb,
               "validation": validation, "acceptance": acceptance, "latency": latency}

    infos, dones = {}, {}
    for role in (stages.TARGET, stages.DRAFT):
        with open(os.path.join(stages.stage_dir(workdir, role), "stage.json"),
                  encoding="utf-8") as f:
            infos[role] = json.load(f)
        dones[role] = trainer_lib.read_done(stages.stage_dir(workdir, role))
        metrics[role] = {"parameters": infos[role]["parameters"], **dones[role]}
    for role, other in ((stages.TARGET, stages.DRAFT), (stages.DRAFT, stages.TARGET)):
        card = _model_card(names[role], role, infos[role], dones[role], names[other],
                           metrics, config, sizes[role])
        with open(os.path.join(directories[role], "MODEL_CARD.md"), "w",
                  encoding="utf-8") as f:
            f.write(card)
    out = stages.stage_dir(workdir, stages.EXPORT)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "metrics.json"), "w", encoding="utf-8") as f:
        json.dump(metrics, f, indent=2)
        f.write("\n")
    with open(os.path.join(out, trainer_lib.DONE_FILE), "w", encoding="utf-8") as f:
        json.dump({"zoo_dir": zoo_dir, **{r: d for r, d in directories.items()}}, f, indent=2)
    return metrics
