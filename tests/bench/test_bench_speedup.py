"""bench.speedup and bench.models on tiny random models (no wall-time assertions)."""

import json
import math
import os

import pytest

import tfspec
from bench import models as bench_models
from bench import speedup
from evals import memory_maps
from evals import walltime
from tests.bench.bench_fixtures import (CONTRACT_KEYS, FOREIGN, TINY, TINY_DRAFT,
                                        save_feature_draft, save_medusa_heads)


def _check_contract(record):
    for key in CONTRACT_KEYS:
        assert key in record, key
        assert math.isfinite(record[key]), (key, record[key])
    assert record["ar_ms_per_token"] > 0 and record["spec_ms_per_token"] > 0
    assert record["speedup"] == pytest.approx(
        record["ar_ms_per_token"] / record["spec_ms_per_token"])
    assert record["speedup_over_predicted"] == pytest.approx(
        record["speedup"] / record["predicted_speedup"])
    # The pooled acceptance rate is a drafted-weighted mean of the rows' rates.
    rows = [r for r in record["per_row_acceptance"] if math.isfinite(r)]
    assert min(rows) - 1e-12 <= record["acceptance_rate"] <= max(rows) + 1e-12
    assert record["draft_cost_ratio"] > 0
    a = min(1.0, record["beta_mean"])
    assert record["predicted_speedup"] == pytest.approx(
        walltime.predicted_speedup(a, record["k"], record["draft_cost_ratio"]))
    # The decode-phase fields are consistent with each other (nan: every call ended in its
    # first loop iteration, see `speedup.split_phases`; ratios over a non-positive time,
    # which tiny models' noisy eager timings can give, are nan too).
    if math.isnan(record["round_ms"]):
        return
    assert record["formula_round_ms"] == pytest.approx(
        record["k"] * record["draft_step_ms"] + record["target_step_ms"])
    _same(record["round_over_formula"], _ratio(record["round_ms"], record["formula_round_ms"]))
    c = _ratio(record["draft_step_ms"], record["target_step_ms"])  # nan or negative: no prediction
    _same(record["decode_predicted_speedup"],
          walltime.predicted_speedup(a, record["k"], c) if c >= 0 else math.nan)
    _same(record["decode_over_predicted"],
          _ratio(record["decode_speedup"], record["decode_predicted_speedup"]))


def _ratio(numerator, denominator):
    if not (math.isfinite(numerator) and math.isfinite(denominator)) or denominator <= 0:
        return math.nan
    return numerator / denominator


def _same(got, want):
    if math.isnan(want):
        assert math.isnan(got)
    else:
        assert got == pytest.approx(want)


@pytest.mark.parametrize("fixed, per_iteration, iterations, calls", [
    (0.05, 0.004, 30, 8), (0.0, 0.01, 2, 1), (0.2, 0.0, 9, 3)])
def test_split_phases_recovers_fixed_and_per_iteration_costs(fixed, per_iteration, iterations,
                                                              calls):
    full = calls * fixed + iterations * per_iteration
    one = calls * fixed + calls * per_iteration
    got = speedup.split_phases(full, one, iterations, calls)
    assert got == pytest.approx((per_iteration, fixed))


def test_a_run_of_many_programs_notes_a_low_memory_map_limit(tmp_path, monkeypatch):
    """The published sweep (~120 programs over these buckets) crashed LLVM at Linux's
    default limit; the note names the fix, and a small run or a raised limit gets none."""
    limit = tmp_path / "max_map_count"
    limit.write_text("65530\n")
    monkeypatch.setattr(memory_maps, "MAX_MAP_COUNT_PATH", str(limit))
    pool = [[5] * n for n in (18, 24, 236, 309)]
    sweep = speedup._parse_args(["--k", "1,2,3,4,5,6,7,8,auto", "--temperature", "0,1",
                                 "--fixed_costs", "true"])
    note = speedup.memory_map_note(pool, sweep)
    assert note and "\n" not in note and "sysctl -w vm.max_map_count=262144" in note
    assert "--resume" not in note
    assert speedup.memory_map_note(pool, speedup._parse_args(["--k", "4"])) is None
    limit.write_text(str(memory_maps.SAFE_MAX_MAP_COUNT))
    assert speedup.memory_map_note(pool, sweep) is None


