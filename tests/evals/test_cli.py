"""One command-line convention for every entry point (evals.cli): help, defaults, errors."""

import importlib
import pathlib
import re
import subprocess
import sys

import pytest

import tfspec
from evals import cli
from evals import run
from evals.orchestration import flags
from evals.orchestration import spec as spec_lib
from evals import tasks

REPO = pathlib.Path(__file__).resolve().parents[2]
ENTRY_POINTS = ("evals.run", "evals.report", "evals.report_example", "bench.speedup",
                "bench.batch", "bench.roofline", "bench.loop_overhead",
                "bench.round_breakdown", "bench.peers", "bench.row_determinism",
                "bench.draft_kinds", "recipes.tiny_code.train", "tfspec.demo")
# A default each program's help must show (one flag per program).
DEFAULT_SHOWN = {
    "evals.run": "(default: 128)", "evals.report_example": "(default: runs/embedded_default)",
    "bench.speedup": "(default: 1,2,4)", "bench.batch": "(default: 4)",
    "bench.roofline": "(default:", "bench.loop_overhead": "(default: t5-base)",
    "bench.round_breakdown": "(default: 1,8)", "bench.peers": "(default: 4)",
    "bench.row_determinism": "(default: 1,2,8,32)",
    "bench.draft_kinds": "(default: t5,feature,medusa,ngram,prompt_lookup)",
    "recipes.tiny_code.train": "(default: all)", "tfspec.demo": "(default: 32)",
}


def _main(module_name, argv):
    """Runs an entry point's main(argv) in this process; returns its exit status."""
    module = importlib.import_module(module_name)
    try:
        return module.main(argv)
    except SystemExit as e:
        return e.code


@pytest.mark.parametrize("flag", ["-h", "--help"])
@pytest.mark.parametrize("module_name", ENTRY_POINTS)
def test_help_exits_0_and_shows_defaults(module_name, flag, capsys):
    assert _main(module_name, [flag]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: "), out[:200]
    assert DEFAULT_SHOWN.get(module_name, "") in " ".join(out.split())  # Help wraps lines.
    assert "--verbose" in out or module_name.startswith("evals.report")


@pytest.mark.parametrize("module_name", ENTRY_POINTS)
def test_a_bad_flag_is_one_line_and_exit_2(module_name, capsys):
    # evals.run passes unknown flags to Beam (tests/evals/test_run.py); a bad value is wrong.
    argv = (["--task", "humaneval", "--k", "four"] if module_name == "evals.run"
            else ["--no_such_flag_at_all"])
    assert _main(module_name, argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ": error: " in err and "Traceback" not in err, err


def test_evals_run_help_from_the_shell():
    for flag in ("-h", "--help"):
        result = subprocess.run([sys.executable, "-m", "evals.run", flag], cwd=REPO,
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0 and "usage: python -m evals.run" in result.stdout
        assert "docs/design.md section 6" in result.stdout and result.stderr == ""


@pytest.mark.parametrize("argv,expected", [
    (["--nobaseline", "--nocalibrate", "--resume"],
     {"baseline": False, "calibrate": False, "resume": True}),
    (["--baseline=false", "--calibrate=0", "--resume=true"],
     {"baseline": False, "calibrate": False, "resume": True}),
    (["--no-baseline", "--prompt_eos"], {"baseline": False, "prompt_eos": True}),
    ([], {"baseline": True, "calibrate": True, "resume": False, "prompt_eos": False}),
])
def test_absl_boolean_spellings_keep_working(argv, expected):
    args, spec = flags.parse(["--task", "humaneval", "--output_dir", "x", *argv], run.PROG, run.__doc__)
    assert {name: getattr(spec, name) for name in expected} == expected
    assert args.verbose is False


def test_beam_flags_pass_through_and_explicit_values_are_seen():
    parser = flags.build_parser(run.PROG, run.__doc__)
    argv = ["--task=humaneval", "--k", "2", "--direct_num_workers", "2",
            "--direct_running_mode=multi_processing"]
    args, beam_args = parser.parse_known_args(argv)
    assert beam_args == ["--direct_num_workers", "2", "--direct_running_mode=multi_processing"]
    assert cli.explicit_values(parser, argv) == {"task": "humaneval", "k": 2}
    assert args.max_new_tokens == 128  # Defaults are restored after explicit_values.
    assert parser.parse_known_args([])[0].max_new_tokens == 128


@pytest.mark.parametrize("argv", [["--list_tasks"], ["--task", "list"]])
def test_list_tasks(argv, capsys):
    assert run.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == sorted(tasks.TASKS)
    assert any("HumanEval" in line for line in lines)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_dtype_flag(dtype):
    _, spec = flags.parse(["--task", "humaneval", "--dtype", dtype], run.PROG, run.__doc__)
    assert spec.dtype == dtype
    _, default = flags.parse(["--task", "humaneval"], run.PROG, run.__doc__)
    assert default.dtype is None
    # Resuming a run recorded before --dtype existed (float32) matches explicit float32.
    assert spec.identity()["dtype"] == (None if dtype == "float32" else dtype)


def test_bad_dtype_is_a_usage_error(capsys):
    assert _main("evals.run", ["--task", "humaneval", "--dtype", "float16"]) == 2
    assert "invalid choice: 'float16'" in capsys.readouterr().err
    with pytest.raises(spec_lib.UsageError, match="--dtype must be one of"):
        spec_lib.build_run_spec({"task": "humaneval", "dtype": "int8"})


def test_version_single_source_and_console_command(capsys, monkeypatch):
    setup_py = (REPO / "setup.py").read_text(encoding="utf-8")
    assert "version=_version()" in setup_py
    version_py = (REPO / "tfspec" / "_version.py").read_text(encoding="utf-8")
    assert re.search(r'__version__ = "([^"]+)"', version_py).group(1) == tfspec.__version__
    assert _main("evals.run", ["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"python -m evals.run {tfspec.__version__}"
    # The console command of setup.py runs evals.run under its own name.
    entry = re.search(r'"tfspec-eval = ([\w.]+):(\w+)"', setup_py)
    function = getattr(importlib.import_module(entry.group(1)), entry.group(2))
    monkeypatch.setattr(sys, "argv", ["tfspec-eval", "--list_tasks"])
    with pytest.raises(SystemExit) as exited:
        function()
    assert exited.value.code == 0 and "humaneval" in capsys.readouterr().out
    monkeypatch.setattr(sys, "argv", ["tfspec-eval", "-h"])
    with pytest.raises(SystemExit) as exited:
        function()
    assert exited.value.code == 0 and capsys.readouterr().out.startswith("usage: tfspec-eval")
