r"""Evaluates a target/draft pair on a task: `python -m evals.run --task humaneval --k 4`.

Runs the baseline (k = 0) and the speculative run (k = --k) side by side on the same
examples as a Beam pipeline (`pipelines.runner`, DirectRunner by default), and writes
summary.json, examples.jsonl (one line per example, sample and mode), sweep.json (with
--k_sweep only), dead_letter.jsonl and run_config.json to --output_dir (fields:
docs/design.md section 6). The installed command `tfspec-eval` is the same program.

Examples:

  python -m evals.run --task humaneval --k 4 --limit 20 --max_new_tokens 128
  python -m evals.run --task humaneval --k_sweep 0,1,2,3,4,5,6,7 --temperature 0
  python -m evals.run --task humaneval --num_samples 10 --temperature 0.8 --pass_at 1,10
  python -m evals.run --task humaneval --completions samples.jsonl      # score only
  python -m evals.run --task humaneval --output_dir runs/x --resume     # continue a run
  python -m evals.run --config configs/NAME.py --limit 5                # flags override
  python -m evals.run --task humaneval --direct_num_workers 2 \
      --direct_running_mode multi_processing                            # Beam options
  python -m evals.run --list_tasks                                      # the tasks

Flags this program does not define are passed to Beam's PipelineOptions. Bad input
(unknown task, k < 0, pass@k > num_samples, missing model or data, vocabulary mismatch,
unwritable output folder, ...) prints one line on stderr and exits with status 2 before
anything is written.
"""

import importlib
import importlib.util
import logging as std_logging
import os
import sys

from evals import cli
from evals import run_spec  # Light: no TensorFlow, no Beam.

PROG = "python -m evals.run"
DOC_POINTER = "docs/design.md section 6"
DTYPES = run_spec.DTYPES


