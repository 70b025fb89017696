"""Tests for tfspec.memory: parameter counts and decode buffers, refused before allocation."""

import numpy as np
import pytest

import tfspec
from tfspec import memory
from tfspec.models import T5, T5Config

_TINY = dict(vocab_size=48, d_model=16, d_kv=4, d_ff=24, num_heads=4)


@pytest.mark.parametrize("config", [
    T5Config(num_layers=1, **_TINY),
    T5Config(num_layers=2, num_decoder_layers=3, feed_forward_proj="gated-gelu",
             tie_word_embeddings=False, **_TINY),
], ids=["v1_0", "v1_1"])
def test_parameter_count_matches_the_built_model(config):
    model = T5(config)
    assert memory.t5_num_parameters(config) == sum(int(np.prod(v.shape))
                                                   for v in model.weights)


def test_check_fits_names_the_estimate_and_the_budget():
    memory.check_fits(1 << 20, "x", "fix it", budget=2 << 20)
    with pytest.raises(ValueError, match=r"^the thing needs about 2.0 GiB, more than this "
                                         r"machine's 1.0 GiB of memory; fix it$"):
        memory.check_fits(2 << 30, "the thing", "fix it", budget=1 << 30)
    assert 0 < memory.machine_bytes()


def test_decode_buffers_grow_with_rows_and_tokens_and_count_the_draft_only_when_used():
    config = T5Config(num_layers=1, num_decoder_layers=2, **_TINY)
    target, draft = T5(config), T5(config)
    one = memory.decode_buffer_bytes(target, None, 1, 100)
    assert memory.decode_buffer_bytes(target, None, 4, 100) == 4 * one
    # KV caches: 2 (keys, values) x 2 layers x 4 heads x 4 d_kv x 4 bytes per position.
    assert one == 102 * (2 * 2 * 4 * 4 * 4 + 16)
    assert memory.decode_buffer_bytes(target, draft, 1, 100, k=0) == one
    assert memory.decode_buffer_bytes(target, draft, 1, 100, k=3) > one
    with pytest.raises(ValueError, match=r"decoding 8 rows x max_new_tokens=100000 .* lower "
                                         r"max_new_tokens or the batch size"):
        memory.check_decode_request(target, draft, 8, 100_000, 3, budget=1 << 20)


def test_generate_refuses_a_huge_max_new_tokens_before_allocating():
    target = tfspec.load_model("zoo:tiny-code-target")
    with pytest.raises(ValueError, match=r"max_new_tokens=1000000000 .* needs about"):
        tfspec.generate(target, [[5, 9]], k=0, max_new_tokens=10**9)
