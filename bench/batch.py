"""Speed-up of speculative decoding against batch size, at a fixed k.

Speculation pays when the target's cost per call is dominated by reading its weights (small
batches): verifying k + 1 positions then costs about one step. As the batch grows the target
call becomes compute-bound, a (k + 1)-position verify costs more than one step, and rows
that reject early still pay for every position (per-row loop: each row keeps its own
accepted length, but the batch waits for its slowest row). This reports where that happens.

For each batch size (interleaved as in bench.speedup: target AR, draft AR, speculative):

    ar_ms_per_token, spec_ms_per_token, speedup, acceptance_rate, beta_mean,
    draft_cost_ratio, predicted_speedup, speedup_over_predicted   as in bench.speedup
    row_acceptance_min/median/max   accepted / drafted of each row (per-row acceptance)
    pays                            speedup > 1

    python -m bench.batch --k 4 --batch_sizes 1,2,4,8,16,32 --temperature 0 \\
        --json runs/bench/batch.json
    python -m bench.batch --target random:t5-small --draft random:t5-small:num_layers=1 \\
        --k 2 --batch_sizes 1,4 --max_new_tokens 16 --repeats 1
    python -m bench.batch --prompts my_prompts.jsonl --k 4 --batch_sizes 1,4,16

--prompts FILE decodes your prompts instead of the built-in pool (JSONL of {"prompt": text}
lines, tokenized with the target's tokenizer; --num_prompts N takes its first N), as in
bench.speedup. The built-in pool has max(--num_prompts, largest batch size) prompts; a file
pool smaller than a batch is cycled to fill it.

JSON: {"records": [...]}, one per batch size, with the full `per_row_acceptance` list.
"""

import platform
from typing import Optional, Sequence

import numpy as np

import tfspec
from bench import models as bench_models
from bench import speedup as speedup_lib
from bench import timing
from evals import cli

COLUMNS = ["batch_size", "k", "ar_ms_per_token", "spec_ms_per_token", "speedup", "pays",
           "acceptance_rate", "row_acceptance_min", "row_acceptance_median",
           "row_acceptance_max", "draft_cost_ratio", "predicted_speedup",
           "speedup_over_predicted"]


def _parse_args(argv=None):
    parser = cli.ArgumentParser("python -m bench.batch", __doc__.split("\n")[0])
    speedup_lib.add_pair_args(parser)
    parser.add_argument("--k", type=int, default=4, help="draft length")
    parser.add_argument("--batch_sizes", default="1,2,4,8,16,32")
    parser.add_argument("--temperature", type=float, default=0.0)
    args = parser.parse_args(argv)
    return args


def run(target, draft, prompt_pool: Sequence[Sequence[int]], k: int,
        batch_sizes: Sequence[int], temperature: float = 0.0, top_k: int = 0,
        top_p: float = 1.0, max_new_tokens: int = 64, repeats: int = 3, seed: int = 0,
        target_spec=None, draft_spec=None, jit_compile: Optional[bool] = True) -> dict:
    """One record per batch size (see the module docstring)."""
    sampling = tfspec.Sampling(temperature=temperature, top_k=top_k, top_p=top_p)
    records = []
    for batch_size in batch_sizes:
        batches = bench_models.batches_of(list(prompt_pool), batch_size)
        (record,) = speedup_lib.measure(target, draft, batches, [k], sampling, max_new_tokens,
                                        repeats, seed, jit_compile=jit_compile)
        rows = np.asarray(record["per_row_acceptance"], dtype=np.float64)
        finite = rows[np.isfinite(rows)]
        if finite.size:
            record["row_acceptance_min"] = float(np.min(finite))
            record["row_acceptance_median"] = float(np.median(finite))
            record["row_acceptance_max"] = float(np.max(finite))
        else:
            for key in ("min", "median", "max"):
                record[f"row_acceptance_{key}"] = float("nan")
        record["pays"] = bool(record["speedup"] > 1.0)
        records.append(record)
    paying = [r["batch_size"] for r in records if r["pays"]]
    return {"target": target_spec, "draft": draft_spec,
            "draft_kind": bench_models.draft_kind(draft), "k": k, "temperature": temperature,
            "max_new_tokens": max_new_tokens, "repeats": repeats, "seed": seed,
            "largest_paying_batch_size": max(paying) if paying else None,
            "machine": platform.processor() or platform.machine(), "records": records}


def main(argv=None):
    args = _parse_args(argv)
    batch_sizes = [int(b) for b in args.batch_sizes.split(",") if b]
    with bench_models.exit_on_input_error():
        target, draft, pool = speedup_lib.load_pair_and_prompts(args, max(batch_sizes))
    result = run(target, draft, pool, args.k, batch_sizes, args.temperature, args.top_k,
                 args.top_p, args.max_new_tokens, args.repeats, args.seed, args.target,
                 args.draft, speedup_lib.jit_compile(args))
    result["prompts"] = args.prompts  # None: the built-in pool.
    timing.print_table(result["records"], COLUMNS)
    print(f"largest batch size where speculation pays: {result['largest_paying_batch_size']}")
    timing.write_json(args.json, result)


if __name__ == "__main__":
    main()
