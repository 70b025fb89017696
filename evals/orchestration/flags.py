"""The command line of one evaluation run: flags and experiment configs -> `RunSpec`.

`evals.run` (and `tfspec-eval`) parse with `parse`; a `--config configs/NAME.py[:ARG]` file's
`get_config()` supplies defaults that explicit flags override. Nothing here imports
TensorFlow or Beam, so a bad flag is reported at once.
"""

import argparse
import importlib
import importlib.util
import os

from evals import cli
from evals.orchestration import spec as spec_lib

DOC_POINTER = "docs/design.md section 6"
DTYPES = spec_lib.DTYPES
ACCEPTANCE_RULES = spec_lib.ACCEPTANCE_RULES


def draft_length_flag(text: str):
    """--k: an integer, or "auto"."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f'must be an integer >= 0 or "auto", got {text!r}') from None


def build_parser(prog: str, description: str) -> cli.ArgumentParser:
    """The flags of evals.run (see `evals.cli` for the conventions)."""
    parser = cli.ArgumentParser(prog, description, error_name="evals.run")
    add = parser.add_argument
    add("--task", default=None,
        help="task to evaluate; one of: " + ", ".join(task_names())
        + " (--list_tasks or --task list describes them)")
    add("--list_tasks", action="store_true", help="list the tasks and exit")
    add("--k", type=draft_length_flag, default=None,
        help='draft tokens per round; 0 = autoregressive only; "auto" = adaptive draft '
             "length (tfspec.generate(k=\"auto\"): per-row horizons up to a compiled "
             "maximum, autoregressive where that measured faster) (default "
             f"{spec_lib.DEFAULT_K}, or the largest K of --k_sweep)")
    add("--k_sweep", default=None,
        help="comma-separated draft lengths to sweep, e.g. 0,1,2,4,auto (writes sweep.json "
             "and prints a per-K table)")
    add("--target", default=spec_lib.DEFAULT_TARGET, help="target model (tfspec.load_model spec)")
    add("--draft", default=spec_lib.DEFAULT_DRAFT,
        help="draft model (tfspec.load_model spec): a T5 with the target's vocabulary, or a "
             "feature draft (EAGLE-style head) trained for --target")
    add("--dtype", default=None, choices=DTYPES,
        help="dtype the target and draft are loaded in (tfspec.load_model; default "
             "float32; a feature draft stays float32)")
    add("--tokenizer", default=None, help="tokenizer (default: the target's spiece.model)")
    add("--temperature", type=float, default=0.0, help="sampling temperature; 0 = greedy")
    add("--top_k", type=int, default=0, help="top-k filtering; 0 disables")
    add("--top_p", type=float, default=1.0, help="nucleus (top-p) filtering; 1 disables")
    add("--acceptance", default="exact", choices=ACCEPTANCE_RULES,
        help="verification rule of the speculative run: exact (rejection sampling; the "
             "output follows the target's distribution) or typical (Medusa's typical "
             "acceptance: an explicit opt-in that is NOT distribution-preserving above "
             "temperature 0; summary.json and the report label it)")
    add("--typical_epsilon", type=float, default=None,
        help="typical acceptance's hard threshold, in (0, 1] (default: tfspec's, 0.09)")
    add("--typical_delta", type=float, default=None,
        help="typical acceptance's entropy-threshold factor, > 0 (default: tfspec's, 0.3)")
    add("--num_samples", type=int, default=1, help="samples per example")
    add("--pass_at", default=None,
        help="comma-separated k of pass@k (HumanEval), e.g. 1,10 (default: those of "
             "1,10,100 that --num_samples allows)")
    add("--limit", type=int, default=None, help="evaluate the first N examples only")
    add("--batch_size", type=int, default=1,
        help="rows per generate call (1: the papers' setting)")
    add("--max_new_tokens", type=int, default=spec_lib.DEFAULT_MAX_NEW_TOKENS,
        help="tokens to generate per sample at most")
    add("--seed", type=int, default=0,
        help="run seed; each (example, sample) has its own stream under it")
    add("--output_dir", default=None,
        help="output folder (local or gs://); default: a new timestamped folder under runs/")
    cli.add_bool(parser, "resume", False, "continue the run in --output_dir: skip finished "
                 "(id, sample, mode) records; a finished run is left unchanged")
    cli.add_bool(parser, "baseline", True, "also run the autoregressive baseline (k = 0) on "
                 "the same examples, for the speed-up (--nobaseline: speculative only)")
    add("--completions", default=None,
        help="score this completions file (JSONL: task_id, completion) instead of "
             "generating; no model is loaded")
    add("--data_source", default=None,
        help="where the task's data comes from (task-specific: package, local, tfds, hf, "
             "corpus)")
    add("--data_path", default=None, help="data file(s) or data folder for --data_source")
    add("--runner", default=spec_lib.DEFAULT_RUNNER, help="Beam runner, e.g. DataflowRunner")
    cli.add_bool(parser, "calibrate", True, "measure the draft cost ratio c (draft vs "
                 "target decode step time) for predicted_speedup")
    cli.add_bool(parser, "prompt_eos", False, "append EOS to the tokenized prompt (public "
                 "T5 checkpoints expect it; the embedded pair was trained without)")
    add("--tpu", default=None, help="TPU name or address ('local' on a Cloud TPU VM)")
    add("--config", default=None,
        help="experiment config: configs/NAME.py[:ARG], whose get_config() returns a "
             "ConfigDict of flag values; explicit flags win")
    add("--version", action="version", version=f"%(prog)s {version()}")
    parser.epilog = ("Flags not listed here are passed to Beam's PipelineOptions. Output "
                     f"files and their fields: {DOC_POINTER}.")
    return parser


def task_names():
    from evals import tasks  # pylint: disable=import-outside-toplevel
    return sorted(tasks.TASKS)


def version() -> str:
    """tfspec's version without importing TensorFlow (tfspec/_version.py)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.path.join(root, "tfspec", "_version.py")
    namespace = {}
    with open(path, encoding="utf-8") as f:
        exec(f.read(), namespace)  # pylint: disable=exec-used  (one assignment)
    return namespace["__version__"]


