"""What the fused prompt attention saves: decoding with and without `kernels.prompt_attention`.

A request's fixed cost is mostly its encoders, and on long prompts a third of an encoder
was its self-attention: XLA writes the [B, H, S, S] scores and makes a pass over them for
each of bias, max, exp and sum, over the whole prompt bucket. `tfspec.models.T5` runs it
through `tfspec.kernels.prompt_attention` where it can (AVX-512, a compiled decode
program): per batch row and head, over the row's valid positions only. This times one pair
with the kernel on and off (`kernels.fused_prompt_attention`; `tfspec.generate` compiles a
loop per setting), interleaved in one process, per mode:

    mode                 "<k>@<batch size>" (k = 0: autoregressive)
    ms_per_request       the whole generate call per batch, fused attention
    xla_ms_per_request   the same with XLA's attention
    speedup              xla_ms_per_request / ms_per_request
    fixed_ms             a call with max_new_tokens = 1 (encoders, one loop iteration, call
                         overhead), fused attention
    xla_fixed_ms         the same with XLA's attention
    fixed_saved_ms       xla_fixed_ms - fixed_ms
    same_tokens          both settings decoded the same tokens. Not promised: they sum the
                         scores in different orders, so a near-tie can flip (each setting
                         is exact in itself: a call's modes read one encoder output)

    python -m bench.prompt_attention --modes 0@1,4@1,0@8,4@8 --json bench/results/prompt_attention.json
"""

import platform
from typing import List, Sequence

import numpy as np

import tfspec
from bench import live_width
from bench import models as bench_models
from bench import speedup as speedup_lib
from bench import timing
from evals import cli
from tfspec import kernels

_PROG = "python -m bench.prompt_attention"
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


def run(pair, prompt_pool: Sequence[Sequence[int]], modes, temperatures,
        max_new_tokens: int = 64, repeats: int = 3, seed: int = 0) -> List[dict]:
    """One record per (mode, temperature) (see the module docstring)."""
    target, draft = pair
    records = []
    for temperature in temperatures:
        sampling = tfspec.Sampling(temperature=temperature)
        for k, batch_size in modes:
            batches = bench_models.batches_of(list(prompt_pool), batch_size)

            def decode(fused, new_tokens, batches=batches, k=k):
                with kernels.fused_prompt_attention(fused):
                    return [tfspec.generate(target, b, draft=draft if k != 0 else None, k=k,
                                            max_new_tokens=new_tokens, sampling=sampling,
                                            seed=seed + i)
                            for i, b in enumerate(batches)]

            times, gens = timing.interleaved_runs(
                [lambda: decode(True, max_new_tokens), lambda: decode(False, max_new_tokens),
                 lambda: decode(True, 1), lambda: decode(False, 1)], repeats)
            fused_ms, xla_ms, fused_fixed_ms, xla_fixed_ms = (
                1e3 * t / len(batches) for t in times)
            records.append({
                "mode": f"{k}@{batch_size}", "k": k, "batch_size": batch_size,
                "temperature": temperature,
                "ms_per_request": fused_ms, "xla_ms_per_request": xla_ms,
                "speedup": xla_ms / fused_ms,
                "fixed_ms": fused_fixed_ms, "xla_fixed_ms": xla_fixed_ms,
                "fixed_saved_ms": xla_fixed_ms - fused_fixed_ms,
                "tokens": int(sum(g.lengths.sum() for g in gens[0])),
                "same_tokens": all(np.array_equal(a.tokens, b.tokens)
                                   for a, b in zip(gens[0], gens[1]))})
    return records


def main(argv=None):
    args = _parse_args(argv)
    if not (kernels.prompt_attention_available() and kernels.allowed()):
        raise SystemExit(cli.usage_error(_PROG, f"needs the kernel on a CPU with AVX-512, "
                                                f"which this machine or process does not "
                                                f"offer ({kernels.status()})"))
    with bench_models.exit_on_input_error():
        target, draft, pool = speedup_lib.load_pair_and_prompts(
            args, max(b for _, b in args.modes))
    records = run((target, draft), pool, args.modes, args.temperatures, args.max_new_tokens,
                  args.repeats, args.seed)
    timing.print_table(records, COLUMNS)
    timing.write_json(args.json, {
        "target": args.target, "draft": args.draft, "prompts": args.prompts,
        "max_new_tokens": args.max_new_tokens, "repeats": args.repeats, "seed": args.seed,
        "machine": platform.machine(), "records": records})


if __name__ == "__main__":
    main()
