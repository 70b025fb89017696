"""Tests of recipes.tiny_code.decontamination: the HumanEval data and the matcher rules
(the exclusion inside a built corpus is tested in test_corpus.py)."""

import os

from recipes.tiny_code import decontamination


def _humaneval_problem(task_id="HumanEval/0"):
    problems = {p["task_id"]: p for p in decontamination.read_humaneval()}
    return problems[task_id]


def test_humaneval_data_is_shipped_offline():
    path = decontamination.humaneval_path()
    assert os.path.isfile(path) and path.endswith("HumanEval.jsonl.gz")
    problems = decontamination.read_humaneval()
    assert len(problems) == 164
    assert {"prompt", "entry_point", "canonical_solution"} <= set(problems[0])


def test_matcher_rules():
    matcher = decontamination.HumanEvalMatcher(decontamination.read_humaneval(), shingle_size=10)
    p = _humaneval_problem("HumanEval/12")
    assert matcher.match(p["entry_point"], "")["rule"] == "entry_point"
    assert matcher.match("other", p["canonical_solution"])["rule"] == "shingle"
    assert matcher.match("other", "def g(a):\n    return sorted(set(a), key=str)[::-1]\n") is None
