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
        return f"rows_matmul kernel: on ({_library._name}, {current_instruction_set()})"
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


class PanelCache:
    """Panel copies of a model's decode kernels that persist across requests and are
    re-made only when their sources change.

    Re-packing every request costs 25-40 ms for the embedded target here (a transposed
    copy of 45 MB); instead every `refresh` compares a fingerprint of the sources
    (`fingerprints`: one read-only pass, ~1-2 ms for the embedded target here), and so does
    `current` inside a compiled program, so the panels always equal their sources when a
    decode program's result is used: training or re-loading weights between calls never
    leaves stale panels.

    Args:
      sources: one entry per panel matrix, a callable returning its [K, N] float32 kernel
        from the model's variables (e.g. q | k | v side by side), traced into XLA.
      source_variables: per entry, the variables it reads (fingerprinted).
    """

    def __init__(self, sources: Sequence[Callable[[], tf.Tensor]],
                 source_variables: Sequence[Sequence[tf.Variable]]):
        self._sources = list(sources)
        self._source_variables = [list(v) for v in source_variables]
        self._variables: List[Optional[tf.Variable]] = [None] * len(self._sources)
        self._half_width: List[Optional[bool]] = [None] * len(self._sources)
        self._exact: List[Optional[tuple]] = [None] * len(self._sources)  # (fingerprint, bool)
        self._by_width: List[dict] = [{} for _ in self._sources]
        self._every = [v for group in self._source_variables for v in group]
        self._fingerprint_all = tf.function(lambda: fingerprints(self._every),
                                            jit_compile=True, autograph=False)
        # int32 [sources, 2]: the fingerprints the panels were last packed (or checked)
        # against; read by `current` inside compiled programs.
        self._packed_fingerprints: Optional[tf.Variable] = None

    def refresh(self) -> int:
        """Re-packs the matrices whose sources changed (eager). Returns how many were.

        A matrix is packed half-width when `half_width_allowed()` and `bfloat16_exact`. A
        variable cannot change dtype, so each width has its own panel variable, kept with
        the fingerprint it was packed from, and `layout` says which one `variables`
        returns: a benchmark that switches widths re-packs nothing while the weights stay
        the same, and callers that cache compiled programs key them by `layout`
        (`tfspec.generate` does), because a program reads the variables it was traced with.
        """
        fingerprint = self._fingerprint_all()
        values = [tuple(row) for row in fingerprint.numpy().tolist()]
        repacked, start = 0, 0
        for i, group in enumerate(self._source_variables):
            current = tuple(values[start:start + len(group)])
            start += len(group)
            by_width = self._by_width[i]           # {half_width: (variable, fingerprint)}
            source = None
            if not _half_width_allowed:
                half = False
            elif self._exact[i] is not None and self._exact[i][0] == current:
                half = self._exact[i][1]           # known for these weights
            else:
                # Eager, and only when a source changed (a tf.function per source would
                # retrace once each, and warn).
                source = self._sources[i]()
                half = bfloat16_exact(source)
                self._exact[i] = (current, half)
            held = by_width.get(half)
            if held is None or held[1] != current:
                source = self._sources[i]() if source is None else source
                packed = panels(source, half_width=half)
                if held is None:
                    variable = tf.Variable(packed, trainable=False)
                else:
                    variable = held[0]
                    variable.assign(packed)
                by_width[half] = (variable, current)
                repacked += 1
            self._variables[i] = by_width[half][0]
            self._half_width[i] = half
        if self._packed_fingerprints is None:
            self._packed_fingerprints = tf.Variable(fingerprint, trainable=False)
        else:
            self._packed_fingerprints.assign(fingerprint)
        return repacked

    def current(self) -> tf.Tensor:
        """bool []: whether the sources still have the fingerprints the panels were packed
        from, computed inside the XLA program being traced (after a `refresh`).

        A compiled decode loop returns this instead of a `refresh` running before every
        call: the check is the same read-only pass over the sources, but it runs inside the
        program (beside the encoders) rather than as a call of its own, and the caller
        re-packs and runs again in the rare call where it is False (`tfspec.generate`).
        """
        return tf.reduce_all(tf.equal(fingerprints(self._every), self._packed_fingerprints))

    @property
    def layout(self) -> tuple:
        """Per matrix, whether its panels are half-width (None before the first refresh)."""
        return tuple(self._half_width)

    @property
    def ready(self) -> bool:
        return all(v is not None for v in self._variables)

    def variables(self) -> List[tf.Variable]:
        """The panel variables, [N / 16, K, 16] each (float32, or bfloat16 where half-width),
        in the order of `sources`."""
        return list(self._variables)


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
    half-width switches and the dropped caches. A caller that skips `refresh` because its
    compiled program checks the panels itself (`PanelCache.current`) does so only while
    this is what it was at the last `refresh`."""
    return (_drops, _allowed, _half_width_allowed)


_reads = threading.local()  # .stack: lists collecting the caches traced code reads


def readable_panel_cache(model) -> Optional["PanelCache"]:
    """The model's `PanelCache` if a program being traced may read its panels (made and
    `ready`, and `enabled()`), else None; recorded by every enclosing
    `recording_panel_reads` block."""
    cache = _CACHES.get(model)
    if cache is None or not cache.ready or not enabled():
        return None
    for caches in getattr(_reads, "stack", ()):
        if all(c is not cache for c in caches):
            caches.append(cache)
    return cache


@contextlib.contextmanager
def recording_panel_reads():
    """Yields a list that collects every `PanelCache` whose panels code traced within the
    block reads (through `readable_panel_cache`), once each: what that program's
    `PanelCache.current` checks must cover."""
    stack = getattr(_reads, "stack", None)
    if stack is None:
        stack = _reads.stack = []
    caches: List["PanelCache"] = []
    stack.append(caches)
    try:
        yield caches
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
