"""The whole evaluation pipeline (DirectRunner, in process) on a tiny random T5 pair."""

import dataclasses
import json
import os

import pytest

from evals import humaneval
from evals import latency
from evals import records
from evals import summary as summary_lib
from evals import tasks
from evals.orchestration.spec import build_run_spec
from pipelines import generation
from pipelines import journal as journal_lib
from pipelines import outputs
from evals.orchestration import runner
from tests.pipelines import tiny_models

MAX_NEW = 8


def _spec(pair, output_dir, **overrides):
    values = dict(task="humaneval", k=3, target=pair["target"], draft=pair["draft"],
                  limit=2, max_new_tokens=MAX_NEW, output_dir=str(output_dir),
                  calibrate=False)
    values.update(overrides)
    return build_run_spec(values)


def _lines(output_dir):
    return tiny_models.read_lines(os.path.join(output_dir, outputs.EXAMPLES))


def _keys(lines):
    return [records.key_of(row) for row in lines]


@pytest.fixture
def generated(monkeypatch):
    """Records every (id, sample, mode) the generator produces in this process."""
    keys = []
    original = generation.Generator._generate

    def recording(self, rows, mode, k, args):
        out = original(self, rows, mode, k, args)
        keys.extend((r["id"], r["sample"], r["mode"]) for r in out)
        return out

    monkeypatch.setattr(generation.Generator, "_generate", recording)
    return keys


def test_humaneval_run_writes_the_contract_files(pair, tmp_path):
    out = tmp_path / "run"
    output_dir, summary = runner.run(
        _spec(pair, out, calibrate=True, k_sweep="0,3"), progress=False)
    assert output_dir == str(out)
    assert sorted(os.listdir(out)) == sorted([outputs.SUMMARY, outputs.EXAMPLES, outputs.SWEEP,
                                              outputs.DEAD_LETTER, outputs.RUN_CONFIG])
    assert summary == outputs.read_json(str(out / outputs.SUMMARY))

    # summary.json, docs/design.md section 6.
    assert list(summary)[:len(summary_lib.HEADER_KEYS)] == list(summary_lib.HEADER_KEYS)
    assert {"runs", "speedup"} <= set(summary)
    assert summary["task"] == "humaneval" and summary["k"] == 3
    assert summary["num_examples"] == 2 and summary["num_samples"] == 1
    assert summary["sampling"] == {"temperature": 0.0, "top_k": 0, "top_p": 1.0}
    assert summary["versions"]["tensorflow"] and summary["versions"]["apache-beam"]
    assert summary["started_at"] <= summary["finished_at"]
    runs = summary["runs"]
    assert set(runs) == {"speculative", "autoregressive"}
    assert set(runs["autoregressive"]) == {"quality", "latency"}
    assert set(runs["speculative"]) == {"quality", "latency", "acceptance",
                                        "draft_cost_ratio", "predicted_speedup",
                                        "calibrated_speedup"}
    for run in runs.values():
        assert run["quality"] == {"pass@1": 0.0}  # Random weights pass nothing.
        assert tuple(run["latency"]) == latency.KEYS
        assert run["latency"]["num_tokens"] > 0 and run["latency"]["ms_per_token"] > 0
    acceptance = runs["speculative"]["acceptance"]
    assert set(acceptance) == {"acceptance_rate", "beta_mean", "mean_tokens_per_round",
                               "per_position"}
    assert len(acceptance["per_position"]) == 3
    assert summary["speedup"] == pytest.approx(runs["autoregressive"]["latency"]["ms_per_token"]
                                               / runs["speculative"]["latency"]["ms_per_token"])
    calibration = summary["calibration"]
    assert calibration["target_step_s"] is not None
    if runs["speculative"]["draft_cost_ratio"] is not None:
        assert runs["speculative"]["predicted_speedup"] > 0
    assert summary["num_failed"] == 0

    # examples.jsonl: one line per (example, sample, mode), contract fields first.
    lines = _lines(out)
    assert sorted(_keys(lines)) == [(f"HumanEval/{i}", 0, m) for i in range(2)
                                    for m in ("autoregressive", "speculative")]
    for line in lines:
        assert tuple(line)[:len(records.CONTRACT_FIELDS)] == records.CONTRACT_FIELDS
        assert set(line["quality"]) == {"passed", "result"}
        assert line["quality"]["passed"] is False
        assert line["output"] == humaneval.truncate_completion(line["output"])
    by_key = {(row["id"], row["mode"]): row["output"] for row in lines}
    for i in range(2):  # Greedy speculative decoding is exact.
        assert by_key[(f"HumanEval/{i}", "speculative")] == \
            by_key[(f"HumanEval/{i}", "autoregressive")]

    # sweep.json: one entry per K of the sweep, in the form of summary's runs.
    sweep = outputs.read_json(str(out / outputs.SWEEP))
    assert [e["k"] for e in sweep] == [0, 3]
    assert sweep[1]["acceptance"] == acceptance
    assert sweep[1]["speedup"] == pytest.approx(summary["speedup"])
    assert "acceptance" not in sweep[0]
    assert (out / outputs.DEAD_LETTER).read_text() == ""


