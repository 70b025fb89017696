"""Where a whole request's CPU time goes, from Linux `perf` samples of this process.

`bench.loop_profile` reads XLA's own per-op trace: it sees only the compiled program's
instructions, and its instrumentation inflates small ones ~2-3x. This samples everything the
process runs instead (the encoders, the decoding loop, the runtime between its ops, the
kernel's helper threads, Python), at a low rate and with nothing added to the program:
`perf record -e cpu-clock -F HZ -p <this process>`, whose samples count CPU time on every
thread. Every mode of --k (0: autoregressive) decodes the pool twice to compile and warm
up; then the modes take turns (--alternations times, --seconds in all per mode), each
decoding the pool again and again under perf, and the samples are sorted by (shared object,
symbol) into the categories of `CATEGORY_NAMES`:

    encoder products     XLA's dots (YNNPACK, Eigen, oneDNN GEMMs) and the kernel's AMX
                         products: with tfspec.kernels on, the decoding loop's products are
                         the kernel's, so these are nearly all the per-call encoders and
                         cross-attention keys/values
    products, 2+ rows    tfspec.kernels products of 2 or more rows: at batch 1 the verify
                         windows; at batch B autoregressive steps multiply B rows too
    products, 1 row      tfspec.kernels products of 1 row: at batch 1 the autoregressive
                         and draft steps
    panel fingerprint    the per-call check that the kernel's panels match the weights
    decode attention     tfspec.kernels batched attention products
    XLA fused code       the compiled program's own (JIT) code: fusions, loop control
    XLA runtime          TensorFlow and XLA's runtime (thunk executor, thread pools, calls)
    Python               the interpreter (tfspec.generate's per-call work)
    OS                   the kernel: mostly the kernel's helper threads polling with
                         sched_yield between products (time of an otherwise idle core)
    helper waiting       the helper threads' own polling code
    other                libc (malloc, memcpy) and the rest

One record per (k, category):

    k, temperature      the mode (batch_size: rows per call, --batch_size)
    category            one of CATEGORY_NAMES
    cpu_ms_per_pass     CPU milliseconds per pass over the pool (all threads)
    share               of the mode's CPU time
    wall_ms_per_pass    the mode's wall time per pass (under perf, which adds ~1-10%)
    passes, tokens_per_pass, rounds_per_pass, cpu_utilisation (CPU time / wall time)

so that a category's cost per round or per token is cpu_ms_per_pass / rounds_per_pass.
The encoders cost the same in every mode; what a round costs beside an autoregressive step
is the difference of the loop's categories.

    python -m bench.cycles --k 0,4 --seconds 20 --json bench/results/cycles.json
    python -m bench.cycles --k 0,4 --batch_size 8   # where a batch-8 round's time goes

Needs Linux `perf` (Debian: linux-perf) and permission to sample this process
(kernel.perf_event_paranoid <= 2, the default).
"""

import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import tfspec
from bench import models as bench_models
from bench import speedup as speedup_lib
from bench import timing
from evals import cli

COLUMNS = ["k", "temperature", "category", "cpu_ms_per_pass", "share", "wall_ms_per_pass",
           "rounds_per_pass"]


def _kernel(dso: str) -> bool:
    return "rows_matmul" in dso  # the tfspec.kernels library


def _kernel_product_rows(symbol: str) -> Optional[int]:
    """Rows of a tfspec.kernels panel product instance (`PanelsAvx512<5, 4, ...>`,
    `PanelAvx2<1, ...>`), else None."""
    match = re.search(r"Panels?(?:Avx512|Avx2)<(\d+),", symbol)
    return int(match.group(1)) if match else None


_RULES: Tuple[Tuple[str, Callable[[str, str], bool]], ...] = (
    ("products, 2+ rows", lambda dso, sym: _kernel(dso) and (
        (_kernel_product_rows(sym) or 0) >= 2 or "PanelScalar" in sym)),
    ("products, 1 row", lambda dso, sym: _kernel(dso) and _kernel_product_rows(sym) == 1),
    ("panel fingerprint", lambda dso, sym: _kernel(dso) and "Hash" in sym),
    ("decode attention", lambda dso, sym: _kernel(dso) and (
        "Dense" in sym or "batched" in sym.lower())),
    # On CPUs with AMX the encoders' products are the kernel's AMX ones.
    ("encoder products", lambda dso, sym: _kernel(dso) and ("Amx" in sym or "SplitRows" in sym)),
    ("helper waiting", lambda dso, sym: _kernel(dso)),
    ("encoder products", lambda dso, sym: any(key in sym for key in (
        "ynn::", "xnn_", "gebp", "gemm_pack", "TensorContraction", "dnnl", "mkldnn"))),
    ("XLA fused code", lambda dso, sym: dso.startswith("[JIT]") or dso == "[unknown]"),
    ("OS", lambda dso, sym: dso.startswith("[kernel") or "sched_yield" in sym),
    ("Python", lambda dso, sym: "libpython" in dso or dso.startswith("python")),
    ("XLA runtime", lambda dso, sym: "tensorflow" in dso or "xla" in dso),
    ("other", lambda dso, sym: True),
)
"""(category, predicate(dso, symbol)) in order: a sample goes to the first that matches. A
PanelScalar product (CPUs without AVX2) counts as 2+ rows whatever its rows."""

