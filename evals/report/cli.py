"""The command line of `python -m evals.report RUN_DIR ... --out REPORT_DIR`."""

import sys
from typing import Optional, Sequence

from evals.report.document import build_report
from evals.report.draft_kinds import load_draft_kinds
from evals.report.runs import ReportError, load_runs

EXIT_USAGE = 2


def main(argv: Optional[Sequence[str]] = None) -> int:
    from evals import cli  # pylint: disable=import-outside-toplevel
    from evals import console  # pylint: disable=import-outside-toplevel
    parser = cli.ArgumentParser(
        "python -m evals.report",
        "Builds a Markdown report with PNG figures from evals.run run directories, and "
        "prints each run's headline numbers.", verbose=False)
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                        help="evals.run output directories (summary.json, sweep.json)")
    parser.add_argument("--out", required=True, metavar="REPORT_DIR",
                        help="where report.md and the figures are written")
    parser.add_argument("--draft_kinds", action="append", default=[], metavar="JSON",
                        help="a `python -m bench.draft_kinds --json` result to lay out as "
                             "the 'Draft kinds side by side' section (repeatable: one per "
                             "temperature)")
    args = parser.parse_args(argv)
    try:
        runs = load_runs(args.run_dirs)
        draft_kinds = [load_draft_kinds(path) for path in args.draft_kinds]
    except ReportError as e:
        print(f"evals.report: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    try:
        path = build_report(runs, args.out, draft_kinds)
    except OSError as e:
        print(f"evals.report: error: cannot write {args.out}: {e.strerror}", file=sys.stderr)
        return EXIT_USAGE
    print(console.report_headline(runs, path))
    return 0




