"""Our autoregressive ms/token against the memory-bandwidth (weight-streaming) bound.

At batch 1 one decoding step is a chain of matrix-vector products: every weight the decoder
uses per token must be read from memory once, so no implementation can beat

    bound_ms_per_token = bytes of weights read per step / memory bandwidth

Reported per (preset, dtype), random weights:

    bandwidth_gb_s          this machine's streaming bandwidth: best of several numpy copies
                            of a large float32 array (bytes read + bytes written) / time
    step_weight_bytes       decoder blocks (self-attention q/k/v/o, cross-attention q/o, FFN,
                            norms, relative bias) + final norm + LM head (the tied embedding or
                            lm_head). Cross-attention k/v are excluded: they project the
                            encoder output once per prompt (in `prepare`), not per token.
                            The KV cache reads are excluded too (small at these lengths).
    bound_ms_per_token      step_weight_bytes / bandwidth
    ar_ms_per_token         `tfspec.generate(k=0)` at batch 1, greedy, no EOS, median of the
                            repeats; includes the one-off encoder pass amortised over
                            max_new_tokens
    multiple_of_bound       ar_ms_per_token / bound_ms_per_token (1.0 = at the bound; goal:
                            <= 1.3 for t5-large)

    python -m bench.roofline --json runs/bench/roofline.json
    python -m bench.roofline --presets t5-small --dtypes float32 --max_new_tokens 16 --repeats 1

t5-large in float32 holds ~3 GB of weights and takes a while to build; `--presets` limits
the set. The bandwidth of a shared machine varies run to run; both numbers come from the
same run.
"""

import platform
import time
from typing import Dict, Optional, Sequence

import numpy as np

import tfspec
from bench import timing
from evals import cli

COLUMNS = ["preset", "dtype", "step_weight_mb", "bandwidth_gb_s", "bound_ms_per_token",
           "ar_ms_per_token", "multiple_of_bound"]
_PER_PROMPT = ("cross_attention/k", "cross_attention/v")


def _parse_args(argv=None):
    parser = cli.ArgumentParser("python -m bench.roofline", __doc__.split("\n")[0])
    parser.add_argument("--presets", default="t5-small,t5-base,t5-large",
                        help="comma-separated T5Config presets (random weights)")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--copy_mib", type=int, default=1024,
                        help="size of the array copied to measure bandwidth")
    parser.add_argument("--copy_repeats", type=int, default=5)
    parser.add_argument("--max_new_tokens", type=int, default=64)
    parser.add_argument("--prompt_length", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default="", help="write the result here")
    return parser.parse_args(argv)


def memory_bandwidth(mib: int = 1024, repeats: int = 5) -> float:
    """Streaming-copy bandwidth in bytes/s: 2 * array bytes / best copy time."""
    src = np.ones(max(1, mib) * (1 << 20) // 4, dtype=np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # Touch every page of dst once before timing.
    best = float("inf")
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    return 2.0 * src.nbytes / best


def step_weight_bytes(model: tfspec.models.T5) -> int:
    """Bytes of weights one cached decoding step reads (see the module docstring)."""
    total = 0
    for block in model.decoder_blocks:
        for weight in block.weights:
            if weight.path.endswith(_PER_PROMPT):
                continue
            total += _nbytes(weight)
    for weight in model.decoder_final_norm.weights:
        total += _nbytes(weight)
    total += _nbytes(model.lm_head if model.lm_head is not None else model.shared)
    return total


def _nbytes(weight) -> int:
    dtype = str(weight.dtype)
    itemsize = 2 if "bfloat16" in dtype else np.dtype(dtype).itemsize
    return int(np.prod(weight.shape)) * itemsize


def ar_ms_per_token(model, max_new_tokens: int, prompt_length: int, repeats: int,
                    jit_compile: Optional[bool] = True) -> float:
    """Median ms/token of greedy autoregressive decoding at batch 1 (no EOS)."""
    rng = np.random.RandomState(0)
    prompt = [rng.randint(3, model.vocab_size, size=prompt_length).tolist()]
    seconds, gen = timing.best_time(
        lambda: tfspec.generate(model, prompt, k=0, sampling=tfspec.Sampling(temperature=0.0),
                                max_new_tokens=max_new_tokens, eos_id=None,
                                jit_compile=jit_compile), repeats)
    return 1e3 * seconds / max(1, int(np.sum(gen.lengths)))


def run(configs: Dict[str, tfspec.models.T5Config], dtypes: Sequence[str] = ("float32",),
        max_new_tokens: int = 64, prompt_length: int = 16, repeats: int = 3,
        copy_mib: int = 1024, copy_repeats: int = 5, jit_compile: Optional[bool] = True) -> dict:
    """One record per (config name, dtype); see the module docstring."""
    bandwidth = memory_bandwidth(copy_mib, copy_repeats)
    print(f"memory bandwidth (numpy copy of {copy_mib} MiB): {bandwidth / 1e9:.2f} GB/s",
          flush=True)
    records = []
    for name, config in configs.items():
        for dtype in dtypes:
            model = tfspec.models.T5(config, seed=0, dtype=dtype)
            nbytes = step_weight_bytes(model)
            ar_ms = ar_ms_per_token(model, max_new_tokens, prompt_length, repeats, jit_compile)
            bound_ms = 1e3 * nbytes / bandwidth
            records.append({
                "preset": name, "dtype": dtype, "step_weight_bytes": nbytes,
                "step_weight_mb": nbytes / 1e6, "bandwidth_gb_s": bandwidth / 1e9,
                "bound_ms_per_token": bound_ms, "ar_ms_per_token": ar_ms,
                "multiple_of_bound": ar_ms / bound_ms})
            print(f"  {name} {dtype}: {ar_ms:.3f} ms/token, bound {bound_ms:.3f}", flush=True)
            del model
    return {"bandwidth_bytes_per_s": bandwidth, "copy_mib": copy_mib, "batch_size": 1,
            "max_new_tokens": max_new_tokens, "repeats": repeats,
            "machine": platform.processor() or platform.machine(), "records": records}


def main(argv=None):
    args = _parse_args(argv)
    configs = {p: tfspec.models.T5Config.preset(p) for p in args.presets.split(",") if p}
    dtypes = [d for d in args.dtypes.split(",") if d]
    result = run(configs, dtypes, args.max_new_tokens, args.prompt_length, args.repeats,
                 args.copy_mib, args.copy_repeats)
    timing.print_table(result["records"], COLUMNS)
    timing.write_json(args.json, result)


if __name__ == "__main__":
    main()
