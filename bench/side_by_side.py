"""Two settings of one decode, timed side by side: what a kernel saves per request.

`bench.amx` (the encoders' products on AMX or XLA's dots) and `bench.prompt_attention` (the
encoders' self-attention fused or XLA's) time the same requests with a feature on and off,
interleaved in one process, per mode and temperature:

    mode                 "<k>@<batch size>" (k = 0: autoregressive)
    ms_per_request       the whole generate call per batch, the feature on
    xla_ms_per_request   the same with XLA's own ops
    speedup              xla_ms_per_request / ms_per_request
    fixed_ms             a call with max_new_tokens = 1 (encoders, one loop iteration, call
                         overhead), the feature on
    xla_fixed_ms         the same with XLA's ops
    fixed_saved_ms       xla_fixed_ms - fixed_ms
    tokens               tokens the feature's calls decoded
    same_tokens          both settings decoded the same tokens. Not promised: the two sum in
                         different orders, so a near-tie can flip (each setting is exact in
                         itself: a call's modes read one encoder output)
"""

from typing import Callable, List, Sequence

import numpy as np

import tfspec
from bench import live_width
from bench import models as bench_models
from bench import speedup as speedup_lib
from bench import timing
from evals import cli

COLUMNS = ["mode", "temperature", "ms_per_request", "xla_ms_per_request", "speedup",
           "fixed_ms", "xla_fixed_ms", "fixed_saved_ms", "same_tokens"]


def parse_args(prog: str, description: str, argv=None):
    """The flags both benchmarks take: the pair's (`speedup.add_pair_args`), --modes and
    --temperatures."""
    parser = cli.ArgumentParser(prog, description)
    speedup_lib.add_pair_args(parser)
    parser.add_argument("--modes", type=live_width.parse_modes,
                        default=live_width.parse_modes("0@1,4@1,0@8,4@8"),
                        help="comma-separated <k>@<batch size> (k = 0: autoregressive)")
    parser.add_argument("--temperatures", type=live_width.parse_temperatures, default=[0.0],
                        help="comma-separated sampling temperatures (0: greedy)")
    return parser.parse_args(argv)


def run(decode_fn: Callable, prompt_pool: Sequence[Sequence[int]], modes, temperatures,
        max_new_tokens: int = 64, repeats: int = 3, seed: int = 0,
        warm_up_fn: Callable = None) -> List[dict]:
    """One record per (mode, temperature) (see the module docstring).

    Args:
      decode_fn: decode_fn(feature_on, k, batch, max_new_tokens, sampling, seed) -> the
        `tfspec.generate` result of one batch of prompts with the feature on or off.
      warm_up_fn: called with (k, batches, sampling) before a mode is timed (e.g. to make a
        model copy's caches under a setting); `timing.interleaved_runs` warms every timed
        call up as well.
    """
    records = []
    for temperature in temperatures:
        sampling = tfspec.Sampling(temperature=temperature)
        for k, batch_size in modes:
            batches = bench_models.batches_of(list(prompt_pool), batch_size)

            def decode(feature_on, new_tokens, batches=batches, k=k):
                return [decode_fn(feature_on, k, b, new_tokens, sampling, seed + i)
                        for i, b in enumerate(batches)]

            if warm_up_fn is not None:
                warm_up_fn(k, batches, sampling)
            times, gens = timing.interleaved_runs(
                [lambda: decode(True, max_new_tokens), lambda: decode(False, max_new_tokens),
                 lambda: decode(True, 1), lambda: decode(False, 1)], repeats)
            on_ms, xla_ms, on_fixed_ms, xla_fixed_ms = (1e3 * t / len(batches) for t in times)
            records.append({
                "mode": f"{k}@{batch_size}", "k": k, "batch_size": batch_size,
                "temperature": temperature,
                "ms_per_request": on_ms, "xla_ms_per_request": xla_ms,
                "speedup": xla_ms / on_ms,
                "fixed_ms": on_fixed_ms, "xla_fixed_ms": xla_fixed_ms,
                "fixed_saved_ms": xla_fixed_ms - on_fixed_ms,
                "tokens": int(sum(g.lengths.sum() for g in gens[0])),
                "same_tokens": all(np.array_equal(a.tokens, b.tokens)
                                   for a, b in zip(gens[0], gens[1]))})
    return records


def report(args, records: List[dict], **extra) -> None:
    """Prints the records' table and writes --json (the run's settings, `extra`, records)."""
    timing.print_table(records, COLUMNS)
    timing.write_json(args.json, {
        "target": args.target, "draft": args.draft, "prompts": args.prompts,
        "max_new_tokens": args.max_new_tokens, "repeats": args.repeats, "seed": args.seed,
        **extra, "records": records})
