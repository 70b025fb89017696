"""The numbers a report derives from runs: alpha and c, recommended k, quality bounds,
agreement of the two modes, per-K rows of a sweep."""

from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

from evals import records
from evals import summary as summary_lib
from evals import walltime
from evals.report.runs import Run
from evals.report.runs import number

HEADLINE_METRICS = ("pass@1", "rouge2", "bleu", "rougeL", "rouge1")
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0
DASH = "–"


def alpha_and_c(entry: Optional[Mapping[str, Any]]):
    """(alpha = beta_mean, c = draft_cost_ratio) of a speculative entry, None if missing."""
    entry = entry or {}
    alpha = number((entry.get("acceptance") or {}).get("beta_mean"))
    if alpha is not None:
        alpha = min(max(alpha, 0.0), 1.0)
    c = number(entry.get("draft_cost_ratio"))
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
    """The calibrated speed-up of `entry`'s alpha and the run's costs at another k (None
    for k = "auto", which has no fixed k)."""
    if k is None or k == records.AUTO:
        return None
    baseline = (run.run_entry("autoregressive") or {}).get("latency")
    return summary_lib.calibrated_speedup(entry or {}, k, run.summary.get("calibration"),
                                          baseline)


def loop_time_ms(entry: Mapping[str, Any], k: int) -> Optional[float]:
    """Mean time of one loop (one target call) in ms: ms/token x tokens per round."""
    ms = number((entry.get("latency") or {}).get("ms_per_token"))
    if ms is None:
        return None
    if k == 0:
        return ms
    per_round = number((entry.get("acceptance") or {}).get("mean_tokens_per_round"))
    return None if per_round is None else ms * per_round


def headline_metric(quality: Mapping[str, Any]) -> Optional[str]:
    for name in HEADLINE_METRICS:
        if number(quality.get(name)) is not None:
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
    value = number(quality.get(metric))
    low, high = number(quality.get(f"{metric}_low")), number(quality.get(f"{metric}_high"))
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


def speculative_entries(runs: Sequence[Run]):
    """(run, its summary's "speculative" entry) for the runs that have one."""
    for run in runs:
        entry = run.run_entry("speculative")
        if entry:
            yield run, entry


def sweep_rows(run: Run) -> List[Dict[str, Any]]:
    """Per-K numbers of a sweep: the data of the Figure 1 panels (k = "auto" last; the
    figures plot the integer Ks only)."""
    out = []
    for entry in run.sweep or []:
        k = records.draft_length(entry.get("k", 0))
        latency = entry.get("latency") or {}
        acceptance = entry.get("acceptance") or {}
        out.append({
            "k": k,
            "ms_per_token": number(latency.get("ms_per_token")),
            "seq_mean_s": number(latency.get("seq_time_mean_s")),
            "seq_std_s": number(latency.get("seq_time_std_s")),
            "p50_s": number(latency.get("seq_time_p50_s")),
            "p90_s": number(latency.get("seq_time_p90_s")),
            "p99_s": number(latency.get("seq_time_p99_s")),
            "acceptance_rate": number(acceptance.get("acceptance_rate")) if k else None,
            "alpha": number(acceptance.get("beta_mean")) if k else None,
            "loop_ms": loop_time_ms(entry, k),
            "speedup": number(entry.get("speedup")),
            "matched": number(entry.get("matched_speedup")),
            "predicted": 1.0 if k == 0 else number(entry.get("predicted_speedup")),
            "calibrated": 1.0 if k == 0 else number(entry.get("calibrated_speedup")),
        })
    return out
