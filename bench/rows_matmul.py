"""Few-row products: XLA:CPU's dot against the `tfspec.kernels` custom call, side by side.

For each [K, N] product of a T5 decoder step (self-attention q|k|v and o, cross-attention q
and o, FFN in and out, LM head; shapes of --target) and each row count (1 = an
autoregressive or draft step, k + 1 = a verify, batch x (k + 1) at batch > 1), this times a
compiled 32-step loop of the product, interleaved, both ways:

    xla_us        tf.matmul inside jit_compile (a GEMV at 1 row, Eigen's GEMM above)
    kernel_us     tfspec.kernels.matmul on the panel-major copy
    kernel/xla    the ratio (below 1: the kernel is faster)
    xla_vs_row1   xla_us / xla_us at 1 row (what a verify pays over a step with XLA's dot)
    kernel_vs_row1  the same for the kernel

Then, end to end on the embedded pair (greedy, the first held-out prompt, batch 1, EOS off so
that every call decodes exactly --short or --long tokens), the per-token slope of
`tfspec.generate` between the two, with XLA's products (`tfspec.kernels.use(False)`), with
the kernel on float32 panels (`kernels.half_width(False)`), and with the kernel as shipped
(half-width panels wherever the weights are bfloat16 values, as the embedded pair's are),
interleaved in one run (records: mode, kernel, half_width, helper_spin_us, ms_per_token,
speedup_vs_xla_ar). Helpers poll `kernels.DEFAULT_HELPER_SPIN_US` in every case (helpers
that sleep after every product were measured against that in
`bench/results/rows_matmul.json` before half-width panels: 3.90 vs 3.60 ms/token
speculative).

Last, a whole T5 decode call of --target (every product, attention over the real cache,
the LM head) at each of --windows positions, in one compiled loop, both ways: what a verify
of k + 1 positions costs against a one-position step (xla_vs_window1, kernel_vs_window1).

    python -m bench.rows_matmul --json bench/results/rows_matmul.json
    python -m bench.rows_matmul --rows 1,5 --repeats 2 --noend_to_end

Each product loop uses 8 different weight matrices of the shape so that, as in a real step,
the weights do not all sit in cache.
"""

import platform
import time
from typing import List, Sequence

import numpy as np

import tfspec  # First: keeps TensorFlow's native logs quiet (tfspec.quiet).
import tensorflow as tf  # pylint: disable=g-bad-import-order
from bench import component_loops
from bench import models as bench_models
from bench import timing
from evals import cli
from tfspec import kernels
from tfspec import quiet

COLUMNS = ["product", "k_dim", "n_dim", "rows", "xla_us", "kernel_us", "kernel/xla",
           "xla_vs_row1", "kernel_vs_row1"]
E2E_COLUMNS = ["mode", "kernel", "half_width", "ms_per_token", "request_ms_long",
               "speedup_vs_xla_ar"]
WINDOW_COLUMNS = ["window", "xla_ms", "kernel_ms", "kernel/xla", "xla_vs_window1",
                  "kernel_vs_window1"]
_WINDOW_CALLS = (4, 36)  # decode calls of the short and the long loop; their difference is timed
_STEPS = 32
_MATRICES = 8


def _parse_args(argv=None):
    parser = cli.ArgumentParser("python -m bench.rows_matmul", __doc__.split("\n")[0])
    parser.add_argument("--target", default=bench_models.DEFAULT_TARGET,
                        help="model whose decoder shapes are timed (zoo:, a directory, or "
                             "random:PRESET)")
    parser.add_argument("--draft", default=bench_models.DEFAULT_DRAFT,
                        help="draft of the end-to-end part")
    parser.add_argument("--rows", default="1,2,5,9,16,40", help="comma-separated row counts")
    parser.add_argument("--products", default="",
                        help="comma-separated product names to time (default: all of "
                             "self q|k|v, self o, cross q, cross o, ffn in, ffn out, lm head)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--k", type=int, default=4, help="draft length of the end-to-end part")
    parser.add_argument("--short", type=int, default=16, help="end to end: fewer new tokens")
    parser.add_argument("--long", type=int, default=64, help="end to end: more new tokens")
    cli.add_bool(parser, "end_to_end", True,
                 "also time tfspec.generate with the kernel on and off")
    parser.add_argument("--windows", default="1,2,5,9",
                        help="decode windows of the whole-call part (1 = a step, k + 1 = a "
                             "verify); empty: skip it")
    parser.add_argument("--window_prompt_length", type=int, default=128,
                        help="whole-call part: prompt length of the cross-attention")
    parser.add_argument("--json", default="", help="write the records here")
    return parser.parse_args(argv)