def test_failed_example_goes_to_dead_letters_then_resume_finishes(pair, tmp_path, generated,
                                                                  monkeypatch):
    out = tmp_path / "run"
    recording = generation.Generator._generate

    def failing(self, rows, mode, k, args):
        if any(r.id == "HumanEval/1" for r in rows):
            raise RuntimeError("injected failure\nsecond line")
        return recording(self, rows, mode, k, args)

    monkeypatch.setattr(generation.Generator, "_generate", failing)
    _, summary = runner.run(_spec(pair, out), progress=False)
    assert summary["num_failed"] == 1
    (letter,) = tiny_models.read_lines(str(out / outputs.DEAD_LETTER))
    assert letter["id"] == "HumanEval/1" and letter["stage"] == "generate"
    assert "injected failure second line" in letter["reason"]
    first = (out / outputs.EXAMPLES).read_bytes()
    assert sorted(_keys(_lines(out))) == [("HumanEval/0", 0, "autoregressive"),
                                          ("HumanEval/0", 0, "speculative")]

    # Resume: only the failed example is generated, finished lines stay as they were.
    monkeypatch.setattr(generation.Generator, "_generate", recording)
    generated.clear()
    _, summary = runner.run(_spec(pair, out, resume=True), progress=False)
    assert sorted(generated) == [("HumanEval/1", 0, "autoregressive"),
                                 ("HumanEval/1", 0, "speculative")]
    data = (out / outputs.EXAMPLES).read_bytes()
    assert data.startswith(first)
    keys = _keys(_lines(out))
    assert len(keys) == len(set(keys)) == 4
    assert summary["num_failed"] == 0 and (out / outputs.DEAD_LETTER).read_text() == ""
    assert summary["runs"]["speculative"]["latency"]["num_tokens"] > 0

    # Resuming a finished run generates nothing and writes no line.
    generated.clear()
    runner.run(_spec(pair, out, resume=True), progress=False)
    assert generated == [] and (out / outputs.EXAMPLES).read_bytes() == data


def _canonical(path, limit):
    problems = list(humaneval.load_problems().values())[:limit]
    with open(path, "w", encoding="utf-8") as f:
        for p in problems:
            f.write(json.dumps({"task_id": p["task_id"],
                                "completion": p["canonical_solution"]}) + "\n")
    return str(path)


def test_completions_of_canonical_solutions_pass(tmp_path):
    path = _canonical(tmp_path / "canonical.jsonl", 164)
    spec = build_run_spec({"task": "humaneval", "completions": path, "limit": 6,
                           "output_dir": str(tmp_path / "run")})
    prepared = runner.prepare(spec)
    assert prepared.model_spec is None  # No model is loaded.
    summary = runner.execute(prepared, progress=False)
    assert summary["runs"] == {"completions": {"quality": {"pass@1": 100.0},
                                               "latency": None}}
    assert summary["num_examples"] == 6 and summary["speedup"] is None
    lines = _lines(tmp_path / "run")
    assert len(lines) == 6 and all(row["quality"] == {"passed": True, "result": "passed"}
                                   for row in lines)
    assert {row["mode"] for row in lines} == {"completions"}


