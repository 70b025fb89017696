"""Tests for pipelines.runner: validation before anything is written, options, reporting."""

import os

import pytest

from evals.run_spec import UsageError
from evals.run_spec import build_run_spec
from pipelines import outputs
from pipelines import runner


def _spec(pair, tmp_path, **overrides):
    values = dict(task="humaneval", k=2, target=pair["target"], draft=pair["draft"], limit=1,
                  max_new_tokens=4, output_dir=str(tmp_path / "run"))
    values.update(overrides)
    return build_run_spec(values)


def test_prepare_writes_nothing_and_plans(pair, tmp_path):
    prepared = runner.prepare(_spec(pair, tmp_path))
    assert not (tmp_path / "run").exists()
    assert prepared.plan.pending_records == 2 and not prepared.large_model
    assert prepared.model_spec.draft == pair["draft"]
    assert runner.prepare(_spec(pair, tmp_path, k=0)).model_spec.draft is None


def test_beam_options_pass_through_and_typos_are_caught(pair, tmp_path):
    spec = _spec(pair, tmp_path, beam_args=["--direct_num_workers", "2",
                                            "--direct_running_mode=multi_processing"])
    options = runner.pipeline_options(spec).get_all_options()
    assert options["direct_num_workers"] == 2 and options["runner"] == "DirectRunner"
    with pytest.raises(UsageError, match="unknown flag --direct_num_worker"):
        runner.pipeline_options(_spec(pair, tmp_path, beam_args=["--direct_num_worker", "2"]))


def test_existing_run_needs_resume_with_the_same_settings(pair, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    outputs.write_json(str(out / outputs.RUN_CONFIG),
                       {"identity": _spec(pair, tmp_path).identity()})
    with pytest.raises(UsageError, match="already holds a run; pass --resume"):
        runner.prepare(_spec(pair, tmp_path))
    with pytest.raises(UsageError, match="used seed=0, not 7"):
        runner.prepare(_spec(pair, tmp_path, resume=True, seed=7))
    (out / outputs.EXAMPLES).write_text("garbage\n")
    with pytest.raises(UsageError, match="line 1 is not a complete record"):
        runner.prepare(_spec(pair, tmp_path, resume=True))


@pytest.mark.parametrize("make_path, message", [
    (lambda t: t / "file" / "run", "is not a folder"),
    (lambda t: "/proc/tfspec-test-run", "not writable"),
])
def test_unwritable_output_dir(tmp_path, make_path, message):
    (tmp_path / "file").write_text("x")
    problem = outputs.check_output_dir(str(make_path(tmp_path)), resume=False)
    assert message in problem
    assert os.listdir(tmp_path) == ["file"]


def test_describe():
    summary = {"task": "humaneval", "num_examples": 2, "num_samples": 1, "speedup": 1.5,
               "num_failed": 1,
               "runs": {"speculative": {"quality": {"pass@1": 50.0},
                                        "latency": {"ms_per_token": 2.0},
                                        "acceptance": {"acceptance_rate": 0.75},
                                        "predicted_speedup": 1.8}}}
    text = runner.describe("runs/x", summary)
    assert "pass@1 50.00" in text and "acceptance 0.750" in text
    assert "measured speed-up 1.50x" in text and "1 failed" in text
