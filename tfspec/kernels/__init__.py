"""Few-row matrix products for XLA:CPU: `panels` and `matmul`, an XLA custom call.

Why: on XLA:CPU a one-row product `[1, K] @ [K, N]` is a GEMV that streams the weights at
close to memory bandwidth, but 2..~16 rows go to Eigen's GEMM, which re-packs the whole
weight matrix on every call. A speculative verify multiplies k + 1 rows by every weight of
the target, so it paid 1.5-2 target steps where one step's worth of bytes is read
(`bench.round_breakdown`). `rows_matmul.cc` reads each weight once per block of rows (12
with AVX-512, 6 with AVX2) from a panel-major copy made once per request, keeps the
accumulators in registers, prefetches ahead of the stream, and splits the panels across the
CPU's threads; at one row it is also faster than XLA's GEMV here
(`python -m bench.rows_matmul`). Without the prefetch a 5-row product of weights that do not
fit in cache streamed at ~70% of the 1-row rate: on t5-base shapes a k = 4 round cost 1.32
target steps; with it, 1.02-1.08 (`python -m bench.loop_overhead`).

Layout ("panels"): `panels(w)` turns a [K, N] kernel into [ceil(N / 16), K, 16]: panel p
is columns 16p .. 16p + 15 (zero past N), contiguous over k. A row-major kernel
walked 16 columns at a time jumps a whole row (often a 4 KB page) per k, which defeats the
hardware prefetcher; a panel is one contiguous stream.

Half-width panels: a float32 kernel whose every value is a bfloat16 (the low 16 bits of each
float are zero, as for a bfloat16 checkpoint loaded as float32, like the embedded pair) is
packed as bfloat16 panels (`panels(w, half_width=True)`), which the kernel widens back bit
for bit: the same products, from half the bytes. A decode step streams every weight once and
is bandwidth-bound, so it is that much faster (`bench.rows_matmul`); `PanelCache` picks the
width per matrix (`bfloat16_exact`), and `half_width(False)` turns it off for comparisons.

Exactness: each output element is the same float32 fused multiply-add chain over
k = 0 .. K - 1 whatever the number of rows, the row block, the thread or the instruction set
(`INSTRUCTION_SETS`; `instruction_set` lowers it for tests and benchmarks), so a row never
depends on its companions in the call, 1-row and (k + 1)-row calls of one model round
identically, and CPUs with and without AVX-512 decode the same tokens.

Few-row products of two activations (`batched_matmul`): decode attention multiplies the
window's queries by the cached keys and its probabilities by the cached values, one small
[W, K] x [K, N] per batch row and head. XLA:CPU emits a one-row product of these as a GEMV
but a few-row one as a batched GEMM that cost ~4x as much (t5-base, `bench.loop_profile`:
a k = 4 round's 48 attention dots 2.0 ms against 0.54 for a step's). `T5` runs the
attention of every window over keys laid out [d_kv, L] (a cache prepared for windows, the
transposed cross keys) through it, each output the same FMA chain over K, so a row's
attention is the same bits alone or in a window; on t5-base shapes a k = 4 round then costs
1.06-1.07 target steps instead of 1.17-1.21 (`bench.loop_overhead`, interleaved).

Many-row products on AMX (`amx_matmul`, `amx_panels`): an encoder multiplies batch x
prompt-bucket rows by each of its weights once per request, compute-bound work (most of a
request's fixed cost) that XLA:CPU runs at ~130-200 GFLOP/s here. Where the CPU has AMX
(Sapphire Rapids and later; `amx_available()`), `tfspec.models.T5` runs its encoder's and its
cross-attention keys/values' products on AMX's bfloat16 tiles from `AMX_MIN_ROWS` rows up.
The weights must be bfloat16 values (the `PanelCache` entry is made only then); the float32
activations are split exactly into three bfloat16 parts, so the products are float32 dot
products in another summation order, not bfloat16 approximations, and every row is the same
additions whatever its companions. The encoder's products cost 2.2-2.5 ms per [384, 384] x
[384, 2048] on AMX here against ~4.7 ms for XLA (`bench.loop_profile`); `python -m bench.amx`
times whole requests with and without. `TFSPEC_AMX=0` (or `amx(False)`) keeps XLA's dots.

An encoder's self-attention (`prompt_attention`): XLA runs it as a batched GEMM that writes
the [B, H, S, S] scores, then a pass over them for each of bias, max, exp, sum and the
value product, over the whole prompt bucket; on the embedded target's 384-wide bucket that
was 12 of a request's ~35 ms. `tfspec_prompt_attention_f32` computes per batch row and head,
8 query rows at a time with their scores in L1, over the row's valid positions only
(AVX-512; `tfspec.models.T5` uses it in compiled decode programs, and
`fused_prompt_attention(False)` keeps XLA's).

The kernel is compiled on first use with the machine's C++ compiler against the running
TensorFlow (`$TFSPEC_CACHE`, default `~/.cache/tfspec`, holds the library) and registered
as the custom-call target `tfspec_rows_matmul_f32` of XLA's host platform. Where it cannot
be (no compiler, not Linux x86-64, a TensorFlow without the registry symbol) or on an
accelerator, `enabled()` is False and callers use ordinary products; `status()` says why.
It is on by default where it can run; `TFSPEC_ROWS_MATMUL=0` turns it off (for example to
compare against XLA's own products: `bench.rows_matmul` does both in one run).
"""

