"""bench.live_width on tiny random models."""

import math

import pytest

from bench import live_width
from bench import models as bench_models
from tests.bench.bench_fixtures import (TINY, TINY_DRAFT, assert_fails_in_one_line,
                                         assert_usage_error)


def test_one_record_per_mode_and_temperature_with_the_same_tokens():
    target = bench_models.load(TINY)
    draft = bench_models.load(TINY_DRAFT, seed=1)
    pool = bench_models.prompts(TINY, target, num_prompts=3, prompt_length=5)
    # Sampled only: the same sampled tokens are the stronger check, and each temperature
    # compiles every mode's programs twice (whole and live widths).
    records = live_width.run(target, draft, pool, [(0, 3), (2, 3), ("auto", 1)], [1.0],
                             max_new_tokens=6, repeats=1)
    assert [(r["mode"], r["temperature"]) for r in records] == [
        (m, 1.0) for m in ("0@3", "2@3", "auto@1")]
    for record in records:
        # The skipped entries are never read: both runs decode the same tokens, sampled
        # ones included (same seeds).
        assert record["same_tokens"], record["mode"]
        assert record["tokens"] > 0
        for key in ("ms_per_token", "whole_ms_per_token", "speedup"):
            assert math.isfinite(record[key]) and record[key] > 0, key


def test_whole_windows_hides_the_live_width_extension():
    target = bench_models.load(TINY)
    assert target.decodes_live_width
    wrapped = live_width.WholeWindows(target)
    assert not wrapped.decodes_live_width
    assert wrapped.vocab_size == target.vocab_size


@pytest.mark.parametrize("text, expected", [
    ("0@8,4@8,auto@1", [(0, 8), (4, 8), ("auto", 1)]),
    (" 3@2 ,", [(3, 2)]),
])
def test_parse_modes(text, expected):
    assert live_width.parse_modes(text) == expected


@pytest.mark.parametrize("flag", ["--modes=4@0", "--modes=x@2", "--modes=,",
                                  "--temperatures=-1", "--temperatures=warm"])
def test_bad_flags_fail_in_one_line(flag, capsys):
    assert_usage_error(live_width.main, flag, capsys=capsys)


def test_the_command_exits_2_without_a_traceback():
    assert_fails_in_one_line("bench.live_width", "--modes=4@0")