def build_parser(prog: str = PROG) -> cli.ArgumentParser:
    """The flags of evals.run (see `evals.cli` for the conventions)."""
    parser = cli.ArgumentParser(prog, __doc__, error_name="evals.run")
    add = parser.add_argument
    add("--task", default=None,
        help="task to evaluate; one of: " + ", ".join(_task_names())
        + " (--list_tasks or --task list describes them)")
    add("--list_tasks", action="store_true", help="list the tasks and exit")
    add("--k", type=int, default=None,
        help="draft tokens per round; 0 = autoregressive only (default "
             f"{run_spec.DEFAULT_K}, or the largest K of --k_sweep)")
    add("--k_sweep", default=None,
        help="comma-separated draft lengths to sweep, e.g. 0,1,2,4 (writes sweep.json and "
             "prints a per-K table)")
    add("--target", default=run_spec.DEFAULT_TARGET, help="target model (tfspec.load_model spec)")
    add("--draft", default=run_spec.DEFAULT_DRAFT, help="draft model (tfspec.load_model spec)")
    add("--dtype", default=None, choices=DTYPES,
        help="dtype the target and draft are loaded in (tfspec.load_model; default "
             "float32)")
    add("--tokenizer", default=None, help="tokenizer (default: the target's spiece.model)")
    add("--temperature", type=float, default=0.0, help="sampling temperature; 0 = greedy")
    add("--top_k", type=int, default=0, help="top-k filtering; 0 disables")
    add("--top_p", type=float, default=1.0, help="nucleus (top-p) filtering; 1 disables")
    add("--num_samples", type=int, default=1, help="samples per example")
    add("--pass_at", default=None,
        help="comma-separated k of pass@k (HumanEval), e.g. 1,10 (default: those of "
             "1,10,100 that --num_samples allows)")
    add("--limit", type=int, default=None, help="evaluate the first N examples only")
    add("--batch_size", type=int, default=1,
        help="rows per generate call (1: the papers' setting)")
    add("--max_new_tokens", type=int, default=run_spec.DEFAULT_MAX_NEW_TOKENS,
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
    add("--runner", default=run_spec.DEFAULT_RUNNER, help="Beam runner, e.g. DataflowRunner")
    cli.add_bool(parser, "calibrate", True, "measure the draft cost ratio c (draft vs "
                 "target decode step time) for predicted_speedup")
    cli.add_bool(parser, "prompt_eos", False, "append EOS to the tokenized prompt (public "
                 "T5 checkpoints expect it; the embedded pair was trained without)")
    add("--tpu", default=None, help="TPU name or address ('local' on a Cloud TPU VM)")
    add("--config", default=None,
        help="experiment config: configs/NAME.py[:ARG], whose get_config() returns a "
             "ConfigDict of flag values; explicit flags win")
    add("--version", action="version", version=f"%(prog)s {_version()}")
    parser.epilog = ("Flags not listed here are passed to Beam's PipelineOptions. Output "
                     f"files and their fields: {DOC_POINTER}.")
    return parser


def _task_names():
    from evals import tasks  # pylint: disable=import-outside-toplevel
    return sorted(tasks.TASKS)


def _version() -> str:
    """tfspec's version without importing TensorFlow (tfspec/_version.py)."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "tfspec", "_version.py")
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
             "top_k", "top_p", "num_samples", "pass_at", "limit", "batch_size",
             "max_new_tokens", "seed", "output_dir", "resume", "baseline", "completions",
             "data_source", "data_path", "runner", "tpu", "calibrate", "prompt_eos")
EXIT_USAGE = cli.EXIT_USAGE


def _usage_error(message) -> int:
    return cli.usage_error("evals.run", message)


def load_config(spec: str) -> dict:
    """Flag values of an experiment config `PATH.py[:ARG]` or `MODULE[:ARG]`.

    Raises:
      run_spec.UsageError: missing file, no get_config, or keys that are not flags.
    """
    path, _, arg = spec.partition(":")
    try:
        if path.endswith(".py") or os.path.sep in path:
            if not os.path.isfile(path):
                raise run_spec.UsageError(f"--config file {path} does not exist")
            module_spec = importlib.util.spec_from_file_location("_evals_run_config", path)
            module = importlib.util.module_from_spec(module_spec)
            module_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(path)
    except run_spec.UsageError:
        raise
    except Exception as e:  # noqa: BLE001  Any error in the user's config file.
        raise run_spec.UsageError(f"cannot load --config {spec}: {type(e).__name__}: "
                                  f"{e}") from None
    if not hasattr(module, "get_config"):
        raise run_spec.UsageError(f"--config {path} has no get_config() function")
    try:
        config = module.get_config(arg) if arg else module.get_config()
        values = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    except Exception as e:  # noqa: BLE001  Any error in the user's get_config.
        raise run_spec.UsageError(f"--config {spec}: get_config failed: {type(e).__name__}: "
                                  f"{e}") from None
    unknown = sorted(set(values) - set(RUN_FLAGS))
    if unknown:
        raise run_spec.UsageError(f"--config {path} sets {unknown[0]!r}, which is not an "
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


def parse(argv, prog: str = PROG):
    """(parsed flags, RunSpec) of a command line; exits 2 on a bad flag value.

    Raises:
      run_spec.UsageError: values that cannot work together.
    """
    parser = build_parser(prog)
    args, beam_args = parser.parse_known_args(list(argv))
    if args.list_tasks or args.task == "list":
        return args, None
    return args, run_spec.build_run_spec(flag_values(parser, argv, args, beam_args))


def _quiet_logs(verbose: bool) -> None:
    """Keeps the terminal for the progress display and errors (unless --verbose)."""
    if not verbose:
        # Per-shape retracing notes of tfspec's compiled loops, and Beam's notes about a
        # memory metric this platform lacks and about Google Cloud client libraries a local
        # run does not use. TensorFlow's native logs: `tfspec.quiet`.
        std_logging.getLogger("tensorflow").setLevel(std_logging.ERROR)
        std_logging.getLogger().addFilter(_drop_resource_module_note)


_DROPPED_NOTES = ("Resource module is not available", "apitools not found")


def _drop_resource_module_note(record) -> bool:
    return not str(record.msg).startswith(_DROPPED_NOTES)


def main(argv=None, prog: str = PROG) -> int:
    """Runs `python -m evals.run ARGS`; returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args, spec = parse(argv, prog)
    except run_spec.UsageError as e:
        return _usage_error(e)
    if spec is None:
        print(list_tasks())
        return 0
    _quiet_logs(args.verbose)
    try:
        from pipelines import progress  # pylint: disable=import-outside-toplevel
        from pipelines import runner  # pylint: disable=import-outside-toplevel
        what = "checking the inputs" if spec.completions else "loading models"
        with progress.transient(f"evals.run: {what}"):
            prepared = runner.prepare(spec)
    except run_spec.UsageError as e:
        return _usage_error(e)
    finished = runner.finished_summary(prepared)
    if finished is not None:
        speedup = finished.get("speedup")
        print(f"evals.run: the run in {prepared.output_dir} is already finished; nothing to do, "
              f"no file changed"
              + (f" (speed-up {speedup:.2f}x, see summary.json)" if speedup else ""))
        return 0
    if spec.temperature == 0 and spec.num_samples > 1 and not spec.completions:
        print("evals.run: note: --temperature 0 is greedy decoding: all samples of an example "
              "are identical", file=sys.stderr)
    try:
        summary = runner.execute(prepared)
    except run_spec.UsageError as e:  # Another run holds the folder.
        return _usage_error(e)
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM (runner's faults.Interrupted).
        print(f"\nevals.run: interrupted; finished records are in {prepared.output_dir}; "
              f"continue with --output_dir {prepared.output_dir} --resume", file=sys.stderr)
        return getattr(e, "exit_code", 130)
    except runner.faults.OutputFullError as e:
        print(f"evals.run: error: {e.strerror}", file=sys.stderr)
        return 1
    print(runner.describe(prepared.output_dir, summary))
    if spec.k_sweep:
        _print_sweep(prepared.output_dir)
    return 0


def _print_sweep(output_dir: str) -> None:
    """The per-K table of a sweep run (sweep.json)."""
    from evals import console  # pylint: disable=import-outside-toplevel
    from pipelines import outputs  # pylint: disable=import-outside-toplevel
    path = outputs.join(output_dir, outputs.SWEEP)
    try:
        sweep = outputs.read_json(path)
    except (OSError, ValueError) as e:
        print(f"evals.run: note: cannot read {path}: {e}", file=sys.stderr)
        return
    print(f"K sweep ({outputs.SWEEP}; speed-up over K = 0, sequence time percentiles):")
    print(console.sweep_table(sweep))


def console_main() -> None:
    """The `tfspec-eval` console command (setup.py entry point): evals.run itself."""
    sys.exit(main(prog="tfspec-eval"))


if __name__ == "__main__":
    sys.exit(main())
