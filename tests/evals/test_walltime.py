"""Tests for evals.walltime (Leviathan et al. 2022, Theorem 3.8)."""

import pytest

from evals import walltime


@pytest.mark.parametrize("a, k, expected", [
    (0.0, 4, 1.0), (0.5, 1, 1.5), (0.5, 2, 1.75), (0.8, 3, (1 - 0.8 ** 4) / 0.2),
    (1.0, 7, 8.0), (0.9, 0, 1.0)])
def test_expected_tokens_per_round(a, k, expected):
    assert walltime.expected_tokens_per_round(a, k) == pytest.approx(expected)


@pytest.mark.parametrize("a, k, c", [(0.75, 7, 0.05), (0.62, 7, 0.05), (0.3, 2, 0.5),
                                     (0.99, 10, 0.01)])
def test_predicted_speedup_is_the_formula(a, k, c):
    formula = (1 - a ** (k + 1)) / ((1 - a) * (k * c + 1))
    assert walltime.predicted_speedup(a, k, c) == pytest.approx(formula, rel=1e-12)


def test_limit_at_full_acceptance_is_continuous():
    assert walltime.predicted_speedup(1.0, 4, 0.1) == pytest.approx(5 / 1.4)
    near = walltime.predicted_speedup(1 - 1e-12, 4, 0.1)
    assert near == pytest.approx(5 / 1.4, rel=1e-9)


def test_no_speculation_is_one():
    assert walltime.predicted_speedup(0.7, 0, 0.3) == 1.0


@pytest.mark.parametrize("a, c, k_max, expected", [
    (0.0, 0.1, 10, 0),      # nothing accepted: never speculate
    (0.8, 1.5, 10, 0),      # draft costlier than the target
    (1.0, 0.0, 12, 12),     # free perfect draft: as long as allowed
    (0.8, 0.05, 32, 8),     # interior optimum, checked by brute force below
])
def test_optimal_k(a, c, k_max, expected):
    k = walltime.optimal_k(a, c, k_max)
    assert k == expected
    best = max(walltime.predicted_speedup(a, j, c) for j in range(k_max + 1))
    assert walltime.predicted_speedup(a, k, c) == best


def test_draft_cost_ratio():
    assert walltime.draft_cost_ratio(0.002, 0.040) == pytest.approx(0.05)
    for bad in [(-1.0, 1.0), (1.0, 0.0), (float("inf"), 1.0)]:
        with pytest.raises(ValueError):
            walltime.draft_cost_ratio(*bad)


@pytest.mark.parametrize("a, k, c", [(1.1, 1, 0.1), (-0.1, 1, 0.1), (0.5, -1, 0.1),
                                     (0.5, 1.5, 0.1), (0.5, 1, -0.1)])
def test_rejects_bad_arguments(a, k, c):
    with pytest.raises(ValueError):
        walltime.predicted_speedup(a, k, c)


@pytest.mark.parametrize("a, k, c", [(0.8, 4, 0.05), (0.6, 1, 0.3), (1.0, 7, 0.1),
                                     (0.0, 3, 0.2)])
def test_calibrated_is_the_formula_under_its_premises(a, k, c):
    # A round of k draft steps plus one target step, no fixed costs: the formula exactly.
    step = 0.002
    cost = walltime.RoundCost(step, step, c * step)
    assert walltime.calibrated_speedup(a, k, cost) == pytest.approx(
        walltime.predicted_speedup(a, k, c))
    assert walltime.calibrated_speedup(a, k, cost, tokens_per_request=100) == pytest.approx(
        walltime.predicted_speedup(a, k, c))
    assert walltime.calibrated_speedup(a, 0, cost) == 1.0


def test_calibrated_costly_verify_and_fixed_costs():
    a, k, step = 0.8, 4, 0.002
    ideal = walltime.RoundCost(step, step, 0.1 * step)
    costly = ideal._replace(round_intercept_s=1.5 * step)   # the verify costs 1.5 steps
    assert walltime.calibrated_speedup(a, k, costly) == pytest.approx(
        walltime.predicted_speedup(a, k, 0.1) * 1.4 / 1.9)
    # Per-request fixed costs (encoders) pull the speed-up towards 1 for short requests.
    fixed = costly._replace(ar_fixed_s=0.05, spec_fixed_s=0.06)
    short = walltime.calibrated_speedup(a, k, fixed, tokens_per_request=16)
    long = walltime.calibrated_speedup(a, k, fixed, tokens_per_request=10_000)
    assert 1.0 < short < long < walltime.calibrated_speedup(a, k, costly)
    # A fixed per-round cost is amortised by longer drafts; a costlier drafted token
    # (a verify that widens with k) makes shorter drafts pay.
    assert walltime.calibrated_optimal_k(a, costly) > walltime.optimal_k(a, 0.1)
    steep = ideal._replace(round_per_k_s=0.2 * step)
    assert walltime.calibrated_optimal_k(a, steep) < walltime.optimal_k(a, 0.1)
    assert walltime.calibrated_optimal_k(a, ideal) == walltime.optimal_k(a, 0.1)


