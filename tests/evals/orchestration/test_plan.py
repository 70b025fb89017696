"""Tests for evals.orchestration.plan: which records a (resumed) run still has to produce."""

import json

import pytest

from evals import records
from evals.orchestration import plan as run_plan
from evals.example import Example
from evals.orchestration.spec import UsageError
from evals.orchestration.spec import build_run_spec

EXAMPLES = [Example(id=f"e{i}", source="s", prompt=f"p{i}", reference="r") for i in range(3)]


def _line(i, sample, mode):
    return {"id": f"e{i}", "sample": sample, "mode": mode}


def test_fresh_plan_has_every_key_and_one_calibration():
    spec = build_run_spec({"task": "humaneval", "k": 2, "num_samples": 2})
    plan = run_plan.make_plan(spec, EXAMPLES)
    generate = [w for w in plan.work if w.kind == records.GENERATE]
    assert [(w.id, w.sample, w.modes) for w in generate] == [
        (f"e{i}", s, None) for i in range(3) for s in range(2)]
    (calibration,) = [w for w in plan.work if w.kind == records.CALIBRATE]
    assert calibration.id == "e0"
    assert plan.total_records == plan.pending_records == 12 and plan.resumed == []
    nocal = build_run_spec({"task": "humaneval", "k": 2, "calibrate": False})
    assert all(w.kind == records.GENERATE for w in run_plan.make_plan(nocal, EXAMPLES).work)


def test_resumed_plan_asks_only_for_missing_modes():
    spec = build_run_spec({"task": "humaneval", "k": 2, "calibrate": False})
    finished = [_line(0, 0, "autoregressive"), _line(0, 0, "speculative"),
                _line(1, 0, "speculative"),
                _line(7, 0, "speculative"),        # Not an example of this run.
                _line(2, 0, "speculative_k5")]     # Not a mode of this run.
    plan = run_plan.make_plan(spec, EXAMPLES, finished)
    assert [(w.id, w.modes) for w in plan.work] == [("e1", (("autoregressive", 0),)),
                                                    ("e2", None)]
    assert sorted(records.key_of(row) for row in plan.resumed) == [
        ("e0", 0, "autoregressive"), ("e0", 0, "speculative"), ("e1", 0, "speculative")]
    assert plan.total_records == 6 and plan.pending_records == 3


def test_load_examples_errors():
    with pytest.raises(UsageError, match="no file matches --data_path"):
        run_plan.load_examples(build_run_spec({"task": "xsum", "data_source": "local",
                                               "data_path": "/nonexistent/x.jsonl"}))


def test_load_examples_rejects_duplicate_ids(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"id": "a", "document": "d", "summary": "s"}) + "\n"
                            for _ in range(2)))
    with pytest.raises(UsageError, match="example id 'a' occurs 2 times"):
        run_plan.load_examples(build_run_spec({"task": "xsum", "data_source": "local",
                                               "data_path": str(path)}))


def _completions(tmp_path, rows):
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps({"task_id": t, "completion": c}) + "\n" for t, c in rows))
    return str(path)


def test_completions_numbered_per_task_and_planned(tmp_path):
    path = _completions(tmp_path, [("e0", "a"), ("e1", "b"), ("e0", "c")])
    spec = build_run_spec({"task": "humaneval", "completions": path})
    triples = run_plan.load_completions(spec, EXAMPLES)
    assert [(e.id, s, c) for e, s, c in triples] == [("e0", 0, "a"), ("e1", 0, "b"),
                                                    ("e0", 1, "c")]
    plan = run_plan.make_plan(spec, EXAMPLES, [_line(1, 0, "completions")], triples)
    assert [(w.id, w.sample, text) for w, text in plan.completions] == [("e0", 0, "a"),
                                                                         ("e0", 1, "c")]
    assert plan.work == [] and plan.num_samples == 2 and len(plan.resumed) == 1


@pytest.mark.parametrize("rows, extra, message", [
    ([("zz", "a")], {}, "task_id 'zz', which is not a humaneval problem"),
    ([("e0", "a")], {"pass_at": "2"}, "pass@2 needs at least 2 completions"),
])
def test_completions_errors(tmp_path, rows, extra, message):
    spec = build_run_spec({"task": "humaneval", "completions": _completions(tmp_path, rows),
                           **extra})
    with pytest.raises(UsageError, match=message):
        run_plan.load_completions(spec, EXAMPLES)


def test_missing_completions_file():
    spec = build_run_spec({"task": "humaneval", "completions": "/nonexistent.jsonl"})
    with pytest.raises(UsageError, match="does not exist"):
        run_plan.load_completions(spec, EXAMPLES)