CATEGORY_NAMES = tuple(dict.fromkeys(name for name, _ in _RULES))
"""The categories, each described in the module docstring."""


def categorize(dso: str, symbol: str) -> str:
    """The category (see `CATEGORY_NAMES`) of a sample in `symbol` of shared object `dso`."""
    for name, matches in _RULES:
        if matches(dso, symbol):
            return name
    raise AssertionError("the last category matches everything")


# `perf report --stdio -F sample,dso,sym` lines: "  126  [JIT] tid 29036  [.] 0x7f38...";
# a shared object's name may hold spaces, the symbol follows its [.] (user) or [k] mark.
_REPORT_LINE = re.compile(r"^\s*(\d+)\s+(.*?)\s+\[[.kgu]\]\s+(.*?)\s*$")


def samples_by_category(report: str) -> Dict[str, int]:
    """{category: samples} of a `perf report --stdio -F sample,dso,sym` text (every one of
    `CATEGORY_NAMES`, 0 where none fell)."""
    counts = {name: 0 for name in CATEGORY_NAMES}
    for line in report.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _REPORT_LINE.match(line)
        if match is None:
            continue
        samples, dso, symbol = int(match.group(1)), match.group(2), match.group(3)
        counts[categorize(dso, symbol)] += samples
    return counts


class PerfError(RuntimeError):
    """perf is missing or may not sample this process (a one-line, actionable message)."""


def perf_binary() -> str:
    """The perf executable on PATH.

    Raises:
      PerfError: there is none (the message says how to install it).
    """
    path = shutil.which("perf")
    if path is None:
        raise PerfError("perf not found on PATH: install Linux perf (Debian: apt install "
                        "linux-perf; Ubuntu: linux-tools-generic) to run bench.cycles")
    return path


def record(work: Callable[[], None], seconds: float, frequency: int
           ) -> Tuple[Dict[str, int], float, int]:
    """Runs `work` again and again for `seconds` under perf sampling this process.

    Returns:
      ({category: samples}, wall seconds, calls of `work`).

    Raises:
      PerfError: perf is missing, or failed (its first line of error output).
    """
    binary = perf_binary()
    with tempfile.TemporaryDirectory(prefix="tfspec-cycles-") as tmp:
        data = os.path.join(tmp, "perf.data")
        log = os.path.join(tmp, "perf.log")
        with open(log, "w", encoding="utf-8") as log_file:
            perf = subprocess.Popen(  # pylint: disable=consider-using-with
                [binary, "record", "-e", "cpu-clock", "-F", str(frequency), "-p",
                 str(os.getpid()), "-o", data],
                stdout=subprocess.DEVNULL, stderr=log_file)
        try:
            time.sleep(0.5)  # perf attaches to every thread before the timed work starts
            if perf.poll() is not None:
                raise PerfError(f"perf record failed: {_first_line(log)}")
            calls, start = 0, time.perf_counter()
            while calls == 0 or time.perf_counter() - start < seconds:
                work()
                calls += 1
            wall = time.perf_counter() - start
            perf.send_signal(signal.SIGINT)  # perf writes its data and exits
            status = perf.wait(timeout=120)
        finally:
            if perf.poll() is None:  # work() raised: no perf outlives the call
                perf.kill()
                perf.wait()
        if status not in (0, -signal.SIGINT) or not os.path.exists(data):
            raise PerfError(f"perf record failed: {_first_line(log)}")
        report = subprocess.run(
            [binary, "report", "-i", data, "--no-children", "--sort", "dso,sym", "-g", "none",
             "--stdio", "-F", "sample,dso,sym"],
            capture_output=True, text=True, check=False)
        if report.returncode != 0:
            reason = (report.stderr.strip().splitlines() or ["no output"])[0]
            raise PerfError(f"perf report failed: {reason}")
        return samples_by_category(report.stdout), wall, calls