@pytest.mark.parametrize("spec_tokens, ar_tokens", [(20, 20), (16, 24), (30, 12)])
def test_calibrated_charges_each_mode_its_own_request_length(spec_tokens, ar_tokens):
    # Sampled answers differ in length between modes; each mode's ms/token spreads its
    # fixed cost over its own tokens, and the prediction must too.
    a, k, step = 0.7, 3, 0.002
    cost = walltime.RoundCost(step, 1.2 * step, 0.1 * step, ar_fixed_s=0.02,
                              spec_fixed_s=0.021)
    ar_ms = (cost.ar_fixed_s + ar_tokens * step) / ar_tokens
    per_round = walltime.expected_tokens_per_round(a, k)
    spec_ms = (cost.spec_fixed(k) + spec_tokens / per_round * cost.round_s(k)) / spec_tokens
    assert walltime.calibrated_speedup(a, k, cost, spec_tokens, ar_tokens) == pytest.approx(
        ar_ms / spec_ms)
    same = walltime.calibrated_speedup(a, k, cost, spec_tokens)
    assert walltime.calibrated_speedup(a, k, cost, spec_tokens, spec_tokens) == same
    # Shorter speculative answers than autoregressive ones measure a lower speed-up.
    if spec_tokens < ar_tokens:
        assert walltime.calibrated_speedup(a, k, cost, spec_tokens, ar_tokens) < same


@pytest.mark.parametrize("ks", [(1, 4, 8), (2, 5), (1, 2, 3, 4, 5, 6, 7, 8)])
def test_fit_round_cost_recovers_a_line(ks):
    cost = walltime.fit_round_cost(0.002, {k: 0.003 + 0.0004 * k for k in ks})
    assert cost.round_intercept_s == pytest.approx(0.003)
    assert cost.round_per_k_s == pytest.approx(0.0004)
    assert cost.verify_in_target_steps(4, draft_step_s=0.0002) == pytest.approx(
        (0.003 + 0.0016 - 0.0008) / 0.002)


def test_fit_round_cost_one_k_uses_the_draft_step():
    cost = walltime.fit_round_cost(0.002, {4: 0.005}, draft_step_s=0.0003)
    assert cost.round_s(4) == pytest.approx(0.005)
    assert cost.round_per_k_s == pytest.approx(0.0003)
    with pytest.raises(ValueError, match="draft_step_s"):
        walltime.fit_round_cost(0.002, {4: 0.005})
    for bad in [{}, {0: 0.004}, {4: -1.0}]:
        with pytest.raises(ValueError):
            walltime.fit_round_cost(0.002, bad, draft_step_s=0.0003)


def test_fit_in_run_keeps_measured_rounds_and_fills_the_other_ks_with_a_line():
    # A round that jumps at k = 6 (a second block of verify rows): no line goes through it.
    measured = {1: (0.0014, 0.034), 4: (0.0027, 0.033), 8: (0.0058, 0.031)}
    cost = walltime.fit_in_run(0.0009, 0.028, measured)
    for k, (round_s, fixed_s) in measured.items():
        assert cost.round_s(k) == round_s and cost.spec_fixed(k) == fixed_s
    line = walltime.fit_round_cost(0.0009, {k: r for k, (r, _) in measured.items()})
    assert cost.round_s(6) == pytest.approx(line.round_s(6))
    assert cost.spec_fixed(6) == pytest.approx(0.033)  # The median measured fixed cost.
    assert (cost.target_step_s, cost.ar_fixed_s) == (0.0009, 0.028)
    # Measured at k = 4, the prediction there is the measured costs' (not the line's).
    n, tokens_per_round = 50.0, walltime.expected_tokens_per_round(0.9, 4)
    assert walltime.calibrated_speedup(0.9, 4, cost, tokens_per_request=n) == pytest.approx(
        (0.028 + n * 0.0009) / (0.033 + n / tokens_per_round * 0.0027))


def test_fit_in_run_one_k_takes_the_calibration_programs_slope():
    program = walltime.fit_round_cost(0.001, {1: 0.0011, 8: 0.0039})
    cost = walltime.fit_in_run(0.0009, 0.028, {4: (0.0027, 0.033)}, program)
    assert cost.round_s(4) == 0.0027
    assert cost.round_s(5) == pytest.approx(0.0027 + program.round_per_k_s)
    with pytest.raises(ValueError, match="slope"):
        walltime.fit_in_run(0.0009, 0.028, {4: (0.0027, 0.033)})
    for bad in [{}, {0: (0.001, 0.03)}, {4: (-1.0, 0.03)}]:
        with pytest.raises(ValueError):
            walltime.fit_in_run(0.0009, 0.028, bad, program)
