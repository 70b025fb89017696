"""A warning before a run that compiles many XLA programs under a low vm.max_map_count.

LLVM's JIT keeps memory maps for every program a process has compiled (XLA:CPU does not
return them when a program is dropped), and past Linux's vm.max_map_count (default 65530) it
stops the process: "LLVM ERROR: Unable to allocate section memory", or "LLVM compilation
error: Cannot allocate memory" and a segmentation fault. `evals.run` and the benchmarks that
compile a program per mode and prompt bucket print `memory_map_note` first.

This module imports neither TensorFlow nor Beam.
"""

from typing import Optional

MAX_MAP_COUNT_PATH = "/proc/sys/vm/max_map_count"
SAFE_MAX_MAP_COUNT = 262144
MANY_PROGRAMS = 100
"""Decoding programs above which LLVM's JIT may run out of memory maps at Linux's default
vm.max_map_count (65530): the sampled docsum K sweep (10 modes x 12 buckets) stopped at 45 of
60 examples, twice; `python -m bench.speedup --k 1,2,3,4,5,6,7,8,auto --temperature 0,1
--fixed_costs true` (~160 programs) with a segmentation fault."""


def max_map_count(path: Optional[str] = None) -> Optional[int]:
    """This machine's vm.max_map_count (from `path`, None: MAX_MAP_COUNT_PATH), or None if
    it cannot be read."""
    try:
        with open(path or MAX_MAP_COUNT_PATH, encoding="ascii") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def memory_map_note(num_programs: int, path: Optional[str] = None,
                    what: str = "decoding programs",
                    after_stop: str = "") -> Optional[str]:
    """One line for a run that compiles MANY_PROGRAMS or more decoding programs on a machine
    whose vm.max_map_count is below SAFE_MAX_MAP_COUNT; None otherwise (or if unreadable).

    Args:
      num_programs: how many programs the run compiles (an estimate).
      path: the limit's file (None: MAX_MAP_COUNT_PATH).
      what: what the programs are, after "this run compiles ~N".
      after_stop: text after "LLVM can run out of memory maps and stop it", e.g. how to
        continue a stopped run.
    """
    if num_programs < MANY_PROGRAMS:
        return None
    limit = max_map_count(path)
    if limit is None or limit >= SAFE_MAX_MAP_COUNT:
        return None
    return (f"this run compiles ~{num_programs} {what}; with vm.max_map_count {limit} LLVM "
            f"can run out of memory maps and stop it{after_stop}; as root, sysctl -w "
            f"vm.max_map_count={SAFE_MAX_MAP_COUNT} avoids that")
