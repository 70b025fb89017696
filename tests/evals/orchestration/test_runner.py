"""Tests for evals.orchestration.runner: validation before anything is written, options, reporting."""

import json
import os

import pytest

from evals.orchestration.spec import UsageError
from evals.orchestration.spec import build_run_spec
from pipelines import outputs
from evals import memory_maps
from evals.orchestration import runner


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


def test_prepare_counts_the_decoding_programs_modes_times_prompt_buckets(pair, tmp_path):
    from pipelines import generation
    from tfspec import generation as tfspec_generation
    spec = _spec(pair, tmp_path, limit=6, k_sweep="0,1,2")
    prepared = runner.prepare(spec)
    tokenizer = generation.load_models(prepared.model_spec).tokenizer
    buckets = {tfspec_generation.prompt_bucket(len(tokenizer.encode(e.prompt)))
               for e in prepared.plan.examples}
    assert len(spec.modes) == 3 and len(buckets) >= 2
    assert prepared.num_programs == 3 * len(buckets)
    assert runner.prepare(_spec(pair, tmp_path, limit=6, k=0)).num_programs == len(buckets)


@pytest.mark.parametrize("programs, limit, noted", [
    (120, "65530", True), (memory_maps.MANY_PROGRAMS, "65530\n", True), (99, "65530", False),
    (120, str(memory_maps.SAFE_MAX_MAP_COUNT), False), (120, "not a number", False)])
def test_memory_map_note_for_many_programs_under_a_low_map_limit(tmp_path, programs, limit,
                                                                 noted):
    path = tmp_path / "max_map_count"
    path.write_text(limit.replace("\\n", "\n"))
    note = runner.memory_map_note(programs, str(path))
    assert (note is not None) == noted
    if noted:
        assert "\n" not in note and f"~{programs} decoding programs (modes x" in note
        assert "--resume then continues" in note
        assert "vm.max_map_count 65530" in note and "vm.max_map_count=262144" in note
    assert runner.memory_map_note(500, str(tmp_path / "absent")) is None


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
    assert "NOT" not in text and "one request length" not in text
    sampled = dict(summary, matched_speedup=1.07, sampling={"temperature": 1.0})
    assert "measured speed-up 1.50x (1.07x at one request length" in runner.describe(
        "runs/x", sampled)
    greedy = dict(sampled, sampling={"temperature": 0.0})  # Equal lengths: one number.
    assert "one request length" not in runner.describe("runs/x", greedy)
    from tfspec import acceptance  # pylint: disable=import-outside-toplevel
    summary["acceptance"] = acceptance.describe("typical")
    assert "does NOT follow the target's distribution (epsilon 0.09, delta 0.3)" in (
        runner.describe("runs/x", summary))


@pytest.mark.parametrize("values, record", [
    ({}, {"rule": "exact", "distribution_preserving": True}),
    ({"acceptance": "typical", "typical_epsilon": 0.2},
     {"rule": "typical", "epsilon": 0.2, "delta": 0.3, "distribution_preserving": False}),
    ({"acceptance": "typical", "k": 0}, None),  # Nothing is verified: no rule to record.
])
def test_summary_header_records_the_acceptance_rule(values, record):
    header = runner.acceptance_record(build_run_spec({"task": "humaneval", **values}))
    if record is None:
        assert header is None
    else:
        assert {key: header[key] for key in record} == record


def _completions_spec(tmp_path, **overrides):
    from evals import humaneval  # pylint: disable=import-outside-toplevel
    path = tmp_path / "completions.jsonl"
    if not path.exists():
        problems = list(humaneval.load_problems().values())[:2]
        path.write_text("".join(json.dumps({"task_id": p["task_id"],
                                            "completion": p["canonical_solution"]}) + "\n"
                                for p in problems))
    values = dict(task="humaneval", completions=str(path), limit=2,
                  output_dir=str(tmp_path / "run"))
    values.update(overrides)
    return build_run_spec(values)


