"""Shared helpers of the benchmarks: timed generate calls, tables, JSON output."""

import json
import os
import time
from typing import Callable, List, Sequence

import numpy as np


def best_time(fn: Callable[[], object], repeats: int) -> tuple:
    """Runs `fn` once to warm up (compile), then `repeats` times.

    Returns:
      (median seconds over the timed runs, the last result).
    """
    result = fn()  # Warm-up: compiles the XLA program; never counted.
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times)), result


def interleaved_times(fns: Sequence[Callable[[], object]], repeats: int) -> List[float]:
    """Median time of each fn, measured in alternation so machine noise hits all alike."""
    return interleaved_runs(fns, repeats)[0]


def interleaved_runs(fns: Sequence[Callable[[], object]], repeats: int) -> tuple:
    """Like `interleaved_times`, also returning each fn's last result.

    Every fn is called once first (warm-up: XLA compilation, never counted), then the fns are
    called in turn `repeats` times (round-robin, the order reversed every other repeat so no fn
    always runs right after the same one), so a slow spell of a shared machine is spread over
    all of them instead of biasing one.

    Returns:
      (list of median seconds, list of last results), both in the order of `fns`.
    """
    results = [fn() for fn in fns]
    samples = [[] for _ in fns]
    for repeat in range(max(1, repeats)):
        order = range(len(fns)) if repeat % 2 == 0 else reversed(range(len(fns)))
        for i in order:
            start = time.perf_counter()
            results[i] = fns[i]()
            samples[i].append(time.perf_counter() - start)
    return [float(np.median(s)) for s in samples], results


def print_table(rows: List[dict], columns: Sequence[str]) -> None:
    widths = [max([len(c)] + [len(_fmt(r.get(c))) for r in rows]) for c in columns]
    print("  ".join(c.rjust(w) for c, w in zip(columns, widths)))
    for row in rows:
        print("  ".join(_fmt(row.get(c)).rjust(w) for c, w in zip(columns, widths)))


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def write_json(path: str, payload: dict) -> None:
    if not path:
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(payload, f, indent=2)
    print(f"wrote {path}")