def test_split_phases_is_nan_without_a_second_iteration():
    assert all(math.isnan(x) for x in speedup.split_phases(1.0, 1.0, 4, 4))


def test_matched_speedup_compares_one_request_length():
    """AR: 20 ms fixed + 1 ms per token; speculative: 22 ms fixed + 2 ms per round of 2.5
    tokens. Sampled at other lengths (100 AR tokens in 4 calls, 150 speculative), the plain
    ms-per-token ratio says 1.50 / 1.39 = 1.08x; at the same 31.25-token request both take
    their fixed part plus that length's iterations: 51.25 / 47.0 = 1.09x, whatever lengths
    each mode sampled."""
    ar = (0.020, 0.001, 100, 100)
    spec = (0.022, 0.002, 60, 150)
    got = speedup.matched_speedup(ar, spec, 31.25)
    assert got == pytest.approx((0.020 + 31.25 * 0.001) / (0.022 + 31.25 / 2.5 * 0.002))
    # Other sampled lengths at the same costs: the same answer.
    assert speedup.matched_speedup((0.020, 0.001, 40, 40), (0.022, 0.002, 24, 60),
                                   31.25) == pytest.approx(got)
    assert math.isnan(speedup.matched_speedup(ar, (float("nan"),) * 2 + (60, 150), 31.25))


@pytest.mark.parametrize("flags, draft_costs", [
    ([], [tfspec.AutoDraft().draft_cost]),
    (["--auto_draft_cost", "hf"], [None]),
    (["--auto_draft_cost", "0.5"], [0.5]),
    (["--auto_draft_cost", "hf,0.5,hf"], [None, 0.5]),  # One "auto" record each.
])
def test_auto_draft_cost_flag(flags, draft_costs, tmp_path):
    out = tmp_path / "speedup.json"
    speedup.main(["--target", TINY, "--draft", TINY_DRAFT, "--k", "1,auto", "--temperature",
                  "1", "--max_new_tokens", "4", "--repeats", "1", "--num_prompts", "1",
                  "--eager", "--json", str(out)] + flags)
    payload = json.loads(out.read_text())
    assert payload["auto"]["draft_cost"] == draft_costs
    assert [(r["k"], r["auto_draft_cost"]) for r in payload["records"]] == (
        [(1, None)] + [("auto", cost) for cost in draft_costs])


def test_parse_random_config_overrides_and_decoder_layers():
    config = bench_models.parse_random_config("random:t5-small:d_model=32,num_layers=1")
    assert (config.d_model, config.num_layers, config.num_decoder_layers) == (32, 1, 1)
    config = bench_models.parse_random_config("random:t5-small:num_layers=2,num_decoder_layers=1")
    assert (config.num_layers, config.num_decoder_layers) == (2, 1)
    assert bench_models.parse_random_config("random:t5-small") == \
        bench_models.tfspec.models.T5Config.preset("t5-small")
    with pytest.raises(ValueError):
        bench_models.parse_random_config("random:t5-small:d_model")
    with pytest.raises(ValueError):
        bench_models.parse_random_config("random:")


def test_random_prompts_and_batches():
    target = bench_models.load(TINY)
    pool = bench_models.prompts(TINY, target, num_prompts=3, prompt_length=5)
    assert len(pool) == 3 and all(len(p) == 5 for p in pool)
    assert all(3 <= t < 64 for p in pool for t in p)
    assert bench_models.batches_of(pool, 5) == [[pool[0], pool[1], pool[2], pool[0], pool[1]]]
    assert bench_models.batches_of(pool, 2) == [[pool[0], pool[1]], [pool[2], pool[0]]]
    assert bench_models.batches_of(pool, 1) == [[p] for p in pool]
    draft = bench_models.load("ngram:unigram", vocab_size=target.vocab_size)
    assert draft.vocab_size == target.vocab_size


