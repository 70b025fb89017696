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
* `calibrated_speedup` = the calibrated walltime model (`evals.walltime.calibrated_speedup`)
  at the run's k and alpha: the formula's tokens per round, with the round, step and
  per-request fixed costs the run measured (`calibration.in_run`: lines fitted to its own
  batch-1 requests, `evals.request_cost`; at ks the run did not decode, a line through the
  measured ones, or the calibration program's slope through the one measured k) and each
  mode's own mean tokens per request (the autoregressive baseline's for its side: sampled
  answers differ in length by mode, and so does each mode's fixed cost per token); with
  no in-run fit (batched runs), the calibration program's costs (`pipelines.generation`);
  None without a calibration that measured round costs.
* `matched_speedup` = the length-matched speed-up (`matched_speedup`): the autoregressive
  mode's mean seconds per request over this mode's fitted seconds for a request of the same
  length (`evals.request_cost.RequestLengthAccumulator`, batch-1 requests). At temperature
  0 every mode emits the same tokens and it equals `speedup`; at T > 0 each mode samples
  answers of its own lengths and a request's ~20 ms fixed part makes `speedup` partly a
  measure of those lengths (HumanEval at T = 1, K = 1: 0.96x plain, 1.02x matched).
* Metrics that cannot be computed are None (JSON null).
"""

import math
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from evals import records
from evals import request_cost
from evals import walltime

PERCENT_PREFIXES = ("pass@",)
HEADER_KEYS = ("task", "k", "target", "draft", "dtype", "sampling", "acceptance", "seed",
               "num_examples",
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


def round_cost(calibration: Optional[Mapping[str, Any]]) -> Optional[walltime.RoundCost]:
    """The `walltime.RoundCost` of a calibration record: the costs the run measured in its
    own requests (`in_run`) where it has them, the calibration program's elsewhere; None
    if neither measured rounds."""
    calibration = calibration or {}
    program = _program_cost(calibration)
    in_run = calibration.get("in_run") or {}
    target_step = _finite(in_run.get("target_step_s"))
    measured = {}
    for k, seconds in (in_run.get("round_s") or {}).items():
        seconds, fixed = _finite(seconds), _finite((in_run.get("spec_fixed_s") or {}).get(k))
        if seconds is not None and seconds > 0 and fixed is not None:
            measured[int(k)] = (seconds, fixed)
    if target_step is None or target_step <= 0 or not measured:
        return program
    try:
        return walltime.fit_in_run(target_step, _finite(in_run.get("ar_fixed_s")) or 0.0,
                                   measured, program)
    except ValueError:
        return program


def _program_cost(calibration: Mapping[str, Any]) -> Optional[walltime.RoundCost]:
    """The `walltime.RoundCost` the calibration program measured (one prompt, before the
    run), None if it measured no rounds."""
    target_step = _finite(calibration.get("target_step_s"))
    rounds = {int(k): _finite(v) for k, v in (calibration.get("round_s") or {}).items()}
    rounds = {k: v for k, v in rounds.items() if v is not None and v > 0}
    if target_step is None or target_step <= 0 or not rounds:
        return None
    try:
        return walltime.fit_round_cost(
            target_step, rounds, draft_step_s=_finite(calibration.get("draft_step_s")),
            ar_fixed_s=_finite(calibration.get("ar_fixed_s")) or 0.0,
            spec_fixed_s=_finite(calibration.get("spec_fixed_s")) or 0.0)
    except ValueError:
        return None


IN_RUN_METHOD = ("least squares of each batch-1 request's seconds on its rounds (an "
                 "autoregressive step is a round), per mode (evals.request_cost)")


def in_run_costs(modes: Sequence[Tuple[str, Any]],
                 metrics: Mapping[str, Mapping[str, Any]]) -> Optional[dict]:
    """The calibration record's `in_run` part: the costs fitted to the run's own requests.

    {target_step_s, ar_fixed_s} from the autoregressive requests, {round_s, spec_fixed_s,
    requests} keyed by each speculative fixed k (as a string, like `round_s`), and the
    method; None without a fit of the autoregressive mode and of one speculative k.
    """
    fits = {k: (metrics.get(mode) or {}).get("request_cost") for mode, k in modes}
    base = fits.get(0)
    spec = {k: fit for k, fit in fits.items()
            if fit and records.speculates(k) and k != records.AUTO}
    if not base or not spec:
        return None
    ordered = sorted(fits, key=records.k_order)
    return {"target_step_s": base["iteration_s"], "ar_fixed_s": base["fixed_s"],
            "round_s": {str(k): spec[k]["iteration_s"] for k in ordered if k in spec},
            "spec_fixed_s": {str(k): spec[k]["fixed_s"] for k in ordered if k in spec},
            "requests": {str(k): fits[k]["requests"] for k in ordered if fits[k]},
            "method": IN_RUN_METHOD}


def with_in_run_costs(calibration: Optional[Mapping[str, Any]],
                      modes: Sequence[Tuple[str, Any]],
                      metrics: Mapping[str, Mapping[str, Any]]) -> Optional[dict]:
    """`calibration` with its `in_run` costs (a copy); None stays None (no draft, or
    `--calibrate false`)."""
    if calibration is None:
        return None
    out = dict(calibration)
    in_run = in_run_costs(modes, metrics)
    if in_run is not None:
        out["in_run"] = in_run
    return out


def tokens_per_request(latency: Optional[Mapping[str, Any]]) -> Optional[float]:
    """Mean generated tokens per sequence, from the latency summary."""
    latency = latency or {}
    ms, tokens = _finite(latency.get("ms_per_token")), _finite(latency.get("num_tokens"))
    seq_s = _finite(latency.get("seq_time_mean_s"))
    if not ms or not tokens or not seq_s:
        return None
    return tokens / (ms * tokens / 1000.0 / seq_s)


def calibrated_speedup(metrics: Mapping[str, Any], k: int,
                       calibration: Optional[Mapping[str, Any]],
                       baseline_latency: Optional[Mapping[str, Any]] = None
                       ) -> Optional[float]:
    """The calibrated model at (alpha = beta_mean, k), None if an input is missing; with
    `baseline_latency`, the autoregressive side at the baseline's own mean request length
    (`walltime.calibrated_speedup`), as `speedup` measures it."""
    alpha = _finite((metrics.get("acceptance") or {}).get("beta_mean"))
    cost = round_cost(calibration)
    if alpha is None or cost is None:
        return None
    try:
        return walltime.calibrated_speedup(min(max(alpha, 0.0), 1.0), k, cost,
                                           tokens_per_request(metrics.get("latency")),
                                           tokens_per_request(baseline_latency))
    except ValueError:
        return None


def speedup(baseline_latency: Optional[Mapping[str, Any]],
            latency: Optional[Mapping[str, Any]]) -> Optional[float]:
    """Baseline ms/token / this run's ms/token (None if either is unknown or zero)."""
    base = _finite((baseline_latency or {}).get("ms_per_token"))
    mine = _finite((latency or {}).get("ms_per_token"))
    if base is None or not mine:
        return None
    return base / mine


def matched_speedup(baseline_metrics: Optional[Mapping[str, Any]],
                    metrics: Optional[Mapping[str, Any]]) -> Optional[float]:
    """The autoregressive mode's mean seconds per request over this mode's fitted seconds
    for a request of the autoregressive mode's mean length (both `request_length` lines);
    None without both lines (e.g. batched runs).

    The autoregressive side is its own line at its own mean length, i.e. its mean request
    time (a least-squares line passes through the means), so with equal lengths in both
    modes (greedy) this is the plain `speedup`."""
    base = (baseline_metrics or {}).get("request_length")
    mine = (metrics or {}).get("request_length")
    if not base or not mine:
        return None
    tokens = float(base["mean_tokens"])
    seconds = request_cost.seconds_at(mine, tokens)
    if not seconds > 0:
        return None
    return request_cost.seconds_at(base, tokens) / seconds


def run_entry(k, metrics: Mapping[str, Any],
              calibration: Optional[Mapping[str, Any]],
              baseline_latency: Optional[Mapping[str, Any]] = None) -> dict:
    """One `runs.*` entry: quality and latency, plus acceptance and the predictions if the
    mode drafts (the calibrated one against `baseline_latency`, the autoregressive mode's,
    if given). k = "auto" has no fixed k for the formulas: its predictions are None."""
    entry = {"quality": dict(metrics.get("quality") or {}),
             "latency": metrics.get("latency")}
    if records.speculates(k):
        c = (calibration or {}).get("draft_cost_ratio")
        entry["acceptance"] = metrics.get("acceptance")
        entry["draft_cost_ratio"] = _finite(c)
        fixed = k != records.AUTO
        entry["predicted_speedup"] = (predicted_speedup(metrics.get("acceptance"), k, c)
                                      if fixed else None)
        entry["calibrated_speedup"] = (calibrated_speedup(metrics, k, calibration,
                                                          baseline_latency)
                                       if fixed else None)
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
      `speedup` and `matched_speedup`.
    """
    summary: Dict[str, Any] = {key: header.get(key) for key in HEADER_KEYS}
    baseline = metrics.get(records.AUTOREGRESSIVE, {}).get("latency")
    runs = {}
    for mode, k in modes:
        if mode in (records.SPECULATIVE, records.AUTOREGRESSIVE, records.COMPLETIONS):
            runs[mode] = run_entry(k, metrics.get(mode, {}), calibration, baseline)
    summary["runs"] = runs
    summary["speedup"] = speedup(runs.get(records.AUTOREGRESSIVE, {}).get("latency"),
                                 runs.get(records.SPECULATIVE, {}).get("latency"))
    summary["matched_speedup"] = matched_speedup(metrics.get(records.AUTOREGRESSIVE),
                                                 metrics.get(records.SPECULATIVE))
    if records.SPECULATIVE not in runs or records.AUTOREGRESSIVE not in runs:
        summary["speedup"] = summary["matched_speedup"] = None
    summary.update(extra or {})
    return summary


def build_sweep(modes: Sequence[Tuple[str, int]], metrics: Mapping[str, Mapping[str, Any]],
                calibration: Optional[Mapping[str, Any]] = None,
                ks: Optional[Sequence[int]] = None) -> list:
    """sweep.json: one entry per K (ascending), each a `runs.*` entry plus `k`, `mode`,
    `speedup` and `matched_speedup` (over the K = 0 entry of the same run, None without
    one).

    Args:
      modes: the run's (mode, k) pairs.
      metrics: mode -> metrics.
      calibration: the draft cost measurement.
      ks: the Ks to list (default: all of `modes`).
    """
    by_k = {k: mode for mode, k in modes}
    wanted = sorted(by_k if ks is None else set(ks) & set(by_k), key=records.k_order)
    baseline = metrics.get(by_k.get(0), {}).get("latency") if 0 in by_k else None
    entries = []
    for k in wanted:
        mode = by_k[k]
        entry = {"k": k, "mode": mode}
        entry.update(run_entry(k, metrics.get(mode, {}), calibration, baseline))
        entry["speedup"] = speedup(baseline, entry["latency"]) if 0 in by_k else None
        entry["matched_speedup"] = (matched_speedup(metrics.get(by_k[0]), metrics.get(mode))
                                    if 0 in by_k else None)
        entries.append(entry)
    return entries


def why_line(summary: Mapping[str, Any]) -> Optional[str]:
    """One line that says why the measured speed-up differs from the formula's.

    The formula charges a round k draft steps plus one target step; the calibration measures
    what a round really costs here, e.g. "rounds at k=4 cost 4.40 ms, not the formula's
    2.83 ms: the verify and the round's fixed work cost 1.53 target steps, not 1".
    """
    k = summary.get("k")
    calibration = summary.get("calibration") or {}
    cost = round_cost(calibration)
    c, draft_step = (_finite(calibration.get("draft_cost_ratio")),
                     _finite(calibration.get("draft_step_s")))
    if not isinstance(k, int) or k <= 0 or cost is None or c is None or draft_step is None:
        return None
    formula_ms = 1000.0 * cost.target_step_s * (1.0 + k * c)
    return (f"why: rounds at k={k} cost {1000.0 * cost.round_s(k):.2f} ms here, not the "
            f"formula's {formula_ms:.2f} ms; the verify and the round's fixed work cost "
            f"{cost.verify_in_target_steps(k, draft_step):.2f} target steps, not 1")
