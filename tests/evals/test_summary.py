"""Tests for evals.summary: summary.json and sweep.json from per-mode metrics."""

import numpy as np
import pytest

from evals import request_cost
from evals import summary as summary_lib
from evals import walltime

HEADER = {key: f"<{key}>" for key in summary_lib.HEADER_KEYS}
MODES = (("autoregressive", 0), ("speculative_k2", 2), ("speculative", 4))


def _metrics(ms, beta=0.8):
    return {"quality": {"pass@1": 50.0},
            "latency": {"ms_per_token": ms, "num_tokens": 10},
            "acceptance": {"acceptance_rate": 0.7, "beta_mean": beta,
                           "mean_tokens_per_round": 3.0, "per_position": [0.8]}}


METRICS = {"autoregressive": _metrics(10.0), "speculative_k2": _metrics(6.0),
           "speculative": _metrics(5.0)}


def test_report_quality_percentages():
    assert summary_lib.report_quality({"pass@1": 0.25, "pass@10": 1, "rouge1": 30.0}) == {
        "pass@1": 25.0, "pass@10": 100.0, "rouge1": 30.0}


def test_summary_layout():
    out = summary_lib.build_summary(HEADER, MODES, METRICS, {"draft_cost_ratio": 0.1},
                                    extra={"num_failed": 0})
    assert list(out) == list(summary_lib.HEADER_KEYS) + ["runs", "speedup", "matched_speedup",
                                                         "num_failed"]
    assert set(out["runs"]) == {"autoregressive", "speculative"}
    assert set(out["runs"]["autoregressive"]) == {"quality", "latency"}
    spec = out["runs"]["speculative"]
    assert spec["draft_cost_ratio"] == 0.1
    assert spec["predicted_speedup"] == pytest.approx(walltime.predicted_speedup(0.8, 4, 0.1))
    assert out["speedup"] == pytest.approx(2.0)


def test_missing_pieces_are_null():
    out = summary_lib.build_summary(HEADER, (("speculative", 4),),
                                    {"speculative": _metrics(5.0)}, None)
    assert out["speedup"] is None
    assert out["runs"]["speculative"]["draft_cost_ratio"] is None
    assert out["runs"]["speculative"]["predicted_speedup"] is None
    empty = summary_lib.build_summary(HEADER, MODES, {}, None)
    assert empty["runs"]["speculative"]["latency"] is None and empty["speedup"] is None


def test_sweep_entries():
    sweep = summary_lib.build_sweep(MODES, METRICS, {"draft_cost_ratio": 0.1}, ks=(0, 2))
    assert [(e["k"], e["mode"]) for e in sweep] == [(0, "autoregressive"), (2, "speculative_k2")]
    assert sweep[0]["speedup"] == pytest.approx(1.0) and "acceptance" not in sweep[0]
    assert sweep[1]["speedup"] == pytest.approx(10 / 6)
    assert sweep[1]["predicted_speedup"] == pytest.approx(walltime.predicted_speedup(0.8, 2, 0.1))
    no_baseline = summary_lib.build_sweep(MODES[1:], METRICS, None)
    assert [e["speedup"] for e in no_baseline] == [None, None]


def _with_lengths(metrics, times, tokens):
    acc = request_cost.RequestLengthAccumulator.create()
    for time_s, n in zip(times, tokens):
        acc.add(time_s, n)
    return dict(metrics, request_length=acc.extract())


