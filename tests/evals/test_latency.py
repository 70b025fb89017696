"""Tests for evals.latency."""

import json

import numpy as np
import pytest

from evals import latency


@pytest.mark.parametrize("seconds, tokens, expected", [
    (2.0, 100, 20.0), (0.5, 1, 500.0), (0.0, 10, 0.0), (1.0, 0, None)])
def test_ms_per_token(seconds, tokens, expected):
    assert latency.ms_per_token(seconds, tokens) == expected


@pytest.mark.parametrize("seconds, tokens", [(-1.0, 1), (float("nan"), 1), (1.0, -1)])
def test_ms_per_token_rejects(seconds, tokens):
    with pytest.raises(ValueError):
        latency.ms_per_token(seconds, tokens)


def test_summary_keys_and_values():
    times = [0.1, 0.2, 0.3, 0.4, 1.0]
    tokens = [10, 10, 10, 10, 10]
    s = latency.summarize(times, tokens)
    assert tuple(s) == latency.KEYS == (
        "ms_per_token", "seq_time_mean_s", "seq_time_std_s", "seq_time_p50_s",
        "seq_time_p90_s", "seq_time_p99_s", "num_tokens")
    assert s["num_tokens"] == 50
    assert s["ms_per_token"] == pytest.approx(1000 * 2.0 / 50)
    assert s["seq_time_mean_s"] == pytest.approx(0.4)
    assert s["seq_time_std_s"] == pytest.approx(np.std(times))
    assert s["seq_time_p50_s"] == pytest.approx(0.3)
    assert s["seq_time_p90_s"] == pytest.approx(0.4 + 0.6 * 0.6)  # Linear interpolation.
    assert s["seq_time_p99_s"] == pytest.approx(0.4 + 0.96 * 0.6)
    json.dumps(s)  # Plain Python types.
    assert all(type(v) in (float, int) for v in s.values())


def test_total_time_overrides_sum_for_batched_rows():
    # Two rows decoded together in one 1-second batch: each row took 1 s, the run 1 s.
    s = latency.summarize([1.0, 1.0], [30, 20], total_time_s=1.0)
    assert s["ms_per_token"] == pytest.approx(20.0)
    assert s["seq_time_mean_s"] == 1.0


@pytest.mark.parametrize("times, tokens", [([], []), ([1.0], [1, 2]), ([-1.0], [1]),
                                           ([1.0], [-3])])
def test_summary_rejects(times, tokens):
    with pytest.raises(ValueError):
        latency.summarize(times, tokens)


def test_accumulator_merge_equals_one_pass():
    rng = np.random.default_rng(0)
    times = rng.uniform(0.1, 2.0, size=40)
    tokens = rng.integers(1, 50, size=40)
    parts = [latency.LatencyAccumulator.create() for _ in range(3)]
    for i, (t, n) in enumerate(zip(times, tokens)):
        parts[i % 3].add(t, n)
    merged = latency.LatencyAccumulator.merge(parts).extract()
    assert merged == pytest.approx(latency.summarize(times, tokens))


def test_accumulator_total_time_adds_up():
    a = latency.LatencyAccumulator.create().add(1.0, 10).add(1.0, 10).add_total_time(1.0)
    b = latency.LatencyAccumulator.create().add(2.0, 20).add_total_time(2.0)
    assert latency.LatencyAccumulator.merge([a, b]).extract()["ms_per_token"] == pytest.approx(
        1000 * 3.0 / 40)