def test_two_runs_prepared_for_one_new_folder_the_second_is_refused(tmp_path):
    first = runner.prepare(_completions_spec(tmp_path))
    second = runner.prepare(_completions_spec(tmp_path, num_samples=1, seed=7))
    runner.execute(first, progress=False)
    before = {name: (tmp_path / "run" / name).read_bytes()
              for name in (outputs.RUN_CONFIG, outputs.EXAMPLES, outputs.SUMMARY)}
    with pytest.raises(UsageError, match="already holds a run"):
        runner.execute(second, progress=False)
    assert before == {name: (tmp_path / "run" / name).read_bytes() for name in before}


def test_a_folder_held_by_a_live_run_is_refused_in_prepare_and_execute(tmp_path):
    from pipelines import run_lock  # pylint: disable=import-outside-toplevel
    spec = _completions_spec(tmp_path)
    prepared = runner.prepare(spec)
    (tmp_path / "run").mkdir()
    with run_lock.hold(str(tmp_path / "run")):
        for attempt in (lambda: runner.prepare(spec),
                        lambda: runner.execute(prepared, progress=False)):
            with pytest.raises(UsageError, match=rf"in use by another run \(pid {os.getpid()} "):
                attempt()
    assert os.listdir(tmp_path / "run") == []


def test_resume_with_a_key_only_journal_line_is_a_one_line_error(tmp_path):
    runner.execute(runner.prepare(_completions_spec(tmp_path)), progress=False)
    examples = tmp_path / "run" / outputs.EXAMPLES
    with open(examples, "a", encoding="utf-8") as f:
        f.write(json.dumps({"id": "HumanEval/7", "sample": 0, "mode": "completions"}) + "\n")
    with pytest.raises(UsageError) as error:
        runner.prepare(_completions_spec(tmp_path, resume=True))
    message = str(error.value)
    assert f"{examples} line 3 is not a complete record (missing fields prompt_sha256" \
           in message and "\n" not in message


def test_a_k_beyond_the_medusa_heads_is_refused_in_prepare(tmp_path):
    spec = build_run_spec(dict(task="humaneval", limit=1, draft="zoo:tiny-code-medusa",
                               k=5, output_dir=str(tmp_path / "run")))
    with pytest.raises(UsageError, match=r"^--k 5: this Medusa draft has 4 heads, so it "
                                         r"drafts at most k = 4 tokens per round; got k = 5; "
                                         r"lower --k$"):
        runner.prepare(spec)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("k,message", [
    ("auto", r"^--k auto drafts up to k = 4 tokens per round: this Medusa draft has 3 heads, "
             r"so it drafts at most k = 3 tokens per round; got k = 4; use a fixed --k "
             r"instead$"),
    (4, r"^--k 4: this Medusa draft has 3 heads, .*; lower --k$"),
    (3, None)])
def test_the_draft_k_check_names_auto_when_auto_is_too_long(k, message):
    """`--k auto` compiles for `AutoDraft().k_max` (4): three heads refuse it in words that
    name auto, not a --k 4 the user never typed."""
    from types import SimpleNamespace  # pylint: disable=import-outside-toplevel
    from tfspec.models import MedusaConfig, MedusaHeads  # pylint: disable=import-outside-toplevel
    from tfspec.testing import tiny_t5  # pylint: disable=import-outside-toplevel
    target, _ = tiny_t5.enumerable_pair()
    heads = MedusaHeads(MedusaConfig.for_target(target, heads=3, d_ff=8), seed=0)
    spec = build_run_spec(dict(task="humaneval", limit=1, k=k, output_dir="unused"))
    if message is None:
        runner._check_draft_k(spec, SimpleNamespace(draft=heads))
        return
    with pytest.raises(UsageError, match=message):
        runner._check_draft_k(spec, SimpleNamespace(draft=heads))


def test_max_new_tokens_beyond_memory_is_refused_in_prepare(tmp_path):
    spec = build_run_spec(dict(task="humaneval", limit=1, max_new_tokens=10**9,
                               output_dir=str(tmp_path / "run")))
    with pytest.raises(UsageError, match=r"max_new_tokens=1000000000 .* more than this "
                                         r"machine's .* \(--max_new_tokens, --batch_size\)"):
        runner.prepare(spec)
    assert not (tmp_path / "run").exists()
