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