def test_self_draft_greedy_accepts_everything_and_keeps_the_contract():
    target = bench_models.load(TINY)
    pool = bench_models.prompts(TINY, target, num_prompts=1, prompt_length=6)
    result = speedup.run(target, target, pool, ks=[2], batch_sizes=[1], temperatures=[0.0],
                         max_new_tokens=6, repeats=1, fixed_costs=True)
    (record,) = result["records"]
    _check_contract(record)
    assert (record["k"], record["batch_size"], record["temperature"]) == (2, 1, 0.0)
    # The target drafting for itself greedily: every draft token is accepted.
    assert record["acceptance_rate"] == 1.0
    assert record["beta_mean"] == pytest.approx(1.0)
    assert record["tokens_spec"] == record["tokens_ar"]
    assert record["rounds"] >= 2  # So the decode-phase fields were checked, and finite:
    for key in ("ar_fixed_ms", "spec_fixed_ms", "round_ms"):
        assert math.isfinite(record[key]), key


@pytest.mark.parametrize("flags,frozen", [([], True), (["--nofreeze_weights"], False)])
def test_loaded_models_are_frozen_unless_asked_not_to(flags, frozen):
    """A benchmark never changes the models it loads, so it decodes them frozen (no
    per-request check of their kernel panels), as a serving process would."""
    args = speedup._parse_args(["--target", TINY, "--draft", TINY_DRAFT, "--num_prompts",
                                "1"] + flags)
    target, draft, _ = speedup.load_pair_and_prompts(args)
    assert tfspec.frozen.is_frozen(target) is frozen
    assert tfspec.frozen.is_frozen(draft) is frozen


def test_main_writes_one_record_per_k_batch_temperature(tmp_path, capsys):
    out = tmp_path / "speedup.json"
    speedup.main(["--target", TINY, "--draft", TINY_DRAFT, "--k", "1", "--batch_size", "2",
                  "--temperature", "1", "--max_new_tokens", "6", "--repeats", "1",
                  "--num_prompts", "2", "--eager", "--json", str(out)])
    assert "speedup_over_predicted" in capsys.readouterr().out
    result = json.loads(out.read_text())
    (record,) = result["records"]
    _check_contract(record)
    assert result["weights_frozen"] is True
    # Without --fixed_costs the decomposition is not measured: its fields are nan.
    assert not result["fixed_costs"] and math.isnan(record["round_ms"])
    assert (record["k"], record["batch_size"], record["temperature"]) == (1, 2, 1.0)
    assert len(record["per_row_acceptance"]) == 2 and record["num_batches"] == 1
    assert result["target"] == TINY and result["draft"] == TINY_DRAFT


def test_typical_acceptance_is_timed_beside_exact_and_labelled(tmp_path):
    out = tmp_path / "speedup.json"
    speedup.main(["--target", TINY, "--draft", TINY_DRAFT, "--k", "1,2", "--temperature", "1",
                  "--acceptance", "exact,typical", "--typical_delta", "0.5",
                  "--max_new_tokens", "6", "--repeats", "1", "--num_prompts", "2", "--eager",
                  "--json", str(out)])
    result = json.loads(out.read_text())
    rules = [(r["acceptance"], r["k"], r["distribution_preserving"]) for r in result["records"]]
    assert rules == [("exact", 1, True), ("exact", 2, True), ("typical", 1, False),
                     ("typical", 2, False)]
    assert result["typical"]["delta"] == 0.5 and not result["typical"]["distribution_preserving"]
    for record in result["records"]:
        _check_contract(record)


@pytest.mark.parametrize("flags", [["--acceptance", "lenient"], ["--acceptance", ""],
                                   ["--acceptance", "typical", "--typical_epsilon", "2"]])
