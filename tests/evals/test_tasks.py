"""Tests for evals.tasks: the table and the common task interface."""

import ast
import inspect
import pathlib

import pytest

from evals import tasks
from tests.evals import fixtures

_TARGET = "The quick brown fox jumps over the dog."
_EXPECTED = {"humaneval", "xsum", "cnn_dailymail", "wmt_ende", "docsum"}


def test_table_has_the_tasks_under_their_names():
    assert set(tasks.TASKS) == _EXPECTED
    for name, task in tasks.TASKS.items():
        assert task.name == name
        assert task.metric_names and task.data_sources
        assert task.default_split


def test_get_task_unknown_lists_known_names():
    with pytest.raises(ValueError) as info:
        tasks.get_task("mmlu")
    for name in _EXPECTED:
        assert name in str(info.value)
    assert tasks.get_task("xsum") is tasks.TASKS["xsum"]


@pytest.mark.parametrize("name", sorted(_EXPECTED))
def test_load_signature(name):
    params = list(inspect.signature(tasks.get_task(name).load).parameters)
    assert params[:4] == ["split", "data_source", "data_path", "limit"]


@pytest.mark.parametrize("name, record, prefix", [
    ("xsum", {"document": "D.", "summary": _TARGET}, "summarize: "),
    ("cnn_dailymail", {"article": "D.", "highlights": _TARGET}, "summarize: "),
    ("wmt_ende", {"en": "D.", "de": _TARGET}, "translate English to German: "),
    ("docsum", {"code": "D.", "summary": _TARGET}, "summarize: "),
])
def test_text_tasks_end_to_end_on_local_files(tmp_path, name, record, prefix):
    task = tasks.get_task(name)
    path = fixtures.write_jsonl(tmp_path / "data.jsonl", [record, record])
    examples = task.load(task.default_split, "local", path, None)
    assert [task.format_prompt(e) for e in examples] == [prefix + "D."] * 2
    assert all(e.prompt == prefix + "D." for e in examples)
    outputs = [task.postprocess(f" {_TARGET} \n", e) for e in examples]
    qualities = task.score_samples(examples, outputs)
    summary = task.aggregate(examples, outputs, qualities)
    assert set(task.metric_names) <= set(summary)
    headline = summary[task.metric_names[0]]
    assert headline == pytest.approx(100.0)
    assert task.score(examples, outputs) == summary


def test_humaneval_task_end_to_end():
    task = tasks.get_task("humaneval")
    assert task.executes_code
    examples = task.load("test", None, None, 2)
    outputs = [task.postprocess(e.reference + "\nprint('x')\n", e) for e in examples]
    summary = task.score(examples, outputs, sample_options={"timeout_s": 20.0})
    assert summary == {"pass@1": 1.0}


def test_no_beam_or_absl_imports():
    """`evals` library modules must not import Beam or absl (those belong to run.py)."""
    package = pathlib.Path(tasks.__file__).parent
    offenders = []
    for path in package.glob("*.py"):
        if path.name in ("run.py",):
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.name}: {n}" for n in names
                          if n.split(".")[0] in ("apache_beam", "absl")]
    assert offenders == []