def test_matched_speedup_compares_both_modes_at_the_autoregressive_length():
    """Sampled answers differ in length by mode: speculation here drew short ones, so its
    ms per token carries more of the 50 ms fixed part and the plain ratio says it loses;
    at one length it is 1.39x faster."""
    ar_tokens, spec_tokens = [60, 80, 100, 120], [10, 20, 30, 40]
    ar_times = [0.05 + 0.003 * n for n in ar_tokens]
    spec_times = [0.05 + 0.002 * n for n in spec_tokens]
    metrics = {"autoregressive": _with_lengths(_metrics(10.0), ar_times, ar_tokens),
               "speculative": _with_lengths(_metrics(10.0), spec_times, spec_tokens)}
    ar_ms = sum(ar_times) / sum(ar_tokens)
    spec_ms = sum(spec_times) / sum(spec_tokens)
    assert ar_ms / spec_ms < 0.9  # The plain ratio of these requests.
    out = summary_lib.build_summary(HEADER, (("autoregressive", 0), ("speculative", 4)),
                                    metrics)
    assert out["matched_speedup"] == pytest.approx((0.05 + 0.003 * 90) / (0.05 + 0.002 * 90))
    sweep = summary_lib.build_sweep((("autoregressive", 0), ("speculative", 4)), metrics)
    assert sweep[0]["matched_speedup"] == pytest.approx(1.0)
    assert sweep[1]["matched_speedup"] == pytest.approx(out["matched_speedup"])


@pytest.mark.parametrize("noise", [0.0, 0.004])
def test_matched_speedup_is_the_plain_one_when_lengths_agree(noise):
    """Greedy: every mode emits the same tokens, and both measures agree (noisy times too:
    the autoregressive side is its mean, the other line passes through its own mean)."""
    rng = np.random.default_rng(0)
    tokens = [int(n) for n in rng.integers(5, 130, size=40)]
    ar_times = [0.02 + 0.003 * n + noise * rng.uniform() for n in tokens]
    spec_times = [0.03 + 0.002 * n + noise * rng.uniform() for n in tokens]
    ar = _with_lengths(_metrics(10.0), ar_times, tokens)
    spec = _with_lengths(_metrics(10.0), spec_times, tokens)
    assert summary_lib.matched_speedup(ar, spec) == pytest.approx(
        sum(ar_times) / sum(spec_times), rel=1e-9)


def test_matched_speedup_needs_both_lines():
    line = _with_lengths(_metrics(10.0), [0.1, 0.2, 0.3], [10, 20, 30])
    assert summary_lib.matched_speedup(line, _metrics(5.0)) is None
    assert summary_lib.matched_speedup(None, line) is None


CALIBRATION = {"draft_cost_ratio": 0.1, "target_step_s": 0.002, "draft_step_s": 0.0002,
               "round_s": {"2": 0.0031, "4": 0.0035}, "ar_fixed_s": 0.01,
               "spec_fixed_s": 0.012}


def _with_sequences(metrics, tokens_per_sequence):
    latency = dict(metrics["latency"])
    latency["seq_time_mean_s"] = latency["ms_per_token"] * tokens_per_sequence / 1000.0
    return dict(metrics, latency=latency)


def test_calibrated_speedup_in_summary_and_sweep():
    metrics = {mode: _with_sequences(m, 5) for mode, m in METRICS.items()}
    out = summary_lib.build_summary(HEADER, MODES, metrics, CALIBRATION)
    cost = walltime.RoundCost(0.002, 0.0027, 0.0002, 0.01, 0.012)
    assert summary_lib.tokens_per_request(metrics["speculative"]["latency"]) == (
        pytest.approx(5.0))
    assert out["runs"]["speculative"]["calibrated_speedup"] == pytest.approx(
        walltime.calibrated_speedup(0.8, 4, cost, tokens_per_request=5.0))
    sweep = summary_lib.build_sweep(MODES, metrics, CALIBRATION)
    assert sweep[1]["calibrated_speedup"] == pytest.approx(
        walltime.calibrated_speedup(0.8, 2, cost, tokens_per_request=5.0))
    # Without measured rounds (older runs, or no draft) there is no calibrated prediction.
    old = summary_lib.build_summary(HEADER, MODES, metrics, {"draft_cost_ratio": 0.1})
    assert old["runs"]["speculative"]["calibrated_speedup"] is None


def test_why_line_names_the_round_cost():
    summary = {"k": 4, "calibration": CALIBRATION}
    line = summary_lib.why_line(summary)
    # Round 3.5 ms; the formula's 2 ms x (1 + 4 x 0.1) = 2.8 ms; (3.5 - 0.8) / 2 = 1.35.
    assert line == ("why: rounds at k=4 cost 3.50 ms here, not the formula's 2.80 ms; the "
                    "verify and the round's fixed work cost 1.35 target steps, not 1")
    assert summary_lib.why_line({"k": 0, "calibration": CALIBRATION}) is None
    assert summary_lib.why_line({"k": 4, "calibration": {"draft_cost_ratio": 0.1}}) is None


