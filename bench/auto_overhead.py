"""What `k="auto"` costs by itself: the adaptive loop drafting exactly like a fixed k.

`tfspec.AutoDraft(k_max=k, draft_cost=0.0, confidence=0.0, fallback=False, initial_k=k)`
drafts k tokens every round, as fixed k does: with a draft cost of 0 the walltime formula's
best horizon (and window) is always k_max, no confidence test stops a row, and no request
falls back to autoregressive decoding. Both modes then decode the same tokens in the same
rounds (asserted per record), so their time ratio is the price of the adaptive machinery
alone: the per-row horizons, drafted counts and statistics in the compiled loop, the
controller and whatever else `tfspec.generate` does per auto request. EOS is off, so every
call decodes --max_new_tokens tokens. The two modes are timed interleaved in one process
(`bench.timing.interleaved_runs`).

For each (k, temperature), one record:

    fixed_ms_per_call    fixed k, per `tfspec.generate` call (one prompt of the pool)
    auto_ms_per_call     the forced adaptive loop, per call
    auto_over_fixed      auto / fixed (1.0: auto costs nothing by itself)
    extra_ms_per_round   (auto - fixed) per loop round
    rounds, tokens       of each mode, summed over the pool (equal in both)
    same_tokens          both modes decoded the same tokens in the same rounds

Two copies of one mode differ by up to ~3% here (each copy's weights and panels sit
elsewhere in memory), so read ratios within that as equal.

    python -m bench.auto_overhead --k 2,4 --temperatures 0,1 --repeats 11 \\
        --json bench/results/auto_overhead.json
"""

from typing import List, Optional, Sequence

import numpy as np

import tfspec
from bench import live_width
from bench import models as bench_models
from bench import speedup as speedup_lib
from bench import timing
from evals import cli

COLUMNS = ["k", "temperature", "fixed_ms_per_call", "auto_ms_per_call", "auto_over_fixed",
           "extra_ms_per_round", "rounds", "same_tokens"]


def forced_auto(k: int) -> tfspec.AutoDraft:
    """An `AutoDraft` that drafts k tokens every round (see the module docstring)."""
    return tfspec.AutoDraft(k_max=k, draft_cost=0.0, confidence=0.0, fallback=False,
                            initial_k=k)


def _parse_args(argv=None):
    parser = cli.ArgumentParser("python -m bench.auto_overhead", __doc__.split("\n")[0])
    speedup_lib.add_pair_args(parser)
    parser.add_argument("--k", default="2,4", help="comma-separated draft lengths (>= 1)")
    parser.add_argument("--temperatures", type=live_width.parse_temperatures,
                        default=[0.0, 1.0],
                        help="comma-separated sampling temperatures (0: greedy)")
    args = parser.parse_args(argv)
    try:
        args.k = [int(x) for x in args.k.split(",") if x.strip()]
    except ValueError:
        args.k = []
    if not args.k or min(args.k) < 1:
        parser.error("--k must be comma-separated integers >= 1, e.g. 2,4")
    return args


def run(target, draft, prompt_pool: Sequence[Sequence[int]], ks: Sequence[int],
        temperatures: Sequence[float], max_new_tokens: int = 64, repeats: int = 5,
        seed: int = 0, jit_compile: Optional[bool] = True) -> List[dict]:
    """One record per (k, temperature) (see the module docstring)."""
    records = []
    for temperature in temperatures:
        sampling = tfspec.Sampling(temperature=temperature)
        for k in ks:
            def decode(k_arg):
                return [tfspec.generate(target, [prompt], draft=draft, k=k_arg,
                                        max_new_tokens=max_new_tokens, sampling=sampling,
                                        seed=seed + i, eos_id=None, jit_compile=jit_compile)
                        for i, prompt in enumerate(prompt_pool)]

            (fixed_s, auto_s), (fixed, auto) = timing.interleaved_runs(
                [lambda k=k: decode(k), lambda k=k: decode(forced_auto(k))], repeats)
            rounds = int(sum(g.stats.rounds.max() for g in fixed))
            same = (all(np.array_equal(a.tokens, b.tokens) for a, b in zip(fixed, auto))
                    and rounds == int(sum(g.stats.rounds.max() for g in auto))
                    and all(g.mode == "speculative" for g in auto))
            calls = len(prompt_pool)
            records.append({
                "k": k, "temperature": temperature, "calls": calls,
                "fixed_ms_per_call": 1e3 * fixed_s / calls,
                "auto_ms_per_call": 1e3 * auto_s / calls,
                "auto_over_fixed": auto_s / fixed_s,
                "extra_ms_per_round": 1e3 * (auto_s - fixed_s) / max(rounds, 1),
                "rounds": rounds, "tokens": int(sum(g.lengths.sum() for g in fixed)),
                "same_tokens": bool(same)})
    return records


def main(argv=None):
    args = _parse_args(argv)
    with bench_models.exit_on_input_error():
        target, draft, pool = speedup_lib.load_pair_and_prompts(args)
    records = run(target, draft, pool, args.k, args.temperatures, args.max_new_tokens,
                  args.repeats, args.seed, speedup_lib.jit_compile(args))
    speedup_lib.print_and_write(args, records, COLUMNS)


if __name__ == "__main__":
    main()
