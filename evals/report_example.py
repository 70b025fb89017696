r"""Regenerates the embedded-default example report: `python -m evals.report_example`.

Runs `python -m evals.run` with `configs/zoo_k_sweep.py` for HumanEval and docsum at
temperature 0 and 1 (K = 0..8 each; every sweep also holds the autoregressive baseline and
the k = 4 speculative run, so its summary.json feeds the Table 2 / Table 1 layouts), then
builds the report from the four run directories, with the draft-kinds section from
`bench/results/draft_kinds_t0.json` and `draft_kinds_t1.json` (`python -m bench.draft_kinds`):

    python -m evals.report_example                       # runs/embedded_default/* and
                                                         # reports/embedded_default/
    python -m evals.report_example --dry_run             # print the commands only
    python -m evals.report_example --only humaneval-t0 -- --limit 5   # quick look

Arguments after `--` go to every `evals.run` call (e.g. `--limit 5`, or `--target DIR
--draft DIR` for another pair). A run directory that already has summary.json is reused
(pass --rerun to run it again); one without is continued with `--resume`. The report is
written with `python -m evals.report` semantics (`evals.report.build_report`), and each
run's summary.json, sweep.json and run_config.json are kept beside it in `OUT/runs/`.

Expected time on 2 CPU cores with the embedded pair: ~10-20 minutes per sweep.
"""

import os
import shutil
import subprocess
import sys
from typing import List, Optional, Sequence

from evals import cli
from evals import console
from evals import report
from evals.report.draft_kinds import load_draft_kinds

SWEEPS = ("humaneval-t0", "humaneval-t1", "docsum-t0", "docsum-t1")
CONFIG = os.path.join("configs", "zoo_k_sweep.py")
DEFAULT_RUNS_DIR = os.path.join("runs", "embedded_default")
DEFAULT_OUT = os.path.join("reports", "embedded_default")
DRAFT_KINDS = tuple(os.path.join("bench", "results", f"draft_kinds_t{t}.json") for t in (0, 1))
"""`python -m bench.draft_kinds --temperature T --json FILE` results for the draft-kinds
section (the README's commands); the ones that exist are used."""


def run_dir(runs_dir: str, sweep: str) -> str:
    return os.path.join(runs_dir, "zoo_k_sweep_" + sweep.replace("-", "_"))


def commands(runs_dir: str, sweeps: Sequence[str], extra: Sequence[str],
             rerun: bool = False) -> List[List[str]]:
    """The evals.run command lines still to run (sys.executable -m evals.run ...)."""
    out = []
    for sweep in sweeps:
        directory = run_dir(runs_dir, sweep)
        if os.path.isfile(os.path.join(directory, "summary.json")) and not rerun:
            continue
        cmd = [sys.executable, "-m", "evals.run", "--config", f"{CONFIG}:{sweep}",
               "--output_dir", directory]
        if os.path.isdir(directory) and not rerun:
            cmd.append("--resume")
        out.append(cmd + list(extra))
    return out


RUN_FILES = ("summary.json", "sweep.json", "run_config.json")
"""What the report keeps of each run (`OUT/runs/NAME/`): its numbers and settings, a few KB,
so that the checked-in report's tables can be rebuilt and tested without the per-sample
logs (`examples.jsonl`, megabytes)."""


def keep_run_files(dirs: Sequence[str], out: str) -> None:
    """Copies each run's `RUN_FILES` into `out/runs/<run folder name>/`."""
    for directory in dirs:
        kept = os.path.join(out, "runs", os.path.basename(os.path.normpath(directory)))
        os.makedirs(kept, exist_ok=True)
        for name in RUN_FILES:
            if os.path.isfile(os.path.join(directory, name)):
                shutil.copy2(os.path.join(directory, name), os.path.join(kept, name))


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: List[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
    parser = cli.ArgumentParser("python -m evals.report_example", __doc__,
                                verbose=False,
                                epilog="Arguments after -- are passed to every evals.run.")
    parser.add_argument("--runs_dir", default=DEFAULT_RUNS_DIR,
                        help="where the sweeps' run folders are")
    parser.add_argument("--out", default=DEFAULT_OUT, help="where the report is written")
    parser.add_argument("--only", action="append", choices=SWEEPS,
                        help="run only this sweep (repeatable; default: all)")
    parser.add_argument("--rerun", action="store_true",
                        help="run the sweeps again instead of resuming them")
    parser.add_argument("--draft_kinds", action="append", metavar="JSON",
                        help="bench.draft_kinds results for the draft-kinds section "
                             "(repeatable; default: those of bench/results that exist)")
    parser.add_argument("--dry_run", action="store_true",
                        help="print the commands without running them")
    args = parser.parse_args(argv)
    sweeps = args.only or list(SWEEPS)
    todo = commands(args.runs_dir, sweeps, extra, args.rerun)
    for cmd in todo:
        print("$ python " + " ".join(cmd[1:]), flush=True)
        if not args.dry_run:
            code = subprocess.call(cmd)
            if code:
                print(f"evals.report_example: error: evals.run exited with {code}",
                      file=sys.stderr)
                return code
    dirs = [run_dir(args.runs_dir, s) for s in sweeps]
    kinds = args.draft_kinds or [path for path in DRAFT_KINDS if os.path.isfile(path)]
    print(f"$ python -m evals.report {' '.join(dirs)} --out {args.out}"
          + "".join(f" --draft_kinds {path}" for path in kinds), flush=True)
    if args.dry_run:
        return 0
    try:
        runs = report.load_runs(dirs)
        path = report.build_report(runs, args.out, [load_draft_kinds(p) for p in kinds])
        keep_run_files(dirs, args.out)
    except report.ReportError as e:
        print(f"evals.report_example: error: {e}", file=sys.stderr)
        return report.EXIT_USAGE
    print(console.report_headline(runs, path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
