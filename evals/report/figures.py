"""The PNG figures of a report (matplotlib, Agg backend): K sweeps, speed-up against k,
per-position acceptance."""

from typing import Optional, Sequence

from evals import published
from evals import walltime
from evals.report.analysis import (alpha_and_c, calibrated_at, calibrated_k, recommended_k,
                                   sweep_rows)
from evals.report.runs import Run
from evals.report.runs import number
from evals.report.tables import fmt, short_model


def _pyplot():
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
    plt.rcParams.update({"font.size": 10, "axes.titlesize": 11, "legend.fontsize": 9})
    return plt


def describe(run: Run) -> str:
    method = published.sampling_method(run.temperature, run.top_p, run.top_k)
    return (f"{run.task}, {method} T={fmt(run.temperature, 1)}"
            + (f" p={fmt(run.top_p, 2)}" if run.top_p < 1 else "")
            + f", {short_model(run.summary.get('target'))} / "
              f"{short_model(run.summary.get('draft'))}")


def _xs(rows, key):
    pts = [(r["k"], r[key]) for r in rows if r[key] is not None]
    return [p[0] for p in pts], [p[1] for p in pts]


def sweep_figure(run: Run, path: str) -> Optional[str]:
    """Chen et al. Figure 1 style panels for a sweep, plus the tail-latency panel."""
    rows = [r for r in sweep_rows(run) if isinstance(r["k"], int)]  # "auto" has no x.
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
    fig.suptitle(f"K sweep: {describe(run)}", fontsize=12)
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
    measured = [(r["k"], r["speedup"]) for r in sweep_rows(run)
                if r["speedup"] is not None and isinstance(r["k"], int)]
    if (not measured and number(run.summary.get("speedup")) is not None
            and isinstance(run.summary.get("k"), int)):
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
    # At T > 0 sampled lengths differ by mode and the two measures part (greedy: equal).
    rows = [r for r in sweep_rows(run) if isinstance(r["k"], int) and r["matched"] is not None]
    matched = [(r["k"], r["matched"]) for r in rows]
    if any(r["speedup"] is not None and abs(r["matched"] - r["speedup"]) > 1e-3 for r in rows):
        ax.plot([k for k, _ in matched], [s for _, s in matched], "D", markersize=6,
                fillstyle="none", color="tab:purple", label="measured, length-matched")
    ax.axvline(best, color="gray", linestyle="--", label=f"recommended k = {best}")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("k (draft tokens per loop)")
    ax.set_ylabel("walltime speed-up over autoregressive (x)")
    ax.set_title(f"Speed-up vs k: {describe(run)}", fontsize=10)
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
            values = [number(v) for v in per_pos]
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
