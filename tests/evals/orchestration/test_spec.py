"""Tests for evals.orchestration.spec: flag values -> RunSpec, and the one-line usage errors."""

import pytest

from evals.orchestration import spec as run_spec
from evals.orchestration.spec import UsageError
from evals.orchestration.spec import build_run_spec


def test_defaults():
    spec = build_run_spec({"task": "humaneval"})
    assert (spec.k, spec.target, spec.draft) == (4, "zoo:tiny-code-target", "zoo:tiny-code-draft")
    assert spec.ks == (0, 4) and spec.baseline and spec.batch_size == 1
    assert spec.modes == (("autoregressive", 0), ("speculative", 4))
    assert spec.sampling == {"temperature": 0.0, "top_k": 0, "top_p": 1.0}
    assert spec.calibrate and spec.runner == "DirectRunner"


def test_k_sweep_modes_and_default_k():
    spec = build_run_spec({"task": "humaneval", "k_sweep": "3,0,1,1"})
    assert spec.k_sweep == (0, 1, 3) and spec.k == 3
    assert spec.modes == (("autoregressive", 0), ("speculative_k1", 1), ("speculative", 3))
    spec = build_run_spec({"task": "humaneval", "k_sweep": [1, 2], "k": 5, "baseline": False})
    assert spec.ks == (1, 2, 5)
    assert build_run_spec({"task": "humaneval", "k": 0}).modes == (("autoregressive", 0),)
    assert not build_run_spec({"task": "humaneval", "k": 0}).uses_draft


@pytest.mark.parametrize("values, modes, k", [
    ({"k": "auto"}, (("autoregressive", 0), ("speculative", "auto")), "auto"),
    ({"k": "AUTO", "baseline": False}, (("speculative", "auto"),), "auto"),
    ({"k_sweep": "auto,2,0"},
     (("autoregressive", 0), ("speculative", 2), ("speculative_auto", "auto")), 2),
    ({"k_sweep": "auto"}, (("autoregressive", 0), ("speculative", "auto")), "auto"),
])
def test_auto_draft_length_is_a_mode(values, modes, k):
    spec = build_run_spec({"task": "humaneval", **values})
    assert spec.modes == modes and spec.k == k and spec.uses_draft
    assert spec.identity()["k"] == k


@pytest.mark.parametrize("values, message", [
    ({"k": "fast"}, "--k must be an integer"),
    ({"k_sweep": "1,fast"}, 'comma-separated integers or "auto"'),
])
def test_bad_auto_spellings_are_one_line_errors(values, message):
    with pytest.raises(UsageError, match=message):
        build_run_spec({"task": "humaneval", **values})


def test_completions_mode():
    spec = build_run_spec({"task": "humaneval", "completions": "x.jsonl", "pass_at": "1,10"})
    assert spec.modes == (("completions", 0),) and spec.ks == () and spec.pass_at == (1, 10)


@pytest.mark.parametrize("values, message", [
    ({}, "pass --task NAME"),
    ({"task": "mmlu"}, "unknown task 'mmlu'"),
    ({"task": "humaneval", "k": -1}, "--k must be >= 0"),
    ({"task": "humaneval", "k_sweep": "0,-2"}, "--k_sweep values must be >= 0"),
    ({"task": "humaneval", "k_sweep": "0,x"}, "--k_sweep takes comma-separated integers"),
    ({"task": "humaneval", "pass_at": "1,10"}, "pass@10 needs at least 10 samples"),
    ({"task": "humaneval", "pass_at": "0"}, "--pass_at values must be >= 1"),
    ({"task": "xsum", "pass_at": "1"}, "--pass_at applies to humaneval only"),
    ({"task": "humaneval", "num_samples": 0}, "--num_samples must be >= 1"),
    ({"task": "humaneval", "temperature": -1}, "--temperature must be >= 0"),
    ({"task": "humaneval", "top_p": 0}, "--top_p must be in (0, 1]"),
    ({"task": "humaneval", "top_k": -3}, "--top_k must be >= 0"),
    ({"task": "humaneval", "max_new_tokens": 0}, "--max_new_tokens must be >= 1"),
    ({"task": "humaneval", "batch_size": "two"}, "--batch_size must be an integer"),
    ({"task": "humaneval", "limit": 0}, "--limit must be >= 1"),
    ({"task": "humaneval", "resume": True}, "--resume needs --output_dir"),
    ({"task": "humaneval", "data_source": "tfds"}, "--data_source tfds is not available"),
    ({"task": "humaneval", "runner": "DataflowRunner", "output_dir": "runs/x"},
     "pass --output_dir gs://"),
    ({"task": "humaneval", "acceptance": "lenient"}, "--acceptance must be one of exact"),
    ({"task": "humaneval", "typical_epsilon": 0.1}, "apply to --acceptance typical only"),
    ({"task": "humaneval", "acceptance": "typical", "typical_epsilon": 0},
     "--typical_epsilon must be in (0, 1]"),
    ({"task": "humaneval", "acceptance": "typical", "typical_delta": -1},
     "--typical_delta must be > 0"),
])
def test_usage_errors_are_one_line(values, message):
    with pytest.raises(UsageError) as info:
        build_run_spec(values)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_identity_ignores_settings_a_resume_may_change():
    a = build_run_spec({"task": "humaneval", "limit": 2, "batch_size": 1})
    b = build_run_spec({"task": "humaneval", "limit": 5, "batch_size": 4, "k_sweep": "0,4"})
    assert a.identity() == b.identity()
    assert a.identity() != build_run_spec({"task": "humaneval", "seed": 1}).identity()


def test_remote_runner_accepts_object_store_output():
    spec = build_run_spec({"task": "humaneval", "runner": "DataflowRunner",
                           "output_dir": "gs://bucket/run"})
    assert not run_spec.is_local_runner(spec.runner)
    assert run_spec.is_local_runner("DirectRunner")


def test_typical_acceptance_is_part_of_a_runs_identity_and_its_arguments():
    exact = build_run_spec({"task": "humaneval"})
    typical = build_run_spec({"task": "humaneval", "acceptance": "typical",
                              "typical_delta": 0.5})
    assert exact.acceptance_args is None and exact.identity()["acceptance"] is None
    assert typical.acceptance_args == {"rule": "typical", "epsilon": None, "delta": 0.5}
    assert typical.identity() != exact.identity()  # A resume cannot mix the two rules.


def test_the_typical_threshold_defaults_in_the_help_are_tfspecs():
    from evals.orchestration import flags  # pylint: disable=import-outside-toplevel
    from tfspec import acceptance  # pylint: disable=import-outside-toplevel
    actions = {a.dest: a for a in flags.build_parser("evals.run", "")._actions}  # pylint: disable=protected-access
    assert f"tfspec's, {acceptance.TYPICAL_EPSILON:g})" in actions["typical_epsilon"].help
    assert f"tfspec's, {acceptance.TYPICAL_DELTA:g})" in actions["typical_delta"].help
    assert tuple(actions["acceptance"].choices) == acceptance.RULES
