"""Command line of the tiny-code recipe: `python -m recipes.tiny_code.train --config FILE`.

    python -m recipes.tiny_code.train --config configs/zoo_tiny_code.py --stage all
    python -m recipes.tiny_code.train --config configs/zoo_tiny_code.py:smoke \\
        --workdir /tmp/smoke --max_steps 20 --zoo_dir /tmp/smoke/zoo

`--config FILE[:ARG]` names a Python file whose `get_config(ARG)` returns an
`ml_collections.ConfigDict`; `--set key.path=VALUE` overrides fields (VALUE is a Python
literal, else a string). Stages: `target` (train the target), `draft` (distill the draft from
the finished target), `export` (write the pair to the zoo with model cards and measured
acceptance), `all` (those three in order, skipping finished ones); `feature_draft` and
`feature_draft_export` train and export an EAGLE-style feature draft for a frozen target
(configs/zoo_tiny_code_eagle.py; `feature_draft_vocabulary` resizes the export's draft
vocabulary without retraining), `medusa` and `medusa_export` Medusa heads for a frozen
target (configs/zoo_tiny_code_medusa.py), `target_encoder_draft` and
`target_encoder_draft_export` a T5 draft that reads its target's encoder output
(configs/zoo_tiny_code_draft_te.py; `target_encoder_adapter` fits only its projection,
`target_encoder_draft_vocabulary` resizes an export's draft vocabulary without retraining).
Every stage resumes from its last checkpoint, so after an interruption re-run the same
command.
"""

import ast
import importlib.util
import json
import os
import sys

from evals import cli  # The convention of every entry point (no TensorFlow).


def load_config(spec: str, overrides=()):
    """Loads `FILE[:ARG]` and applies `key.path=VALUE` overrides."""
    path, _, arg = spec.partition(":")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Config file {path} does not exist.")
    module_spec = importlib.util.spec_from_file_location("_tfspec_recipe", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    config = module.get_config(arg or None)
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep:
            raise ValueError(f"--set expects key.path=VALUE, got {item!r}.")
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            value = text
        node = config
        *parents, leaf = key.split(".")
        for name in parents:
            node = node[name]
        if isinstance(node, dict):
            node[leaf] = value
        else:
            with node.unlocked() if hasattr(node, "unlocked") else _null():
                node[leaf] = value
    return config


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *args):
        return False