def test_bad_acceptance_flags_are_one_line_errors(flags, capsys):
    with pytest.raises(SystemExit) as info:
        speedup.main(["--target", TINY, "--draft", TINY_DRAFT, *flags])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) <= 2 and ("--acceptance" in err or "--typical_epsilon" in err)


def test_checkpoint_prompts_are_tokenized_held_out_code(monkeypatch):
    import types

    import tfspec
    from recipes.tiny_code import corpus as code_corpus

    items = [{"id": "a", "prompt": "def f(x):\n    return", "completion": " x\n"},
             {"id": "b", "prompt": "import os\n", "completion": ""}]
    fake = types.SimpleNamespace(completion=lambda split: items if split == "validation" else [])
    monkeypatch.setattr(code_corpus, "build_corpus", lambda: fake)
    spm = os.path.join(os.path.dirname(tfspec.__file__), "zoo", "assets", "tiny-code",
                       "spiece.model")
    tokenizer = tfspec.load_tokenizer(spm)
    target = types.SimpleNamespace(tokenizer_path=spm, max_prompt_length=3)
    pool = bench_models.prompts("some/checkpoint", target, num_prompts=5)
    assert pool == [tokenizer.encode(item["prompt"])[-3:] for item in items]


def test_main_fixed_costs_flag_measures_the_decomposition(tmp_path):
    out = tmp_path / "speedup.json"
    speedup.main(["--target", TINY, "--draft", TINY, "--k", "2", "--temperature", "0",
                  "--max_new_tokens", "6", "--repeats", "1", "--num_prompts", "1", "--eager",
                  "--fixed_costs", "--json", str(out)])
    result = json.loads(out.read_text())
    (record,) = result["records"]
    assert result["fixed_costs"]
    _check_contract(record)
    assert math.isfinite(record["round_ms"]) and math.isfinite(record["spec_fixed_ms"])
    # The speed-up with free rounds: the AR time of a request over the speculative fixed part.
    requests = record["num_batches"]
    ar_request_ms = record["ar_ms_per_token"] * record["tokens_ar"] / requests
    if record["spec_fixed_ms"] > 0:
        assert record["speedup_ceiling"] == pytest.approx(ar_request_ms / record["spec_fixed_ms"])
    else:
        assert math.isnan(record["speedup_ceiling"])


def test_auto_is_a_k_entry_with_its_own_record(tmp_path):
    out = tmp_path / "speedup.json"
    speedup.main(["--target", TINY, "--draft", TINY_DRAFT, "--k", "2,auto",
                  "--temperature", "0", "--max_new_tokens", "6", "--repeats", "2",
                  "--num_prompts", "2", "--eager", "--json", str(out)])
    records = json.loads(out.read_text())["records"]
    assert [r["k"] for r in records] == [2, "auto"]
    auto = records[1]
    assert 0.0 <= auto["auto_speculative_fraction"] <= 1.0
    assert auto["predicted_speedup"] is None or math.isnan(auto["predicted_speedup"])
    assert auto["tokens_spec"] == records[0]["tokens_spec"]  # Greedy: the same tokens.
    assert math.isnan(records[0]["auto_speculative_fraction"])


def test_auto_one_iteration_calls_speculate_under_a_controller_of_their_own():
    target = bench_models.load(TINY)
    draft = bench_models.load(TINY_DRAFT)
    pool = bench_models.prompts(TINY, target, num_prompts=2, prompt_length=5)
    greedy = tfspec.Sampling(temperature=0.0)
    speedup.measure(target, draft, [[p] for p in pool], [speedup.AUTO], greedy,
                    max_new_tokens=6, repeats=2, eos_id=None, jit_compile=None,
                    fixed_costs=True)
    timed = tfspec.adaptive.controller(target, draft, greedy, tfspec.AutoDraft())
    split = tfspec.adaptive.controller(target, draft, greedy, tfspec.AutoDraft(fallback=False))
    # The timed calls' controller saw only their 6-token requests, in both modes...
    timed_tokens = [t for fit in timed.measurements.values() for _, t, _ in fit.window]
    assert timed_tokens and set(timed_tokens) == {6.0}
    # ...and the one-iteration calls all speculated, under their own.
    assert len(split.measurements[tfspec.adaptive.SPECULATIVE]) > 0
    assert len(split.measurements[tfspec.adaptive.AUTOREGRESSIVE]) == 0
    assert {t for _, t, _ in split.measurements[tfspec.adaptive.SPECULATIVE].window} == {1.0}


