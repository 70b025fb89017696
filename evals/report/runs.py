"""Run directories as the report reads them: summary.json, sweep.json, examples.jsonl."""

import dataclasses
import json
import math
import os
from typing import Any, Dict, List, Optional, Sequence

from evals import records


class ReportError(ValueError):
    """A run directory that cannot be read; the message is one line."""


TYPICAL_MARK = "[typical acceptance: NOT distribution-preserving]"
"""Marks the runs whose speculative output does not follow the target's distribution."""


@dataclasses.dataclass
class Run:
    """One loaded run directory.

    Attributes:
      path: the directory.
      name: a short label (the directory's base name, made unique by `load_runs`).
      summary: summary.json.
      sweep: sweep.json entries (ascending K), or None.
      examples: examples.jsonl lines, or None when the file is absent.
    """

    path: str
    name: str
    summary: Dict[str, Any]
    sweep: Optional[List[Dict[str, Any]]] = None
    examples: Optional[List[Dict[str, Any]]] = None

    @property
    def task(self) -> str:
        return str(self.summary.get("task"))

    @property
    def typical_acceptance(self) -> bool:
        """Whether the speculative run verified with typical acceptance (summary.json's
        `acceptance.rule`), whose output does not follow the target's distribution."""
        return (self.summary.get("acceptance") or {}).get("rule") == "typical"

    @property
    def label(self) -> str:
        """`name`, marked beside every number of a typical-acceptance run."""
        return f"{self.name} {TYPICAL_MARK}" if self.typical_acceptance else self.name

    @property
    def sampling(self) -> Dict[str, Any]:
        return dict(self.summary.get("sampling") or {})

    @property
    def temperature(self) -> float:
        return float(self.sampling.get("temperature") or 0.0)

    @property
    def top_p(self) -> float:
        value = self.sampling.get("top_p")
        return 1.0 if value is None else float(value)

    @property
    def top_k(self) -> int:
        return int(self.sampling.get("top_k") or 0)

    def run_entry(self, mode: str) -> Optional[Dict[str, Any]]:
        return (self.summary.get("runs") or {}).get(mode)


def _read_json(path: str, what: str):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise ReportError(f"{path}: not valid JSON ({e.msg} at line {e.lineno}); "
                          f"is the {what} complete?") from None
    except OSError as e:
        raise ReportError(f"{path}: cannot read ({e.strerror})") from None


def load_run(path: str) -> Run:
    """Reads a run directory.

    Raises:
      ReportError: no such directory, no or invalid summary.json / sweep.json.
    """
    if not os.path.isdir(path):
        raise ReportError(f"{path}: no such run directory")
    summary_path = os.path.join(path, "summary.json")
    if not os.path.isfile(summary_path):
        raise ReportError(f"{path}: no summary.json (not a finished evals.run output "
                          f"directory; finish it with --output_dir {path} --resume)")
    summary = _read_json(summary_path, "run")
    if not isinstance(summary, dict) or "runs" not in summary or "task" not in summary:
        raise ReportError(f"{summary_path}: not an evals.run summary (no 'task'/'runs')")
    sweep = None
    sweep_path = os.path.join(path, "sweep.json")
    if os.path.isfile(sweep_path):
        sweep = _read_json(sweep_path, "sweep")
        if not isinstance(sweep, list):
            raise ReportError(f"{sweep_path}: expected a list of per-K entries")
        sweep = sorted(sweep, key=lambda e: records.k_order(records.draft_length(e.get("k", 0))))
    examples = None
    examples_path = os.path.join(path, "examples.jsonl")
    if os.path.isfile(examples_path):
        examples = []
        with open(examples_path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    try:
                        examples.append(json.loads(line))
                    except json.JSONDecodeError:
                        continue  # A line cut by an interrupted run; summary is the truth.
    name = os.path.basename(os.path.normpath(path)) or "run"
    return Run(path=path, name=name, summary=summary, sweep=sweep, examples=examples)


def load_runs(paths: Sequence[str]) -> List[Run]:
    """Loads several run directories, giving them unique names."""
    runs, seen = [], {}
    for path in paths:
        run = load_run(path)
        count = seen.get(run.name, 0)
        seen[run.name] = count + 1
        if count:
            run.name = f"{run.name}-{count + 1}"
        runs.append(run)
    return runs


def number(value) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None
