"""The checked-in example report (`reports/embedded_default/`) and `evals.report_example`."""

import glob
import json
import os
import shutil

import pytest

from evals import report
from evals import report_example

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KEPT = sorted(glob.glob(os.path.join(ROOT, report_example.DEFAULT_OUT, "runs", "*")))
XSUM_RUN = os.path.join(ROOT, "tests", "fixtures", "run_dirs", "xsum_nucleus_k2")


def _sweep(directory):
    with open(os.path.join(directory, "sweep.json"), encoding="utf-8") as f:
        return json.load(f)


def test_the_example_report_keeps_the_numbers_of_its_sweeps():
    names = [os.path.basename(d) for d in KEPT]
    assert names and set(names) <= {os.path.basename(report_example.run_dir("", s))
                                    for s in report_example.SWEEPS}
    with open(os.path.join(ROOT, report_example.DEFAULT_OUT, "report.md"),
              encoding="utf-8") as f:
        text = f.read()
    assert all(f"### {name}:" in text for name in names)  # The report is built from them.
    for directory in KEPT:
        ks = [entry["k"] for entry in _sweep(directory)]
        assert ks == list(range(9)) + ["auto"], directory  # K = 0..8 and the auto row.
    # The kept files rebuild the report's runs (without the per-sample logs).
    assert len(report.load_runs(KEPT)) == len(KEPT)


@pytest.mark.parametrize("directory", KEPT, ids=os.path.basename)
def test_calibrated_prediction_is_within_15_percent_at_every_k_of_the_sweeps(directory):
    """Issue goal: calibrated within 15% of measured at every K of the example sweeps. Its
    costs are fitted to each sweep's own requests (`calibration.in_run`); with the
    calibration program's costs (one prompt, timed apart from the run) HumanEval was up to
    28% optimistic. It must also be closer to the measured speed-up than the formula."""
    with open(os.path.join(directory, "summary.json"), encoding="utf-8") as f:
        in_run = json.load(f)["calibration"]["in_run"]
    assert sorted(in_run["round_s"], key=int) == [str(k) for k in range(1, 9)]
    for entry in _sweep(directory):
        if entry["k"] in (0, "auto"):
            continue
        measured = entry["speedup"]
        calibrated, formula = entry["calibrated_speedup"], entry["predicted_speedup"]
        assert abs(calibrated / measured - 1) <= 0.15, entry["k"]
        assert abs(calibrated - measured) < abs(formula - measured), entry["k"]


def test_report_example_keeps_each_runs_numbers_beside_the_report(tmp_path):
    runs_dir = str(tmp_path / "runs")
    shutil.copytree(XSUM_RUN, report_example.run_dir(runs_dir, "humaneval-t0"))
    out = str(tmp_path / "rep")
    assert report_example.main(["--runs_dir", runs_dir, "--only", "humaneval-t0",
                                "--out", out]) == 0
    kept = os.path.join(out, "runs", "zoo_k_sweep_humaneval_t0")
    assert sorted(os.listdir(kept)) == sorted(
        n for n in report_example.RUN_FILES if os.path.isfile(os.path.join(XSUM_RUN, n)))
    assert not os.path.exists(os.path.join(kept, "examples.jsonl"))