@pytest.mark.parametrize("flags", [["--k", "0"], ["--k", "two"], ["--k", "1,-3"], ["--k", ""],
                                   ["--k", "auto", "--auto_confidence", "1.5"],
                                   ["--k", "auto", "--auto_draft_cost", "-1"],
                                   ["--k", "auto", "--auto_draft_cost", "cheap"],
                                   ["--k", "auto", "--auto_draft_cost", ","]])
def test_bad_k_lists_are_one_line_errors(flags, capsys):
    with pytest.raises(SystemExit) as exit_info:
        speedup.main(["--target", TINY, "--draft", TINY_DRAFT] + flags)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and ("--k" in err or "confidence" in err
                                           or "--auto_draft_cost" in err)


# ------------------------------------------------------------------------ feature drafts


@pytest.fixture(scope="module")
def feature_draft(tmp_path_factory):
    return save_feature_draft(tmp_path_factory.mktemp("feature_draft"))


def test_load_pair_binds_a_feature_draft_and_refuses_a_foreign_one(feature_draft, tmp_path):
    import tfspec  # pylint: disable=import-outside-toplevel

    target, draft = bench_models.load_pair(TINY, feature_draft)
    assert isinstance(draft, tfspec.models.FeatureDraft) and draft.target is target
    assert bench_models.draft_kind(draft) == "feature"
    alone = bench_models.draft_alone(draft, target)
    assert alone is draft.alone() and alone.vocab_size == target.vocab_size
    assert bench_models.draft_alone(target, target) is target  # Token drafts: themselves.
    # --dtype bfloat16: the target is bfloat16, the feature draft stays float32.
    target16, draft16 = bench_models.load_pair(TINY, feature_draft, dtype="bfloat16")
    assert {v.dtype for v in target16.weights} == {"bfloat16"}
    assert {v.dtype for v in draft16.weights if v.dtype != "int32"} == {"float32"}
    foreign = save_feature_draft(tmp_path / "foreign", **FOREIGN)
    with pytest.raises(bench_models.ModelError) as error:
        bench_models.load_pair(TINY, foreign)
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"--draft {foreign} cannot draft for "
                                                      f"--target {TINY}: ")
    assert "zoo:some-other-target" in message


def test_prompt_lookup_spec_and_draft_kinds():
    target = bench_models.load(TINY)
    lookup = bench_models.load("prompt_lookup:2", vocab_size=target.vocab_size)
    assert (lookup.max_ngram, lookup.vocab_size) == (2, target.vocab_size)
    assert bench_models.load("prompt_lookup", vocab_size=64).max_ngram == 3
    for bad in ("prompt_lookup:0", "prompt_lookup:x"):
        with pytest.raises(ValueError, match="prompt_lookup"):
            bench_models.load(bad, vocab_size=64)
    unigram = bench_models.load("ngram:unigram", vocab_size=64)
    assert [bench_models.draft_kind(d) for d in (target, lookup, unigram)] == [
        "t5", "prompt_lookup", "ngram"]


