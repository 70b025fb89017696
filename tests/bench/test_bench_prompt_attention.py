"""bench.prompt_attention on tiny random models."""

import pytest

from bench import models as bench_models
from bench import prompt_attention
from tests.bench.bench_fixtures import (TINY, TINY_DRAFT, assert_side_by_side_records,
                                         assert_usage_error)
from tfspec import generation, kernels

needs_kernel = pytest.mark.skipif(not kernels.prompt_attention_available(),
                                  reason=f"needs AVX-512 and the kernel: {kernels.status()}")


@needs_kernel
def test_one_record_per_mode_comparing_xla_attention():
    pair = bench_models.load(TINY), bench_models.load(TINY_DRAFT, seed=1)
    pool = bench_models.prompts(TINY, pair[0], num_prompts=2, prompt_length=20)
    records = prompt_attention.run(pair, pool, [(0, 1), (2, 2)], [0.0], max_new_tokens=6,
                                   repeats=1)
    assert_side_by_side_records(records, ["0@1", "2@2"])
    # Both settings were compiled and timed: one loop per (mode, setting) at each shape.
    assert len(generation.compiled_loops(pair[0])) >= 4


def test_without_the_kernel_it_says_so_in_one_line(capsys, monkeypatch):
    monkeypatch.setattr(prompt_attention.kernels, "prompt_attention_available", lambda: False)
    assert_usage_error(prompt_attention.main, "--modes", "0@1", capsys=capsys,
                       expect=("needs the kernel on a CPU with AVX-512",))


@pytest.mark.parametrize("flag", ["--modes=4@0", "--temperatures=warm"])
def test_bad_flags_fail_in_one_line(flag, capsys):
    assert_usage_error(prompt_attention.main, flag, capsys=capsys)
