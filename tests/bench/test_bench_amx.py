"""bench.amx on tiny random models with bfloat16 weight values."""

import pytest
import tensorflow as tf

from bench import amx
from bench import models as bench_models
from tests.bench.bench_fixtures import (TINY, TINY_DRAFT, assert_fails_in_one_line,
                                         assert_side_by_side_records, assert_usage_error)
from tfspec import kernels

needs_amx = pytest.mark.skipif(not kernels.amx_available(),
                               reason=f"needs AMX and the kernel: {kernels.status()}")


def _bfloat16_pair():
    """(target, draft) of the tiny specs, every weight rounded to a bfloat16 value (as a
    bfloat16 checkpoint loaded as float32 has): their encoders get AMX panels."""
    pair = bench_models.load(TINY), bench_models.load(TINY_DRAFT, seed=1)
    for model in pair:
        for w in model.weights:
            w.assign(tf.cast(tf.cast(w, tf.bfloat16), tf.float32))
    return pair


@needs_amx
def test_one_record_per_mode_comparing_the_copy_without_amx():
    pair, xla_pair = _bfloat16_pair(), _bfloat16_pair()
    pool = bench_models.prompts(TINY, pair[0], num_prompts=2,
                                prompt_length=kernels.AMX_MIN_ROWS + 8)
    records = amx.run(pair, xla_pair, pool, [(0, 1), (2, 2)], [0.0], max_new_tokens=6,
                      repeats=1)
    assert_side_by_side_records(records, ["0@1", "2@2"])
    # What was compared: the first copy's target read AMX panels, the other's had none.
    assert amx._uses_amx(pair[0]) and not amx._uses_amx(xla_pair[0])


@needs_amx
def test_a_target_without_amx_panels_is_refused_before_the_benchmark_runs(capsys,
                                                                        monkeypatch):
    """A random float32 target has no bfloat16 weight values, so no AMX panels: refused
    in one line before anything is decoded."""
    monkeypatch.setattr(amx, "run", lambda *args, **kwargs: pytest.fail("benchmark ran"))
    assert_usage_error(amx.main, "--target", TINY, "--draft", TINY_DRAFT, "--modes", "0@1",
                       "--max_new_tokens", "2", "--repeats", "1", "--num_prompts", "1",
                       capsys=capsys, expect=("has no AMX panels",))


def test_without_amx_it_says_so_in_one_line(monkeypatch):
    monkeypatch.setenv("TFSPEC_AMX", "0")
    assert_fails_in_one_line("bench.amx", "--modes", "0@1", expect=("needs AMX", "TFSPEC_AMX=0"))


@pytest.mark.parametrize("flag", ["--modes=4@0", "--temperatures=warm"])
def test_bad_flags_fail_in_one_line(flag, capsys):
    assert_usage_error(amx.main, flag, capsys=capsys)

