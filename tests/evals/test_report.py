"""Tests for evals.report: tables and figures from run directories."""

import json
import os
import re
import shutil

import pytest

from evals import published
from evals import report
from evals import report_example
from evals import summary as summary_lib
from evals import walltime

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "run_dirs")
XSUM_RUN = os.path.join(FIXTURES, "xsum_nucleus_k2")          # recorded, tiny random pair
SWEEP_RUN = os.path.join(FIXTURES, "humaneval_sweep_k0_3")    # recorded, K = 0..3


def _sections(markdown):
    """{heading: [table rows as dicts]} of a Markdown document (first table per section)."""
    out, heading, header = {}, None, None
    for line in markdown.splitlines():
        if line.startswith("#"):
            heading, header = line.lstrip("# ").strip(), None
            continue
        if not line.startswith("|") or heading is None:
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if header is None:
            header = cells
        elif not all(set(c) <= {"-"} for c in cells):
            out.setdefault(heading, []).append(dict(zip(header, cells)))
    return out


def _table(sections, prefix):
    return next(rows for name, rows in sections.items() if name.startswith(prefix))


def _write_run(directory, task, temperature, top_p=1.0, k=4, quality=None,
               base_quality=None, sweep_ks=None, alpha=0.8, c=0.05, draft="hf://x/t5-small",
               round_s=None):
    """A synthetic run directory built with evals.summary (the real summary writer)."""
    ms = {0: 10.0, 1: 7.0, 2: 5.5, 3: 5.0, 4: 4.0, 5: 4.5}

    def metrics(kk, q):
        out = {"quality": q or {}, "latency": {
            "ms_per_token": ms[kk], "seq_time_mean_s": 1.28 * ms[kk] / 10,
            "seq_time_std_s": 0.01 * (kk + 1), "seq_time_p50_s": 0.1 * ms[kk] / 10,
            "seq_time_p90_s": 0.15 * ms[kk] / 10 + 0.1 * kk, "seq_time_p99_s": 2.0 + kk,
            "num_tokens": 1000}}
        if kk:
            out["acceptance"] = {"acceptance_rate": alpha - 0.05, "beta_mean": alpha,
                                 "mean_tokens_per_round": 1 + alpha * kk,
                                 "per_position": [alpha ** (i + 1) for i in range(kk)]}
        return out

    ks = sorted(set(sweep_ks or ()) | {0, k})
    modes = [(("autoregressive" if kk == 0 else "speculative" if kk == k
               else f"speculative_k{kk}"), kk) for kk in ks]
    met = {m: metrics(kk, base_quality if kk == 0 else quality) for m, kk in modes}
    header = {key: None for key in summary_lib.HEADER_KEYS}
    header.update(task=task, k=k, target="hf://x/t5-11b", draft=draft, seed=0,
                  sampling={"temperature": temperature, "top_k": 0, "top_p": top_p},
                  num_examples=10, num_samples=1)
    calibration = {"draft_cost_ratio": c, "target_step_s": 0.01, "draft_step_s": 0.01 * c}
    if round_s:
        calibration["round_s"] = {str(kk): v for kk, v in round_s.items()}
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "summary.json"), "w", encoding="utf-8") as f:
        json.dump(summary_lib.build_summary(header, modes, met, calibration,
                                            {"calibration": calibration}), f)
    if sweep_ks:
        with open(os.path.join(directory, "sweep.json"), "w", encoding="utf-8") as f:
            json.dump(summary_lib.build_sweep(modes, met, calibration), f)
    return directory


@pytest.fixture(scope="module")
def recorded_report(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("report"))
    runs = report.load_runs([XSUM_RUN, SWEEP_RUN])
    path = report.build_report(runs, out)
    with open(path, encoding="utf-8") as f:
        return out, f.read(), runs


