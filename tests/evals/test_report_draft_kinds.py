"""Tests for evals.report.draft_kinds: the draft-kinds section from bench.draft_kinds JSON."""

import json
import os
import shutil

import pytest

from evals import report
from evals import report_example
from evals.report import draft_kinds

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = [os.path.join(ROOT, "bench", "results", f"draft_kinds_t{t}.json") for t in (0, 1)]
XSUM_RUN = os.path.join(ROOT, "tests", "fixtures", "run_dirs", "xsum_nucleus_k2")


def _result(tmp_path, name, summary):
    path = str(tmp_path / name)
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"benchmark": "draft_kinds", "target": "zoo:t", "num_prompts": 2,
                   "batch_size": 1, "max_new_tokens": 8, "k": [1, 2], "summary": summary}, f)
    return path


def _rows(table):
    lines = table.splitlines()
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    return [dict(zip(header, (c.strip() for c in line.strip("|").split("|"))))
            for line in lines[2:]]


def test_the_shipped_results_make_one_row_per_kind_with_both_temperatures():
    results = [draft_kinds.load_draft_kinds(path) for path in RESULTS]
    rows = _rows(draft_kinds.draft_kinds_table(results))
    by_kind = {row["kind"]: row for row in rows}
    assert set(by_kind) == {e["kind"] for e in results[0]["summary"]}
    for entry in results[0]["summary"] + results[1]["summary"]:
        row = by_kind[entry["kind"]]
        label = f"T={entry['temperature']:g}"
        assert row[f"{label} best k"] == str(entry["best_k"])
        assert row[f"{label} speed-up"] == f"{entry['speedup']:.2f}x"
        assert row[f"{label} beta"] == f"{entry['beta_mean']:.3f}"
        if entry["temperature"] > 0:  # At one request length.
            assert row[f"{label} length-matched"] == f"{entry['matched_speedup']:.2f}x"
        assert "T=0 length-matched" not in row
    assert all(row["greedy = AR"] == "yes" for row in rows)


@pytest.mark.parametrize("identical, expected", [(True, "yes"), (False, "NO"),
                                                  (None, draft_kinds.DASH)])
def test_greedy_identity_column_reports_the_greedy_check(tmp_path, identical, expected):
    summary = [{"kind": "t5", "draft": "d", "temperature": 0.0, "best_k": 2, "speedup": 1.2,
                "beta_mean": 0.9, "draft_cost_ratio": 0.1, "identical_to_ar": identical},
               {"kind": "t5", "draft": "d", "temperature": 1.0, "best_k": 1, "speedup": 0.9,
                "beta_mean": 0.6, "draft_cost_ratio": 0.2, "identical_to_ar": None}]
    rows = _rows(draft_kinds.draft_kinds_table(
        [draft_kinds.load_draft_kinds(_result(tmp_path, "r.json", summary))]))
    assert len(rows) == 1 and rows[0]["greedy = AR"] == expected


def test_a_kind_missing_at_one_temperature_gets_dashes(tmp_path):
    t0 = _result(tmp_path, "t0.json", [{"kind": "t5", "draft": "d", "temperature": 0.0,
                                        "best_k": 2, "speedup": 1.2, "beta_mean": 0.9,
                                        "draft_cost_ratio": 0.1}])
    t1 = _result(tmp_path, "t1.json", [{"kind": "ngram", "draft": "n", "temperature": 1.0,
                                        "best_k": 1, "speedup": 0.9, "beta_mean": 0.1,
                                        "draft_cost_ratio": 0.01}])
    rows = _rows(draft_kinds.draft_kinds_table(
        [draft_kinds.load_draft_kinds(t0), draft_kinds.load_draft_kinds(t1)]))
    assert rows[0]["T=1 speed-up"] == rows[1]["T=0 speed-up"] == draft_kinds.DASH
    assert rows[1]["T=1 speed-up"] == "0.90x"


def test_cli_adds_the_section_and_refuses_a_file_of_another_kind(tmp_path, capsys):
    run_copy = str(tmp_path / "run")
    shutil.copytree(XSUM_RUN, run_copy)
    out = str(tmp_path / "out")
    argv = [run_copy, "--out", out] + [a for p in RESULTS for a in ("--draft_kinds", p)]
    assert report.main(argv) == 0
    with open(os.path.join(out, "report.md"), encoding="utf-8") as f:
        text = f.read()
    assert "## Draft kinds side by side" in text and "`zoo:tiny-code-medusa`" in text
    capsys.readouterr()
    assert report.main([run_copy, "--out", out, "--draft_kinds",
                        os.path.join(run_copy, "summary.json")]) == report.EXIT_USAGE
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not a bench.draft_kinds result" in err


def test_report_example_passes_the_shipped_results(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)  # Its config and results paths are relative to the checkout.
    assert report_example.main(["--dry_run", "--runs_dir", str(tmp_path / "runs"),
                                "--out", str(tmp_path / "rep")]) == 0
    out = capsys.readouterr().out
    assert all(f"--draft_kinds {os.path.relpath(p, ROOT)}" in out for p in RESULTS)


def test_report_example_refuses_a_bad_results_file_in_one_line(tmp_path, capsys):
    runs_dir = str(tmp_path / "runs")
    shutil.copytree(XSUM_RUN, report_example.run_dir(runs_dir, "humaneval-t0"))
    bad = str(tmp_path / "bad.json")
    with open(bad, "w", encoding="utf-8") as f:
        f.write("{not json")
    assert report_example.main(["--runs_dir", runs_dir, "--only", "humaneval-t0",
                                "--out", str(tmp_path / "rep"), "--draft_kinds",
                                bad]) == report.EXIT_USAGE
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is not JSON" in err


def test_c_per_step_is_shown_when_the_results_have_it(tmp_path):
    summary = [{"kind": "feature", "draft": "f", "temperature": 1.0, "best_k": 1,
                "speedup": 0.95, "beta_mean": 0.74, "draft_cost_ratio": 1.03,
                "step_cost_ratio": 0.125}]
    rows = _rows(draft_kinds.draft_kinds_table(
        [draft_kinds.load_draft_kinds(_result(tmp_path, "r.json", summary))]))
    assert rows[0]["T=1 c"] == "1.03" and rows[0]["T=1 c per step"] == "0.12"


@pytest.mark.parametrize("frozen,says", [
    ([True, True], "models frozen (`tfspec.freeze_weights`"),
    ([None, False], "weights checked on every request"),
    ([True, None], "some files with frozen models, some without")])
def test_the_section_says_whether_the_models_were_frozen(tmp_path, frozen, says):
    results = []
    for t, value in enumerate(frozen):
        path = _result(tmp_path, f"t{t}.json", [{
            "kind": "t5", "draft": "d", "temperature": float(t), "best_k": 1, "speedup": 1.1,
            "beta_mean": 0.7, "draft_cost_ratio": 0.2}])
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if value is not None:
            data["weights_frozen"] = value
        with open(path, "w", encoding="utf-8") as f:
            json.dump(data, f)
        results.append(draft_kinds.load_draft_kinds(path))
    assert says in "\n".join(draft_kinds.draft_kinds_section(results))
