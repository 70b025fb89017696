"""The Markdown tables of a report (paper layouts, recommendation, per position, sweeps)."""

import os
from typing import Optional, Sequence

from evals import published
from evals import walltime
from evals.report.analysis import (DASH, agreement, alpha_and_c, calibrated_at, calibrated_k,
                                   greedy_mismatches, headline_metric, quality_bounds,
                                   recommended_k, speculative_entries, sweep_rows)
from evals.report.runs import Run
from evals.report.runs import number


def fmt(value, digits: int = 2, suffix: str = "") -> str:
    """A number with `digits` decimals (and suffix), or an en dash when missing."""
    parsed = number(value)
    return DASH if parsed is None else f"{parsed:.{digits}f}{suffix}"


def short_model(spec: Optional[str]) -> str:
    if not spec:
        return DASH
    spec = str(spec)
    if "://" in spec or spec.startswith("zoo:"):
        return spec.split("://")[-1]
    return os.path.basename(os.path.normpath(spec)) or spec


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    def clean(cell):
        return str(cell).replace("|", "\\|").replace("\n", " ")
    lines = ["| " + " | ".join(clean(h) for h in header) + " |",
             "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(clean(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)





def leviathan_table(runs: Sequence[Run]) -> str:
    """Markdown table in the layout of Leviathan et al. Table 2, published rows beside."""
    header = ("source", "task", "target", "draft", "temperature", "k", "alpha",
              "acceptance rate", "c", "speed-up (measured)", "speed-up (length-matched)",
              "speed-up (formula)", "measured / formula", "speed-up (calibrated)",
              "measured / calibrated")
    rows = []
    for run, entry in speculative_entries(runs):
        alpha, c = alpha_and_c(entry)
        measured = number(run.summary.get("speedup"))
        predicted = number(entry.get("predicted_speedup"))
        ratio = measured / predicted if measured is not None and predicted else None
        calibrated = number(entry.get("calibrated_speedup"))
        calibrated_ratio = (measured / calibrated if measured is not None and calibrated
                            else None)
        rows.append((f"ours: {run.label}", run.task, short_model(run.summary.get("target")),
                     short_model(run.summary.get("draft")), fmt(run.temperature, 1),
                     str(run.summary.get("k")), fmt(alpha), fmt(
                         (entry.get("acceptance") or {}).get("acceptance_rate")),
                     fmt(c, 3), fmt(measured, 2, "x"),
                     fmt(number(run.summary.get("matched_speedup")), 2, "x"),
                     fmt(predicted, 2, "x"),
                     fmt(ratio, 2), fmt(calibrated, 2, "x"), fmt(calibrated_ratio, 2)))
        row = published.match_leviathan(run.task, run.temperature, run.summary.get("draft"))
        if row:
            rows.append((f"published: {row.source}", row.task, row.target, row.draft,
                         fmt(row.temperature, 1), str(row.k), fmt(row.alpha), DASH, DASH,
                         fmt(row.speedup, 1, "x"), DASH, DASH, DASH, DASH, DASH))
    if not rows:
        return "_No speculative run in the given run directories._"
    return markdown_table(header, rows)


def chen_table(runs: Sequence[Run]) -> str:
    """Markdown table in the layout of Chen et al. Table 1, published rows beside."""
    header = ("source", "sampling method", "benchmark", "decoding", "quality",
              "95% bounds", "mean token time (ms)", "speed-up", "quality agrees")
    rows = []
    for run in runs:
        base_entry, spec_entry = run.run_entry("autoregressive"), run.run_entry("speculative")
        if not base_entry and not spec_entry:
            continue
        quality = (spec_entry or base_entry or {}).get("quality") or {}
        metric = headline_metric(quality)
        method = published.sampling_method(run.temperature, run.top_p, run.top_k)
        method_text = (f"{method} (T={fmt(run.temperature, 1)}"
                       + (f", p={fmt(run.top_p, 2)}" if run.top_p < 1 else "")
                       + (f", top-k={run.top_k}" if run.top_k else "") + ")")
        base = quality_bounds(run, "autoregressive", metric) if metric else (None,) * 4
        spec = quality_bounds(run, "speculative", metric) if metric else (None,) * 4
        agree = agreement(base, spec) if base_entry and spec_entry else DASH
        if agree.startswith(("yes", "NO")):
            agree += f" ({base[3]})"
        pairs = greedy_mismatches(run.examples) if run.temperature == 0 else None
        if pairs and base_entry and spec_entry:
            compared, differ = pairs
            agree = (f"yes: {compared}/{compared} outputs identical" if not differ else
                     f"NO: {differ} of {compared} outputs differ")
        for label, entry, q, speed in (
                ("autoregressive (k=0)", base_entry, base, 1.0 if base_entry else None),
                (f"speculative (k={run.summary.get('k')})", spec_entry, spec,
                 run.summary.get("speedup"))):
            if not entry:
                continue
            bounds = (f"[{fmt(q[1])}, {fmt(q[2])}]" if q[1] is not None else DASH)
            rows.append((f"ours: {run.label}", method_text, run.task, label,
                         f"{metric} {fmt(q[0])}" if metric else DASH, bounds,
                         fmt((entry.get("latency") or {}).get("ms_per_token"), 3),
                         fmt(speed, 2, "x"), agree))
        row = published.match_chen(run.task, run.temperature, run.top_p, run.top_k)
        if row:
            for label, value, ms, speed in (
                    ("autoregressive", row.baseline_quality, row.baseline_ms_per_token, 1.0),
                    (f"speculative (K={row.k})", row.speculative_quality,
                     row.speculative_ms_per_token, row.speedup)):
                rows.append((f"published: {row.source}",
                             f"{row.method} (T={fmt(row.temperature, 1)}"
                             + (f", p={fmt(row.top_p, 2)}" if row.top_p < 1 else "") + ")",
                             row.task, label, f"{row.metric} {fmt(value, 1)}", DASH,
                             fmt(ms, 2), fmt(speed, 2, "x"), DASH))
    if not rows:
        return "_No run with quality results._"
    return markdown_table(header, rows)


def recommendation_table(runs: Sequence[Run]) -> str:
    """Measured alpha and costs, the recommended k and the predicted speed-ups.

    The recommendation is the calibrated model's (measured round costs); the formula's own
    optimum is listed beside it, as the formula assumes a verify that costs one step.
    """
    header = ("run", "alpha", "c", "k of the run", "calibrated speed-up at run k",
              "recommended k (calibrated)", "calibrated speed-up at recommended k",
              "formula's optimal_k", "formula speed-up at its optimal_k")
    rows = []
    for run, entry in speculative_entries(runs):
        alpha, c = alpha_and_c(entry)
        k = run.summary.get("k") or 0  # An int, or "auto" (no calibrated value at it).
        best = calibrated_k(run, entry)
        formula_best = recommended_k(alpha, c)
        at_formula_best = (walltime.predicted_speedup(alpha, formula_best, c)
                           if formula_best is not None else None)
        rows.append((run.label, fmt(alpha), fmt(c, 3), str(k),
                     fmt(calibrated_at(run, entry, k), 2, "x"),
                     DASH if best is None else str(best),
                     fmt(calibrated_at(run, entry, best), 2, "x"),
                     DASH if formula_best is None else str(formula_best),
                     fmt(at_formula_best, 2, "x")))
    if not rows:
        return "_No speculative run._"
    return markdown_table(header, rows)


def per_position_table(runs: Sequence[Run]) -> str:
    """Per-position acceptance of each run's speculative entry, with alpha**i beside."""
    entries = [(r, e) for r, e in speculative_entries(runs)
               if (e.get("acceptance") or {}).get("per_position")]
    if not entries:
        return "_No per-position acceptance recorded._"
    width = max(len(e["acceptance"]["per_position"]) for _, e in entries)
    header = ["run", "measured / alpha^i"] + [f"i={i + 1}" for i in range(width)]
    rows = []
    for run, entry in entries:
        per_pos = entry["acceptance"]["per_position"]
        alpha, _ = alpha_and_c(entry)
        rows.append([run.label, "measured"] + [fmt(v) for v in per_pos]
                    + [""] * (width - len(per_pos)))
        rows.append([run.label, "alpha^i"] + [
            fmt(alpha ** (i + 1)) if alpha is not None else DASH
            for i in range(len(per_pos))] + [""] * (width - len(per_pos)))
    return markdown_table(header, rows)



def sweep_table(run: Run) -> str:
    header = ("K", "ms/token", "speed-up (measured)", "speed-up (length-matched)",
              "speed-up (formula)", "speed-up (calibrated)", "alpha",
              "acceptance rate", "loop time (ms)", "seq time mean ± std (s)",
              "p50 (s)", "p90 (s)", "p99 (s)")
    rows = [(str(r["k"]), fmt(r["ms_per_token"], 3), fmt(r["speedup"], 2, "x"),
             fmt(r["matched"], 2, "x"), fmt(r["predicted"], 2, "x"), fmt(r["calibrated"], 2, "x"), fmt(r["alpha"]),
             fmt(r["acceptance_rate"]),
             fmt(r["loop_ms"], 3), f"{fmt(r['seq_mean_s'], 4)} ± {fmt(r['seq_std_s'], 4)}",
             fmt(r["p50_s"], 4), fmt(r["p90_s"], 4), fmt(r["p99_s"], 4))
            for r in sweep_rows(run)]
    return markdown_table(header, rows)
