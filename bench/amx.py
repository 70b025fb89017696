"""What the encoders on AMX save: decoding with and without `tfspec.kernels.amx`.

A request's fixed cost is mostly its encoder: batch x prompt-bucket rows through every
encoder weight (and the cross-attention keys/values of every decoder layer), compute-bound
work. Where the CPU has AMX (`tfspec.kernels.amx_available()`), `tfspec.models.T5` runs
those products on AMX tiles (`tfspec.kernels.amx_matmul`: float32 products up to summation
order, from an exact three-part bfloat16 split of the activations) from
`tfspec.kernels.AMX_MIN_ROWS` rows up. This loads the pair twice, one copy whose panel caches
are made without AMX entries (`kernels.amx(False)`: XLA's float32 dots, as before the
feature), and times both, interleaved in one process, per mode and temperature: whole
requests and max_new_tokens = 1 calls (the fixed cost), in the records of
`bench.side_by_side` (the feature: the encoders on AMX).

    python -m bench.amx --modes 0@1,4@1,0@8,4@8 --json bench/results/amx.json
"""

import platform
from typing import List, Sequence

import tfspec
from bench import models as bench_models
from bench import side_by_side
from bench import speedup as speedup_lib
from evals import cli
from tfspec import kernels

_PROG = "python -m bench.amx"


def run(pair, xla_pair, prompt_pool: Sequence[Sequence[int]], modes, temperatures,
        max_new_tokens: int = 64, repeats: int = 3, seed: int = 0) -> List[dict]:
    """One record per (mode, temperature) (`bench.side_by_side`: the feature is AMX).

    Args:
      pair: (target, draft) whose panel caches may have AMX entries.
      xla_pair: another copy of the same (target, draft), never decoded before this call
        (its caches are made here under `kernels.amx(False)`).
    """
    def decode(on_amx, k, batch, new_tokens, sampling, seed):
        target, draft = pair if on_amx else xla_pair
        return tfspec.generate(target, batch, draft=draft if k != 0 else None, k=k,
                               max_new_tokens=new_tokens, sampling=sampling, seed=seed)

    def warm_up(k, batches, sampling):
        with kernels.amx(False):  # The copy's caches are made without AMX entries.
            for i, batch in enumerate(batches):
                decode(False, k, batch, 1, sampling, seed + i)

    return side_by_side.run(decode, prompt_pool, modes, temperatures, max_new_tokens,
                            repeats, seed, warm_up_fn=warm_up)


def _uses_amx(target) -> bool:
    return any(layout == kernels.AMX for layout in kernels.panel_layout(target) or ())


def _has_amx_panels(target) -> bool:
    """Whether `target`'s decode panels (packed here, as its first decode would) use AMX:
    checked before the benchmark runs, which would compare nothing otherwise."""
    refresh = getattr(target, "refresh_decode_panels", None)
    return refresh is not None and refresh() and _uses_amx(target)


def main(argv=None):
    args = side_by_side.parse_args(_PROG, __doc__.split("\n")[0], argv)
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
    side_by_side.report(args, records, amx_min_rows=kernels.AMX_MIN_ROWS,
                        machine=platform.machine())


if __name__ == "__main__":
    main()
