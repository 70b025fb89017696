"""bench.roofline on a tiny random T5."""

import numpy as np
import pytest

import tfspec
from bench import models as bench_models
from bench import roofline
from tests.bench.bench_fixtures import TINY


def test_memory_bandwidth_is_positive():
    assert roofline.memory_bandwidth(mib=8, repeats=1) > 1e6  # > 1 MB/s: it ran.


def test_step_weight_bytes_skips_per_prompt_cross_attention_projections():
    config = bench_models.parse_random_config(TINY)
    model = tfspec.models.T5(config)
    d, inner, ff, v = config.d_model, config.num_heads * config.d_kv, config.d_ff, config.vocab_size
    per_block = (3 * d  # three RMS norms
                 + 4 * d * inner  # self-attention q, k, v, o
                 + config.relative_attention_num_buckets * config.num_heads
                 + 2 * d * inner  # cross-attention q, o (k, v are per prompt)
                 + 2 * d * ff)
    expected = 4 * (config.num_decoder_layers * per_block + d + v * d)
    assert roofline.step_weight_bytes(model) == expected
    half = roofline.step_weight_bytes(tfspec.models.T5(config, dtype="bfloat16"))
    assert half * 2 == expected


def test_run_reports_a_positive_multiple_of_the_bound():
    config = bench_models.parse_random_config(TINY)
    result = roofline.run({"tiny": config}, dtypes=["float32"], max_new_tokens=4,
                          prompt_length=4, repeats=1, copy_mib=8, copy_repeats=1, jit_compile=None)
    (record,) = result["records"]
    assert record["preset"] == "tiny" and record["dtype"] == "float32"
    assert record["multiple_of_bound"] > 0 and np.isfinite(record["multiple_of_bound"])
    assert record["multiple_of_bound"] == pytest.approx(
        record["ar_ms_per_token"] / record["bound_ms_per_token"])
    assert record["bound_ms_per_token"] == pytest.approx(
        1e3 * record["step_weight_bytes"] / result["bandwidth_bytes_per_s"])