def products(config: tfspec.models.T5Config) -> List[tuple]:
    """(name, K, N) of one decoder step's products (the kernel's fused layout)."""
    inner = config.num_heads * config.d_kv
    ffn_in = 2 * config.d_ff if config.is_gated_act else config.d_ff
    return [("self q|k|v", config.d_model, 3 * inner), ("self o", inner, config.d_model),
            ("cross q", config.d_model, inner), ("cross o", inner, config.d_model),
            ("ffn in", config.d_model, ffn_in), ("ffn out", config.d_ff, config.d_model),
            ("lm head", config.d_model, config.vocab_size)]


def _product_loop(k_dim: int, n_dim: int, rows: int, use_kernel: bool, seed: int):
    rng = np.random.default_rng(seed)
    weights = [tf.constant(rng.standard_normal((k_dim, n_dim)).astype(np.float32) * 0.05)
               for _ in range(_MATRICES)]
    weight_panels = [kernels.panels(w) for w in weights]
    x = tf.constant(rng.standard_normal((rows, k_dim)).astype(np.float32))

    def body(i, x):
        for j in range(_MATRICES):
            y = (kernels.matmul(x, weight_panels[j], n_dim) if use_kernel
                 else tf.matmul(x, weights[j]))
            # Feed a scalar of y back so no product can be skipped or hoisted.
            x = x + 1e-3 * tf.reduce_mean(y, axis=1, keepdims=True)
        return i + 1, x

    loop = tf.function(lambda x: tf.while_loop(lambda i, _: i < _STEPS, body, (0, x))[1],
                       jit_compile=True, autograph=False)
    return lambda: loop(x).numpy()


def measure_products(config, row_counts: Sequence[int], repeats: int,
                     names: Sequence[str] = ()) -> List[dict]:
    records = []
    for name, k_dim, n_dim in products(config):
        if names and name not in names:
            continue
        fns, keys = [], []
        for rows in row_counts:
            for use_kernel in (False, True):
                fns.append(_product_loop(k_dim, n_dim, rows, use_kernel, seed=rows))
                keys.append((rows, use_kernel))
        times = dict(zip(keys, timing.interleaved_times(fns, repeats)))
        per_call = {key: t / (_STEPS * _MATRICES) * 1e6 for key, t in times.items()}
        for rows in row_counts:
            xla_us, kernel_us = per_call[(rows, False)], per_call[(rows, True)]
            records.append({
                "product": name, "k_dim": k_dim, "n_dim": n_dim, "rows": rows,
                "xla_us": xla_us, "kernel_us": kernel_us, "kernel/xla": kernel_us / xla_us,
                "xla_vs_row1": xla_us / per_call.get((1, False), float("nan")),
                "kernel_vs_row1": kernel_us / per_call.get((1, True), float("nan"))})
    return records


def measure_end_to_end(target, draft, prompt, k: int, short: int, long: int,
                       repeats: int) -> List[dict]:
    """Per-token slope of generate between `short` and `long` new tokens: XLA's products,
    the kernel on float32 panels, the kernel as shipped (half-width panels where exact)."""
    greedy = tfspec.Sampling(temperature=0.0)
    spin = kernels.DEFAULT_HELPER_SPIN_US
    settings = [(False, False), (True, False), (True, True)]  # (kernel, half_width)
    cases = [(use, half, mode) for use, half in settings
             for mode in ("autoregressive", "speculative")]

    def call(use, half, mode, n):
        def fn():
            with kernels.use(use), kernels.half_width(half), kernels.helper_spin(spin):
                gen = tfspec.generate(target, [prompt], draft=draft if mode == "speculative"
                                      else None, k=k if mode == "speculative" else 0,
                                      max_new_tokens=n, seed=0, sampling=greedy,
                                      eos_id=None)  # Every row runs to n tokens.
            return int(gen.lengths[0])
        return fn

    fns = [call(use, half, mode, n) for use, half, mode in cases for n in (short, long)]
    times, lengths = timing.interleaved_runs(fns, repeats)
    records = []
    for i, (use, half, mode) in enumerate(cases):
        (t_short, t_long), (n_short, n_long) = times[2 * i:2 * i + 2], lengths[2 * i:2 * i + 2]
        records.append({"mode": mode, "kernel": use, "half_width": half if use else None,
                        "helper_spin_us": spin if use else None,
                        "new_tokens": [n_short, n_long],
                        "ms_per_token": (t_long - t_short) / max(1, n_long - n_short) * 1e3,
                        "request_ms_long": t_long * 1e3})
    xla_ar = records[0]["ms_per_token"]
    for record in records:
        record["speedup_vs_xla_ar"] = xla_ar / record["ms_per_token"]
    return records