import contextlib
import ctypes
import hashlib
import os
import pathlib
import platform
import shutil
import subprocess
import tempfile
import threading
import weakref
from typing import Callable, List, Optional, Sequence

import tensorflow as tf

PANEL = 16
"""Output columns per panel (two 8-float AVX registers)."""

MAX_ROWS = 48
"""Calls with more rows than this use XLA's own product (Eigen GEMM is faster there:
`bench.rows_matmul`)."""

TARGET_NAME = "tfspec_rows_matmul_f32"
HALF_WIDTH_TARGET_NAME = "tfspec_rows_matmul_bf16w"
_ENV_SWITCH = "TFSPEC_ROWS_MATMUL"
_SOURCE = pathlib.Path(__file__).with_name("rows_matmul.cc")
_FLAGS = ("-O3", "-std=c++17", "-shared", "-fPIC", "-pthread")

_lock = threading.Lock()
_library = None          # ctypes.CDLL once loaded and registered
_failure: Optional[str] = None


def _cache_dir() -> pathlib.Path:
    root = os.environ.get("TFSPEC_CACHE") or os.path.join(os.path.expanduser("~"), ".cache",
                                                          "tfspec")
    return pathlib.Path(root) / "kernels"


def _compiler() -> Optional[str]:
    for name in (os.environ.get("CXX"), "g++", "c++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def _build(compiler: str) -> pathlib.Path:
    """Compiles rows_matmul.cc once per (source, TensorFlow, compiler); returns the .so."""
    tf_dir = tf.sysconfig.get_lib()
    source = _SOURCE.read_bytes()
    key = hashlib.sha256(b"\0".join([source, tf.__version__.encode(), tf_dir.encode(),
                                     compiler.encode(), " ".join(_FLAGS).encode()]))
    target = _cache_dir() / f"rows_matmul-{key.hexdigest()[:16]}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # Compile to a private name, then rename: concurrent builds (pytest -n 2, Beam workers)
    # never load a half-written library.
    fd, partial = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        command = [compiler, *_FLAGS, str(_SOURCE), "-o", partial, f"-L{tf_dir}",
                   "-l:libtensorflow_cc.so.2", f"-Wl,-rpath,{tf_dir}"]
        result = subprocess.run(command, capture_output=True, text=True, timeout=300,
                                check=False)
        if result.returncode != 0:
            raise OSError(f"{compiler} failed: {result.stderr.strip()[-500:]}")
        os.replace(partial, target)
    finally:
        if os.path.exists(partial):
            os.remove(partial)
    return target


def _load() -> bool:
    global _library, _failure
    with _lock:
        if _library is not None or _failure is not None:
            return _library is not None
        switch = os.environ.get(_ENV_SWITCH, "").strip().lower()
        if switch in ("0", "false", "no", "off"):
            _failure = f"turned off by {_ENV_SWITCH}=0"
        elif switch not in ("", "1", "true", "yes", "on"):
            _failure = (f"{_ENV_SWITCH}={switch!r} is not understood; use 1 (on, the "
                        "default) or 0 (off)")
        elif platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
            _failure = f"needs Linux on x86-64 (this is {platform.system()} {platform.machine()})"
        elif _compiler() is None:
            _failure = "no C++ compiler found (install g++ or set CXX)"
        else:
            try:
                library = ctypes.CDLL(str(_build(_compiler())))
                library.tfspec_register_rows_matmul()
                library.tfspec_set_helper_spin(ctypes.c_long(_helper_spin_us))
                _library = library
            except (OSError, subprocess.SubprocessError, AttributeError) as e:
                _failure = f"could not build or load the kernel: {e}"
        return _library is not None


def status() -> str:
    """One line: whether few-row products use the kernel here, and if not, why."""
    if _load():
        amx_state = "AMX encoders" if amx_available() else "no AMX"
        return (f"rows_matmul kernel: on ({_library._name}, {current_instruction_set()}, "
                f"{amx_state})")
    return f"rows_matmul kernel: off ({_failure})"


def _on_cpu() -> bool:
    """True when the program being traced runs on CPU devices."""
    if tf.distribute.has_strategy():
        strategy = tf.distribute.get_strategy()
        if strategy.num_replicas_in_sync > 1:
            # The panels are plain variables on one device; XLA cannot read them from
            # another replica's device. Multi-replica runs keep XLA's products.
            return False
        devices = strategy.extended.worker_devices
        return all("CPU" in tf.DeviceSpec.from_string(d).device_type.upper() for d in devices)
    if tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("TPU"):
        return False
    return True


def in_xla_program() -> bool:
    """True while tracing a function that XLA compiles (a custom call runs nowhere else:
    not eagerly, not in a plain tf.function graph)."""
    # pylint: disable=g-import-not-at-top
    from tensorflow.python.framework import ops
    from tensorflow.python.ops import control_flow_util
    if tf.executing_eagerly():
        return False
    return control_flow_util.GraphOrParentsInXlaContext(ops.get_default_graph())


_allowed = True


def allowed() -> bool:
    """False inside `use(False)`."""
    return _allowed


@contextlib.contextmanager
def use(value: bool):
    """Within the block, programs traced for the first time use the kernel only if `value`
    (process-wide; benchmarks compare both in one run: `tfspec.generate` caches its
    compiled loops per setting)."""
    global _allowed
    previous, _allowed = _allowed, bool(value)
    try:
        yield
    finally:
        _allowed = previous


_half_width_allowed = True


def half_width_allowed() -> bool:
    """False inside `half_width(False)`."""
    return _half_width_allowed


@contextlib.contextmanager
def half_width(value: bool):
    """Within the block, `PanelCache.refresh` packs every matrix as float32 panels unless
    `value` (process-wide; for benchmarks comparing both widths in one run)."""
    global _half_width_allowed
    previous, _half_width_allowed = _half_width_allowed, bool(value)
    try:
        yield
    finally:
        _half_width_allowed = previous


DEFAULT_HELPER_SPIN_US = 300
"""How long (microseconds) the kernel's helper threads poll for the next product before they
sleep. A decode step's products come microseconds apart, and a helper woken for each one
joined late: with helpers sleeping at once, speculative k = 4 took 3.90 ms/token against
3.60 polling (`bench.rows_matmul`, end to end). While polling a helper yields its core to any
other runnable thread."""

_helper_spin_us = DEFAULT_HELPER_SPIN_US


@contextlib.contextmanager
def helper_spin(micros: int):
    """Within the block, the helpers poll for `micros` after each product (0: they sleep at
    once); process-wide, for benchmarks that compare settings in one run."""
    global _helper_spin_us
    previous, _helper_spin_us = _helper_spin_us, max(0, int(micros))
    _apply_helper_spin()
    try:
        yield
    finally:
        _helper_spin_us = previous
        _apply_helper_spin()


def _apply_helper_spin() -> None:
    if _library is not None:
        _library.tfspec_set_helper_spin(ctypes.c_long(_helper_spin_us))


INSTRUCTION_SETS = ("portable", "avx2", "avx512")
"""The kernel's code paths, lowest first. Each computes every output element as the same
float32 FMA chain over k, so all give the same products bit for bit; the best one the CPU
has runs unless `instruction_set` lowers it."""


def current_instruction_set() -> Optional[str]:
    """The code path products take now (None without the kernel)."""
    if not _load():
        return None
    # Setting the cap again changes nothing and returns the path in effect under it.
    return INSTRUCTION_SETS[_library.tfspec_set_instruction_set(ctypes.c_int(_isa_cap))]


_isa_cap = len(INSTRUCTION_SETS) - 1  # the best the CPU has


@contextlib.contextmanager
def instruction_set(name: str):
    """Within the block, products use at most the code path `name` (one of
    `INSTRUCTION_SETS`; lowered to the best this CPU has); process-wide, for tests that
    compare the paths and benchmarks that time them."""
    global _isa_cap
    if name not in INSTRUCTION_SETS:
        raise ValueError(f"instruction set {name!r} is not one of {INSTRUCTION_SETS}")
    previous, _isa_cap = _isa_cap, INSTRUCTION_SETS.index(name)
    if _load():
        _library.tfspec_set_instruction_set(ctypes.c_int(_isa_cap))
    try:
        yield
    finally:
        _isa_cap = previous
        if _library is not None:
            _library.tfspec_set_instruction_set(ctypes.c_int(_isa_cap))


def enabled() -> bool:
    """Whether `matmul` may be used in the program being traced: allowed, an XLA program
    for CPU devices, with the kernel loaded."""
    return _allowed and in_xla_program() and _on_cpu() and _load()


def panels(kernel: tf.Tensor, half_width: bool = False) -> tf.Tensor:
    """float32 [K, N] -> [ceil(N / 16), K, 16], zero-padded past N (see the module
    docstring): float32, or with `half_width` bfloat16 (only for a `bfloat16_exact` kernel:
    the cast is then exact)."""
    k_dim, n_dim = kernel.shape
    padded = -(-n_dim // PANEL) * PANEL
    kernel = tf.cast(kernel, tf.float32)
    if padded != n_dim:
        kernel = tf.pad(kernel, [[0, 0], [0, padded - n_dim]])
    packed = tf.transpose(tf.reshape(kernel, [k_dim, padded // PANEL, PANEL]), [1, 0, 2])
    return tf.cast(packed, tf.bfloat16) if half_width else packed


def bfloat16_exact(kernel: tf.Tensor) -> bool:
    """Whether every float32 value of `kernel` is a bfloat16 (its low 16 bits are zero), so
    that half-width panels hold it exactly (eager)."""
    bits = tf.bitcast(tf.cast(kernel, tf.float32), tf.int32)
    return bool(tf.reduce_all(tf.equal(tf.bitwise.bitwise_and(bits, 0xFFFF), 0)))


def matmul(x: tf.Tensor, kernel_panels: tf.Tensor, n_dim: int,
           live_width: Optional[tf.Tensor] = None) -> tf.Tensor:
    """x float32 [..., K] (static shape) @ the [K, n_dim] kernel of `kernel_panels` (float32
    or half-width bfloat16 panels) -> float32 [..., n_dim].

    `live_width` (int32 [B] or [], for x [B, W, K]): only entries w < live_width[b] of row
    b are computed, each the same bits as without it (rows do not depend on their
    companions); the other entries are 0. A window row that drafted fewer than W - 1
    tokens, or a row that has finished (0), then costs what its live entries do.

    Only inside an XLA-compiled function on CPU, with `enabled()` True.
    """
    num_panels, k_dim, _ = kernel_panels.shape
    if not (num_panels - 1) * PANEL < n_dim <= num_panels * PANEL:
        raise ValueError(f"{num_panels} panels cannot hold {n_dim} columns")
    leading = x.shape[:-1]
    rows = 1
    for d in leading:
        rows *= d
    flat = tf.reshape(tf.cast(x, tf.float32), [rows, k_dim])
    target = HALF_WIDTH_TARGET_NAME if kernel_panels.dtype == tf.bfloat16 else TARGET_NAME
    operands, dims = [flat, kernel_panels], f"{rows},{k_dim},{n_dim}"
    if live_width is not None:
        if len(leading) != 2:
            raise ValueError(f"live_width needs x of rank 3 [B, W, K], got shape {x.shape}")
        operands.append(tf.broadcast_to(tf.cast(live_width, tf.int32), leading[:1]))
        dims += f",{leading[1]}"
    (y,) = _custom_call(operands, target, dims, False, [tf.float32], [[rows, n_dim]])
    return tf.reshape(y, list(leading) + [n_dim])


BATCHED_TARGET_NAME = "tfspec_batched_matmul_f32"


def batched_matmul(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
    """x float32 [..., M, K] @ y float32 [..., K, N] -> float32 [..., M, N], one product per
    leading index (static shapes, the same leading dimensions on both).

    For decode attention: per batch row and head, the window's queries against the keys
    laid out [d_kv, L], then its probabilities against the values [L, d_kv]. XLA:CPU runs
    a one-row product of these as a GEMV but a few-row one as a batched GEMM that costs ~4x
    as much (see `tfspec_batched_matmul_f32` in rows_matmul.cc); here each output element is
    the float32 FMA chain over K in order, so a row gets the same bits alone or in a window.

    Only inside an XLA-compiled function on CPU, with `enabled()` True.
    """
    if x.shape[:-2] != y.shape[:-2] or x.shape[-1] != y.shape[-2]:
        raise ValueError(f"cannot multiply {x.shape} by {y.shape} per leading index")
    leading = x.shape[:-2]
    groups = 1
    for d in leading:
        groups *= d
    (m, k), n = x.shape[-2:], y.shape[-1]
    flat_x = tf.reshape(tf.cast(x, tf.float32), [groups, m, k])
    flat_y = tf.reshape(tf.cast(y, tf.float32), [groups, k, n])
    (out,) = _custom_call([flat_x, flat_y], BATCHED_TARGET_NAME, f"{groups},{m},{k},{n}",
                          False, [tf.float32], [[groups, m, n]])
    return tf.reshape(out, list(leading) + [m, n])


AMX_TARGET_NAME = "tfspec_amx_matmul"
AMX_DEPTH = 32
"""k per AMX tile row: `amx_panels` pad K to a multiple of it."""

AMX_MIN_ROWS = 1
"""Fewest rows (batch x prompt bucket) for which models run their once-per-request products
on AMX (`amx_applies`: the T5 encoder and cross keys/values, a feature draft's cross
keys/values). Every width pays on this project's CPUs: a batch-1 call with one new token of
the embedded target took 4.5 / 4.9 ms at the 8- and 24-wide buckets on AMX
against 8.3 / 9.3 ms with XLA's dots (frozen weights; 11.5 / 11.8 against 15.0 / 15.8 ms
unfrozen, where the in-loop panel check reads 33 MB more weights). It was 32 until
frozen weights (`tfspec.freeze_weights`) removed that check from the harness's calls."""


def amx_applies(x: tf.Tensor) -> bool:
    """Whether a model's once-per-request products over `x` ([B, S] ids or [B, S, D]
    states) go through its AMX panels: a static B x S of at least `AMX_MIN_ROWS` (1: every
    static shape). Below it the in-loop check of the panels' sources reads only the decode
    step's weights (`PanelCache.current`)."""
    shape = x.shape
    return shape.is_fully_defined() and int(shape[0]) * int(shape[1]) >= AMX_MIN_ROWS


def amx_entry(cache: Optional["PanelCache"], entry: int, x: tf.Tensor
              ) -> Optional[tf.Tensor]:
    """The AMX panels of a readable panel cache's `entry` for a product over `x` (inside
    the program being traced), or None: no cache (`readable_panel_cache`), no such entry,
    an entry without panels, or an `x` for which `amx_applies` says no."""
    if cache is None or len(cache) <= entry or not amx_applies(x):
        return None
    panels = cache.variables([entry])[0]
    return None if panels is None else tf.convert_to_tensor(panels)


def amx_available() -> bool:
    """Whether many-row products may run on AMX here (`amx_matmul`): the kernel is loaded,
    the CPU has AMX-TILE and AMX-BF16, the OS let this process use them, and neither
    `amx(False)` nor `TFSPEC_AMX=0` is in force."""
    return (_amx_allowed and _amx_switch_on() and _load()
            and bool(_library.tfspec_amx_available()))


_AMX_ENV_SWITCH = "TFSPEC_AMX"
_amx_allowed = True


def _amx_switch_on() -> bool:
    return os.environ.get(_AMX_ENV_SWITCH, "").strip().lower() not in ("0", "false", "no",
                                                                        "off")


@contextlib.contextmanager
def amx(value: bool):
    """Within the block, `amx_available()` is False unless `value`: panel caches made
    within it get no AMX entries (`tfspec.models.T5`), and a `refresh` within it packs none
    (process-wide). A model keeps what its cache was made with until the cache is
    refreshed or dropped, so a benchmark can decode one model of each kind in one run;
    `tfspec.generate` does not refresh a model's panels because this changed."""
    global _amx_allowed
    previous, _amx_allowed = _amx_allowed, bool(value)
    try:
        yield
    finally:
        _amx_allowed = previous


def amx_panels(kernel: tf.Tensor) -> tf.Tensor:
    """A bfloat16-exact float32 [K, N] kernel -> bfloat16 [ceil(N / 16), Kp / 2, 16, 2]
    (Kp = K rounded up to `AMX_DEPTH`; zero past K and N): panel p holds columns
    16p .. 16p + 15, the rows of each k pair (2i, 2i + 1) side by side (AMX's layout for
    its second tile operand). The cast is exact only for a `bfloat16_exact` kernel."""
    k_dim, n_dim = kernel.shape
    padded_n = -(-n_dim // PANEL) * PANEL
    padded_k = -(-k_dim // AMX_DEPTH) * AMX_DEPTH
    kernel = tf.pad(tf.cast(kernel, tf.float32), [[0, padded_k - k_dim], [0, padded_n - n_dim]])
    pairs = tf.reshape(kernel, [padded_k // 2, 2, padded_n // PANEL, PANEL])
    return tf.cast(tf.transpose(pairs, [2, 0, 3, 1]), tf.bfloat16)


def amx_matmul(x: tf.Tensor, kernel_panels: tf.Tensor, k_dim: int, n_dim: int,
               lengths: Optional[tf.Tensor] = None) -> tf.Tensor:
    """x float32 [..., K] (static shape) @ the bfloat16-exact [K, n_dim] kernel of
    `kernel_panels` (`amx_panels`) -> float32 [..., n_dim], on AMX.

    Not a bfloat16 approximation: x is split exactly into three bfloat16 parts, each
    product of two bfloat16 values is exact in float32, and only the summation order
    differs from a float32 dot (see rows_matmul.cc). Every output row is the same float32
    additions whatever the other rows, so batch composition never changes a row.

    With `lengths` (int32 [B], x [B, S, K]: left-aligned prompts), the rows past each
    prompt's length come out 0, and are not multiplied where they end a 32-row block in a
    whole 16-row tile or fill it (a 268-token prompt in the 384-wide bucket skips 3.5 of
    its 12 blocks; the embedded pair's bench pool in one batch of 8, 1129 valid rows of
    3072, decoded its 1-token calls in 115 ms against 184).

    Only inside an XLA-compiled function on CPU, with `amx_available()` True.
    """
    leading = x.shape[:-1]
    rows = 1
    for d in leading:
        rows *= d
    flat = tf.reshape(tf.cast(x, tf.float32), [rows, k_dim])
    operands, dims = [flat, kernel_panels], f"{rows},{k_dim},{n_dim}"
    if lengths is not None:
        if len(leading) != 2:
            raise ValueError(f"amx_matmul with lengths needs x [B, S, K], got {x.shape}")
        operands.append(tf.cast(lengths, tf.int32))
        dims += f",{leading[1]}"
    (y,) = _custom_call(operands, AMX_TARGET_NAME, dims, False, [tf.float32], [[rows, n_dim]])
    return tf.reshape(y, list(leading) + [n_dim])


SPLIT_PARTS = 3
"""Parts of `bfloat16_split`: 3 x 8 significant bits hold a float32's 24 exactly."""


def bfloat16_split(kernel: tf.Tensor) -> tf.Tensor:
    """A float32 [K, N] kernel -> float32 [K, 3 N]: its hi | mid | lo bfloat16 parts side by
    side, each `bfloat16_exact`, summing exactly to the kernel.

    Why: AMX multiplies bfloat16 weights, so a float32 kernel that is not a bfloat16 value
    (e.g. a fitted projection) has no panels of its own; the panels of its three parts do,
    and `amx_matmul_split` sums their products (`amx_matmul` splits x the same way).
    Each part is the residual of the parts before it rounded to bfloat16: rounding to
    nearest leaves at most 2^-9 of the magnitude, so the residual after two parts has at
    most 8 significant bits and the third part holds it exactly. (Values below about
    2^-100, whose last part would be a float32 subnormal, lose those bits: TensorFlow
    flushes subnormals to zero on CPU.)
    """
    rest = tf.cast(kernel, tf.float32)
    parts = []
    for _ in range(SPLIT_PARTS):
        part = tf.cast(tf.cast(rest, tf.bfloat16), tf.float32)
        parts.append(part)
        rest = rest - part  # exact: the rounding error of a float32 to fewer bits
    return tf.concat(parts, axis=-1)


def amx_matmul_split(x: tf.Tensor, split_panels: tf.Tensor, k_dim: int, n_dim: int,
                     lengths: Optional[tf.Tensor] = None) -> tf.Tensor:
    """x float32 [..., K] @ a float32 [K, n_dim] kernel given as the `amx_panels` of its
    `bfloat16_split` ([K, 3 n_dim]) -> float32 [..., n_dim], on AMX: one product of the
    three parts side by side, then (hi + mid) + lo. Every term is an exact product of
    bfloat16 parts, so this is the float32 product up to summation order, as
    `amx_matmul` is for a bfloat16-exact kernel. `lengths` as in `amx_matmul`."""
    hi, mid, lo = tf.split(amx_matmul(x, split_panels, k_dim, SPLIT_PARTS * n_dim, lengths),
                           SPLIT_PARTS, axis=-1)
    return (hi + mid) + lo


PROMPT_ATTENTION_TARGET_NAME = "tfspec_prompt_attention_f32"

_prompt_attention_allowed = True


def prompt_attention_allowed() -> bool:
    """False inside `fused_prompt_attention(False)`."""
    return _prompt_attention_allowed


@contextlib.contextmanager
def fused_prompt_attention(value: bool):
    """Within the block, programs traced for the first time run their encoders'
    self-attention through `prompt_attention` only if `value` (process-wide;
    `tfspec.generate` caches its compiled loops per setting, so a benchmark can time both
    in one run on one model)."""
    global _prompt_attention_allowed
    previous, _prompt_attention_allowed = _prompt_attention_allowed, bool(value)
    try:
        yield
    finally:
        _prompt_attention_allowed = previous


def prompt_attention_available() -> bool:
    """Whether encoders' self-attention may run through `prompt_attention` here: the kernel
    is loaded, the CPU has AVX-512, and `fused_prompt_attention(False)` is not in force
    (a program must also be `enabled()` for it)."""
    return (_prompt_attention_allowed and _load()
            and bool(_library.tfspec_prompt_attention_available()))


def prompt_attention(qkv: tf.Tensor, offset_bias: tf.Tensor, lengths: tf.Tensor,
                     num_heads: int, d_kv: int) -> tf.Tensor:
    """An encoder's self-attention over left-aligned prompts, fused per batch row and head
    (`tfspec_prompt_attention_f32` in rows_matmul.cc).

    out[b, i] = softmax_j(q_i . k_j + bias[j - i]) @ v over the row's valid keys
    j < lengths[b], for i < lengths[b]; 0 at padded positions. The [S, S] scores never reach
    memory, and padding costs nothing. float32 attention (exp within 2 ulp), not XLA's
    bit for bit; a row's result depends on its own prompt alone (not on its companions or
    the bucket).

    Args:
      qkv: float32 [B, S, 3 * H * d_kv] (static shape): queries | keys | values, each
        head-major (h * d_kv + d), as one fused projection writes them.
      offset_bias: float32 [H, 2S - 1]: the position bias of key - query offset o at
        o + S - 1.
      lengths: int32 [B] valid positions per row (>= 1).
      num_heads: H.
      d_kv: the width of a head.

    Returns:
      float32 [B, S, H * d_kv], heads merged.

    Only inside an XLA-compiled function on CPU (`enabled()`), with
    `prompt_attention_available()` True.
    """
    batch, width = qkv.shape[0], qkv.shape[1]
    if qkv.shape[2] != 3 * num_heads * d_kv:
        raise ValueError(f"prompt_attention needs qkv [B, S, 3 x {num_heads} x {d_kv}], got "
                         f"{qkv.shape}")
    operands = [tf.cast(qkv, tf.float32), tf.cast(offset_bias, tf.float32),
                tf.cast(lengths, tf.int32)]
    (out,) = _custom_call(operands, PROMPT_ATTENTION_TARGET_NAME,
                          f"{batch},{width},{num_heads},{d_kv}", False, [tf.float32],
                          [[batch, width, num_heads * d_kv]])
    return out


def _custom_call(*args):
    # TensorFlow's XlaCustomCallV2 op (API_VERSION_STATUS_RETURNING_UNIFIED); imported here
    # so that importing tfspec does not load the XLA op wrappers.
    from tensorflow.compiler.tf2xla.ops import gen_xla_ops  # pylint: disable=g-import-not-at-top
    return gen_xla_ops.xla_custom_call_v2(*args)


def fingerprints(tensors: Sequence[tf.Tensor]) -> tf.Tensor:
    """int32 [len(tensors), 2]: a fingerprint of each float32 tensor's bits (inside an XLA
    program, kernel loaded; one custom call for all).

    Two 32-bit sums of per-element bijections of (bits, index): any single changed element
    changes both; several changes cancel in both with probability about 2^-64.
    """
    flats, counts = [], []
    for x in tensors:
        count = 1
        for d in x.shape:
            count *= d
        flats.append(tf.reshape(tf.cast(x, tf.float32), [count]))
        counts.append(str(count))
    (y,) = _custom_call(flats, "tfspec_fingerprint_f32", ",".join(counts), False, [tf.int32],
                        [[len(flats), 2]])
    return y


ROWS = "rows"
"""A `PanelCache` matrix for `matmul` (few-row products: decode steps and verifies)."""
AMX = "amx"
"""A `PanelCache` matrix for `amx_matmul` (many-row products: the encoders)."""


class PanelCache:
    """Panel copies of a model's decode kernels that persist across requests and are
    re-made only when their sources change.

    Re-packing every request costs 25-40 ms for the embedded target here (a transposed
    copy of 45 MB); instead every `refresh` compares a fingerprint of the sources
    (`fingerprints`: one read-only pass, 2 ms for the embedded target's weights from cache
    here, 4-5 ms from DRAM), and so does `current` inside a compiled program, so the
    panels always equal their sources when a decode program's result is used: training or
    re-loading weights between calls never leaves stale panels.

    Args:
      sources: one entry per panel matrix, a callable returning its [K, N] float32 kernel
        from the model's variables (e.g. q | k | v side by side), traced into XLA.
      source_variables: per entry, the variables it reads (fingerprinted).
      kinds: per entry, `ROWS` (few-row panels for `matmul`, the default) or `AMX`
        (`amx_panels` for `amx_matmul`: made only where `amx_available()` and for a
        `bfloat16_exact` source, else that entry has no panels and its product stays
        XLA's).
    """

    def __init__(self, sources: Sequence[Callable[[], tf.Tensor]],
                 source_variables: Sequence[Sequence[tf.Variable]],
                 kinds: Optional[Sequence[str]] = None):
        self._sources = list(sources)
        self._source_variables = [list(v) for v in source_variables]
        self._kinds = list(kinds) if kinds is not None else [ROWS] * len(self._sources)
        if len(self._kinds) != len(self._sources) or set(self._kinds) - {ROWS, AMX}:
            raise ValueError(f"kinds must be {ROWS!r} or {AMX!r}, one per source")
        self._variables: List[Optional[tf.Variable]] = [None] * len(self._sources)
        # Per matrix: half-width (bool) for ROWS panels, AMX or None for AMX ones.
        self._layout: List = [None] * len(self._sources)
        self._exact: List[Optional[tuple]] = [None] * len(self._sources)  # (fingerprint, bool)
        self._by_width: List[dict] = [{} for _ in self._sources]
        self._every = [v for group in self._source_variables for v in group]
        # Entry i's first row in the fingerprints of `_every`.
        self._offsets = [sum(len(g) for g in self._source_variables[:i])
                         for i in range(len(self._source_variables))]
        self._fingerprint_all = tf.function(lambda: fingerprints(self._every),
                                            jit_compile=True, autograph=False)
        # int32 [sources, 2]: the fingerprints the panels were last packed (or checked)
        # against; read by `current` inside compiled programs.
        self._packed_fingerprints: Optional[tf.Variable] = None
        self._ready = False

    def refresh(self) -> int:
        """Re-packs the matrices whose sources changed (eager). Returns how many were.

        A ROWS matrix is packed half-width when `half_width_allowed()` and
        `bfloat16_exact`; an AMX one only when `amx_available()` and `bfloat16_exact`. A
        variable cannot change dtype, so each width has its own panel variable, kept with
        the fingerprint it was packed from, and `layout` says which one `variables`
        returns: a benchmark that switches widths re-packs nothing while the weights stay
        the same, and callers that cache compiled programs key them by `layout`
        (`tfspec.generate` does), because a program reads the variables it was traced with.
        """
        fingerprint = self._fingerprint_all()
        values = [tuple(row) for row in fingerprint.numpy().tolist()]
        repacked, start = 0, 0
        amx_here = amx_available()
        for i, group in enumerate(self._source_variables):
            current = tuple(values[start:start + len(group)])
            start += len(group)
            by_width = self._by_width[i]           # {layout: (variable, fingerprint)}
            amx_kind = self._kinds[i] == AMX
            source = None
            if (amx_kind and not amx_here) or (not amx_kind and not _half_width_allowed):
                exact = False
            elif self._exact[i] is not None and self._exact[i][0] == current:
                exact = self._exact[i][1]          # known for these weights
            else:
                # Eager, and only when a source changed (a tf.function per source would
                # retrace once each, and warn).
                source = self._sources[i]()
                exact = bfloat16_exact(source)
                self._exact[i] = (current, exact)
            layout = (AMX if exact else None) if amx_kind else exact
            if layout is None:                     # an AMX matrix that cannot have panels
                self._variables[i], self._layout[i] = None, None
                continue
            held = by_width.get(layout)
            if held is None or held[1] != current:
                source = self._sources[i]() if source is None else source
                packed = amx_panels(source) if amx_kind else panels(source, half_width=layout)
                if held is None:
                    variable = tf.Variable(packed, trainable=False)
                else:
                    variable = held[0]
                    variable.assign(packed)
                by_width[layout] = (variable, current)
                repacked += 1
            self._variables[i] = by_width[layout][0]
            self._layout[i] = layout
        if self._packed_fingerprints is None:
            self._packed_fingerprints = tf.Variable(fingerprint, trainable=False)
        else:
            self._packed_fingerprints.assign(fingerprint)
        self._ready = True
        return repacked

    def current(self, entries: Optional[Sequence[int]] = None) -> tf.Tensor:
        """bool []: whether the sources of `entries` (default: all) still have the
        fingerprints their panels were packed from, computed inside the XLA program being
        traced (after a `refresh`).

        A compiled decode loop returns this instead of a `refresh` running before every
        call: the check is the same read-only pass over the sources, but it runs inside the
        program (beside the encoders) rather than as a call of its own, and the caller
        re-packs and runs again in the rare call where it is False (`tfspec.generate`).
        It checks only the entries the program read (`recording_panel_reads`).
        """
        entries = range(len(self._sources)) if entries is None else entries
        variables, rows = [], []
        for i in entries:
            group = self._source_variables[i]
            variables.extend(group)
            rows.extend(range(self._offsets[i], self._offsets[i] + len(group)))
        if not variables:
            return tf.constant(True)
        packed = tf.gather(self._packed_fingerprints, rows)
        return tf.reduce_all(tf.equal(fingerprints(variables), packed))

    def matches_sources(self) -> bool:
        """Whether every source still has the fingerprint its panels were packed (or last
        checked) from (eager; after a `refresh`): what `tfspec.unfreeze_weights` asks."""
        if self._packed_fingerprints is None:
            return True
        return bool(tf.reduce_all(tf.equal(self._fingerprint_all(),
                                           self._packed_fingerprints)))

    @property
    def layout(self) -> tuple:
        """Per matrix: for ROWS panels whether they are half-width, for AMX ones `AMX` or
        None (no panels); None everywhere before the first refresh."""
        return tuple(self._layout)

    @property
    def ready(self) -> bool:
        return self._ready

    def variables(self, entries: Optional[Sequence[int]] = None
                  ) -> List[Optional[tf.Variable]]:
        """The panel variables of `entries` (default: all, in the order of `sources`): ROWS
        ones [N / 16, K, 16] (float32, or bfloat16 where half-width), AMX ones
        [N / 16, Kp / 2, 16, 2] bfloat16 or None (see `kinds`). Code being traced within
        `recording_panel_reads` records the entries it took (those with panels)."""
        entries = list(range(len(self._sources)) if entries is None else entries)
        _record_reads(self, [i for i in entries if self._variables[i] is not None])
        return [self._variables[i] for i in entries]

    def __len__(self):
        return len(self._sources)


# {model: PanelCache}: kept outside the model so that Keras does not track the panels as
# weights (they are neither saved nor trained), and freed with the model.
_CACHES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def panel_cache(model, make: Callable[[], PanelCache]) -> PanelCache:
    """The model's `PanelCache`, made by `make()` on first use."""
    cache = _CACHES.get(model)
    if cache is None:
        cache = _CACHES[model] = make()
    return cache


_drops = 0  # how often a cache was dropped: part of `panel_epoch`


def drop_panel_cache(model) -> None:
    """Forgets the model's `PanelCache` (its sources changed, e.g. a draft bound to
    another target); the next `panel_cache` makes a new one."""
    global _drops
    if _CACHES.pop(model, None) is not None:
        _drops += 1


def panel_epoch() -> tuple:
    """What decides which panels a `refresh` would make besides the weights: the kernel and
    half-width switches and the dropped caches (not `amx`: it applies to the caches made
    or refreshed within its block, so that a benchmark can keep a model of each kind). A caller that skips `refresh` because its
    compiled program checks the panels itself (`PanelCache.current`) does so only while
    this is what it was at the last `refresh`."""
    return (_drops, _allowed, _half_width_allowed)


_reads = threading.local()  # .stack: the `PanelReads` of the enclosing recording blocks


class PanelReads:
    """What code traced within a `recording_panel_reads` block read: per `PanelCache`, the
    entries whose panels it took (`PanelCache.variables`)."""

    def __init__(self):
        self._entries = {}  # id(cache) -> (cache, set of entry indices)

    def add(self, cache: "PanelCache", entries=()) -> None:
        self._entries.setdefault(id(cache), (cache, set()))[1].update(entries)

    def checks(self) -> List[tuple]:
        """[(cache, sorted entries)] in the order the caches were first read."""
        return [(cache, sorted(entries)) for cache, entries in self._entries.values()]

    def __len__(self):
        return len(self._entries)


def _record_reads(cache: "PanelCache", entries=()) -> None:
    for reads in getattr(_reads, "stack", ()):
        reads.add(cache, entries)


def readable_panel_cache(model) -> Optional["PanelCache"]:
    """The model's `PanelCache` if a program being traced may read its panels (made and
    `ready`, and `enabled()`), else None. The entries the program then takes
    (`PanelCache.variables`) are recorded by every enclosing `recording_panel_reads`
    block."""
    cache = _CACHES.get(model)
    if cache is None or not cache.ready or not enabled():
        return None
    _record_reads(cache)
    return cache


@contextlib.contextmanager
def recording_panel_reads():
    """Yields a `PanelReads` that collects the panels code traced within the block reads:
    what that program's `PanelCache.current` checks must cover (and no more: a check
    reads every byte of its sources)."""
    stack = getattr(_reads, "stack", None)
    if stack is None:
        stack = _reads.stack = []
    reads = PanelReads()
    stack.append(reads)
    try:
        yield reads
    finally:
        stack.pop()


def existing_panel_cache(model) -> Optional[PanelCache]:
    """The model's `PanelCache` if `panel_cache` made one, else None."""
    return _CACHES.get(model)


def panel_layout(model) -> Optional[tuple]:
    """The `PanelCache.layout` of `model`'s panels, or None without any: programs traced
    with one layout must not run with another."""
    cache = _CACHES.get(model)
    return None if cache is None else cache.layout


def usable_outside_trace() -> bool:
    """Eager counterpart of `enabled`: allowed, CPU devices, kernel loaded."""
    return _allowed and _on_cpu() and _load()
