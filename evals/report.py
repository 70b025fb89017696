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

Regenerating the embedded-default example report (`reports/embedded_default/`) is one
command, `python -m evals.report_example` (see that module).

Library use (no Beam, no absl, no TensorFlow): `load_run(path)`, `build_report(runs, out)`.
"""

import dataclasses
import json
import math
import os
import re
import sys
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

from evals import published
from evals import summary as summary_lib
from evals import walltime

EXIT_USAGE = 2
HEADLINE_METRICS = ("pass@1", "rouge2", "bleu", "rougeL", "rouge1")
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0
DASH = "–"


class ReportError(ValueError):
    """A run directory that cannot be read; the message is one line."""


@dataclasses.dataclass
class Run:
    """One loaded run directory.

    Attributes:
      path: the directory.
      name: a short label (the directory's base name, made unique by `load_runs`).
      summary: summary.json.
      sweep: sweep.json entries (ascending K), or None.
      examples: examples.jsonl lines, or None when the file is absent.
    """

    path: str
    name: str
    summary: Dict[str, Any]
    sweep: Optional[List[Dict[str, Any]]] = None
    examples: Optional[List[Dict[str, Any]]] = None

    @property
    def task(self) -> str:
        return str(self.summary.get("task"))

    @property
    def sampling(self) -> Dict[str, Any]:
        return dict(self.summary.get("sampling") or {})

    @property
    def temperature(self) -> float:
        return float(self.sampling.get("temperature") or 0.0)

    @property
    def top_p(self) -> float:
        value = self.sampling.get("top_p")
        return 1.0 if value is None else float(value)

    @property
    def top_k(self) -> int:
        return int(self.sampling.get("top_k") or 0)

    def run_entry(self, mode: str) -> Optional[Dict[str, Any]]:
        return (self.summary.get("runs") or {}).get(mode)


def _read_json(path: str, what: str):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise ReportError(f"{path}: not valid JSON ({e.msg} at line {e.lineno}); "
                          f"is the {what} complete?") from None
    except OSError as e:
        raise ReportError(f"{path}: cannot read ({e.strerror})") from None


def load_run(path: str) -> Run:
    """Reads a run directory.

    Raises:
      ReportError: no such directory, no or invalid summary.json / sweep.json.
    """
    if not os.path.isdir(path):
        raise ReportError(f"{path}: no such run directory")
    summary_path = os.path.join(path, "summary.json")
    if not os.path.isfile(summary_path):
        raise ReportError(f"{path}: no summary.json (not a finished evals.run output "
                          f"directory; finish it with --output_dir {path} --resume)")
    summary = _read_json(summary_path, "run")
    if not isinstance(summary, dict) or "runs" not in summary or "task" not in summary:
        raise ReportError(f"{summary_path}: not an evals.run summary (no 'task'/'runs')")
    sweep = None
    sweep_path = os.path.join(path, "sweep.json")
    if os.path.isfile(sweep_path):
        sweep = _read_json(sweep_path, "sweep")
        if not isinstance(sweep, list):
            raise ReportError(f"{sweep_path}: expected a list of per-K entries")
        sweep = sorted(sweep, key=lambda e: int(e.get("k", 0)))
    examples = None
    examples_path = os.path.join(path, "examples.jsonl")
    if os.path.isfile(examples_path):
        examples = []
        with open(examples_path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    try:
                        examples.append(json.loads(line))
                    except json.JSONDecodeError:
                        continue  # A line cut by an interrupted run; summary is the truth.
    name = os.path.basename(os.path.normpath(path)) or "run"
    return Run(path=path, name=name, summary=summary, sweep=sweep, examples=examples)


def load_runs(paths: Sequence[str]) -> List[Run]:
    """Loads several run directories, giving them unique names."""
    runs, seen = [], {}
    for path in paths:
        run = load_run(path)
        count = seen.get(run.name, 0)
        seen[run.name] = count + 1
        if count:
            run.name = f"{run.name}-{count + 1}"
        runs.append(run)
    return runs


# ----------------------------------------------------------------------------- formatting


def _num(value) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def fmt(value, digits: int = 2, suffix: str = "") -> str:
    """A number with `digits` decimals (and suffix), or an en dash when missing."""
    number = _num(value)
    return DASH if number is None else f"{number:.{digits}f}{suffix}"


def _short_model(spec: Optional[str]) -> str:
    if not spec:
        return DASH
    spec = str(spec)
    if "://" in spec or spec.startswith("zoo:"):
        return spec.split("://")[-1]
    return os.path.basename(os.path.normpath(spec)) or spec


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    def clean(cell):
        return str(cell).replace("|", "\\|").replace("\n", " ")
    lines = ["| " + " | ".join(clean(h) for h in header) + " |",
             "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(clean(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "run"


# ------------------------------------------------------------------------------ analysis


def alpha_and_c(entry: Optional[Mapping[str, Any]]):
    """(alpha = beta_mean, c = draft_cost_ratio) of a speculative entry, None if missing."""
    entry = entry or {}
    alpha = _num((entry.get("acceptance") or {}).get("beta_mean"))
    if alpha is not None:
        alpha = min(max(alpha, 0.0), 1.0)
    c = _num(entry.get("draft_cost_ratio"))
    return alpha, (c if c is not None and c >= 0 else None)


def recommended_k(alpha: Optional[float], c: Optional[float],
                  k_max: int = 16) -> Optional[int]:
    """`walltime.optimal_k` at the measured alpha and c (None if either is missing)."""
    if alpha is None or c is None:
        return None
    return walltime.optimal_k(alpha, c, k_max=k_max)


def calibrated_k(run: "Run", entry: Optional[Mapping[str, Any]],
                 k_max: int = 16) -> Optional[int]:
    """`walltime.calibrated_optimal_k` at the measured alpha and the run's measured round
    costs (None without a calibration that measured rounds)."""
    alpha, _ = alpha_and_c(entry)
    cost = summary_lib.round_cost(run.summary.get("calibration"))
    if alpha is None or cost is None:
        return None
    tokens = summary_lib.tokens_per_request((entry or {}).get("latency"))
    return walltime.calibrated_optimal_k(alpha, cost, k_max=k_max, tokens_per_request=tokens)


def calibrated_at(run: "Run", entry: Optional[Mapping[str, Any]],
                  k: Optional[int]) -> Optional[float]:
    """The calibrated speed-up of `entry`'s alpha and the run's costs at another k."""
    if k is None:
        return None
    return summary_lib.calibrated_speedup(entry or {}, k, run.summary.get("calibration"))


def loop_time_ms(entry: Mapping[str, Any], k: int) -> Optional[float]:
    """Mean time of one loop (one target call) in ms: ms/token x tokens per round."""
    ms = _num((entry.get("latency") or {}).get("ms_per_token"))
    if ms is None:
        return None
    if k == 0:
        return ms
    per_round = _num((entry.get("acceptance") or {}).get("mean_tokens_per_round"))
    return None if per_round is None else ms * per_round


def headline_metric(quality: Mapping[str, Any]) -> Optional[str]:
    for name in HEADLINE_METRICS:
        if _num(quality.get(name)) is not None:
            return name
    return None


def bootstrap_pass1(examples: Sequence[Mapping[str, Any]], mode: str,
                    resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED):
    """95% bootstrap interval (percent) of pass@1 over problems, or None without records.

    pass@1 of a problem is its fraction of passing samples; the run's pass@1 is their mean
    over problems. Problems are resampled with replacement.
    """
    per_problem: Dict[str, List[float]] = {}
    for line in examples:
        if line.get("mode") != mode:
            continue
        passed = (line.get("quality") or {}).get("passed")
        if passed is None:
            continue
        per_problem.setdefault(str(line.get("id")), []).append(1.0 if passed else 0.0)
    if not per_problem:
        return None
    rates = np.array([np.mean(v) for _, v in sorted(per_problem.items())])
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, rates.size, size=(resamples, rates.size))
    means = rates[idx].mean(axis=1) * 100.0
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def quality_bounds(run: Run, mode: str, metric: str):
    """(value, low, high, how) of a quality metric of one mode; bounds may be None."""
    entry = run.run_entry(mode) or {}
    quality = entry.get("quality") or {}
    value = _num(quality.get(metric))
    low, high = _num(quality.get(f"{metric}_low")), _num(quality.get(f"{metric}_high"))
    if low is not None and high is not None:
        return value, low, high, "summary bootstrap"
    if metric == "pass@1" and run.examples:
        bounds = bootstrap_pass1(run.examples, mode)
        if bounds:
            return value, bounds[0], bounds[1], "bootstrap over problems"
    return value, None, None, None


def agreement(base, spec) -> str:
    """'yes'/'NO' by 95% interval overlap, or a dash when the intervals cannot judge:
    either is missing, or both are the single point 0 (nothing passed in either mode, which
    says nothing about agreement)."""
    _, blow, bhigh, _ = base
    _, slow, shigh, _ = spec
    if None in (blow, bhigh, slow, shigh):
        return f"{DASH} (no bounds)"
    if blow == bhigh == slow == shigh == 0:
        return f"{DASH} (both 0: not judged)"
    return "yes" if max(blow, slow) <= min(bhigh, shigh) else "NO"


def greedy_mismatches(examples: Optional[Sequence[Mapping[str, Any]]]):
    """(outputs compared, outputs that differ) between the autoregressive and speculative
    records of the same (id, sample); None without examples or without pairs.

    For greedy decoding the two modes must emit the same tokens (exactness), so this is the
    sharp check; with a bfloat16 cache a near-tie may still flip a token now and then.
    """
    outputs: Dict[str, Dict[Any, Any]] = {"autoregressive": {}, "speculative": {}}
    for line in examples or ():
        if line.get("mode") in outputs:
            outputs[line["mode"]][(line.get("id"), line.get("sample"))] = line.get(
                "raw_output")
    common = set(outputs["autoregressive"]) & set(outputs["speculative"])
    if not common:
        return None
    differ = sum(outputs["autoregressive"][key] != outputs["speculative"][key]
                 for key in common)
    return len(common), differ


# -------------------------------------------------------------------------------- tables


def _speculative_entries(runs: Sequence[Run]):
    """(run, its summary's "speculative" entry) for the runs that have one."""
    for run in runs:
        entry = run.run_entry("speculative")
        if entry:
            yield run, entry


def leviathan_table(runs: Sequence[Run]) -> str:
    """Markdown table in the layout of Leviathan et al. Table 2, published rows beside."""
    header = ("source", "task", "target", "draft", "temperature", "k", "alpha",
              "acceptance rate", "c", "speed-up (measured)", "speed-up (formula)",
              "measured / formula", "speed-up (calibrated)", "measured / calibrated")
    rows = []
    for run, entry in _speculative_entries(runs):
        alpha, c = alpha_and_c(entry)
        measured = _num(run.summary.get("speedup"))
        predicted = _num(entry.get("predicted_speedup"))
        ratio = measured / predicted if measured is not None and predicted else None
        calibrated = _num(entry.get("calibrated_speedup"))
        calibrated_ratio = (measured / calibrated if measured is not None and calibrated
                            else None)
        rows.append((f"ours: {run.name}", run.task, _short_model(run.summary.get("target")),
                     _short_model(run.summary.get("draft")), fmt(run.temperature, 1),
                     str(run.summary.get("k")), fmt(alpha), fmt(
                         (entry.get("acceptance") or {}).get("acceptance_rate")),
                     fmt(c, 3), fmt(measured, 2, "x"), fmt(predicted, 2, "x"),
                     fmt(ratio, 2), fmt(calibrated, 2, "x"), fmt(calibrated_ratio, 2)))
        row = published.match_leviathan(run.task, run.temperature, run.summary.get("draft"))
        if row:
            rows.append((f"published: {row.source}", row.task, row.target, row.draft,
                         fmt(row.temperature, 1), str(row.k), fmt(row.alpha), DASH, DASH,
                         fmt(row.speedup, 1, "x"), DASH, DASH, DASH, DASH))
    if not rows:
        return "_No speculative run in the given run directories._"
    return _table(header, rows)


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
            rows.append((f"ours: {run.name}", method_text, run.task, label,
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
    return _table(header, rows)


def recommendation_table(runs: Sequence[Run]) -> str:
    """Measured alpha and costs, the recommended k and the predicted speed-ups.

    The recommendation is the calibrated model's (measured round costs); the formula's own
    optimum is listed beside it, as the formula assumes a verify that costs one step.
    """
    header = ("run", "alpha", "c", "k of the run", "calibrated speed-up at run k",
              "recommended k (calibrated)", "calibrated speed-up at recommended k",
              "formula's optimal_k", "formula speed-up at its optimal_k")
    rows = []
    for run, entry in _speculative_entries(runs):
        alpha, c = alpha_and_c(entry)
        k = int(run.summary.get("k") or 0)
        best = calibrated_k(run, entry)
        formula_best = recommended_k(alpha, c)
        at_formula_best = (walltime.predicted_speedup(alpha, formula_best, c)
                           if formula_best is not None else None)
        rows.append((run.name, fmt(alpha), fmt(c, 3), str(k),
                     fmt(calibrated_at(run, entry, k), 2, "x"),
                     DASH if best is None else str(best),
                     fmt(calibrated_at(run, entry, best), 2, "x"),
                     DASH if formula_best is None else str(formula_best),
                     fmt(at_formula_best, 2, "x")))
    if not rows:
        return "_No speculative run._"
    return _table(header, rows)


def per_position_table(runs: Sequence[Run]) -> str:
    """Per-position acceptance of each run's speculative entry, with alpha**i beside."""
    entries = [(r, e) for r, e in _speculative_entries(runs)
               if (e.get("acceptance") or {}).get("per_position")]
    if not entries:
        return "_No per-position acceptance recorded._"
    width = max(len(e["acceptance"]["per_position"]) for _, e in entries)
    header = ["run", "measured / alpha^i"] + [f"i={i + 1}" for i in range(width)]
    rows = []
    for run, entry in entries:
        per_pos = entry["acceptance"]["per_position"]
        alpha, _ = alpha_and_c(entry)
        rows.append([run.name, "measured"] + [fmt(v) for v in per_pos]
                    + [""] * (width - len(per_pos)))
        rows.append([run.name, "alpha^i"] + [
            fmt(alpha ** (i + 1)) if alpha is not None else DASH
            for i in range(len(per_pos))] + [""] * (width - len(per_pos)))
    return _table(header, rows)


def sweep_rows(run: Run) -> List[Dict[str, Any]]:
    """Per-K numbers of a sweep: the data of the Figure 1 panels."""
    out = []
    for entry in run.sweep or []:
        k = int(entry.get("k", 0))
        latency = entry.get("latency") or {}
        acceptance = entry.get("acceptance") or {}
        out.append({
            "k": k,
            "ms_per_token": _num(latency.get("ms_per_token")),
            "seq_mean_s": _num(latency.get("seq_time_mean_s")),
            "seq_std_s": _num(latency.get("seq_time_std_s")),
            "p50_s": _num(latency.get("seq_time_p50_s")),
            "p90_s": _num(latency.get("seq_time_p90_s")),
            "p99_s": _num(latency.get("seq_time_p99_s")),
            "acceptance_rate": _num(acceptance.get("acceptance_rate")) if k else None,
            "alpha": _num(acceptance.get("beta_mean")) if k else None,
            "loop_ms": loop_time_ms(entry, k),
            "speedup": _num(entry.get("speedup")),
            "predicted": 1.0 if k == 0 else _num(entry.get("predicted_speedup")),
            "calibrated": 1.0 if k == 0 else _num(entry.get("calibrated_speedup")),
        })
    return out


def sweep_table(run: Run) -> str:
    header = ("K", "ms/token", "speed-up (measured)", "speed-up (formula)",
              "speed-up (calibrated)", "alpha",
              "acceptance rate", "loop time (ms)", "seq time mean ± std (s)",
              "p50 (s)", "p90 (s)", "p99 (s)")
    rows = [(str(r["k"]), fmt(r["ms_per_token"], 3), fmt(r["speedup"], 2, "x"),
             fmt(r["predicted"], 2, "x"), fmt(r["calibrated"], 2, "x"), fmt(r["alpha"]),
             fmt(r["acceptance_rate"]),
             fmt(r["loop_ms"], 3), f"{fmt(r['seq_mean_s'], 4)} ± {fmt(r['seq_std_s'], 4)}",
             fmt(r["p50_s"], 4), fmt(r["p90_s"], 4), fmt(r["p99_s"], 4))
            for r in sweep_rows(run)]
    return _table(header, rows)


# ------------------------------------------------------------------------------- figures


def _pyplot():
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
    plt.rcParams.update({"font.size": 10, "axes.titlesize": 11, "legend.fontsize": 9})
    return plt


def _describe(run: Run) -> str:
    method = published.sampling_method(run.temperature, run.top_p, run.top_k)
    return (f"{run.task}, {method} T={fmt(run.temperature, 1)}"
            + (f" p={fmt(run.top_p, 2)}" if run.top_p < 1 else "")
            + f", {_short_model(run.summary.get('target'))} / "
              f"{_short_model(run.summary.get('draft'))}")


def _xs(rows, key):
    pts = [(r["k"], r[key]) for r in rows if r[key] is not None]
    return [p[0] for p in pts], [p[1] for p in pts]


def sweep_figure(run: Run, path: str) -> Optional[str]:
    """Chen et al. Figure 1 style panels for a sweep, plus the tail-latency panel."""
    rows = sweep_rows(run)
    if not rows:
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    ks = [r["k"] for r in rows]

    longest = max([r["p99_s"] or 0.0 for r in rows] + [r["seq_mean_s"] or 0.0 for r in rows])
    unit, scale = ("s", 1.0) if longest >= 1.0 else ("ms", 1e3)

    ax = axes[0, 0]
    pts = [(r["k"], r["seq_mean_s"] * scale, (r["seq_std_s"] or 0.0) * scale) for r in rows
           if r["seq_mean_s"] is not None]
    if pts:
        ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] for p in pts],
                    marker="o", capsize=4, label="mean ± 1 std")
    ax.set_title("Time per generated sequence")
    ax.set_ylabel(f"sequence time ({unit})")

    ax = axes[0, 1]
    x, y = _xs(rows, "acceptance_rate")
    ax.plot(x, y, marker="o", label="acceptance rate (accepted / drafted)")
    x, y = _xs(rows, "alpha")
    ax.plot(x, y, marker="s", linestyle="--", label="alpha (mean overlap β)")
    ax.set_ylim(0, 1.05)
    ax.set_title("Acceptance")
    ax.set_ylabel("fraction")

    ax = axes[1, 0]
    x, y = _xs(rows, "loop_ms")
    ax.plot(x, y, marker="o", color="tab:green", label="loop time (one target call)")
    x2, y2 = _xs(rows, "ms_per_token")
    ax.plot(x2, y2, marker="^", color="tab:purple", label="time per token")
    ax.set_title("Loop time and token time")
    ax.set_ylabel("time (ms)")

    ax = axes[1, 1]
    for key, label, style in (("p50_s", "p50", "-o"), ("p90_s", "p90", "--s"),
                              ("p99_s", "p99", ":^")):
        x, y = _xs(rows, key)
        ax.plot(x, [v * scale for v in y], style, label=label)
    ax.set_title("Sequence time percentiles (tail latency)")
    ax.set_ylabel(f"sequence time ({unit})")

    for ax in axes.flat:
        ax.set_xlabel("K (draft tokens per loop; 0 = autoregressive)")
        ax.set_xticks(ks)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="best")
    fig.suptitle(f"K sweep: {_describe(run)}", fontsize=12)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def speedup_figure(run: Run, path: str) -> Optional[str]:
    """Predicted speed-up against k at the measured alpha and c, with measured points."""
    entry = run.run_entry("speculative")
    alpha, c = alpha_and_c(entry)
    if alpha is None or c is None:
        return None
    plt = _pyplot()
    calibrated_best = calibrated_k(run, entry)
    best = recommended_k(alpha, c) if calibrated_best is None else calibrated_best
    measured = [(r["k"], r["speedup"]) for r in sweep_rows(run) if r["speedup"] is not None]
    if not measured and _num(run.summary.get("speedup")) is not None:
        measured = [(int(run.summary.get("k") or 0), float(run.summary["speedup"]))]
    k_max = max([8, best + 2] + [k for k, _ in measured])
    ks = list(range(k_max + 1))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(ks, [walltime.predicted_speedup(alpha, k, c) for k in ks], "-o", markersize=4,
            label=f"formula (alpha={alpha:.2f}, c={c:.3f})")
    if calibrated_best is not None:
        ax.plot(ks, [calibrated_at(run, entry, k) for k in ks], "-^", markersize=4,
                label="calibrated (measured round costs)")
    if measured:
        ax.plot([k for k, _ in measured], [s for _, s in measured], "s", markersize=8,
                color="tab:red", label="measured")
    ax.axvline(best, color="gray", linestyle="--", label=f"recommended k = {best}")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("k (draft tokens per loop)")
    ax.set_ylabel("walltime speed-up over autoregressive (x)")
    ax.set_title(f"Speed-up vs k: {_describe(run)}", fontsize=10)
    ax.set_xticks(ks)
    ax.grid(alpha=0.3)
    ax.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def per_position_figure(runs: Sequence[Run], path: str) -> Optional[str]:
    """Per-position acceptance of every run's speculative (--k) entry against alpha**i."""
    series = []
    for run in runs:
        entries = []
        if run.run_entry("speculative"):
            entries = [dict(run.run_entry("speculative"), k=run.summary.get("k"))]
        for entry in entries:
            per_pos = (entry.get("acceptance") or {}).get("per_position") or []
            values = [_num(v) for v in per_pos]
            if values and all(v is not None for v in values):
                alpha, _ = alpha_and_c(entry)
                label = f"{run.name} k={entry.get('k')}"
                series.append((label, values, alpha))
    if not series:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.8))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (label, values, alpha) in enumerate(series):
        color = colors[i % len(colors)]
        pos = list(range(1, len(values) + 1))
        alpha_text = "" if alpha is None else f" (alpha={alpha:.2f})"
        ax.plot(pos, values, "-o", color=color, label=f"{label}{alpha_text}")
        if alpha is not None:
            ax.plot(pos, [alpha ** p for p in pos], ":", color=color)
    ax.plot([], [], ":", color="gray", label="alpha^i (independent acceptances)")
    ax.set_xlabel("draft position i within a loop (1 = first drafted token)")
    ax.set_ylabel("fraction of loops with position i accepted")
    ax.set_ylim(0, 1.05)
    ax.set_title("Per-position acceptance (solid: measured; dotted: alpha^i)")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(alpha=0.3)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


