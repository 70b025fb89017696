"""Compares draft distillation objectives at one budget of steps, on held-out beta.

    python -m recipes.tiny_code.compare_objectives --config configs/zoo_draft_objectives.py
    python -m recipes.tiny_code.compare_objectives --config configs/zoo_draft_objectives.py \\
        --variants tv,jsd --json bench/results/draft_objectives.json

`--config FILE` names a recipe whose `get_config(VARIANT)` gives one variant's recipe and
whose `config.compare` section lists the compared variants and the measurement (held-out
prompts, k, new tokens). For each variant the draft stage runs in WORKDIR/VARIANT (the
initial draft, the divergence and the data come from that variant's `draft` section), then
its final weights, rounded to bfloat16 as they would ship, are measured with k-token
speculative decoding on the held-out completion prompts at temperature 0 and 1. The starting
draft (`draft.init_from`, when set) is measured the same way as the row "initial".

Resumable: finished variants (DONE.json) and their measurements (WORKDIR/VARIANT/beta.json)
are reused, so after an interruption re-run the same command. The target's continuations
and the draft's own samples are generated once and shared by every variant that asks for
them (the same prompts, the same initial draft). Writes WORKDIR/comparison.json.
"""

import json
import os
import shutil
import sys
import tempfile

from evals import cli  # The convention of every entry point (no TensorFlow).
from recipes.tiny_code.train import load_config

PROG = "python -m recipes.tiny_code.compare_objectives"
COMPARISON_FILE = "comparison.json"
BETA_FILE = "beta.json"
INITIAL = "initial"
CARD_SECTION = "## Distillation objectives compared"


def parse_args(argv=None):
    parser = cli.ArgumentParser(PROG, __doc__)
    parser.add_argument("--config", required=True,
                        help="FILE whose get_config(VARIANT) gives each variant's recipe.")
    parser.add_argument("--variants", default=None,
                        help="Comma-separated variants (default: the config's "
                             "compare.variants).")
    parser.add_argument("--workdir", default=None,
                        help="Parent of the variants' workdirs (default: the config's "
                             "workdir).")
    parser.add_argument("--max_steps", type=int, default=None,
                        help="Train each variant to this step instead of the config's.")
    parser.add_argument("--json", default=None, help="Also write the comparison here.")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="Override a field of every variant's recipe, e.g. "
                             "--set draft.steps=100.")
    parser.add_argument("--card", default=None, metavar="MODEL_CARD.md",
                        help="Write the comparison table into this model card (its section "
                             f"{CARD_SECTION!r} is replaced, or appended).")
    parser.add_argument("--export", default=None, metavar="VARIANT",
                        help="Write VARIANT's final weights (bfloat16) over the draft named "
                             "by --export_dir, keeping its tokenizer and card.")
    parser.add_argument("--export_dir", default=None,
                        help="The draft directory --export writes (e.g. "
                             "tfspec/zoo/tiny-code-draft).")
    parser.add_argument("--no_progress", action="store_true", help="No progress bars.")
    return parser.parse_args(argv)


def _measure(config, target, draft, data, out_path):
    """Held-out acceptance at temperature 0 and 1 of `draft` rounded to bfloat16."""
    from tfspec import checkpoints
    from tfspec.training import export
    if os.path.exists(out_path):
        with open(out_path, encoding="utf-8") as f:
            return json.load(f)
    compare = config.compare
    with tempfile.TemporaryDirectory() as directory:
        checkpoints.save_model(draft, directory, dtype="bfloat16")
        shipped = checkpoints.load_model(directory)
    prompts = export.heldout_prompts(data, compare.prompts)
    result = {f"t{int(t)}": export.measure_acceptance(
        target, shipped, prompts, compare.k, compare.max_new_tokens, t,
        batch_size=compare.batch_size, seed=0) for t in (0.0, 1.0)}
    tmp = out_path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
    os.replace(tmp, out_path)
    return result


