"""The compiled loop updates the KV caches in place: no decode step copies a whole cache.

Reads XLA's optimized HLO of the whole `tfspec.generate` program and walks every
computation reachable from a while loop's body (the rounds, the draft steps and what they
call). A `copy` or `transpose` whose result has a cache's shape there would be a per-step
copy of a whole cache. Before the head-major cache layout, the attention dots transposed
every cache on every step; a `tf.cond` around the draft catch-up copied the draft cache
in both branches.
"""

import re

import numpy as np
import pytest
import tensorflow as tf

import tfspec
from tfspec import acceptance, decoding, generation, sampling
from tfspec.models import T5, T5Config

_COMPUTATION = re.compile(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$")
_CALLEE = re.compile(r"(?:body|condition|calls|to_apply|true_computation|false_computation|"
                     r"branch_computations)=\{?([%\w.\-, ]+)\}?")


def _computations(hlo: str) -> dict:
    """{computation name: its body lines} of an HLO module text."""
    out, name = {}, None
    for line in hlo.splitlines():
        match = _COMPUTATION.match(line)
        if match:
            name = match.group(1)
            out[name] = []
        elif name is not None:
            out[name].append(line)
    return out


def _loop_computations(computations: dict) -> set:
    """Names of computations that run on every round: while bodies/conditions and callees."""
    pending = []
    for lines in computations.values():
        for line in lines:
            if " while(" in line:
                pending += re.findall(r"(?:body|condition)=%?([\w.\-]+)", line)
    seen = set()
    while pending:
        name = pending.pop()
        if name in seen or name not in computations:
            continue
        seen.add(name)
        for line in computations[name]:
            for group in _CALLEE.findall(line):
                pending += [c.strip().lstrip("%") for c in group.split(",") if c.strip()]
    return seen


def _config(layers, d_model, heads):
    return T5Config(vocab_size=64, d_model=d_model, d_kv=8, d_ff=2 * d_model,
                    num_layers=layers, num_decoder_layers=layers, num_heads=heads,
                    relative_attention_num_buckets=8, relative_attention_max_distance=16,
                    feed_forward_proj="gated-gelu", tie_word_embeddings=False)


# Every pair of values of any two of the three settings, in half the 8 programs (each
# compile costs seconds): the copies they could cause come from one setting or two.
@pytest.mark.parametrize("temperature, batch, adaptive", [
    (0.0, 1, False), (1.0, 1, True), (0.0, 3, True), (1.0, 3, False)],
    ids=["greedy-batch1-fixed_k", "sampled-batch1-auto", "greedy-batch3-auto",
         "sampled-batch3-fixed_k"])
def test_no_whole_cache_copy_inside_the_loop(temperature, batch, adaptive):
    """Also in adaptive mode, whose verify is a conditional over compiled widths: each
    branch must update the cache operand in place, not copy it."""
    target = T5(_config(2, 32, 4), seed=0)
    draft = T5(_config(1, 24, 3), seed=1)
    k, max_new_tokens = 3, 10
    config = decoding.LoopConfig(k=k, max_new_tokens=max_new_tokens,
                                 sampling=tfspec.Sampling(temperature), eos_id=1, start_id=0,
                                 adaptive=decoding.Adaptive() if adaptive else None)
    run = generation._loop_fn(target, draft, config, True, acceptance.accept,  # pylint: disable=protected-access
                              sampling.sample_categorical)
    prompts = tf.constant(np.arange(3, 3 + 8 * batch).reshape(batch, 8), tf.int32)
    inputs = (prompts, tf.fill([batch], 8), tf.range(batch, dtype=tf.int64),
              tf.constant(0, tf.int64))
    if adaptive:
        inputs = inputs[:3] + (tf.fill([batch], 2), inputs[3])     # the rows' first horizons
    hlo = run.experimental_get_compiler_ir(*inputs)(stage="optimized_hlo")
    computations = _computations(hlo)
    in_loop = _loop_computations(computations)
    assert len(in_loop) > 3, "no while loop found in the optimized HLO"

    length = config.buffer_length
    cache_shapes = {f"f32[{batch},{m.config.num_heads},{length},{m.config.d_kv}]"
                    for m in (target, draft)}
    # The target's keys, laid out for its verify windows ([B, H, d_kv, L], `WindowedCache`).
    key_columns = f"f32[{batch},{target.config.num_heads},{target.config.d_kv},{length}]"
    cache_shapes.add(key_columns)
    copies = [line.strip()[:160] for name in in_loop for line in computations[name]
              if re.search(r" (copy|transpose)\(", line)
              and any(f"= {shape}" in line for shape in cache_shapes)]
    assert not copies, f"whole-cache copies inside the loop: {copies}"
    # The check can see a cache-shaped op at all: the in-place scatters are there.
    scatters = [line for name in in_loop for line in computations[name]
                if any(f"= {shape}" in line for shape in cache_shapes) and "scatter" in line]
    assert scatters, "no cache update found: the shape match is broken"
    # ...and the transposed keys' per-row slice updates.
    slices = [line for name in in_loop for line in computations[name]
              if f"= {key_columns}" in line and "dynamic-update-slice" in line]
    assert slices, "no update of the transposed key cache found"
