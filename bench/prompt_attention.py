"""What the fused prompt attention saves: decoding with and without `kernels.prompt_attention`.

A request's fixed cost is mostly its encoders, and on long prompts a third of an encoder
was its self-attention: XLA writes the [B, H, S, S] scores and makes a pass over them for
each of bias, max, exp and sum, over the whole prompt bucket. `tfspec.models.T5` runs it
through `tfspec.kernels.prompt_attention` where it can (AVX-512, a compiled decode
program): per batch row and head, over the row's valid positions only. This times one pair
with the kernel on and off (`kernels.fused_prompt_attention`; `tfspec.generate` compiles a
loop per setting), interleaved in one process, per mode and temperature: whole requests
and max_new_tokens = 1 calls (the fixed cost), in the records of `bench.side_by_side`
(the feature: the fused attention).

    python -m bench.prompt_attention --modes 0@1,4@1,0@8,4@8 --json bench/results/prompt_attention.json
"""

import platform
from typing import List, Sequence

import tfspec
from bench import models as bench_models
from bench import side_by_side
from bench import speedup as speedup_lib
from evals import cli
from tfspec import kernels

_PROG = "python -m bench.prompt_attention"


def run(pair, prompt_pool: Sequence[Sequence[int]], modes, temperatures,
        max_new_tokens: int = 64, repeats: int = 3, seed: int = 0) -> List[dict]:
    """One record per (mode, temperature) (`bench.side_by_side`: the feature is the fused
    attention, on one pair: `tfspec.generate` compiles a loop per setting)."""
    target, draft = pair

    def decode(fused, k, batch, new_tokens, sampling, seed):
        with kernels.fused_prompt_attention(fused):
            return tfspec.generate(target, batch, draft=draft if k != 0 else None, k=k,
                                   max_new_tokens=new_tokens, sampling=sampling, seed=seed)

    return side_by_side.run(decode, prompt_pool, modes, temperatures, max_new_tokens,
                            repeats, seed)


def main(argv=None):
    args = side_by_side.parse_args(_PROG, __doc__.split("\n")[0], argv)
    if not (kernels.prompt_attention_available() and kernels.allowed()):
        raise SystemExit(cli.usage_error(_PROG, f"needs the kernel on a CPU with AVX-512, "
                                                f"which this machine or process does not "
                                                f"offer ({kernels.status()})"))
    with bench_models.exit_on_input_error():
        target, draft, pool = speedup_lib.load_pair_and_prompts(
            args, max(b for _, b in args.modes))
    records = run((target, draft), pool, args.modes, args.temperatures, args.max_new_tokens,
                  args.repeats, args.seed)
    side_by_side.report(args, records, machine=platform.machine())


if __name__ == "__main__":
    main()