def list_tasks() -> str:
    """One line per task: name, then what it evaluates."""
    from evals import tasks  # pylint: disable=import-outside-toplevel
    width = max(len(name) for name in tasks.TASKS)
    return "\n".join(f"{name:<{width}}  {task.description} (data: "
                     f"{', '.join(task.data_sources)})"
                     for name, task in sorted(tasks.TASKS.items()))


RUN_FLAGS = ("task", "k", "k_sweep", "target", "draft", "dtype", "tokenizer", "temperature",
             "top_k", "top_p", "acceptance", "typical_epsilon", "typical_delta",
             "num_samples", "pass_at", "limit", "batch_size",
             "max_new_tokens", "seed", "output_dir", "resume", "baseline", "completions",
             "data_source", "data_path", "runner", "tpu", "calibrate", "prompt_eos")


def load_config(spec: str) -> dict:
    """Flag values of an experiment config `PATH.py[:ARG]` or `MODULE[:ARG]`.

    Raises:
      spec_lib.UsageError: missing file, no get_config, or keys that are not flags.
    """
    path, _, arg = spec.partition(":")
    try:
        if path.endswith(".py") or os.path.sep in path:
            if not os.path.isfile(path):
                raise spec_lib.UsageError(f"--config file {path} does not exist")
            module_spec = importlib.util.spec_from_file_location("_evals_run_config", path)
            module = importlib.util.module_from_spec(module_spec)
            module_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(path)
    except spec_lib.UsageError:
        raise
    except Exception as e:  # noqa: BLE001  Any error in the user's config file.
        raise spec_lib.UsageError(f"cannot load --config {spec}: {type(e).__name__}: "
                                  f"{e}") from None
    if not hasattr(module, "get_config"):
        raise spec_lib.UsageError(f"--config {path} has no get_config() function")
    try:
        config = module.get_config(arg) if arg else module.get_config()
        values = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    except Exception as e:  # noqa: BLE001  Any error in the user's get_config.
        raise spec_lib.UsageError(f"--config {spec}: get_config failed: {type(e).__name__}: "
                                  f"{e}") from None
    unknown = sorted(set(values) - set(RUN_FLAGS))
    if unknown:
        raise spec_lib.UsageError(f"--config {path} sets {unknown[0]!r}, which is not an "
                                  f"evals.run flag (known: {', '.join(RUN_FLAGS)})")
    return values


def flag_values(parser: cli.ArgumentParser, argv, args, beam_args) -> dict:
    """The run's values: the config's, overridden by flags given on the command line.

    Args:
      parser: `build_parser()`.
      argv: the command-line arguments (without the program name).
      args: `parser.parse_known_args(argv)[0]`.
      beam_args: the arguments left for Beam.
    """
    values = {}
    if args.config:
        values.update(load_config(args.config))
    given = cli.explicit_values(parser, argv)
    for name in RUN_FLAGS:
        if name in given or name not in values:
            values[name] = getattr(args, name)
    values["beam_args"] = list(beam_args)
    values["config"] = args.config
    return values


def parse(argv, prog: str, description: str):
    """(parsed flags, RunSpec) of a command line; exits 2 on a bad flag value.

    Raises:
      spec_lib.UsageError: values that cannot work together.
    """
    parser = build_parser(prog, description)
    args, beam_args = parser.parse_known_args(list(argv))
    if args.list_tasks or args.task == "list":
        return args, None
    return args, spec_lib.build_run_spec(flag_values(parser, argv, args, beam_args))
