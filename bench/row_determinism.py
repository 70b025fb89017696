"""Does a row's output depend on the batch it is decoded in? Rows alone vs in batches.

    python -m bench.row_determinism --num_prompts 128 --batch_sizes 1,2,8,32 \
        --temperature 1 --json bench/results/row_determinism.json

Every prompt of the pool is decoded with its own row key (its index in the pool) and one
request seed, autoregressively and speculatively, at each batch size (consecutive prompts
share a batch; a short last batch is padded with copies of its last row, as the evaluation
pipeline does). Two comparisons per mode:

    across batch sizes   the rows of batch size B against the same rows at the first batch
                         size: kernels for one row and for many, and other prompt widths
                         (the bucket of a batch is its longest prompt's), round differently,
                         and at temperature > 0 a token near a CDF boundary can flip
    across companions    every row decoded twice at one fixed shape (batch `--fixed_batch`,
                         every prompt padded to one width), in two different shufflings of
                         the pool: the row's companions change, its call shape does not

`tfspec.generate` promises the second (0 rows differ) and not the first; the evaluation
pipeline decodes every call at one batch size and one prompt bucket per row
(`pipelines.generation`), which is what makes a resumed or retried record bit-identical.
Records: mode, comparison, batch_size, rows, rows_differing, first_differing_rows.
"""

import argparse
from typing import Dict, List, Optional, Sequence

import numpy as np

import tfspec  # First: it keeps TensorFlow's native start-up logs quiet (tfspec.quiet).
from bench import models as bench_models
from bench import speedup as speedup_lib
from bench import timing
from evals import cli
from tfspec import generation

DEFAULT_NUM_PROMPTS = 128  # Flips are rare (a few %): fewer prompts would hide them.
COLUMNS = ["mode", "comparison", "batch_size", "rows", "rows_differing"]


def _decode(target, draft, k: int, pool: Sequence[Sequence[int]], order: Sequence[int],
            batch_size: int, width: Optional[int], sampling: tfspec.Sampling,
            max_new_tokens: int, seed: int, jit_compile: Optional[bool]) -> Dict[int, List[int]]:
    """Row index -> tokens, decoding `pool` in `order`, `batch_size` rows per call.

    `width`: pad every prompt to this width (one prompt bucket for every call); None pads
    each call to its own longest prompt, as `tfspec.generate` does with ragged prompts.
    """
    out = {}
    for start in range(0, len(order), batch_size):
        rows = list(order[start:start + batch_size])
        rows += [rows[-1]] * (batch_size - len(rows))  # Pad the ragged last batch.
        call_width = width or max(len(pool[i]) for i in rows)
        ids = np.zeros([batch_size, call_width], np.int32)
        for j, i in enumerate(rows):
            ids[j, :len(pool[i])] = pool[i]
        gen = tfspec.generate(target, ids, prompt_lengths=[len(pool[i]) for i in rows],
                              draft=draft, k=k, sampling=sampling, seed=seed,
                              max_new_tokens=max_new_tokens, row_keys=[int(i) for i in rows],
                              jit_compile=jit_compile)
        for j, i in enumerate(rows):
            out[int(i)] = gen.row_tokens(j)
    return out


def _differing(a: Dict[int, List[int]], b: Dict[int, List[int]]) -> List[int]:
    return sorted(i for i in a if a[i] != b[i])


def run(target, draft, pool: Sequence[Sequence[int]], k: int, batch_sizes: Sequence[int],
        fixed_batch: int, sampling: tfspec.Sampling, max_new_tokens: int,
        seed: int = 0, jit_compile: Optional[bool] = True) -> dict:
    """The records of the module docstring, for k = 0 and k."""
    records = []
    width = generation.prompt_bucket(max(len(p) for p in pool))
    for mode, mode_k, mode_draft in (("autoregressive", 0, None), ("speculative", k, draft)):
        def decode(order, batch_size, call_width=None):
            return _decode(target, mode_draft, mode_k, pool, order, batch_size, call_width,
                           sampling, max_new_tokens, seed, jit_compile)

        natural = list(range(len(pool)))
        by_size = {b: decode(natural, b) for b in batch_sizes}
        reference = by_size[batch_sizes[0]]
        for b in batch_sizes[1:]:
            differing = _differing(by_size[b], reference)
            records.append({"mode": mode, "comparison": f"batch {b} vs {batch_sizes[0]}",
                            "batch_size": b, "rows": len(pool),
                            "rows_differing": len(differing),
                            "first_differing_rows": differing[:10]})
        shuffles = [list(np.random.RandomState(s).permutation(len(pool))) for s in (0, 1)]
        first, second = (decode(order, fixed_batch, width) for order in shuffles)
        differing = _differing(first, second)
        records.append({"mode": mode, "comparison": "companions shuffled, one shape",
                        "batch_size": fixed_batch, "rows": len(pool),
                        "rows_differing": len(differing), "first_differing_rows": differing[:10]})
    return {"records": records, "k": k, "temperature": sampling.temperature,
            "top_k": sampling.top_k, "top_p": sampling.top_p,
            "max_new_tokens": max_new_tokens, "seed": seed, "num_prompts": len(pool),
            "prompt_width_of_shuffled_calls": width}


def _parse_args(argv=None) -> argparse.Namespace:
    parser = cli.ArgumentParser("python -m bench.row_determinism", __doc__.split("\n")[0])
    speedup_lib.add_pair_args(parser)
    parser.add_argument("--k", type=int, default=4, help="draft length of the speculative mode")
    parser.add_argument("--batch_sizes", default="1,2,8,32",
                        help="comma-separated; the first is the reference")
    parser.add_argument("--fixed_batch", type=int, default=8,
                        help="batch size of the shuffled-companions comparison")
    parser.add_argument("--temperature", type=float, default=1.0)
    args = parser.parse_args(argv)
    try:
        args.batch_size_list = [int(b) for b in args.batch_sizes.split(",") if b.strip()]
    except ValueError:
        parser.error(f"--batch_sizes must be comma-separated integers, got {args.batch_sizes!r}")
    if not args.batch_size_list or min(args.batch_size_list) < 1 or args.fixed_batch < 1:
        parser.error("batch sizes must be >= 1")
    return args


def main(argv=None) -> None:
    args = _parse_args(argv)
    if args.num_prompts is None and not args.prompts:
        args.num_prompts = DEFAULT_NUM_PROMPTS
    with bench_models.exit_on_input_error():
        target, draft, pool = speedup_lib.load_pair_and_prompts(args)
    sampling = tfspec.Sampling(temperature=args.temperature, top_k=args.top_k,
                               top_p=args.top_p)
    result = run(target, draft, pool, args.k, args.batch_size_list, args.fixed_batch,
                 sampling, args.max_new_tokens, args.seed, speedup_lib.jit_compile(args))
    result["prompts"] = args.prompts  # None: the built-in pool.
    timing.print_table(result["records"], COLUMNS)
    timing.write_json(args.json, result)


if __name__ == "__main__":
    main()