def test_recorded_runs_tables(recorded_report):
    _, markdown, runs = recorded_report
    sections = _sections(markdown)
    lev = _table(sections, "Walltime speed-up")
    for run in runs:
        s = run.summary
        spec = s["runs"]["speculative"]
        row = next(r for r in lev if r["source"] == f"ours: {run.name}")
        assert row["k"] == str(s["k"]) and row["task"] == s["task"]
        assert row["alpha"] == f"{spec['acceptance']['beta_mean']:.2f}"
        assert row["c"] == f"{spec['draft_cost_ratio']:.3f}"
        assert row["speed-up (measured)"] == f"{s['speedup']:.2f}x"
        assert row["speed-up (formula)"] == f"{spec['predicted_speedup']:.2f}x"
    chen = _table(sections, "Quality and token time")
    xsum = runs[0].summary
    spec_row = next(r for r in chen if r["source"] == "ours: xsum_nucleus_k2"
                    and r["decoding"].startswith("speculative"))
    assert spec_row["quality"] == f"rouge2 {xsum['runs']['speculative']['quality']['rouge2']:.2f}"
    assert spec_row["mean token time (ms)"] == (
        f"{xsum['runs']['speculative']['latency']['ms_per_token']:.3f}")
    # The tiny random pair scores rouge2 0 in both modes: two zero intervals judge nothing.
    assert xsum["runs"]["speculative"]["quality"]["rouge2"] == 0
    assert spec_row["quality agrees"] == "– (both 0: not judged)"
    published_rows = [r for r in chen if r["source"].startswith("published")]
    assert {r["speed-up"] for r in published_rows} >= {"1.92x", "2.46x", "1.00x"}
    he_row = next(r for r in chen if r["source"] == "ours: humaneval_sweep_k0_3")
    assert he_row["95% bounds"] == "[0.00, 0.00]"   # bootstrapped from examples.jsonl
    assert he_row["quality agrees"] == "– (both 0: not judged)"


