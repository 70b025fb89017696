"""`python -m evals.run` as a user runs it: subprocesses, exit codes, files on disk."""

import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from evals import humaneval
from evals import records
from evals import request_cost
from evals import summary as summary_lib
from tests.pipelines import tiny_models

REPO = pathlib.Path(__file__).resolve().parents[2]
DRIVER = REPO / "tests" / "pipelines" / "run_driver.py"  # evals.run, generation slowed down
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO))


def _run(args, timeout=300):
    return subprocess.run([sys.executable, "-m", "evals.run", *args], cwd=REPO, env=ENV,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return tiny_models.make_pair(str(tmp_path_factory.mktemp("pair")))


@pytest.fixture(scope="module")
def xsum(tmp_path_factory):
    return tiny_models.write_xsum(str(tmp_path_factory.mktemp("data") / "xsum.jsonl"))


def _models(pair):
    return ["--target", pair["target"], "--draft", pair["draft"]]


def _xsum_args(pair, xsum, out, *extra):
    return ["--task", "xsum", "--data_source", "local", "--data_path", xsum, "--k", "2",
            "--max_new_tokens", "8", "--temperature", "1", "--nocalibrate",
            "--output_dir", str(out), *_models(pair), *extra]


def _bad_inputs(pair, tmp):
    mismatched = tiny_models.make_pair(str(tmp / "mismatch"),
                                       draft_vocab_size=pair["vocab_size"] + 8)
    blocker = tmp / "a_file"
    blocker.write_text("x")
    return {
        "unknown task": (["--task", "mmlu"], "unknown task 'mmlu'"),
        "k < 0": (["--task", "humaneval", "--k", "-1"], "--k must be >= 0"),
        "pass@k > num_samples": (["--task", "humaneval", "--num_samples", "2",
                                  "--pass_at", "1,10"], "pass@10 needs at least 10 samples"),
        "bad flag value": (["--task", "humaneval", "--k", "four"], "--k"),
        "unknown flag": (["--task", "humaneval", "--num_sample", "3"],
                         "unknown flag --num_sample"),
        "missing model": (["--task", "humaneval", "--target", str(tmp / "no_such_model")],
                          "cannot load --target"),
        "vocab mismatch": (["--task", "humaneval", *_models(mismatched)],
                           "share the vocabulary"),
        "feature draft for another target": (["--task", "humaneval", *_models(dict(
            pair, draft=tiny_models.make_feature_draft(str(tmp / "foreign"), pair["target"],
                                                       **tiny_models.FOREIGN)))],
            "cannot draft for --target"),
        "unwritable output dir": (["--task", "humaneval", "--output_dir",
                                   str(blocker / "run")], "is not a folder"),
        "missing data": (["--task", "xsum", "--data_source", "local", "--data_path",
                          str(tmp / "missing.jsonl")], "no file matches --data_path"),
        "resume without a run": (["--task", "humaneval", "--resume", "--output_dir",
                                  str(tmp / "never_ran")], "holds no run"),
        "corrupt safetensors": (["--task", "humaneval", *_models(
            dict(pair, target=_damaged_copy(pair["target"], tmp / "corrupt", "corrupt")))],
            "model.safetensors is not a readable safetensors file"),
        "absurd config": (["--task", "humaneval", *_models(
            dict(pair, target=_damaged_copy(pair["target"], tmp / "absurd", "absurd")))],
            "parameters, which needs about"),
        "nan weights": (["--task", "humaneval", *_models(
            dict(pair, target=_damaged_copy(pair["target"], tmp / "nan", "nan")))],
            "non-finite values"),
        "max_new_tokens beyond memory": (["--task", "humaneval", "--max_new_tokens",
                                          str(10**9)], "max_new_tokens=1000000000"),
        "null completion": (["--task", "humaneval", "--completions", _completions_file(
            tmp / "null.jsonl", [None])], "null.jsonl:2: 'completion' must be a string, "
                                          "got null"),
        "object completion": (["--task", "humaneval", "--completions", _completions_file(
            tmp / "object.jsonl", [{"a": 1}])], "object.jsonl:2: 'completion' must be a "
                                                "string, got an object"),
    }


def _damaged_copy(model_dir, directory, damage):
    """A copy of a checkpoint folder with a corrupt file, absurd sizes or a NaN weight."""
    import shutil  # pylint: disable=import-outside-toplevel
    shutil.copytree(model_dir, directory)
    weights = directory / "model.safetensors"
    if damage == "corrupt":
        weights.write_bytes(weights.read_bytes()[:100])
    elif damage == "absurd":
        config = json.loads((directory / "config.json").read_text())
        config.update(d_model=10**7, vocab_size=10**9)
        (directory / "config.json").write_text(json.dumps(config))
    else:
        from safetensors import numpy as safetensors_np  # pylint: disable=import-outside-toplevel
        tensors = safetensors_np.load_file(str(weights))
        tensors["shared.weight"][3, 1] = float("nan")
        safetensors_np.save_file(tensors, str(weights), metadata={"format": "pt"})
    return str(directory)


def _completions_file(path, bad_values):
    """Line 1 a valid completion, then one line per bad value."""
    rows = [{"task_id": "HumanEval/0", "completion": "    return 1\n"}]
    rows += [{"task_id": "HumanEval/0", "completion": value} for value in bad_values]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def test_bad_input_one_line_exit_2_nothing_written(pair, tmp_path):
    cases = _bad_inputs(pair, tmp_path)
    out = tmp_path / "out"
    procs = {}
    for name, (args, _) in cases.items():
        if "--output_dir" not in args:
            args = [*args, "--output_dir", str(out / name.replace(" ", "_"))]
        procs[name] = subprocess.Popen(
            [sys.executable, "-m", "evals.run", *args], cwd=REPO, env=ENV, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    before = set(os.listdir(tmp_path))
    for name, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=300)
        expected = cases[name][1]
        assert proc.returncode == 2, (name, stderr)
        assert stderr.count("\n") == 1 and stderr.startswith("evals.run: error: "), (name, stderr)
        assert expected in stderr, (name, stderr)
        assert "Traceback" not in stderr and stdout == "", name
    assert not out.exists()  # No output folder was created for any of them.
    assert set(os.listdir(tmp_path)) == before
    assert not (tmp_path / "never_ran").exists()
    assert (tmp_path / "a_file").read_text() == "x"


def _in_process(args, monkeypatch=None):
    """Runs the same flags through the library (shares this process's compiled models)."""
    from evals import run  # pylint: disable=import-outside-toplevel
    from evals.orchestration import flags  # pylint: disable=import-outside-toplevel
    from evals.orchestration import runner  # pylint: disable=import-outside-toplevel

    _, spec = flags.parse(args, run.PROG, run.__doc__)
    return runner.run(spec, progress=False)


# The worker processes decode with XLA programs (`tests/conftest.py`'s `_graph_loops` patches
# only this process), so this process must too for the rows to match.
@pytest.mark.xla_loops
def test_two_worker_processes_match_one(pair, xsum, tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    common = ["--num_samples", "2", "--nobaseline"]
    # The 2-process run in a subprocess; meanwhile the 1-process run here.
    proc = subprocess.Popen(
        [sys.executable, "-m", "evals.run",
         *_xsum_args(pair, xsum, two, *common, "--direct_num_workers", "2",
                     "--direct_running_mode", "multi_processing")],
        cwd=REPO, env=ENV, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _in_process(_xsum_args(pair, xsum, one, *common))
    finally:
        stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-3000:]
    views = []
    for out in (one, two):
        raw = (out / "examples.jsonl").read_text(encoding="utf-8")
        lines = [json.loads(row) for row in raw.splitlines()]
        assert len(lines) == len(tiny_models.XSUM_DOCS) * 2
        assert len({records.key_of(row) for row in lines}) == len(lines)
        views.append(sorted(records.deterministic_view(row) for row in lines))
    assert views[0] == views[1]
    summary = json.loads((two / "summary.json").read_text())
    assert set(summary["runs"]) == {"speculative"} and summary["speedup"] is None
    assert summary["runs"]["speculative"]["quality"]["rouge1"] >= 0
    assert "xsum: 6 examples x 2 samples" in stdout


def test_kill_halfway_then_resume(pair, xsum, tmp_path, monkeypatch):
    out = tmp_path / "run"
    log = tmp_path / "killed.log"
    args = _xsum_args(pair, xsum, out)
    total = len(tiny_models.XSUM_DOCS) * 2
    proc = subprocess.Popen([sys.executable, str(DRIVER), str(log), "0.3", "--", *args],
                            cwd=REPO, env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    examples = out / "examples.jsonl"
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if examples.exists() and examples.read_bytes().count(b"\n") >= 4:
                break
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    killed = examples.read_bytes()
    complete = killed[:killed.rfind(b"\n") + 1]
    done = [json.loads(row) for row in complete.decode("utf-8").splitlines()]
    assert 4 <= len(done) < total, "the run was not killed halfway"
    assert len({records.key_of(row) for row in done}) == len(done)
    assert not (out / "summary.json").exists()

    # --resume (through the library, to record what is generated).
    from pipelines import generation  # pylint: disable=import-outside-toplevel
    generated = []
    original = generation.Generator._generate  # pylint: disable=protected-access

    def recording(self, rows, mode, k, args_):
        result = original(self, rows, mode, k, args_)
        generated.extend(records.key_of(r) for r in result)
        return result

    monkeypatch.setattr(generation.Generator, "_generate", recording)
    _, summary = _in_process([*args, "--resume"])
    final = examples.read_bytes()
    assert final.startswith(complete)
    lines = [json.loads(row) for row in final.decode("utf-8").splitlines()]
    keys = [records.key_of(row) for row in lines]
    assert len(keys) == len(set(keys)) == total
    assert sorted(generated) == sorted(set(keys) - {records.key_of(row) for row in done})
    assert summary["runs"]["autoregressive"]["latency"]["num_tokens"] > 0


def test_sweep_prints_a_per_k_table_and_resuming_a_finished_run_changes_nothing(
        pair, xsum, tmp_path):
    out = tmp_path / "sweep"
    args = _xsum_args(pair, xsum, out, "--k_sweep", "0,2")  # Calibration: the main command.
    first = _run(args)
    assert first.returncode == 0, first.stderr[-3000:]
    sweep = json.loads((out / "sweep.json").read_text())
    table = first.stdout[first.stdout.index("K sweep"):].splitlines()[1:]
    assert table[0].split() == ["K", "ms/token", "speed-up", "acceptance", "p50", "(ms)",
                                "p99", "(ms)"]
    for row, entry in zip(table[1:], sweep):
        cells = row.split()
        assert cells[0] == str(entry["k"])
        assert cells[1] == f"{entry['latency']['ms_per_token']:.3f}"
        assert cells[2] == f"{entry['speedup']:.2f}x"
        assert cells[5] == f"{1e3 * entry['latency']['seq_time_p99_s']:.1f}"
    assert len(table) == 1 + 2
    # Every line carries the prompt text beside its hash.
    docs = {f"doc{i}": doc for i, doc in enumerate(tiny_models.XSUM_DOCS)}
    for row in tiny_models.read_lines(str(out / "examples.jsonl")):
        assert row["prompt_sha256"] == records.prompt_sha256(row["prompt"])
        assert docs[row["id"]] in row["prompt"]

    files = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.iterdir()}
    again = _run([*args, "--resume"])
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("\n") == 1 and "already finished" in again.stdout, again.stdout
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.iterdir()} == files


def test_auto_draft_length_runs_records_resumes_and_matches_greedy(pair, xsum, tmp_path):
    out = tmp_path / "auto"
    args = _xsum_args(pair, xsum, out, "--k", "auto", "--temperature", "0")
    first = _run(args)
    assert first.returncode == 0, first.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["k"] == "auto"
    spec = summary["runs"]["speculative"]
    assert spec["predicted_speedup"] is None and spec["acceptance"]["acceptance_rate"] >= 0
    lines = tiny_models.read_lines(str(out / "examples.jsonl"))
    by_mode = {}
    for row in lines:
        by_mode.setdefault(row["mode"], {})[row["id"]] = row
    assert {r["k"] for r in by_mode["speculative"].values()} == {"auto"}
    # Greedy: whichever mode each call ran, the outputs are the autoregressive ones.
    assert {i: r["output"] for i, r in by_mode["speculative"].items()} == {
        i: r["output"] for i, r in by_mode["autoregressive"].items()}
    again = _run([*args, "--resume"])
    assert again.returncode == 0 and "already finished" in again.stdout, again.stderr[-2000:]


def test_a_feature_draft_runs_end_to_end(pair, xsum, tmp_path):
    """--draft DIR of a feature draft: bound to --target, exact, named in the summary (its
    calibration through `alone()`: tests/pipelines/test_generation.py)."""
    feature_draft = tiny_models.make_feature_draft(str(tmp_path / "feature_draft"),
                                                   pair["target"])
    out = tmp_path / "feature"
    args = _xsum_args(dict(pair, draft=feature_draft), xsum, out, "--temperature", "0",
                      "--limit", "3")
    output_dir, summary = _in_process(args)
    assert output_dir == str(out)
    assert summary["draft"] == feature_draft and summary["target"] == pair["target"]
    assert set(summary["runs"]) == {"speculative", "autoregressive"}
    acceptance = summary["runs"]["speculative"]["acceptance"]
    assert 0.0 <= acceptance["acceptance_rate"] <= 1.0
    assert summary["runs"]["speculative"]["latency"]["num_tokens"] > 0
    lines = tiny_models.read_lines(str(out / "examples.jsonl"))
    by_mode = {}
    for row in lines:
        by_mode.setdefault(row["mode"], {})[row["id"]] = row["output"]
    assert len(by_mode["speculative"]) == 3
    assert by_mode["speculative"] == by_mode["autoregressive"]  # Greedy: exact.
    config = json.loads((out / "run_config.json").read_text())
    assert config["spec"]["draft"] == feature_draft


@pytest.mark.parametrize("limit", [
    12, pytest.param(None, marks=pytest.mark.slow, id="all-164")])
def test_completions_of_canonical_solutions_report_pass_at_1_of_100(tmp_path, limit):
    path = tmp_path / "canonical.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for p in humaneval.load_problems().values():
            f.write(json.dumps({"task_id": p["task_id"],
                                "completion": p["canonical_solution"]}) + "\n")
    limit_args = [] if limit is None else ["--limit", str(limit)]
    result = _run(["--task", "humaneval", "--completions", str(path), *limit_args,
                   "--output_dir", str(tmp_path / "run")], timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["runs"]["completions"]["quality"] == {"pass@1": 100.0}
    assert summary["num_examples"] == (limit or 164)
    assert "pass@1 100.00" in result.stdout


def test_config_file_values_and_explicit_flags_win(tmp_path):
    from evals import run  # pylint: disable=import-outside-toplevel
    from evals.orchestration import flags  # pylint: disable=import-outside-toplevel
    from evals.orchestration.spec import UsageError  # pylint: disable=import-outside-toplevel

    config = tmp_path / "exp.py"
    config.write_text(
        "import ml_collections\n\n\n"
        "def get_config(arg=None):\n"
        "    c = ml_collections.ConfigDict()\n"
        "    c.task = 'humaneval'\n"
        "    c.k = 3\n"
        "    c.k_sweep = [0, 1, 3]\n"
        "    c.limit = 10 if arg is None else int(arg)\n"
        "    return c\n")
    argv = ["--config", f"{config}:5", "--k", "2", "--direct_num_workers", "2"]
    parser = flags.build_parser(run.PROG, run.__doc__)
    args, beam_args = parser.parse_known_args(argv)
    values = flags.flag_values(parser, argv, args, beam_args)
    assert (values["task"], values["k"], values["limit"]) == ("humaneval", 2, 5)
    assert values["k_sweep"] == [0, 1, 3] and values["beam_args"] == ["--direct_num_workers", "2"]
    assert values["max_new_tokens"] == 128  # Neither config nor flag: the default.

    bad = tmp_path / "bad.py"
    bad.write_text("def get_config():\n    return {'nonsense': 1}\n")
    with pytest.raises(UsageError, match="'nonsense', which is not an evals.run"):
        flags.load_config(str(bad))
    with pytest.raises(UsageError, match="does not exist"):
        flags.load_config(str(tmp_path / "missing.py"))


def test_main_command_on_the_embedded_default(tmp_path):
    """README's main command (`--task humaneval --k 4`, no model flags), on 3 problems."""
    out = tmp_path / "run"
    result = _run(["--task", "humaneval", "--k", "4", "--limit", "3", "--max_new_tokens", "48",
                   "--output_dir", str(out)], timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["target"] == "zoo:tiny-code-target"
    assert summary["calibration"]["draft_cost_ratio"] is not None  # Calibrated by default.
    runs = summary["runs"]
    assert set(runs) == {"autoregressive", "speculative"}
    for run in runs.values():
        assert set(run["quality"]) == {"pass@1"}
    # Greedy: the speculative run must produce the baseline's completions, so equal quality.
    assert runs["speculative"]["quality"] == runs["autoregressive"]["quality"]
    assert runs["speculative"]["acceptance"]["acceptance_rate"] > 0.3
    assert summary["speedup"] > 0
    rows = tiny_models.read_lines(str(out / "examples.jsonl"))
    # The calibrated model's costs are fitted to the run's own requests (3 per mode): the
    # summary holds exactly the fits of the records' (time_s, rounds). Three timed requests
    # beside another test worker can give a non-positive slope, which is no fit (and then
    # no `in_run`), so the expectation is recomputed from the records, not assumed.
    fits = {}
    for mode in ("autoregressive", "speculative"):
        acc = request_cost.RequestCostAccumulator.create()
        for row in rows:
            if row["mode"] == mode:
                acc.add(row["time_s"], row["rounds"])
        assert acc.requests == 3
        fits[mode] = acc.extract()
    if fits["autoregressive"] and fits["speculative"]:
        in_run = summary["calibration"]["in_run"]
        assert in_run["requests"] == {"0": 3, "4": 3}
        assert in_run["round_s"]["4"] == pytest.approx(fits["speculative"]["iteration_s"])
        assert in_run["target_step_s"] == pytest.approx(fits["autoregressive"]["iteration_s"])
        assert (summary_lib.round_cost(summary["calibration"]).round_s(4)
                == in_run["round_s"]["4"])
    else:
        assert "in_run" not in summary["calibration"]
    by_mode = {}
    for row in rows:
        by_mode.setdefault(row["mode"], {})[row["id"]] = row["output"]
    assert by_mode["speculative"] == by_mode["autoregressive"] and len(rows) == 6
    # The README's promise: no sweep.json without --k_sweep.
    assert sorted(p.name for p in out.iterdir()) == [
        "dead_letter.jsonl", "examples.jsonl", "run_config.json", "summary.json"]
    # Quiet (no TensorFlow native log line) and a progress display that names its phases
    # and counts examples like the header ("3 examples x 1 samples").
    assert not re.search(r"absl::InitializeLog|^[IWEF]\d{4} |cpu_feature_guard",
                         result.stderr, re.M), result.stderr[-3000:]
    assert "3/3" in result.stderr and "AR 3/3 · k=4 3/3" in result.stderr, result.stderr
    assert "writing outputs" in result.stderr
    assert "humaneval: 3 examples x 1 samples" in result.stdout


def _stderr_lines(stderr):
    """Non-empty stderr lines without TensorFlow's native start-up logs and the bar."""
    noise = ("I0000", "E0000", "W0000", "WARNING: All log messages", "WARNING:root:",
             "To enable the following instructions")
    bar = re.compile(r"^[^|]*: +\d+%\|")  # "PHASE:  40%|####  | 2/6 [...]" (tqdm)
    return [row for row in stderr.replace("\r", "\n").splitlines()
            if row.strip() and not row.startswith(noise) and not bar.match(row)]


@pytest.mark.parametrize("signum, exit_code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_ends_with_a_resume_hint_then_resume_completes(pair, xsum, tmp_path, signum,
                                                              exit_code):
    out = tmp_path / "run"
    args = _xsum_args(pair, xsum, out)
    proc = subprocess.Popen([sys.executable, str(DRIVER), str(tmp_path / "log"), "0.3", "--",
                             *args], cwd=REPO, env=ENV, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    examples = out / "examples.jsonl"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if examples.exists() and examples.read_bytes().count(b"\n") >= 2:
            break
        time.sleep(0.05)
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == exit_code, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert _stderr_lines(stderr) == [
        f"evals.run: interrupted; finished records are in {out}; continue with "
        f"--output_dir {out} --resume"]
    assert not (out / ".run.lock").exists() and not (out / "summary.json").exists()
    _, summary = _in_process([*args, "--resume"])
    lines = [json.loads(row) for row in examples.read_text(encoding="utf-8").splitlines()]
    assert len({records.key_of(row) for row in lines}) == len(lines) == \
        2 * len(tiny_models.XSUM_DOCS)
    assert summary["num_failed"] == 0


def test_second_run_into_a_folder_in_use_exits_2_naming_the_holder(pair, xsum, tmp_path):
    from pipelines import run_lock  # pylint: disable=import-outside-toplevel
    out = tmp_path / "run"
    out.mkdir()
    with run_lock.hold(str(out)):  # This process plays the first run.
        result = _run(_xsum_args(pair, xsum, out))
    assert result.returncode == 2, result.stderr[-3000:]
    (line,) = _stderr_lines(result.stderr)
    assert line.startswith(f"evals.run: error: --output_dir {out} is in use by another run "
                           f"(pid {os.getpid()} on {socket.gethostname()}, started 20")
    assert line.endswith("); wait for it to finish or choose another --output_dir")
    assert os.listdir(out) == []


def _mount_tmpfs(path, size):
    path.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {result.stderr.strip()}; "
                    f"tests/pipelines/test_journal.py injects ENOSPC instead")


def test_full_disk_is_one_line_and_the_folder_resumes_elsewhere(pair, xsum, tmp_path):
    small = tmp_path / "small"
    _mount_tmpfs(small, "12k")  # Room for run_config.json and a few records only.
    try:
        out = small / "run"
        result = _run(_xsum_args(pair, xsum, out))
        assert result.returncode == 1, result.stderr[-3000:]
        assert "Traceback" not in result.stderr
        assert _stderr_lines(result.stderr) == [
            f"evals.run: error: no space left on device while writing to {out}; its finished "
            f"records are kept: free space (or copy the folder to another disk) and continue "
            f"with --output_dir {out} --resume"]
        journal = (out / "examples.jsonl").read_bytes()
        assert journal and journal.endswith(b"\n")  # Whole lines only.
        roomy = tmp_path / "roomy"
        subprocess.run(["cp", "-r", str(out), str(roomy)], check=True)
    finally:
        subprocess.run(["umount", str(small)], check=False)
    done = len(journal.splitlines())
    assert 0 < done < 2 * len(tiny_models.XSUM_DOCS)
    _, summary = _in_process([*_xsum_args(pair, xsum, roomy), "--resume"])
    final = (roomy / "examples.jsonl").read_bytes()
    assert final.startswith(journal)
    keys = [records.key_of(json.loads(row)) for row in final.splitlines()]
    assert len(keys) == len(set(keys)) == 2 * len(tiny_models.XSUM_DOCS)
    assert summary["num_failed"] == 0


def test_completions_with_lone_surrogates_fail_only_their_record(tmp_path):
    path = tmp_path / "completions.jsonl"
    problems = list(humaneval.load_problems().values())[:2]
    path.write_text(json.dumps({"task_id": problems[0]["task_id"], "completion": "\ud800"})
                    + "\n" + json.dumps({"task_id": problems[1]["task_id"],
                                         "completion": problems[1]["canonical_solution"]})
                    + "\n")
    out = tmp_path / "run"
    args = ["--task", "humaneval", "--limit", "2", "--completions", str(path),
            "--output_dir", str(out)]
    for extra in ([], ["--resume"]):
        result = _run([*args, *extra])
        assert result.returncode == 0, result.stderr[-3000:]
        assert "1 failed (see dead_letter.jsonl" in result.stdout
        (letter,) = [json.loads(row) for row in
                     (out / "dead_letter.jsonl").read_text(encoding="utf-8").splitlines()]
        assert letter["id"] == problems[0]["task_id"] and "surrogate" in letter["reason"]
        (line,) = [json.loads(row) for row in
                   (out / "examples.jsonl").read_text(encoding="utf-8").splitlines()]
        assert line["id"] == problems[1]["task_id"] and line["quality"]["passed"]
