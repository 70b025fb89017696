"""summary.json and sweep.json (docs/design.md section 6) from per-mode metrics.

The pipeline reduces the records of each mode to `{"quality", "latency", "acceptance"}`
(`pipelines.combiners`); this module assembles the files:

    summary = build_summary(header, modes, metrics, calibration)
    sweep = build_sweep(modes, metrics, calibration)          # with --k_sweep

Conventions:
* pass@k is reported as a percentage (0-100), like ROUGE and BLEU; `evals.humaneval`
  computes fractions and `report_quality` scales them.
* `speedup` = autoregressive ms/token / speculative ms/token, both measured in the same run
  on the same examples; None when either is missing.
* `predicted_speedup` = Leviathan et al.'s walltime formula (`evals.walltime`) at the run's
  k, with alpha = the measured `beta_mean` (the exact per-position overlap
  sum_x min(p, q), whose expectation is the paper's alpha) and c = the measured
  `draft_cost_ratio`.
* Metrics that cannot be computed are None (JSON null).
"""

import math
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from evals import records
from evals import walltime

PERCENT_PREFIXES = ("pass@",)
HEADER_KEYS = ("task", "k", "target", "draft", "dtype", "sampling", "seed", "num_examples",
               "num_samples", "versions", "git_commit", "started_at", "finished_at")


def report_quality(quality: Mapping[str, Any]) -> dict:
    """The task's aggregate with fractions (pass@k) turned into percentages."""
    out = {}
    for name, value in quality.items():
        if name.startswith(PERCENT_PREFIXES) and isinstance(value, (int, float)):
            value = 100.0 * float(value)
        out[name] = value
    return out


def _finite(value) -> Optional[float]:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def predicted_speedup(acceptance: Optional[Mapping[str, Any]], k: int,
                      draft_cost_ratio: Optional[float]) -> Optional[float]:
    """The walltime formula at (alpha = beta_mean, k, c), or None if an input is missing."""
    alpha = _finite((acceptance or {}).get("beta_mean"))
    c = _finite(draft_cost_ratio)
    if alpha is None or c is None or c < 0:
        return None
    return walltime.predicted_speedup(min(max(alpha, 0.0), 1.0), k, c)


def speedup(baseline_latency: Optional[Mapping[str, Any]],
            latency: Optional[Mapping[str, Any]]) -> Optional[float]:
    """Baseline ms/token / this run's ms/token (None if either is unknown or zero)."""
    base = _finite((baseline_latency or {}).get("ms_per_token"))
    mine = _finite((latency or {}).get("ms_per_token"))
    if base is None or not mine:
        return None
    return base / mine


def run_entry(k: int, metrics: Mapping[str, Any],
              draft_cost_ratio: Optional[float]) -> dict:
    """One `runs.*` entry: quality and latency, plus acceptance and the prediction if k > 0."""
    entry = {"quality": dict(metrics.get("quality") or {}),
             "latency": metrics.get("latency")}
    if k > 0:
        entry["acceptance"] = metrics.get("acceptance")
        entry["draft_cost_ratio"] = _finite(draft_cost_ratio)
        entry["predicted_speedup"] = predicted_speedup(metrics.get("acceptance"), k,
                                                       draft_cost_ratio)
    return entry


def build_summary(header: Mapping[str, Any], modes: Sequence[Tuple[str, int]],
                  metrics: Mapping[str, Mapping[str, Any]],
                  calibration: Optional[Mapping[str, Any]] = None,
                  extra: Optional[Mapping[str, Any]] = None) -> dict:
    """summary.json.

    Args:
      header: the HEADER_KEYS values (task, k, ..., finished_at).
      modes: the run's (mode, k) pairs.
      metrics: mode -> {"quality", "latency", "acceptance"} (modes without records absent).
      calibration: the draft cost measurement (`draft_cost_ratio` key), if any.
      extra: further top-level keys (after `speedup`).

    Returns:
      The summary dict: HEADER_KEYS, `runs` with "speculative" (the --k run) and
      "autoregressive" (the baseline) when they ran ("completions" in completions mode),
      and `speedup`.
    """
    summary: Dict[str, Any] = {key: header.get(key) for key in HEADER_KEYS}
    c = (calibration or {}).get("draft_cost_ratio")
    runs = {}
    for mode, k in modes:
        if mode in (records.SPECULATIVE, records.AUTOREGRESSIVE, records.COMPLETIONS):
            runs[mode] = run_entry(k, metrics.get(mode, {}), c)
    summary["runs"] = runs
    summary["speedup"] = speedup(runs.get(records.AUTOREGRESSIVE, {}).get("latency"),
                                 runs.get(records.SPECULATIVE, {}).get("latency"))
    if records.SPECULATIVE not in runs or records.AUTOREGRESSIVE not in runs:
        summary["speedup"] = None
    summary.update(extra or {})
    return summary


def build_sweep(modes: Sequence[Tuple[str, int]], metrics: Mapping[str, Mapping[str, Any]],
                calibration: Optional[Mapping[str, Any]] = None,
                ks: Optional[Sequence[int]] = None) -> list:
    """sweep.json: one entry per K (ascending), each a `runs.*` entry plus `k`, `mode` and
    `speedup` (over the K = 0 entry of the same run, None without one).

    Args:
      modes: the run's (mode, k) pairs.
      metrics: mode -> metrics.
      calibration: the draft cost measurement.
      ks: the Ks to list (default: all of `modes`).
    """
    c = (calibration or {}).get("draft_cost_ratio")
    by_k = {k: mode for mode, k in modes}
    wanted = sorted(by_k if ks is None else set(ks) & set(by_k))
    baseline = metrics.get(by_k.get(0), {}).get("latency") if 0 in by_k else None
    entries = []
    for k in wanted:
        mode = by_k[k]
        entry = {"k": k, "mode": mode}
        entry.update(run_entry(k, metrics.get(mode, {}), c))
        entry["speedup"] = speedup(baseline, entry["latency"]) if 0 in by_k else None
        entries.append(entry)
    return entries
