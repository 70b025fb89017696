r"""Paper-style reports from evaluation run directories: tables in Markdown, PNG figures.

    python -m evals.report RUN_DIR [RUN_DIR ...] --out REPORT_DIR

reads each run's `summary.json` (and `sweep.json`, `examples.jsonl` when present;
docs/design.md section 6), prints each run's headline numbers (`evals.console`) and writes
`REPORT_DIR/report.md` with its figures next to it:

* Table "Leviathan et al. Table 2 layout": task, target, draft, temperature, k, alpha
  (measured `beta_mean`, whose expectation is the paper's alpha), acceptance rate, draft
  cost ratio c, the measured walltime speed-up and the speed-up the walltime formula
  predicts from the measured alpha and c. Published rows of the same task and temperature
  are listed under ours, marked "published".
* Table "Chen et al. Table 1 layout": sampling method, benchmark, decoding, quality,
  mean token time (ms), speed-up, with the baseline and speculative quality side by side
  and whether they agree. Greedy runs with examples.jsonl compare the outputs of the two
  modes token for token (exactness makes them identical) and count the differences.
  Otherwise, ROUGE carries 95% bootstrap bounds in summary.json (`_low`,
  `_high`); the two agree when the intervals overlap. pass@1 has no bounds in
  summary.json: the report bootstraps the per-problem pass rates of `examples.jsonl`
  (2000 resamples over problems, fixed seed) and applies the same overlap rule; without
  examples.jsonl only the point estimates are shown. BLEU has no bounds: not judged.
* Table and figure "Recommended draft length": `evals.walltime.calibrated_optimal_k` at the
  measured alpha and the measured round costs (the formula's `optimal_k` beside it), with
  the formula's and the calibrated speed-up curves against k and the measured points.
* Per-position acceptance: the fraction of rounds whose i-th drafted token was accepted,
  beside alpha**i (what independent acceptances with mean alpha would give).
* From a K sweep (`sweep.json`), the figure of Chen et al. Figure 1: mean sequence time with
  its standard deviation, acceptance rate, loop time (ms per target call:
  ms/token x tokens per round; ms/token at K = 0) against K, plus p50/p90/p99 sequence time
  against K (the tail-latency spread), and a table of the same numbers.

* With `--draft_kinds JSON` (one per temperature), the "Draft kinds side by side" section:
  `python -m bench.draft_kinds` results, one row per kind of draft with its best k,
  speed-up, beta and c at each temperature (`evals.report.draft_kinds`).

Regenerating the embedded-default example report (`reports/embedded_default/`) is one
command, `python -m evals.report_example` (see that module).

Library use (no Beam, no absl, no TensorFlow): `load_run(path)`, `build_report(runs, out)`.

Modules, top-down: `cli` (the command) -> `document` (report.md) -> `draft_kinds` (its
section from bench results), `tables` and `figures` -> `analysis` (the derived numbers) ->
`runs` (reading run directories).
"""

from evals.report.analysis import (BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, DASH, HEADLINE_METRICS,
                                   agreement, alpha_and_c, bootstrap_pass1, calibrated_at,
                                   calibrated_k, greedy_mismatches, headline_metric,
                                   loop_time_ms, quality_bounds, recommended_k, sweep_rows)
from evals.report.cli import EXIT_USAGE, main
from evals.report.document import build_report
from evals.report.figures import per_position_figure, speedup_figure, sweep_figure
from evals.report.runs import Run, ReportError, load_run, load_runs
from evals.report.tables import (chen_table, fmt, leviathan_table, per_position_table,
                                 recommendation_table, sweep_table)

__all__ = ["BOOTSTRAP_RESAMPLES", "BOOTSTRAP_SEED", "DASH", "EXIT_USAGE", "HEADLINE_METRICS",
           "ReportError",
           "Run", "agreement", "alpha_and_c", "bootstrap_pass1", "build_report",
           "calibrated_at", "calibrated_k", "chen_table", "fmt", "greedy_mismatches",
           "headline_metric", "leviathan_table", "load_run", "load_runs", "loop_time_ms", "main",
           "per_position_figure", "per_position_table", "quality_bounds", "recommendation_table",
           "recommended_k", "speedup_figure", "sweep_figure", "sweep_rows", "sweep_table"]
