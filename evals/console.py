"""What the terminal shows after a run or a report: the headline numbers as plain text.

    print(sweep_table(sweep))        # evals.run with --k_sweep: one row per K
    print(report_headline(runs))     # evals.report: each run's numbers, then report.md

No TensorFlow, no Beam: reads only the dicts of summary.json / sweep.json
(docs/design.md section 6).
"""

import math
from typing import Any, Mapping, Optional, Sequence

from evals import report

DASH = "-"


def _num(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return None if math.isnan(value) or math.isinf(value) else float(value)


def _fmt(value: Any, digits: int = 2, suffix: str = "") -> str:
    value = _num(value)
    return DASH if value is None else f"{value:.{digits}f}{suffix}"


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns right-aligned under their headers, two spaces apart."""
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows)]
    return "\n".join("  ".join(str(c).rjust(w) for c, w in zip(row, widths))
                     for row in [header, *rows])


def sweep_table(sweep: Sequence[Mapping[str, Any]]) -> str:
    """Per-K table of a K sweep: ms/token, speed-up over K = 0, acceptance, p50/p99 sequence
    time (ms). `sweep` is sweep.json's list."""
    rows = []
    for entry in sweep:
        latency = entry.get("latency") or {}
        acceptance = entry.get("acceptance") or {}
        k = entry.get("k")
        rows.append((str(k), _fmt(latency.get("ms_per_token"), 3),
                     _fmt(entry.get("speedup"), 2, "x"),
                     _fmt(acceptance.get("acceptance_rate"), 3) if k else DASH,
                     _fmt(1e3 * latency["seq_time_p50_s"] if _num(
                         latency.get("seq_time_p50_s")) is not None else None, 1),
                     _fmt(1e3 * latency["seq_time_p99_s"] if _num(
                         latency.get("seq_time_p99_s")) is not None else None, 1)))
    return text_table(("K", "ms/token", "speed-up", "acceptance", "p50 (ms)", "p99 (ms)"),
                      rows)


def _quality(quality: Mapping[str, Any]) -> str:
    name = report.headline_metric(quality or {})
    return DASH if name is None else f"{name} {_fmt(quality[name])}"


def run_headline(run: "report.Run") -> str:
    """A few lines of one run: per mode quality and ms/token; speed-up, acceptance,
    recommended k; the best measured K of a sweep."""
    summary = run.summary
    sampling = run.sampling
    lines = [f"{run.label}: {run.task}, {summary.get('num_examples')} examples x "
             f"{summary.get('num_samples')} samples, temperature "
             f"{_fmt(sampling.get('temperature'), 2)}, k = {summary.get('k')}"]
    for mode, entry in (summary.get("runs") or {}).items():
        latency = entry.get("latency") or {}
        lines.append(f"  {mode:<15} {_quality(entry.get('quality'))}, "
                     f"{_fmt(latency.get('ms_per_token'), 3)} ms/token")
    spec = run.run_entry("speculative")
    parts = [f"speed-up {_fmt(summary.get('speedup'), 2, 'x')}"]
    matched = _num(summary.get("matched_speedup"))
    if matched is not None and sampling.get("temperature"):
        parts.append(f"length-matched {matched:.2f}x")
    if spec:
        acceptance = (spec.get("acceptance") or {}).get("acceptance_rate")
        parts.append(f"acceptance {_fmt(acceptance, 3)}")
        parts.append(f"formula {_fmt(spec.get('predicted_speedup'), 2, 'x')}")
        if spec.get("calibrated_speedup") is not None:
            parts.append(f"calibrated {_fmt(spec.get('calibrated_speedup'), 2, 'x')}")
        best = report.calibrated_k(run, spec)
        if best is None:  # No measured round costs (older runs): the formula's optimum.
            best = report.recommended_k(*report.alpha_and_c(spec))
        parts.append(f"recommended k {best if best is not None else DASH}")
    lines.append("  " + ", ".join(parts))
    # Sampled modes' answers differ in length: rank Ks at one request length where known.
    key = ("matched_speedup" if sampling.get("temperature") and any(
        _num(e.get("matched_speedup")) is not None for e in run.sweep or []) else "speedup")
    measured = [(e.get(key), e.get("k")) for e in run.sweep or []
                if _num(e.get(key)) is not None and e.get("k")]
    if measured:
        speedup, k = max(measured, key=lambda entry: entry[0])
        what = "length-matched" if key == "matched_speedup" else "measured"
        lines.append(f"  K sweep: best {what} speed-up {speedup:.2f}x at K = {k} "
                     f"(of {', '.join(str(e.get('k')) for e in run.sweep)})")
    return "\n".join(lines)


def report_headline(runs: Sequence["report.Run"], report_path: Optional[str] = None) -> str:
    """The headline of every run, then where the report is."""
    parts = [run_headline(run) for run in runs]
    if report_path:
        parts.append(f"report: {report_path}")
    return "\n".join(parts)
