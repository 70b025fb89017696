"""Measures host memory around hostile sandbox checks (the figures in WORKSPACE.md).

    PYTHONPATH=. python tests/evals/measure_sandbox_memory.py [--layers LAYERS]

For each attack (four processes of 400 MiB anonymous memory, a 1.5 GiB memfd, a 1.5 GiB
tmpfs in a nested user namespace) it samples MemAvailable from /proc/meminfo every 10 ms
and prints it before the check, its lowest value during the check, and after it, the
largest growth of Shmem (memfd and tmpfs pages; less disturbed by other load), the
verdict and the check cgroup's peak. LAYERS takes one layer away to show what the other
one bounds alone: `all` (default), `cgroup` (the syscall filter is switched off in a copy
of the child), `filter` (no cgroup), `none` (neither: the attacks as they were).
Needs root. Other load on the machine shows in the figures; run it on a quiet one.
"""

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from evals import sandbox  # pylint: disable=wrong-import-position
import test_sandbox_bounds as attacks  # pylint: disable=wrong-import-position

_MIB = 1 << 20
_ATTACKS = [("anonymous 4 x 400 MiB", attacks._ANONYMOUS, 4, 400),  # pylint: disable=protected-access
            ("memfd 1.5 GiB", attacks._MEMFD, 1, 1536),  # pylint: disable=protected-access
            ("nested-userns tmpfs 1.5 GiB", attacks._NESTED_USERNS_TMPFS, 1, 1536)]  # pylint: disable=protected-access


def _meminfo():
    """(MemAvailable, Shmem) in bytes."""
    values = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, _, rest = line.partition(":")
            values[key] = int(rest.split()[0]) * 1024
    return values["MemAvailable"], values["Shmem"]


def _measure(completion, n, mib):
    before, shmem_before = _meminfo()
    lowest = [before]
    shmem_peak = [shmem_before]
    done = threading.Event()

    def sample():
        while not done.is_set():
            available, shmem = _meminfo()
            lowest[0] = min(lowest[0], available)
            shmem_peak[0] = max(shmem_peak[0], shmem)
            time.sleep(0.01)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        result = attacks._check(  # pylint: disable=protected-access
            completion, f"def check(candidate):\n    held = candidate({n}, {mib})\n"
                        f"    assert held == {n * mib}, held\n",
            sandbox.Limits(timeout_s=40.0, file_size_bytes=4 << 30))
    finally:
        done.set()
        sampler.join()
    time.sleep(0.5)
    return before, lowest[0], _meminfo()[0], shmem_peak[0] - shmem_before, result


def _child_without_filter(folder):
    """A copy of the child whose syscall filter refuses to install."""
    source = os.path.dirname(sandbox._CHILD_SCRIPT)  # pylint: disable=protected-access
    target = os.path.join(folder, "_sandbox_child")
    shutil.copytree(source, target)
    with open(os.path.join(target, "seccomp.py"), "a") as f:
        f.write("\n\ndef install():\n    raise OSError(38, 'switched off for a measurement')\n")
    return os.path.join(target, "__main__.py")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", choices=["all", "cgroup", "filter", "none"], default="all")
    args = parser.parse_args()
    if args.layers in ("filter", "none"):
        os.environ["TFSPEC_SANDBOX_CGROUP"] = "/nonexistent"
    with tempfile.TemporaryDirectory() as folder:
        if args.layers in ("cgroup", "none"):
            os.chmod(folder, 0o755)
            sandbox._CHILD_SCRIPT = _child_without_filter(folder)  # pylint: disable=protected-access
        for name, completion, n, mib in _ATTACKS:
            before, lowest, after, shmem, result = _measure(completion, n, mib)
            print(f"{args.layers:6s} | {name:28s} | MemAvailable before {before / _MIB:8.0f} MiB,"
                  f" lowest {lowest / _MIB:8.0f} (-{(before - lowest) / _MIB:5.0f}), after"
                  f" {after / _MIB:8.0f} MiB | Shmem +{shmem / _MIB:5.0f} MiB | cgroup peak "
                  f"{(result.isolation.get('cgroup_peak_bytes') or 0) / _MIB:5.0f} MiB | "
                  f"{result.result[:60]}", flush=True)


if __name__ == "__main__":
    main()
