"""What the encoders on AMX save: decoding with and without `tfspec.kernels.amx`.

A request's fixed cost is mostly its encoder: batch x prompt-bucket rows through every
encoder weight (and the cross-attention keys/values of every decoder layer), compute-bound
work. Where the CPU has AMX (`tfspec.kernels.amx_available()`), `tfspec.models.T5` runs
those products on AMX tiles (`tfspec.kernels.amx_matmul`: float32 products up to summation
order, from an exact three-part bfloat16 split of the activations) from
`tfspec.kernels.AMX_MIN_ROWS` rows up. This loads the pair twice, one copy whose panel caches
are made without AMX entries (`kernels.amx(False)`: XLA's float32 dots, as before the
feature), and times both, interleaved in one process, per mode:

    mode                 "<k>@<batch size>" (k = 0: autoregressive)
    ms_per_request       the whole generate call per batch, encoders on AMX
    xla_ms_per_request   the same with XLA's dots
    speedup              xla_ms_per_request / ms_per_request
    fixed_ms             a call with max_new_tokens = 1 (encoders, panel check, one loop
                         iteration, call overhead), encoders on AMX
    xla_fixed_ms         the same with XLA's dots
    fixed_saved_ms       xla_fixed_ms - fixed_ms
    same_tokens          both copies decoded the same tokens. Not promised: the two sum the
                         encoder's products in different orders, so a near-tie can flip
                         (each copy is exact in itself: its speculative and autoregressive
                         calls read one encoder output)

    python -m bench.amx --modes 0@1,4@1,0@8,4@8 --json bench/results/amx.json
"""

import argparse
import platform
from typing import List, Optional, Sequence

import numpy as np

import tfspec
from bench import live_width
from bench import models as bench_models
from bench import speedup as speedup_lib
from bench import timing
from evals import cli
from tfspec import kernels

_PROG = "python -m bench.amx"
COLUMNS = ["mode", "temperature", "ms_per_request", "xla_ms_per_request", "speedup",
           "fixed_ms", "xla_fixed_ms", "fixed_saved_ms", "same_tokens"]


def _parse_args(argv=None):
    parser = cli.ArgumentParser(_PROG, __doc__.split("\n")[0])
    speedup_lib.add_pair_args(parser)
    parser.add_argument("--modes", type=live_width.parse_modes,
                        default=live_width.parse_modes("0@1,4@1,0@8,4@8"),
                        help="comma-separated <k>@<batch size> (k = 0: autoregressive)")
    parser.add_argument("--temperatures", type=live_width.parse_temperatures, default=[0.0],
                        help="comma-separated sampling temperatures (0: greedy)")
    return parser.parse_args(argv)


def run(pair, xla_pair, prompt_pool: Sequence[Sequence[int]], modes, temperatures,
        max_new_tokens: int = 64, repeats: int = 3, seed: int = 0) -> List[dict]:
    """One record per (mode, temperature) (see the module docstring).

    Args:
      pair: (target, draft) whose panel caches may have AMX entries.
      xla_pair: another copy of the same (target, draft), never decoded before this call
        (its caches are made here under `kernels.amx(False)`).
    """
    records = []
    for temperature in temperatures:
        sampling = tfspec.Sampling(temperature=temperature)
        for k, batch_size in modes:
            batches = bench_models.batches_of(list(prompt_pool), batch_size)

            def decode(models, new_tokens, batches=batches, k=k):
                target, draft = models
                return [tfspec.generate(target, b, draft=draft if k != 0 else None, k=k,
                                        max_new_tokens=new_tokens, sampling=sampling,
                                        seed=seed + i)
                        for i, b in enumerate(batches)]

            with kernels.amx(False):  # The copy's caches are made without AMX entries.
                decode(xla_pair, 1)
            times, gens = timing.interleaved_runs(
                [lambda: decode(pair, max_new_tokens), lambda: decode(xla_pair, max_new_tokens),
                 lambda: decode(pair, 1), lambda: decode(xla_pair, 1)], repeats)
            amx_s, xla_s, amx_fixed_s, xla_fixed_s = (1e3 * t / len(batches) for t in times)
            records.append({
                "mode": f"{k}@{batch_size}", "k": k, "batch_size": batch_size,
                "temperature": temperature,
                "ms_per_request": amx_s, "xla_ms_per_request": xla_s,
                "speedup": xla_s / amx_s,
                "fixed_ms": amx_fixed_s, "xla_fixed_ms": xla_fixed_s,
                "fixed_saved_ms": xla_fixed_s - amx_fixed_s,
                "tokens": int(sum(g.lengths.sum() for g in gens[0])),
                "same_tokens": all(np.array_equal(a.tokens, b.tokens)
                                   for a, b in zip(gens[0], gens[1]))})
    return records


def _uses_amx(target) -> bool:
    return any(layout == kernels.AMX for layout in kernels.panel_layout(target) or ())


def _has_amx_panels(target) -> bool:
    """Whether `target`'s decode panels (packed here, as its first decode would) use AMX:
    checked before the benchmark runs, which would compare nothing otherwise."""
    refresh = getattr(target, "refresh_decode_panels", None)
    return refresh is not None and refresh() and _uses_amx(target)


def main(argv=None):
    args = _parse_args(argv)
    if not kernels.amx_available():
        raise SystemExit(cli.usage_error(_PROG, f"needs AMX, which this machine or process "
                                                f"does not offer ({kernels.status()}; "
                                                f"TFSPEC_AMX=0 also turns it off)"))
    with bench_models.exit_on_input_error():
        target, draft, pool = speedup_lib.load_pair_and_prompts(
            args, max(b for _, b in args.modes))
    if not _has_amx_panels(target):
        raise SystemExit(cli.usage_error(_PROG, "the target has no AMX panels (it is not a "
                                                "float32 T5 with bfloat16 weight values): "
                                                "nothing to compare"))
    with bench_models.exit_on_input_error():
        xla_pair = bench_models.load_pair(args.target, args.draft, args.dtype)
    records = run((target, draft), xla_pair, pool, args.modes, args.temperatures,
                  args.max_new_tokens, args.repeats, args.seed)
    timing.print_table(records, COLUMNS)
    timing.write_json(args.json, {
        "target": args.target, "draft": args.draft, "prompts": args.prompts,
        "max_new_tokens": args.max_new_tokens, "repeats": args.repeats, "seed": args.seed,
        "amx_min_rows": kernels.AMX_MIN_ROWS, "machine": platform.machine(),
        "records": records})


if __name__ == "__main__":
    main()