def parse_args(argv=None):
    parser = cli.ArgumentParser("python -m recipes.tiny_code.train", __doc__)
    parser.add_argument("--config", required=True, help="FILE[:ARG] with get_config(ARG).")
    parser.add_argument("--workdir", default=None,
                        help="Checkpoints and logs (default: the config's workdir).")
    parser.add_argument("--stage", default="all",
                        choices=("target", "draft", "export", "all", "feature_draft",
                                 "feature_draft_export", "feature_draft_vocabulary",
                                 "medusa", "medusa_export",
                                 "target_encoder_draft", "target_encoder_draft_export",
                                 "target_encoder_adapter", "target_encoder_draft_vocabulary"),
                        help="what to run (feature_draft*: the recipe's feature_draft "
                             "section, an EAGLE-style head for a frozen target, or the "
                             "export's draft vocabulary resized to the section's "
                             "draft_vocab_size; medusa*: its "
                             "medusa section, Medusa heads for a frozen target; "
                             "target_encoder_*: its target_encoder_draft section, a T5 "
                             "draft that reads its target's encoder output: the adapter "
                             "alone, or fine-tuned with it, or the export's draft "
                             "vocabulary resized to the section's draft_vocab_size)")
    parser.add_argument("--max_steps", type=int, default=None,
                        help="Train the training stages to this step instead of the "
                             "config's steps (the learning-rate schedule is unchanged).")
    parser.add_argument("--zoo_dir", default=None,
                        help="Where the export stage writes the models (default tfspec/zoo).")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="Override a config field, e.g. --set target.steps=100.")
    parser.add_argument("--no_progress", action="store_true", help="No progress bar.")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    # Imported late (TensorFlow is slow to load); tfspec first, which keeps TensorFlow's
    # native start-up logs quiet (tfspec.quiet).
    import tfspec  # noqa: F401  pylint: disable=unused-import
    import tensorflow as tf

    from recipes.tiny_code import data as data_lib
    from tfspec.training import export, stages
    from tfspec.training import feature_draft as feature_draft_lib
    from tfspec.training import medusa as medusa_lib
    from tfspec.training import target_encoder_draft as target_encoder_lib
    tf.get_logger().setLevel("ERROR")  # Bucketed shapes retrace on purpose; no warnings.

    config = stages.validate_config(load_config(args.config, args.set))
    workdir = os.path.abspath(os.path.expanduser(args.workdir or config.workdir))
    os.makedirs(workdir, exist_ok=True)
    stages.log(f"[train] workdir {workdir}, stage {args.stage}")
    wanted = stages.STAGES if args.stage == "all" else (args.stage,)
    data = None
    results = {}
    for stage in wanted:
        if args.stage == "all" and stages.stage_done(workdir, stage, args.max_steps,
                                                     config):
            stages.log(f"[train] stage {stage}: already done, skipped")
            continue
        if data is None:
            data = data_lib.load_data(config)
            stages.log(f"[train] data: {len(data.train)} train / "
                       f"{len(data.validation)} validation examples")
        if stage == stages.TARGET:
            results[stage] = stages.train_target(config, workdir, data, args.max_steps,
                                                 progress=not args.no_progress)
        elif stage == stages.DRAFT:
            results[stage] = stages.train_draft(config, workdir, data, args.max_steps,
                                                progress=not args.no_progress)
        elif stage == feature_draft_lib.STAGE:
            results[stage] = feature_draft_lib.train_feature_draft(
                config, workdir, data, args.max_steps, progress=not args.no_progress)
        elif stage == feature_draft_lib.EXPORT_STAGE:
            results[stage] = feature_draft_lib.export_feature_draft(config, workdir,
                                                                    args.zoo_dir, data)
        elif stage == feature_draft_lib.VOCABULARY_STAGE:
            results[stage] = feature_draft_lib.resize_draft_vocabulary(config, workdir,
                                                                       args.zoo_dir, data)
        elif stage == medusa_lib.STAGE:
            results[stage] = medusa_lib.train_medusa(config, workdir, data, args.max_steps,
                                                     progress=not args.no_progress)
        elif stage == medusa_lib.EXPORT_STAGE:
            results[stage] = medusa_lib.export_medusa(config, workdir, args.zoo_dir, data)
        elif stage == target_encoder_lib.STAGE:
            results[stage] = target_encoder_lib.train_target_encoder_draft(
                config, workdir, data, args.max_steps, progress=not args.no_progress)
        elif stage == target_encoder_lib.ADAPTER_STAGE:
            results[stage] = target_encoder_lib.fit_target_encoder_adapter(
                config, workdir, args.zoo_dir, data)
        elif stage == target_encoder_lib.EXPORT_STAGE:
            results[stage] = target_encoder_lib.export_target_encoder_draft(
                config, workdir, args.zoo_dir, data)
        elif stage == target_encoder_lib.VOCABULARY_STAGE:
            results[stage] = target_encoder_lib.resize_draft_vocabulary(
                config, workdir, args.zoo_dir, data)
        else:
            results[stage] = export.export_pair(config, workdir, args.zoo_dir, data)
        stages.log(f"[train] stage {stage} done: "
                   f"{json.dumps(results[stage], default=str)[:2000]}")
    return results


def run(argv=None) -> int:
    """The command: `main`, with a refusal (bad recipe, missing stage, a file in the way)
    as one line and exit status 1 instead of a traceback."""
    try:
        main(argv)
    except (ValueError, RuntimeError, OSError) as e:
        print(f"python -m recipes.tiny_code.train: error: {' '.join(str(e).split())}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(run())
