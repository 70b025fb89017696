"""bench.auto_overhead on tiny random models."""

import math

import pytest

from bench import auto_overhead
from bench import models as bench_models
from tests.bench.bench_fixtures import (TINY, TINY_DRAFT, assert_fails_in_one_line,
                                         assert_usage_error)


def test_the_forced_adaptive_loop_decodes_like_fixed_k():
    target = bench_models.load(TINY)
    draft = bench_models.load(TINY_DRAFT, seed=1)
    pool = bench_models.prompts(TINY, target, num_prompts=2, prompt_length=5)
    # Sampled only: the same sampled tokens are the stronger check (greedy identity of the
    # adaptive loop: tests/tfspec/test_adaptive.py).
    records = auto_overhead.run(target, draft, pool, [1, 3], [1.0], max_new_tokens=7,
                                repeats=1)
    assert [(r["k"], r["temperature"]) for r in records] == [(1, 1.0), (3, 1.0)]
    for record in records:
        # Same tokens in the same rounds, sampled ones included: what makes the time ratio
        # the adaptive machinery's alone.
        assert record["same_tokens"], record
        # EOS is off: every call decodes max_new_tokens.
        assert record["tokens"] == 7 * len(pool)
        assert record["rounds"] >= math.ceil(7 / (record["k"] + 1)) * len(pool)
        for key in ("fixed_ms_per_call", "auto_ms_per_call", "auto_over_fixed"):
            assert math.isfinite(record[key]) and record[key] > 0, key


@pytest.mark.parametrize("k", [1, 4])
def test_forced_auto_drafts_k_every_round(k):
    auto = auto_overhead.forced_auto(k)
    assert (auto.k_max, auto.initial_k, auto.draft_cost, auto.confidence, auto.fallback) == (
        k, k, 0.0, 0.0, False)


@pytest.mark.parametrize("flag", ["--k=0", "--k=two", "--temperatures=-1"])
def test_bad_flags_fail_in_one_line(flag, capsys):
    assert_usage_error(auto_overhead.main, flag, capsys=capsys)


def test_the_command_exits_2_without_a_traceback():
    assert_fails_in_one_line("bench.auto_overhead", "--k=0")
