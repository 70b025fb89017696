"""Tests for evals.console: the per-K table of a sweep and the headline of a report."""

import json
import os
import shutil

import pytest

from evals import console
from evals import report

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "run_dirs")
XSUM_RUN = os.path.join(FIXTURES, "xsum_nucleus_k2")          # recorded, tiny random pair
SWEEP_RUN = os.path.join(FIXTURES, "humaneval_sweep_k0_3")    # recorded, K = 0..3


def _sweep():
    with open(os.path.join(SWEEP_RUN, "sweep.json"), encoding="utf-8") as f:
        return json.load(f)


def test_sweep_table_one_row_per_k_with_the_recorded_numbers():
    sweep = _sweep()
    lines = console.sweep_table(sweep).splitlines()
    assert lines[0].split() == ["K", "ms/token", "speed-up", "acceptance", "p50", "(ms)",
                                "p99", "(ms)"]
    assert len(lines) == 1 + len(sweep)
    for line, entry in zip(lines[1:], sweep):
        latency = entry["latency"]
        expected = [str(entry["k"]), f"{latency['ms_per_token']:.3f}",
                    f"{entry['speedup']:.2f}x",
                    f"{entry['acceptance']['acceptance_rate']:.3f}" if entry["k"] else "-",
                    f"{1e3 * latency['seq_time_p50_s']:.1f}",
                    f"{1e3 * latency['seq_time_p99_s']:.1f}"]
        assert line.split() == expected


@pytest.mark.parametrize("missing", ["latency", "speedup", "acceptance"])
def test_sweep_table_shows_a_dash_for_what_is_missing(missing):
    sweep = _sweep()
    for entry in sweep:
        entry[missing] = None
    rows = [line.split() for line in console.sweep_table(sweep).splitlines()[1:]]
    column = {"latency": 1, "speedup": 2, "acceptance": 3}[missing]
    assert all(row[column] == "-" for row in rows)


def test_report_headline_has_each_runs_numbers():
    runs = report.load_runs([SWEEP_RUN, XSUM_RUN])
    text = console.report_headline(runs, "out/report.md")
    sweep_run, xsum_run = runs
    summary = sweep_run.summary
    assert text.splitlines()[-1] == "report: out/report.md"
    assert f"{summary['speedup']:.2f}x" in text
    spec = summary["runs"]["speculative"]
    assert f"acceptance {spec['acceptance']['acceptance_rate']:.3f}" in text
    assert f"{spec['latency']['ms_per_token']:.3f} ms/token" in text
    best = max((e["speedup"], e["k"]) for e in sweep_run.sweep if e["k"])
    assert f"best measured speed-up {best[0]:.2f}x at K = {best[1]}" in text
    recommended = report.recommended_k(*report.alpha_and_c(spec))
    assert f"recommended k {recommended}" in text
    assert f"{xsum_run.name}: xsum, 4 examples x 1 samples" in text
    assert "rouge2" in text  # The task's headline metric.


def test_a_sampled_sweep_is_ranked_at_one_request_length(tmp_path):
    """At T > 0 the best K is the best length-matched one: K = 2 sampled short answers, so
    its plain ratio leads, but at one length K = 1 is faster."""
    run_copy = str(tmp_path / "sampled")
    shutil.copytree(SWEEP_RUN, run_copy)
    summary_path, sweep_path = (os.path.join(run_copy, name)
                                for name in ("summary.json", "sweep.json"))
    with open(summary_path, encoding="utf-8") as f:
        summary = json.load(f)
    summary["sampling"]["temperature"] = 1.0
    summary["matched_speedup"] = 1.05
    sweep = _sweep()
    plain = {0: 1.0, 1: 1.1, 2: 1.3, 3: 0.9}
    matched = {0: 1.0, 1: 1.2, 2: 1.02, 3: 0.95}
    for entry in sweep:
        entry["speedup"], entry["matched_speedup"] = plain[entry["k"]], matched[entry["k"]]
    for path, value in ((summary_path, summary), (sweep_path, sweep)):
        with open(path, "w", encoding="utf-8") as f:
            json.dump(value, f)
    text = console.run_headline(report.load_run(run_copy))
    assert "best length-matched speed-up 1.20x at K = 1" in text
    assert "length-matched 1.05x" in text


def test_report_cli_prints_the_headline_not_just_the_path(tmp_path, capsys):
    run_copy = str(tmp_path / "run")
    shutil.copytree(XSUM_RUN, run_copy)
    assert report.main([run_copy, "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert out.strip().endswith("report.md")
    summary = report.load_run(run_copy).summary
    assert f"speed-up {summary['speedup']:.2f}x" in out