def test_recorded_sweep_table_and_figures(recorded_report):
    out, markdown, runs = recorded_report
    sweep = runs[1].sweep
    rows = _table(_sections(markdown), "humaneval_sweep_k0_3")
    assert [r["K"] for r in rows] == [str(e["k"]) for e in sweep]
    for row, entry in zip(rows, sweep):
        assert row["ms/token"] == f"{entry['latency']['ms_per_token']:.3f}"
        assert row["p99 (s)"] == f"{entry['latency']['seq_time_p99_s']:.4f}"
        if entry["k"]:
            loop = (entry["latency"]["ms_per_token"]
                    * entry["acceptance"]["mean_tokens_per_round"])
            assert row["loop time (ms)"] == f"{loop:.3f}"
    for name in ("sweep_humaneval_sweep_k0_3.png", "per_position_acceptance.png",
                 "speedup_xsum_nucleus_k2.png", "speedup_humaneval_sweep_k0_3.png"):
        path = os.path.join(out, name)
        assert os.path.getsize(path) > 10_000, name
        with open(path, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
        assert f"]({name})" in markdown


def test_published_rows_and_recommendation(tmp_path):
    lev_dir = _write_run(str(tmp_path / "ende_t0"), "wmt_ende", 0.0, k=5,
                         quality={"bleu": 20.0}, base_quality={"bleu": 20.5},
                         sweep_ks=(0, 1, 2, 3, 4, 5), alpha=0.75, c=0.05,
                         round_s={1: 0.016, 5: 0.020})
    disagree = _write_run(str(tmp_path / "xsum_greedy"), "xsum", 0.0, k=4,
                          quality={"rouge2": 10.0, "rouge2_low": 9.0, "rouge2_high": 11.0},
                          base_quality={"rouge2": 15.0, "rouge2_low": 14.0,
                                        "rouge2_high": 16.0}, alpha=0.6, c=0.5)
    out = str(tmp_path / "out")
    with open(report.build_report(report.load_runs([lev_dir, disagree]), out),
              encoding="utf-8") as f:
        sections = _sections(f.read())
    lev = _table(sections, "Walltime speed-up")
    ours = next(r for r in lev if r["source"] == "ours: ende_t0")
    assert ours["speed-up (measured)"] == "2.22x"            # 10 ms / 4.5 ms at k = 5
    assert ours["speed-up (formula)"] == f"{walltime.predicted_speedup(0.75, 5, 0.05):.2f}x"
    pub = [r for r in lev if r["source"] == f"published: {published.LEVIATHAN_SOURCE}"]
    assert len(pub) == 1 and pub[0]["alpha"] == "0.75" and pub[0]["speed-up (measured)"] == \
        "3.4x" and pub[0]["draft"] == "T5-small (77M)" and pub[0]["k"] == "7"
    chen = _table(sections, "Quality and token time")
    assert {r["quality agrees"] for r in chen if r["source"] == "ours: xsum_greedy"} == {
        "NO (summary bootstrap)"}
    assert {r["quality agrees"] for r in chen if r["source"] == "ours: ende_t0"} == {
        "– (no bounds)"}
    assert any(r["quality"] == "rouge2 15.7" and r["source"].startswith("published")
               for r in chen)
    assert ours["measured / calibrated"] != "–"
    rec = {r["run"]: r for r in _table(sections, "Recommended draft length")}
    assert rec["ende_t0"]["formula's optimal_k"] == str(walltime.optimal_k(0.75, 0.05, 16))
    # Rounds of 15 ms + 1 ms per drafted token (10 ms target steps) and 128 tokens per
    # request: the calibrated model prefers a shorter draft than the formula (k = 9 there).
    cost = walltime.RoundCost(0.01, 0.015, 0.001)
    best = walltime.calibrated_optimal_k(0.75, cost, 16, tokens_per_request=128)
    assert best < walltime.optimal_k(0.75, 0.05, 16)
    assert rec["ende_t0"]["recommended k (calibrated)"] == str(best)
    assert rec["ende_t0"]["calibrated speed-up at recommended k"] == (
        f"{walltime.calibrated_speedup(0.75, best, cost, 128):.2f}x")
    assert rec["xsum_greedy"]["formula's optimal_k"] == "1"   # 1.6 / 1.5 > 1 at k = 1
    assert rec["xsum_greedy"]["recommended k (calibrated)"] == "–"   # no rounds measured
    pos = _table(sections, "Per-position acceptance")
    measured = next(r for r in pos if r["run"] == "ende_t0" and r["measured / alpha^i"]
                    == "measured")
    assert measured["i=1"] == "0.75" and measured["i=2"] == "0.56"
    assert os.path.getsize(os.path.join(out, "sweep_ende_t0.png")) > 10_000


def test_bootstrap_pass1():
    lines = [{"id": f"p{i}", "mode": "speculative", "quality": {"passed": i % 2 == 0}}
             for i in range(20)]
    low, high = report.bootstrap_pass1(lines, "speculative")
    assert 20 < low < 50 < high < 80
    assert report.bootstrap_pass1(lines, "autoregressive") is None
    all_pass = [dict(line, quality={"passed": True}) for line in lines]
    assert report.bootstrap_pass1(all_pass, "speculative") == (100.0, 100.0)


def test_matching_published_rows():
    assert published.match_leviathan("wmt_ende", 0, "hf://google-t5/t5-large").alpha == 0.82
    assert published.match_leviathan("wmt_ende", 0, "hf://google-t5/t5-small").alpha == 0.75
    assert published.match_leviathan("cnn_dailymail", 1, None).speedup == 2.3
    assert published.match_leviathan("xsum", 0) is None
    assert published.match_chen("xsum", 1.0, 0.8).speedup == 1.92
    assert published.match_chen("xsum", 0.0).speedup == 2.01
    assert published.match_chen("humaneval", 0.0) is None


@pytest.mark.parametrize("make,expected", [
    (lambda d: None, "no such run directory"),
    (lambda d: os.makedirs(d), "no summary.json"),
    (lambda d: (os.makedirs(d), open(os.path.join(d, "summary.json"), "w").write("{\"ta")),
     "not valid JSON"),
    (lambda d: (os.makedirs(d), open(os.path.join(d, "summary.json"), "w").write("[]")),
     "not an evals.run summary"),
])
def test_cli_bad_run_dir_is_one_line_exit_2(tmp_path, capsys, make, expected):
    bad = str(tmp_path / "bad")
    make(bad)
    code = report.main([XSUM_RUN, bad, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and expected in err and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err and not os.path.exists(tmp_path / "out")


def test_cli_writes_report(tmp_path, capsys):
    run_copy = str(tmp_path / "run")
    shutil.copytree(XSUM_RUN, run_copy)
    os.remove(os.path.join(run_copy, "examples.jsonl"))  # Optional file.
    assert report.main([run_copy, "--out", str(tmp_path / "out")]) == 0
    assert capsys.readouterr().out.strip().endswith("report.md")
    assert os.path.isfile(tmp_path / "out" / "report.md")


def test_report_example_commands(tmp_path):
    runs_dir = str(tmp_path / "runs")
    cmds = report_example.commands(runs_dir, report_example.SWEEPS, ["--limit", "2"])
    assert [c[c.index("--config") + 1] for c in cmds] == [
        f"configs/zoo_k_sweep.py:{s}" for s in report_example.SWEEPS]
    assert all(c[-2:] == ["--limit", "2"] and "--resume" not in c for c in cmds)
    done = report_example.run_dir(runs_dir, "humaneval-t0")
    partial = report_example.run_dir(runs_dir, "docsum-t1")
    os.makedirs(done)
    os.makedirs(partial)
    open(os.path.join(done, "summary.json"), "w").close()
    cmds = report_example.commands(runs_dir, report_example.SWEEPS, [])
    assert len(cmds) == 3 and "--resume" in cmds[-1]
    assert report_example.main(["--dry_run", "--runs_dir", runs_dir,
                                "--out", str(tmp_path / "rep")]) == 0


@pytest.mark.parametrize("spec_outputs, expected", [
    (["a", "b", "c"], (3, 0)),
    (["a", "x", "c"], (3, 1)),
    (["a", "b"], (2, 0)),            # Only pairs present in both modes are compared.
])
def test_greedy_mismatches(spec_outputs, expected):
    lines = [{"id": f"p{i}", "sample": 0, "mode": "autoregressive", "raw_output": o}
             for i, o in enumerate("abc")]
    lines += [{"id": f"p{i}", "sample": 0, "mode": "speculative", "raw_output": o}
              for i, o in enumerate(spec_outputs)]
    assert report.greedy_mismatches(lines) == expected
    assert report.greedy_mismatches(lines[:3]) is None


def test_agreement_does_not_judge_two_zeros():
    zero = (0.0, 0.0, 0.0, "bootstrap")
    assert report.agreement(zero, zero).startswith("–")
    assert report.agreement(zero, (10.0, 0.0, 20.0, "b")) == "yes"
    assert report.agreement(zero, (30.0, 20.0, 40.0, "b")) == "NO"


@pytest.mark.parametrize("flip, expected", [(False, "yes: 3/3 outputs identical"),
                                            (True, "NO: 1 of 3 outputs differ")])
def test_greedy_runs_compare_outputs_token_for_token(tmp_path, flip, expected):
    directory = _write_run(str(tmp_path / "greedy"), "humaneval", 0.0,
                           quality={"pass@1": 0.0}, base_quality={"pass@1": 0.0})
    with open(os.path.join(directory, "examples.jsonl"), "w", encoding="utf-8") as f:
        for i in range(3):
            for mode in ("autoregressive", "speculative"):
                text = "x" if flip and i == 1 and mode == "speculative" else f"out{i}"
                f.write(json.dumps({"id": f"p{i}", "sample": 0, "mode": mode,
                                    "raw_output": text, "quality": {"passed": False}}) + "\n")
    markdown = "## Quality\n" + report.chen_table(report.load_runs([directory]))
    chen = _table(_sections(markdown), "Quality")
    assert {r["quality agrees"] for r in chen if r["source"] == "ours: greedy"} == {expected}


def _write_sweep_run(directory, modes, metrics, k, temperature, num_examples, calibration):
    """summary.json and sweep.json of a HumanEval sweep from per-mode `metrics`, written by
    evals.summary (the real summary writer)."""
    header = {key: None for key in summary_lib.HEADER_KEYS}
    header.update(task="humaneval", k=k, target="zoo:t", draft="zoo:d", seed=0,
                  sampling={"temperature": temperature, "top_k": 0, "top_p": 1.0},
                  num_examples=num_examples, num_samples=1)
    with open(os.path.join(directory, "summary.json"), "w", encoding="utf-8") as f:
        json.dump(summary_lib.build_summary(header, modes, metrics, calibration,
                                            {"calibration": calibration}), f)
    with open(os.path.join(directory, "sweep.json"), "w", encoding="utf-8") as f:
        json.dump(summary_lib.build_sweep(modes, metrics, calibration), f)


def test_a_sweep_with_an_auto_entry_reports_it_as_a_row(tmp_path):
    """k = "auto" has a table row (measured numbers, no formula) but no x position."""
    directory = str(tmp_path / "auto_sweep")
    os.makedirs(directory)

    def metrics(ms, k):
        out = {"quality": {"pass@1": 0.0}, "latency": {
            "ms_per_token": ms, "seq_time_mean_s": 0.1, "seq_time_std_s": 0.01,
            "seq_time_p50_s": 0.1, "seq_time_p90_s": 0.12, "seq_time_p99_s": 0.2,
            "num_tokens": 1000}}
        if k:
            out["acceptance"] = {"acceptance_rate": 0.7, "beta_mean": 0.8,
                                 "mean_tokens_per_round": 2.5,
                                 "per_position": [0.8, 0.6, 0.4, 0.2]}
        return out

    modes = [("autoregressive", 0), ("speculative_k2", 2), ("speculative", 4),
             ("speculative_auto", "auto")]
    met = {"autoregressive": metrics(10.0, 0), "speculative_k2": metrics(6.0, 2),
           "speculative": metrics(5.0, 4), "speculative_auto": metrics(4.0, "auto")}
    _write_sweep_run(directory, modes, met, k=4, temperature=0.0, num_examples=10,
                     calibration={"draft_cost_ratio": 0.1, "target_step_s": 0.01,
                                  "draft_step_s": 0.001})
    runs = report.load_runs([directory])
    assert [e["k"] for e in runs[0].sweep] == [0, 2, 4, "auto"]
    out = str(tmp_path / "out")
    with open(report.build_report(runs, out), encoding="utf-8") as f:
        rows = _table(_sections(f.read()), "auto_sweep")
    assert [r["K"] for r in rows] == ["0", "2", "4", "auto"]
    assert rows[-1]["speed-up (measured)"] == "2.50x" and rows[-1]["speed-up (formula)"] == "–"
    assert {r["speed-up (length-matched)"] for r in rows} == {"–"}  # No request lines.
    assert os.path.getsize(os.path.join(out, "sweep_auto_sweep.png")) > 10_000


def test_the_sweep_table_has_the_length_matched_speedup(tmp_path):
    """At T = 1 the modes' requests have other lengths: the column compares their fitted
    request times at the autoregressive mean length, beside the plain ratio."""
    directory = str(tmp_path / "matched")
    os.makedirs(directory)

    def metrics(k, fixed_s, token_s, mean_tokens):
        out = {"quality": {"pass@1": 0.0}, "latency": {
            "ms_per_token": 1e3 * (fixed_s / mean_tokens + token_s), "seq_time_mean_s": 0.1,
            "seq_time_std_s": 0.01, "seq_time_p50_s": 0.1, "seq_time_p90_s": 0.12,
            "seq_time_p99_s": 0.2, "num_tokens": 1000},
            "request_length": {"requests": 20, "mean_tokens": mean_tokens,
                               "fixed_s": fixed_s, "token_s": token_s}}
        if k:
            out["acceptance"] = {"acceptance_rate": 0.4, "beta_mean": 0.65,
                                 "mean_tokens_per_round": 2.0, "per_position": [0.6, 0.3]}
        return out

    modes = [("autoregressive", 0), ("speculative", 2)]
    met = {"autoregressive": metrics(0, 0.02, 0.0015, 60.0),
           "speculative": metrics(2, 0.03, 0.0012, 40.0)}  # Shorter answers drawn.
    _write_sweep_run(directory, modes, met, k=2, temperature=1.0, num_examples=20,
                     calibration={"draft_cost_ratio": 0.1, "target_step_s": 0.0015,
                                  "draft_step_s": 0.00015})
    out = str(tmp_path / "out")
    with open(report.build_report(report.load_runs([directory]), out), encoding="utf-8") as f:
        sections = _sections(f.read())
    rows = _table(sections, "matched")
    plain = (0.02 / 60 + 0.0015) / (0.03 / 40 + 0.0012)
    matched = (0.02 + 0.0015 * 60) / (0.03 + 0.0012 * 60)
    assert plain < 1.0 < matched
    assert [(r["speed-up (measured)"], r["speed-up (length-matched)"]) for r in rows] == [
        ("1.00x", "1.00x"), (f"{plain:.2f}x", f"{matched:.2f}x")]
    table2 = _table(sections, "Walltime speed-up")
    assert [(r["speed-up (measured)"], r["speed-up (length-matched)"]) for r in table2] == [
        (f"{plain:.2f}x", f"{matched:.2f}x")]
    assert os.path.getsize(os.path.join(out, "speedup_matched.png")) > 10_000
