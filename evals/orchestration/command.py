"""One evaluation run as a command: prepare, run, report, with the CLI's exit statuses.

`evals.run` parses its flags into a `RunSpec` and calls `run_command`. The statuses: 0 done
(or already finished), 2 bad input (one line, nothing written), 130/143 interrupted by
SIGINT/SIGTERM (finished records kept, with a resume hint), 1 a full disk.
"""

import logging as std_logging
import sys

from evals import cli
from evals.orchestration.spec import RunSpec
from evals.orchestration.spec import UsageError


def _usage_error(message) -> int:
    return cli.usage_error("evals.run", message)


def run_command(spec: RunSpec, verbose: bool = False) -> int:
    """Runs `spec` with a progress display; prints the summary; returns the exit status."""
    _quiet_logs(verbose)
    # Imported after the log filters are in place: importing Beam logs notes at import time.
    from evals.orchestration import progress  # pylint: disable=import-outside-toplevel
    from evals.orchestration import runner  # pylint: disable=import-outside-toplevel
    try:
        what = "checking the inputs" if spec.completions else "loading models"
        with progress.transient(f"evals.run: {what}"):
            prepared = runner.prepare(spec)
    except UsageError as e:
        return _usage_error(e)
    finished = runner.finished_summary(prepared)
    if finished is not None:
        speedup = finished.get("speedup")
        print(f"evals.run: the run in {prepared.output_dir} is already finished; nothing to do, "
              f"no file changed"
              + (f" (speed-up {speedup:.2f}x, see summary.json)" if speedup else ""))
        return 0
    note = runner.memory_map_note(prepared.num_programs)
    if note:
        print(f"evals.run: note: {note}", file=sys.stderr)
    if spec.temperature == 0 and spec.num_samples > 1 and not spec.completions:
        print("evals.run: note: --temperature 0 is greedy decoding: all samples of an example "
              "are identical", file=sys.stderr)
    try:
        summary = runner.execute(prepared)
    except UsageError as e:  # Another run holds the folder.
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
