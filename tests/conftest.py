"""Test-wide setup: quiet TensorFlow, two logical CPU devices, and the strategy matrix.

`--strategy default|mirrored|tpu:NAME` picks the `tf.distribute` strategy of every test that
takes the `strategy` fixture (the decoding, exactness and T5 parity tests): models with
variables are created in `strategy.scope()` and `tfspec.generate` gets `strategy=`.
`mirrored` is `MirroredStrategy` over the two logical CPU devices set up below; `tpu:NAME`
is `tfspec.distribute.resolve_strategy(NAME)` (`tpu:local` on a Cloud TPU VM). Tests marked
`strategies` run under both default and mirrored in a default run, so the plain
`python -m pytest` (what CI runs) covers the mirrored matrix on a small set of tests.
"""

import ctypes
import ctypes.util
import dataclasses
import gc
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import pytest  # noqa: E402
import tfspec  # noqa: E402,F401  First: keeps TensorFlow's native start-up logs quiet.
import tensorflow as tf  # noqa: E402  (environment must be set first)

# Logical devices can only be configured before the runtime initialises, so this runs at
# collection time, once per test process.
_cpus = tf.config.list_physical_devices("CPU")
try:
    tf.config.set_logical_device_configuration(
        _cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)
except RuntimeError:  # Runtime already initialised by an earlier import: keep what exists.
    pass

DEFAULT, MIRRORED, TPU_PREFIX = "default", "mirrored", "tpu:"
_STRATEGIES = {}


def pytest_addoption(parser):
    parser.addoption("--strategy", action="store", default=DEFAULT,
                     help="tf.distribute strategy of the decoding, exactness and T5 parity "
                          "tests: default, mirrored (two logical CPU devices) or tpu:NAME "
                          "(tpu:local on a Cloud TPU VM).")


def pytest_configure(config):
    name = config.getoption("strategy")
    if name not in (DEFAULT, MIRRORED) and not (name.startswith(TPU_PREFIX)
                                                and len(name) > len(TPU_PREFIX)):
        raise pytest.UsageError(f"--strategy must be default, mirrored or tpu:NAME, got "
                                f"{name!r}")
    config.addinivalue_line("markers", "slow: long-running test (CI runs it; deselect locally with -m 'not slow')")
    config.addinivalue_line(
        "markers", "strategies: with the default --strategy, run under both the default "
                   "and the mirrored strategy (the CI part of the strategy matrix)")
    config.addinivalue_line(
        "markers", "xla_loops: in the harness test directories, decode with XLA programs as "
                   "asked (see the `_graph_loops` fixture)")
    config.addinivalue_line(
        "markers", "auto_default: k=\"auto\" keeps its shipped schedule in this test (see "
                   "the `_auto_in_one_window` fixture)")


@pytest.fixture(autouse=True)
def _auto_in_one_window(request, monkeypatch):
    """`k="auto"` (the string) runs Hugging Face's schedule in tests, one compiled window,
    except in tests marked `auto_default`.

    Why: TensorFlow never frees a compiled XLA program (its device compilation cache has no
    eviction), so each test worker keeps every program it compiled, and memory bounds the
    suite (it peaked at 23.1 GB used of 24.1 on 2026-12-06; see `_graph_loops`). The
    shipped default (the formula's schedule, `AutoDraft.draft_cost` 0.5) compiles one
    program per window, 1..k_max, per model and prompt bucket: +0.6 GB over the files that
    use `k="auto"`.
    Tests of the schedules pass an explicit `AutoDraft` (both schedules are covered by the
    exactness and adaptive tests); those that use "auto" for the plumbing (records,
    summaries, reports, the CLI) do not need four programs each.
    """
    if request.node.get_closest_marker("auto_default"):
        return
    from tfspec import adaptive  # pylint: disable=import-outside-toplevel
    resolve = adaptive.resolve

    def one_window(k):
        auto = resolve(k)
        if isinstance(k, str) and auto is not None:
            return dataclasses.replace(auto, draft_cost=None)
        return auto

    monkeypatch.setattr(adaptive, "resolve", one_window)