# -------------------------------------------------------------------------------- report


def _runs_table(runs: Sequence[Run]) -> str:
    header = ("run", "task", "target", "draft", "sampling", "k", "sweep Ks", "examples",
              "samples", "seed", "git commit", "finished")
    rows = []
    for run in runs:
        s = run.summary
        sweep_ks = ",".join(str(e.get("k")) for e in run.sweep) if run.sweep else DASH
        sampling = (f"T={fmt(run.temperature, 1)} top_k={run.top_k} "
                    f"top_p={fmt(run.top_p, 2)}")
        rows.append((run.name, run.task, _short_model(s.get("target")),
                     _short_model(s.get("draft")), sampling, str(s.get("k")), sweep_ks,
                     str(s.get("num_examples")), str(s.get("num_samples")),
                     str(s.get("seed")), str(s.get("git_commit") or DASH)[:12],
                     str(s.get("finished_at") or DASH)))
    return _table(header, rows)


def build_report(runs: Sequence[Run], out_dir: str) -> str:
    """Writes `out_dir/report.md` and its PNG figures; returns the report's path."""
    os.makedirs(out_dir, exist_ok=True)
    parts = [
        "# Speculative decoding report",
        "",
        f"Generated by `python -m evals.report` from {len(runs)} run director"
        f"{'y' if len(runs) == 1 else 'ies'}. Rows marked **published** are numbers from "
        "the papers (their models and hardware, see `evals/published.py`), not ours.",
        "",
        "Definitions: *alpha* is the measured mean overlap β = Σ min(target, draft) per "
        "verified position (its expectation is Leviathan et al.'s α); *acceptance rate* is "
        "accepted / drafted tokens; *c* is the measured cost of one draft step over one "
        "target step; *speed-up (measured)* is autoregressive ms/token over speculative "
        "ms/token in the same run; *speed-up (formula)* is "
        "(1 − α^(k+1)) / ((1 − α)(k·c + 1)) at the measured α and c.",
        "",
        "## Runs",
        "",
        _runs_table(runs),
        "",
        "## Walltime speed-up (layout of Leviathan et al. Table 2)",
        "",
        leviathan_table(runs),
        "",
        "## Quality and token time (layout of Chen et al. Table 1)",
        "",
        "Quality agrees when the 95% bootstrap intervals of the baseline and the "
        "speculative run overlap. ROUGE (x100) intervals come from summary.json; pass@1 "
        "intervals (percent) are bootstrapped here over problems from examples.jsonl; "
        "BLEU has no interval and is not judged, nor are two intervals that are both the "
        "point 0. Greedy runs with examples.jsonl are judged by their outputs instead: "
        "the two modes must emit the same tokens, and the differing outputs are counted "
        "(a bfloat16 cache may flip a near-tie now and then). Exact speculative decoding "
        "samples from the target's distribution, so a disagreement points at noise from "
        "too few examples or at a bug.",
        "",
        chen_table(runs),
        "",
        "## Recommended draft length",
        "",
        "`evals.walltime.calibrated_optimal_k`: the k that maximises the calibrated model "
        "(the formula's tokens per round at the measured alpha, with the round, step and "
        "per-request costs the run's calibration measured; 0 means speculation does not "
        "pay). The formula's `optimal_k(alpha, c)` is beside it: it assumes a verify that "
        "costs one target step and no per-round work.",
        "",
        recommendation_table(runs),
        "",
    ]
    for run in runs:
        path = speedup_figure(run, os.path.join(out_dir, f"speedup_{_slug(run.name)}.png"))
        if path:
            parts += [f"![Speed-up against k, {run.name}]({os.path.basename(path)})", ""]
    parts += ["## Per-position acceptance", "",
              "Fraction of loops in which the i-th drafted token was accepted. With "
              "independent acceptances of mean alpha it would be alpha^i.", "",
              per_position_table(runs), ""]
    path = per_position_figure(runs, os.path.join(out_dir, "per_position_acceptance.png"))
    if path:
        parts += [f"![Per-position acceptance]({os.path.basename(path)})", ""]
    sweeps = [run for run in runs if run.sweep]
    if sweeps:
        parts += ["## K sweeps (Chen et al. Figure 1, plus tail latency)", "",
                  "Loop time is the time of one target call: ms/token x tokens per loop "
                  "(ms/token at K = 0). Sequence times are per generated sequence "
                  "(up to the run's max_new_tokens). Speed-ups are over the K = 0 "
                  "entry of the same run.", ""]
        for run in sweeps:
            parts += [f"### {run.name}: {_describe(run)}", "", sweep_table(run), ""]
            path = sweep_figure(run, os.path.join(out_dir, f"sweep_{_slug(run.name)}.png"))
            if path:
                parts += [f"![K sweep, {run.name}]({os.path.basename(path)})", ""]
    report_path = os.path.join(out_dir, "report.md")
    with open(report_path, "w", encoding="utf-8") as f:
        f.write("\n".join(parts))
    return report_path


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
    args = parser.parse_args(argv)
    try:
        runs = load_runs(args.run_dirs)
    except ReportError as e:
        print(f"evals.report: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    try:
        path = build_report(runs, args.out)
    except OSError as e:
        print(f"evals.report: error: cannot write {args.out}: {e.strerror}", file=sys.stderr)
        return EXIT_USAGE
    print(console.report_headline(runs, path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