def _first_line(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = [line.strip() for line in f if line.strip()]
    return lines[0] if lines else "no output"


def run(target, draft, prompt_pool: Sequence[Sequence[int]], ks: Sequence[int],
        sampling: Optional[tfspec.Sampling] = None, max_new_tokens: int = 64,
        seconds: float = 20.0, frequency: int = 999, seed: int = 0,
        jit_compile: Optional[bool] = True, alternations: int = 3, batch_size: int = 1
        ) -> List[dict]:
    """One record per (k, category) (see the module docstring); `sampling` None: greedy.
    A pass decodes the pool in consecutive batches of `batch_size` (the last one filled by
    cycling, `bench.models.batches_of`).

    The modes are sampled in turn, `alternations` times each for seconds / alternations
    (every mode compiled first), so that a machine whose speed drifts over minutes weighs
    on every mode alike.

    Raises:
      PerfError: see `record`.
    """
    perf_binary()  # Fail before compiling anything.
    sampling = sampling or tfspec.Sampling(temperature=0.0)
    batches = bench_models.batches_of(list(prompt_pool), batch_size)
    decodes, generations = {}, {}
    for k in ks:
        decodes[k] = speedup_lib.decode_fn(target, batches, k, sampling, max_new_tokens, seed,
                                           draft=draft if k else None,
                                           jit_compile=jit_compile)
        generations[k] = decodes[k]()  # Compiles. One seed: every pass decodes these tokens.
        decodes[k]()
    counts = {k: dict.fromkeys(CATEGORY_NAMES, 0) for k in ks}
    walls, passes = dict.fromkeys(ks, 0.0), dict.fromkeys(ks, 0)
    for _ in range(alternations):
        for k in ks:
            segment, wall, calls = record(decodes[k], seconds / alternations, frequency)
            for category, samples in segment.items():
                counts[k][category] += samples
            walls[k] += wall
            passes[k] += calls
    records = []
    for k in ks:
        total = max(sum(counts[k].values()), 1)
        tokens = int(sum(g.lengths.sum() for g in generations[k]))
        rounds = speedup_lib.loop_steps(generations[k])
        for category in CATEGORY_NAMES:
            records.append({
                "k": k, "temperature": sampling.temperature, "batch_size": batch_size,
                "category": category,
                "samples": counts[k][category],
                "cpu_ms_per_pass": 1e3 * counts[k][category] / frequency / passes[k],
                "share": counts[k][category] / total,
                "wall_ms_per_pass": 1e3 * walls[k] / passes[k],
                "passes": passes[k], "tokens_per_pass": tokens, "rounds_per_pass": rounds,
                "cpu_utilisation": total / frequency / walls[k]})
    return records


def _parse_args(argv=None):
    parser = cli.ArgumentParser("python -m bench.cycles", __doc__.split("\n")[0])
    speedup_lib.add_pair_args(parser, repeats=False)
    parser.add_argument("--k", default="0,4",
                        help="comma-separated draft lengths (0: autoregressive)")
    parser.add_argument("--batch_size", type=int, default=1,
                        help="rows per generate call (the pool in consecutive batches)")
    parser.add_argument("--temperature", type=float, default=0.0,
                        help="sampling temperature (0: greedy)")
    parser.add_argument("--seconds", type=float, default=20.0,
                        help="sampled decoding time per mode")
    parser.add_argument("--frequency", type=int, default=999,
                        help="perf samples per second of CPU time")
    parser.add_argument("--alternations", type=int, default=3,
                        help="sample the modes in turn this many times each, for "
                             "--seconds / this each time")
    args = parser.parse_args(argv)
    try:
        args.k = [int(x) for x in args.k.split(",") if x.strip()]
    except ValueError:
        args.k = []
    if not args.k or min(args.k) < 0:
        parser.error("--k must be comma-separated integers >= 0, e.g. 0,4")
    if args.batch_size < 1:
        parser.error("--batch_size must be >= 1")
    if args.temperature < 0:
        parser.error("--temperature must be >= 0")
    if args.seconds <= 0:
        parser.error("--seconds must be > 0")
    if args.alternations < 1:
        parser.error("--alternations must be >= 1")
    if not 1 <= args.frequency <= 20000:
        parser.error("--frequency must be in 1..20000 (samples per second)")
    return args


def main(argv=None):
    args = _parse_args(argv)
    try:
        perf_binary()
    except PerfError as e:
        sys.exit(f"bench.cycles: {e}")
    with bench_models.exit_on_input_error():
        target, draft, pool = speedup_lib.load_pair_and_prompts(args)
    sampling = tfspec.Sampling(temperature=args.temperature, top_k=args.top_k,
                               top_p=args.top_p)
    try:
        records = run(target, draft, pool, args.k, sampling, args.max_new_tokens,
                      args.seconds, args.frequency, args.seed, speedup_lib.jit_compile(args),
                      args.alternations, args.batch_size)
    except PerfError as e:
        sys.exit(f"bench.cycles: {e}")
    timing.print_table(records, COLUMNS)
    timing.write_json(args.json, {
        "target": args.target, "draft": args.draft, "prompts": args.prompts,
        "max_new_tokens": args.max_new_tokens, "batch_size": args.batch_size,
        "temperature": args.temperature,
        "top_k": args.top_k, "top_p": args.top_p, "seed": args.seed,
        "seconds": args.seconds, "frequency": args.frequency,
        "alternations": args.alternations,
        "machine": platform.machine(), "records": records})


if __name__ == "__main__":
    main()