# Test directories whose decoding runs as tf.function graphs instead of XLA programs (see
# `_graph_loops`); tests/tfspec, which tests the compiled loop itself, is not among them.
_GRAPH_LOOP_DIRS = ("bench", "evals", "pipelines", "recipes")
_TESTS_DIR = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(autouse=True)
def _graph_loops(request, monkeypatch):
    """In the harness tests (`_GRAPH_LOOP_DIRS`), `tfspec.generate`'s decode loop runs as a
    `tf.function` graph (`jit_compile=False`) where the caller asked for an XLA program,
    except in tests marked `xla_loops`.

    Why: TensorFlow never frees a compiled XLA program (its device compilation cache has no
    eviction), and XLA:CPU keeps ~0.2-0.3 MB of heap per kernel of a program (measured
    2026-12-07: a jit function of 80 small fusions leaves 25 MB, one of 20 leaves 6 MB), so
    each decode loop of a tiny test pair stays in its worker at ~50 MB. The suite's two
    workers outgrew this machine's 24 GiB (CI stop 56 timed out thrashing at 94%). The
    graph runs the same ops and the same loop code (panel checks included), so the
    harness tests (records, pipelines, reports, benchmark plumbing, recipes) test what
    they test; the XLA programs are tested in tests/tfspec (exactness, greedy identity,
    the loop's HLO, kernels) and by the benchmarks themselves. Tests of what only the
    compiled program does (its numerics across shapes, its compilation) are marked
    `xla_loops`.
    """
    rel = os.path.relpath(str(request.node.path), _TESTS_DIR)
    if (rel.split(os.sep)[0] not in _GRAPH_LOOP_DIRS
            or request.node.get_closest_marker("xla_loops")):
        return
    from tfspec import generation  # pylint: disable=import-outside-toplevel
    loop_fn = generation._loop_fn  # pylint: disable=protected-access

    def graph_loop_fn(target, draft, config, jit_compile, *args, **kwargs):
        return loop_fn(target, draft, config, False if jit_compile else jit_compile,
                       *args, **kwargs)

    monkeypatch.setattr(generation, "_loop_fn", graph_loop_fn)


def _libc_malloc_trim():
    """glibc's malloc_trim, or None (another C library or OS)."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


_MALLOC_TRIM = _libc_malloc_trim()


@pytest.fixture(autouse=True, scope="module")
def _return_freed_memory(request):
    """After each test module: collect garbage and hand glibc's free heap pages back to the
    OS (malloc_trim).

    Why: memory bounds the suite (TensorFlow keeps every compiled program, see
    `_graph_loops`), and XLA's compiler frees
    most of what it allocates into glibc's per-thread arenas, which keep it. Measured on a
    loop that makes a tiny pair and compiles 4 loops per iteration: 170 MB less resident
    memory with the trim (312 against 485 MB after the first iteration), the same growth
    per iteration after it.
    """
    before = _resident_mb()
    yield
    gc.collect()
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)
    log = os.environ.get("TFSPEC_TEST_MEMORY_LOG")
    if log:  # One line per module: worker, resident MB before and after, the module.
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}\t{before:.0f}\t"
                    f"{_resident_mb():.0f}\t{request.node.nodeid}\n")


def _resident_mb() -> float:
    """This process's resident memory in MB (Linux; 0 elsewhere)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6
    except (OSError, ValueError, IndexError):
        return 0.0


def pytest_report_header(config):
    """A line when Linux's vm.max_map_count is below what the suite needs: each worker
    compiles hundreds of XLA programs, and LLVM's JIT aborts the worker when it runs out of
    memory maps (`.ci/run` raises the limit where it may)."""
    del config
    from evals import memory_maps  # pylint: disable=import-outside-toplevel
    limit = memory_maps.max_map_count()
    if limit is None or limit >= memory_maps.SAFE_MAX_MAP_COUNT:
        return None
    return (f"vm.max_map_count is {limit}: a test worker may abort when LLVM runs out of "
            f"memory maps; as root, sysctl -w vm.max_map_count={memory_maps.SAFE_MAX_MAP_COUNT}")


def pytest_generate_tests(metafunc):
    if "strategy" not in metafunc.fixturenames:
        return
    name = metafunc.config.getoption("strategy")
    names = [name]
    if name == DEFAULT and metafunc.definition.get_closest_marker("strategies"):
        names = [DEFAULT, MIRRORED]
    metafunc.parametrize("strategy", names, indirect=True, scope="module")


def _make_strategy(name: str) -> tf.distribute.Strategy:
    if name == DEFAULT:
        return tf.distribute.get_strategy()
    if name == MIRRORED:
        cpus = tf.config.list_logical_devices("CPU")
        assert len(cpus) >= 2, "tests/conftest.py configures two logical CPU devices"
        return tf.distribute.MirroredStrategy([d.name for d in cpus[:2]])
    from tfspec import distribute  # pylint: disable=import-outside-toplevel
    return distribute.resolve_strategy(name[len(TPU_PREFIX):])


@pytest.fixture(scope="module")
def strategy(request):
    """The `tf.distribute.Strategy` of this test (see the module docstring).

    The default strategy has one replica, so `generate(strategy=...)` then takes the plain
    single-device path.
    """
    name = request.param
    if name not in _STRATEGIES:
        _STRATEGIES[name] = _make_strategy(name)
    return _STRATEGIES[name]