def _decode_loop(target, width: int, use_kernel: bool, prompt_length: int):
    """fn(iterations) timing `iterations` decode calls of `width` positions in one compiled
    loop (`component_loops.verify_loop`, on the real cache and context of one random
    prompt), kernel on or off."""
    calls = _WINDOW_CALLS[1]
    ids = tf.constant(np.random.default_rng(width).integers(
        2, target.vocab_size, size=(1, prompt_length)), tf.int32)
    window_ids = tf.range(width)[None, :]
    with kernels.use(use_kernel):  # Both programs are traced (and compiled) inside it.
        context, cache = tf.function(
            lambda i, n: target.prepare(i, n, calls + width + 1), jit_compile=True)(
                ids, tf.constant([prompt_length]))
        loop = component_loops.verify_loop(target, width - 1, calls)
        loop(context, cache, window_ids, tf.constant(1))
    return lambda n: (lambda: loop(context, cache, window_ids, tf.constant(n)).numpy())


def measure_decode_windows(target, widths: Sequence[int], prompt_length: int,
                           repeats: int) -> List[dict]:
    """ms per whole T5 decode call at each window width, XLA's dot and the kernel,
    interleaved: the time of a loop of 36 calls minus one of 4, over 32 (prepare cancels)."""
    target.refresh_decode_panels()
    fns, keys = [], []
    for width in widths:
        for use_kernel in (False, True):
            loop = _decode_loop(target, width, use_kernel, prompt_length)
            fns += [loop(n) for n in _WINDOW_CALLS]
            keys.append((width, use_kernel))
    times = timing.interleaved_times(fns, repeats)
    calls = _WINDOW_CALLS[1] - _WINDOW_CALLS[0]
    per_call = {key: (times[2 * i + 1] - times[2 * i]) / calls * 1e3
                for i, key in enumerate(keys)}

    def ratio(a, b):  # nan where noise left no positive time to divide by (tiny models)
        return a / b if b > 0 else float("nan")

    records = []
    for width in widths:
        xla_ms, kernel_ms = per_call[(width, False)], per_call[(width, True)]
        records.append({
            "window": width, "xla_ms": xla_ms, "kernel_ms": kernel_ms,
            "kernel/xla": ratio(kernel_ms, xla_ms),
            "xla_vs_window1": ratio(xla_ms, per_call.get((1, False), float("nan"))),
            "kernel_vs_window1": ratio(kernel_ms, per_call.get((1, True), float("nan")))})
    return records


def main(argv=None) -> int:
    args = _parse_args(argv)
    print(kernels.status())
    if not kernels.usable_outside_trace():
        print("nothing to compare: the kernel is off here")
        return 1
    with bench_models.exit_on_input_error():
        target = bench_models.load_spec(args.target, "--target")
    row_counts = [int(r) for r in args.rows.split(",") if r.strip()]
    start = time.time()
    names = [n.strip() for n in args.products.split(",") if n.strip()]
    unknown = sorted(set(names) - {name for name, _, _ in products(target.config)})
    if unknown:
        return cli.usage_error("python -m bench.rows_matmul", f"unknown --products {unknown}")
    draft = None
    if args.end_to_end:  # Only the end-to-end part decodes with the draft.
        with bench_models.exit_on_input_error():
            draft = bench_models.load_draft(target, args.target, args.draft)
    records = measure_products(target.config, row_counts, args.repeats, names)
    timing.print_table(records, COLUMNS)
    payload = {"benchmark": "rows_matmul", "target": args.target, "rows": row_counts,
               "repeats": args.repeats, "machine": platform.machine(),
               "processor": platform.processor(), "records": records}
    if args.end_to_end:
        prompt = bench_models.prompts(args.target, target, num_prompts=1)[0]
        e2e = measure_end_to_end(target, draft, prompt, args.k, args.short, args.long,
                                 args.repeats)
        print()
        timing.print_table(e2e, E2E_COLUMNS)
        payload.update(end_to_end=e2e, k=args.k, draft=args.draft)
    widths = [int(w) for w in args.windows.split(",") if w.strip()]
    if widths:
        windows = measure_decode_windows(target, widths, args.window_prompt_length,
                                         args.repeats)
        print()
        timing.print_table(windows, WINDOW_COLUMNS)
        payload.update(decode_windows=windows, window_prompt_length=args.window_prompt_length)
    payload["seconds"] = time.time() - start
    timing.write_json(args.json, payload)
    return 0



# Traced once per product shape or window width on purpose: no retracing warning.
for _builder in (_product_loop, _decode_loop):
    quiet.expect_retracing(_builder)


if __name__ == "__main__":
    raise SystemExit(main())