def test_feature_draft_spec_times_its_c_through_alone(feature_draft, tmp_path, monkeypatch):
    import tfspec  # pylint: disable=import-outside-toplevel

    models = []
    real = tfspec.generate

    def spy(model, prompts, **kwargs):
        models.append((type(model).__name__, type(kwargs.get("draft")).__name__))
        return real(model, prompts, **kwargs)

    monkeypatch.setattr(tfspec, "generate", spy)
    out = tmp_path / "speedup.json"
    speedup.main(["--target", TINY, "--draft", feature_draft, "--k", "1,2", "--temperature",
                  "0", "--max_new_tokens", "6", "--repeats", "1", "--num_prompts", "2",
                  "--eager", "--json", str(out)])
    result = json.loads(out.read_text())
    assert result["draft"] == feature_draft and result["draft_kind"] == "feature"
    assert [r["k"] for r in result["records"]] == [1, 2]
    for record in result["records"]:
        _check_contract(record)
        assert record["tokens_spec"] == record["tokens_ar"]  # Greedy: the target's tokens.
    # c: the draft decoded alone through FeatureDraftAlone; speculation: the draft itself.
    assert ("FeatureDraftAlone", "NoneType") in models
    assert ("T5", "FeatureDraft") in models


def test_a_k_beyond_the_medusa_heads_is_one_line_before_decoding(tmp_path, capsys):
    heads = save_medusa_heads(tmp_path / "medusa")  # 3 heads.
    with pytest.raises(SystemExit) as exit_info:
        speedup.main(["--target", TINY, "--draft", heads, "--k", "2,4,auto", "--eager",
                      "--repeats", "1", "--num_prompts", "1", "--max_new_tokens", "4"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"--k 4 is too long for --draft {heads}: this Medusa draft has 3 heads" in err


def test_an_auto_k_max_beyond_the_medusa_heads_names_auto(tmp_path, capsys):
    heads = save_medusa_heads(tmp_path / "medusa")  # 3 heads.
    with pytest.raises(SystemExit) as exit_info:
        speedup.main(["--target", TINY, "--draft", heads, "--k", "2,auto", "--auto_k_max", "4",
                      "--eager", "--repeats", "1", "--num_prompts", "1",
                      "--max_new_tokens", "4"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert (f"--k auto (up to --auto_k_max 4 per round) is too long for --draft {heads}: "
            f"this Medusa draft has 3 heads") in err, err
    assert err.rstrip().endswith("; lower --k or --auto_k_max"), err


def test_a_foreign_feature_draft_is_one_line_and_exit_2_at_the_command_line(tmp_path):
    import subprocess  # pylint: disable=import-outside-toplevel
    import sys  # pylint: disable=import-outside-toplevel

    foreign = save_feature_draft(tmp_path / "foreign", **FOREIGN)
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run([sys.executable, "-m", "bench.speedup", "--target", TINY, "--draft",
                           foreign, "--k", "1", "--eager"], cwd=repo, capture_output=True,
                          text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=repo, TF_CPP_MIN_LOG_LEVEL="2"))
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith(f"error: --draft {foreign} cannot draft for --target ")
    assert "trained for zoo:some-other-target" in proc.stderr and proc.stdout == ""


@pytest.mark.parametrize("module_name", ["bench.batch", "bench.round_breakdown",
                                         "bench.row_determinism", "bench.loop_profile"])
def test_other_pair_benchmarks_refuse_a_foreign_feature_draft_in_one_line(
        module_name, tmp_path, capsys):
    import importlib  # pylint: disable=import-outside-toplevel

    foreign = save_feature_draft(tmp_path / "foreign", **FOREIGN)
    with pytest.raises(SystemExit) as exit_info:
        importlib.import_module(module_name).main(["--target", TINY, "--draft", foreign])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot draft for --target" in err, err


@pytest.mark.parametrize("module_name", ["bench.round_breakdown", "bench.peers"])
def test_benchmarks_that_cannot_drive_a_feature_draft_say_so_in_one_line(
        module_name, feature_draft, capsys):
    import importlib  # pylint: disable=import-outside-toplevel

    with pytest.raises(SystemExit) as exit_info:
        importlib.import_module(module_name).main(["--target", TINY, "--draft", feature_draft])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not take a feature draft" in err, err