def test_object_store_journal_and_scoring_failures(tmp_path, monkeypatch):
    """The gs:// journal layout (one object per record, merged at the end), on local disk."""
    path = _canonical(tmp_path / "canonical.jsonl", 3)
    task = tasks.get_task("humaneval")

    def score(examples, outputs_, **options):
        if examples[0].id == "HumanEval/2":
            raise ValueError("scorer broke")
        return task.score_samples(examples, outputs_, **options)

    monkeypatch.setitem(tasks.TASKS, "humaneval", dataclasses.replace(task, score_samples=score))
    spec = build_run_spec({"task": "humaneval", "completions": path,
                           "output_dir": str(tmp_path / "run"), "limit": 3})
    prepared = runner.prepare(spec)
    prepared.journal = journal_lib.Journal(prepared.output_dir, journal_lib.PARTS)
    summary = runner.execute(prepared, progress=False)
    assert summary["num_failed"] == 1
    (letter,) = tiny_models.read_lines(str(tmp_path / "run" / outputs.DEAD_LETTER))
    assert (letter["id"], letter["stage"]) == ("HumanEval/2", "score")
    assert "ValueError: scorer broke" in letter["reason"]
    assert not os.path.exists(tmp_path / "run" / journal_lib.PARTS_DIR) or not os.listdir(
        tmp_path / "run" / journal_lib.PARTS_DIR)
    assert sorted(row["id"] for row in _lines(tmp_path / "run")) == ["HumanEval/0", "HumanEval/1"]
    assert summary["runs"]["completions"]["quality"] == {"pass@1": 100.0}


def test_lone_surrogates_fail_their_record_never_the_run_and_resume_gets_past(
        tmp_path, monkeypatch):
    """A completion, a candidate's exception text and a scorer's exception text holding a
    lone UTF-16 surrogate (which Beam's coder and the journal cannot encode as UTF-8)."""
    problems = list(humaneval.load_problems().values())[:4]
    completions = [
        (problems[0], "\ud800"),                                      # dead letter
        (problems[1], "    raise ValueError('x\\ud800y')\n"),          # failed sample
        (problems[2], problems[2]["canonical_solution"]),             # scorer raises
        (problems[3], problems[3]["canonical_solution"]),             # passes
    ]
    path = tmp_path / "completions.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for p, completion in completions:
            f.write(json.dumps({"task_id": p["task_id"], "completion": completion}) + "\n")
    task = tasks.get_task("humaneval")

    def score(examples, outputs_, **options):
        if examples[0].id == problems[2]["task_id"]:
            raise ValueError("scorer broke on \udcff")
        return task.score_samples(examples, outputs_, **options)

    monkeypatch.setitem(tasks.TASKS, "humaneval", dataclasses.replace(task, score_samples=score))
    out = tmp_path / "run"
    values = {"task": "humaneval", "completions": str(path), "limit": 4,
              "output_dir": str(out)}
    for resume in (False, True):
        summary = runner.execute(runner.prepare(build_run_spec(dict(values, resume=resume))),
                                 progress=False)
        assert summary["num_failed"] == 2
        letters = {d["id"]: d for d in tiny_models.read_lines(str(out / outputs.DEAD_LETTER))}
        assert "lone UTF-16 surrogate '\\ud800' at character 0" in letters[
            problems[0]["task_id"]]["reason"]
        assert letters[problems[2]["task_id"]]["reason"] == ("ValueError: scorer broke on "
                                                             "\\udcff")
        lines = {row["id"]: row for row in _lines(out)}
        assert set(lines) == {problems[1]["task_id"], problems[3]["task_id"]}
        assert lines[problems[1]["task_id"]]["quality"] == {
            "passed": False, "result": "failed: ValueError: x\\ud800y"}
        assert lines[problems[3]["task_id"]]["quality"]["passed"] is True
    (out / outputs.EXAMPLES).read_bytes().decode("utf-8")  # Valid UTF-8 throughout.


def test_a_huge_completion_is_one_record_not_the_runs_problem(tmp_path):
    """An 8 MB completion (a passing body followed by 2 million comment lines) is carried,
    scored in the sandbox and journaled like any other; the other records are unaffected."""
    problems = list(humaneval.load_problems().values())[:2]
    huge = problems[0]["canonical_solution"] + "    # padding\n" * 600_000
    path = tmp_path / "completions.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for p, completion in ((problems[0], huge), (problems[1], "    return None\n")):
            f.write(json.dumps({"task_id": p["task_id"], "completion": completion}) + "\n")
    out = tmp_path / "run"
    summary = runner.execute(runner.prepare(build_run_spec(
        {"task": "humaneval", "completions": str(path), "limit": 2, "output_dir": str(out)})),
        progress=False)
    assert summary["num_failed"] == 0
    lines = {line["id"]: line for line in tiny_models.read_lines(str(out / outputs.EXAMPLES))}
    assert lines[problems[0]["task_id"]]["quality"]["passed"] is True
    assert lines[problems[1]["task_id"]]["quality"]["passed"] is False
    assert len(lines[problems[0]["task_id"]]["output"]) > 8_000_000