def _share(source_dir: str, target_dir: str, names):
    """Copies the generated-example caches that `target_dir` lacks from `source_dir`."""
    os.makedirs(target_dir, exist_ok=True)
    for name in names:
        source, target = os.path.join(source_dir, name), os.path.join(target_dir, name)
        if os.path.exists(source) and not os.path.exists(target):
            shutil.copyfile(source, target)


def row(name: str, result, training=None):
    out = {"variant": name}
    for key in ("t0", "t1"):
        out[f"beta_{key}"] = result[key]["beta_mean"]
        out[f"acceptance_{key}"] = result[key]["acceptance_rate"]
    if training is not None:
        out.update(training)
    return out


def markdown(rows) -> str:
    lines = ["| variant | divergence | on-policy prompts | steps | beta T=0 | beta T=1 | "
             "acceptance T=0 | acceptance T=1 | held-out KL | held-out overlap |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        def fmt(key, digits=3):
            value = r.get(key)
            return "-" if value is None else (f"{value:.{digits}f}" if isinstance(value, float)
                                              else str(value))
        lines.append(f"| {r['variant']} | {fmt('divergence')} | {fmt('on_policy_prompts')} | "
                     f"{fmt('steps')} | {fmt('beta_t0')} | {fmt('beta_t1')} | "
                     f"{fmt('acceptance_t0')} | {fmt('acceptance_t1')} | "
                     f"{fmt('validation_kl')} | {fmt('validation_overlap')} |")
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    import tfspec  # noqa: F401  pylint: disable=unused-import  (quiet TensorFlow first)
    import tensorflow as tf

    from recipes.tiny_code import data as data_lib
    from tfspec.training import stages, trainer as trainer_lib
    tf.get_logger().setLevel("ERROR")

    path = args.config.partition(":")[0]
    base = load_config(args.config, args.set)
    variants = (args.variants.split(",") if args.variants else list(base.compare.variants))
    configs = {v: stages.validate_config(load_config(f"{path}:{v}", args.set))
               for v in variants}
    workdir = os.path.abspath(os.path.expanduser(args.workdir or base.workdir))
    shared = os.path.join(workdir, "shared")
    os.makedirs(shared, exist_ok=True)
    data = data_lib.load_data(base)
    stages.log(f"[compare] workdir {workdir}; variants {', '.join(variants)}; data "
               f"{len(data.train)} train / {len(data.validation)} validation examples")

    rows = []
    target = None
    init_from = base.draft.get("init_from", "") or ""
    if base.draft.get("target_from") and init_from:
        target = stages.load_spec(base.draft.target_from)
        initial = stages.load_spec(init_from)
        # Refuse a draft of other shapes before minutes of measuring it, not after.
        stages.copy_weights(initial, stages.build_model(base, stages.DRAFT), init_from)
        result = _measure(base, target, initial, data,
                          os.path.join(shared, f"{INITIAL}_{BETA_FILE}"))
        rows.append(row(INITIAL, result, {"divergence": None, "steps": 0}))
        stages.log(f"[compare] {INITIAL}: beta T=0 {rows[-1]['beta_t0']:.3f}, "
                   f"T=1 {rows[-1]['beta_t1']:.3f}")
    caches = (stages.GENERATED_FILE, stages.ON_POLICY_FILE)
    for variant in variants:
        config = configs[variant]
        variant_dir = os.path.join(workdir, variant)
        draft_dir = stages.stage_dir(variant_dir, stages.DRAFT)
        _share(shared, draft_dir, caches)
        summary = stages.train_draft(config, variant_dir, data, args.max_steps,
                                     progress=not args.no_progress)
        _share(draft_dir, shared, caches)
        if target is None:
            target = (stages.load_spec(config.draft.target_from)
                      if config.draft.get("target_from") else
                      stages.load_trained(config, variant_dir, stages.TARGET,
                                          config.export.weights))
        draft = stages.load_trained(config, variant_dir, stages.DRAFT, "final")
        result = _measure(config, target, draft, data, os.path.join(variant_dir, BETA_FILE))
        log = trainer_lib.read_log(os.path.join(draft_dir, trainer_lib.LOG_FILE))
        last_validation = next((r for r in reversed(log) if "validation_loss" in r), {})
        rows.append(row(variant, result, {
            "divergence": config.draft.get("divergence", "forward_kl"),
            "on_policy_prompts": int(config.draft.get("on_policy_prompts", 0) or 0),
            "steps": summary["steps"], "train_seconds": summary.get("elapsed"),
            "validation_kl": last_validation.get("validation_kl"),
            "validation_overlap": last_validation.get("validation_overlap")}))
        stages.log(f"[compare] {variant}: beta T=0 {rows[-1]['beta_t0']:.3f}, "
                   f"T=1 {rows[-1]['beta_t1']:.3f}")
    comparison = {"config": args.config, "measurement": dict(base.compare), "rows": rows}
    text = json.dumps(comparison, indent=2, default=str) + "\n"
    for path in [os.path.join(workdir, COMPARISON_FILE)] + ([args.json] if args.json else []):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(path + ".tmp", path)
    print(markdown(rows))
    if args.export:
        if args.export not in configs or not args.export_dir:
            raise ValueError(f"--export names one of the compared variants "
                             f"({', '.join(variants)}) and needs --export_dir.")
        export_variant(configs[args.export], os.path.join(workdir, args.export),
                       args.export_dir)
        stages.log(f"[compare] wrote {args.export}'s weights to {args.export_dir}")
    if args.card:
        write_card_section(args.card, card_section(comparison, args.export))
    return comparison


def export_variant(config, variant_dir: str, directory: str):
    """Saves a variant's final draft weights (bfloat16) into an existing model directory,
    keeping its tokenizer and model card."""
    from tfspec import checkpoints
    from tfspec.training import stages
    draft = stages.load_trained(config, variant_dir, stages.DRAFT, "final")
    kept = {}
    for name in (checkpoints.TOKENIZER_FILE, "MODEL_CARD.md"):
        path = os.path.join(directory, name)
        if os.path.exists(path):
            with open(path, "rb") as f:
                kept[name] = f.read()
    checkpoints.save_model(draft, directory, dtype="bfloat16")
    for name, data in kept.items():
        with open(os.path.join(directory, name), "wb") as f:
            f.write(data)


def card_section(comparison, exported=None) -> str:
    """The model-card section of a comparison (Markdown)."""
    m = comparison["measurement"]
    lines = [CARD_SECTION, "",
             f"Each objective fine-tuned the draft above for the same number of steps "
             f"(`python -m recipes.tiny_code.compare_objectives --config "
             f"{comparison['config']}`), then its final weights, rounded to bfloat16, were "
             f"measured with k = {m['k']} speculative decoding on {m['prompts']} held-out "
             f"completion prompts ({m['max_new_tokens']} new tokens); \"initial\" is the draft "
             "before fine-tuning. Held-out KL and overlap: teacher-forced, on the validation "
             "split, at the last validation.", "", markdown(comparison["rows"]), ""]
    if exported:
        lines += [f"Shipped: `{exported}`.", ""]
    return "\n".join(lines)


def write_card_section(path: str, section: str):
    """Replaces (or appends) `CARD_SECTION` in the card at `path`, atomically."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    start = text.find(CARD_SECTION)
    if start >= 0:
        end = text.find("\n## ", start + len(CARD_SECTION))
        text = text[:start] + section + (text[end + 1:] if end >= 0 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(text if text.endswith("\n") else text + "\n")
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    try:
        main()
    except (ValueError, FileNotFoundError, RuntimeError) as error:
        sys.exit(cli.usage_error(PROG, error))
