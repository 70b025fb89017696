"""Tests for evals.request_cost: the least-squares line of request seconds on iterations."""

import numpy as np
import pytest

from evals import request_cost


def _accumulate(times, counts, parts=1, cls=request_cost.RequestCostAccumulator):
    """Adds the requests in `parts` accumulators of `cls` and merges them (as Beam would)."""
    chunks = np.array_split(np.arange(len(times)), parts)
    accumulators = []
    for chunk in chunks:
        acc = cls.create()
        for i in chunk:
            acc.add(times[i], counts[i])
        accumulators.append(acc)
    return cls.merge(accumulators)


@pytest.mark.parametrize("fixed, per_iteration, parts", [
    (0.030, 0.0009, 1), (0.012, 0.0027, 3), (0.0, 0.0044, 2)])
def test_recovers_the_line_of_noisy_requests(fixed, per_iteration, parts):
    rng = np.random.default_rng(0)
    iterations = rng.integers(2, 129, size=400)
    times = fixed + per_iteration * iterations + rng.normal(0, 0.002, size=400).clip(-fixed)
    out = _accumulate(times, iterations, parts).extract()
    assert tuple(out) == request_cost.KEYS and out["requests"] == 400
    expected_slope, expected_intercept = np.polyfit(iterations, times, 1)
    assert out["iteration_s"] == pytest.approx(expected_slope, rel=1e-9)
    assert out["fixed_s"] == pytest.approx(max(expected_intercept, 0.0), abs=1e-12)
    assert out["iteration_s"] == pytest.approx(per_iteration, rel=0.05)


def test_merging_in_any_split_gives_the_same_fit():
    rng = np.random.default_rng(1)
    iterations = rng.integers(1, 60, size=50)
    times = 0.02 + 0.001 * iterations + rng.uniform(0, 0.003, size=50)
    fits = [_accumulate(times, iterations, parts).extract() for parts in (1, 2, 7)]
    for fit in fits[1:]:
        assert fit == pytest.approx(fits[0], rel=1e-9)


@pytest.mark.parametrize("times, iterations", [
    ([0.1, 0.2], [1, 2]),                    # fewer than MIN_REQUESTS
    ([0.1, 0.2, 0.3], [5, 5, 5]),            # one length: no slope
    ([0.3, 0.2, 0.1], [1, 2, 3]),            # longer requests faster: noise, no fit
])
def test_no_fit_without_a_positive_slope_over_enough_requests(times, iterations):
    assert _accumulate(times, iterations).extract() is None


def test_a_negative_intercept_is_clamped_to_no_fixed_cost():
    out = _accumulate([0.001, 0.003, 0.005], [2, 4, 6]).extract()
    assert out["fixed_s"] == 0.0 and out["iteration_s"] == pytest.approx(0.001)


@pytest.mark.parametrize("time_s, iterations", [(-0.1, 3), (float("nan"), 3), (0.1, -1)])
def test_rejects_impossible_requests(time_s, iterations):
    with pytest.raises(ValueError, match="time_s >= 0"):
        request_cost.RequestCostAccumulator.create().add(time_s, iterations)


@pytest.mark.parametrize("parts", [1, 3])
def test_length_line_fits_seconds_on_tokens_without_clamping(parts):
    """The length line predicts requests near the mean length, so a negative intercept
    (noise, or per-token costs that shrink with length) is kept: clamped, the line would
    miss the mean time."""
    tokens = np.array([10, 20, 30, 40, 50])
    times = -0.005 + 0.001 * tokens + np.array([0.0, 0.0004, -0.0002, 0.0001, 0.0])
    out = _accumulate(times, tokens, parts, request_cost.RequestLengthAccumulator).extract()
    assert tuple(out) == request_cost.LENGTH_KEYS and out["requests"] == 5
    slope, intercept = np.polyfit(tokens, times, 1)
    assert out["token_s"] == pytest.approx(slope) and out["fixed_s"] == pytest.approx(intercept)
    assert out["fixed_s"] < 0 and out["mean_tokens"] == pytest.approx(30.0)
    assert request_cost.seconds_at(out, 30.0) == pytest.approx(times.mean())


def test_length_line_rejects_impossible_requests():
    with pytest.raises(ValueError, match="tokens >= 0"):
        request_cost.RequestLengthAccumulator.create().add(0.1, -2)