def test_auto_mode_entries_have_acceptance_but_no_fixed_k_predictions():
    from evals import records as records_lib
    metrics = {"quality": {}, "latency": {"ms_per_token": 2.0},
               "acceptance": {"beta_mean": 0.8, "acceptance_rate": 0.7}}
    entry = summary_lib.run_entry(records_lib.AUTO, metrics, {"draft_cost_ratio": 0.2})
    assert entry["acceptance"] == metrics["acceptance"] and entry["draft_cost_ratio"] == 0.2
    assert entry["predicted_speedup"] is None and entry["calibrated_speedup"] is None
    sweep = summary_lib.build_sweep(
        [("autoregressive", 0), ("speculative_auto", records_lib.AUTO), ("speculative", 2)],
        {"autoregressive": {"latency": {"ms_per_token": 4.0}},
         "speculative_auto": metrics, "speculative": metrics})
    assert [e["k"] for e in sweep] == [0, 2, records_lib.AUTO]
    assert sweep[-1]["speedup"] == 2.0


def _with_request_cost(metrics, fixed_s, iteration_s, requests=20):
    return dict(metrics, request_cost={"requests": requests, "fixed_s": fixed_s,
                                       "iteration_s": iteration_s})


def test_the_runs_own_requests_set_the_calibrated_costs():
    metrics = {mode: _with_sequences(m, 5) for mode, m in METRICS.items()}
    metrics["autoregressive"] = _with_request_cost(metrics["autoregressive"], 0.02, 0.0025)
    metrics["speculative"] = _with_request_cost(metrics["speculative"], 0.03, 0.0050)
    # An auto mode has a fit too, but no fixed k: it is counted, not used.
    metrics["speculative_auto"] = _with_request_cost(_metrics(4.0), 0.03, 0.004, requests=7)
    modes = MODES + (("speculative_auto", "auto"),)
    calibration = summary_lib.with_in_run_costs(CALIBRATION, modes, metrics)
    assert calibration is not CALIBRATION and "in_run" not in CALIBRATION
    in_run = calibration["in_run"]
    assert (in_run["target_step_s"], in_run["ar_fixed_s"]) == (0.0025, 0.02)
    assert in_run["round_s"] == {"4": 0.005} and in_run["spec_fixed_s"] == {"4": 0.03}
    assert in_run["requests"] == {"0": 20, "4": 20, "auto": 7}
    assert list(in_run["requests"]) == ["0", "4", "auto"]
    out = summary_lib.build_summary(HEADER, modes, metrics, calibration)
    tokens_per_round = walltime.expected_tokens_per_round(0.8, 4)
    assert out["runs"]["speculative"]["calibrated_speedup"] == pytest.approx(
        (0.02 + 5 * 0.0025) / (0.03 + 5 / tokens_per_round * 0.005))
    # k = 2 was not fitted: the calibration program's slope through the measured k = 4.
    program = summary_lib.round_cost(CALIBRATION)
    cost = summary_lib.round_cost(calibration)
    assert cost.round_s(2) == pytest.approx(0.005 - 2 * program.round_per_k_s)
    assert summary_lib.why_line({"k": 4, "calibration": calibration}).startswith(
        "why: rounds at k=4 cost 5.00 ms here, not the formula's 3.50 ms")


@pytest.mark.parametrize("fitted", [(), ("autoregressive",), ("speculative",)])
def test_without_both_fits_the_calibration_programs_costs_stay(fitted):
    metrics = dict(METRICS)
    for mode in fitted:
        metrics[mode] = _with_request_cost(metrics[mode], 0.02, 0.002)
    calibration = summary_lib.with_in_run_costs(CALIBRATION, MODES, metrics)
    assert calibration == CALIBRATION
    assert summary_lib.round_cost(calibration) == summary_lib.round_cost(CALIBRATION)
    assert summary_lib.with_in_run_costs(None, MODES, metrics) is None
