"""bench.speedup and bench.models on tiny random models (no wall-time assertions)."""

import json
import math
import os

import pytest

from bench import models as bench_models
from bench import speedup
from evals import walltime
from tests.bench.bench_fixtures import CONTRACT_KEYS, TINY, TINY_DRAFT


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


def test_split_phases_is_nan_without_a_second_iteration():
    assert all(math.isnan(x) for x in speedup.split_phases(1.0, 1.0, 4, 4))


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


def test_main_writes_one_record_per_k_batch_temperature(tmp_path, capsys):
    out = tmp_path / "speedup.json"
    speedup.main(["--target", TINY, "--draft", TINY_DRAFT, "--k", "1", "--batch_size", "2",
                  "--temperature", "1", "--max_new_tokens", "6", "--repeats", "1",
                  "--num_prompts", "2", "--eager", "--json", str(out)])
    assert "speedup_over_predicted" in capsys.readouterr().out
    result = json.loads(out.read_text())
    (record,) = result["records"]
    _check_contract(record)
    # Without --fixed_costs the decomposition is not measured: its fields are nan.
    assert not result["fixed_costs"] and math.isnan(record["round_ms"])
    assert (record["k"], record["batch_size"], record["temperature"]) == (1, 2, 1.0)
    assert len(record["per_row_acceptance"]) == 2 and record["num_batches"] == 1
    assert result["target"] == TINY and result["draft"] == TINY_DRAFT


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


@pytest.mark.parametrize("flags", [["--k", "0"], ["--k", "two"], ["--k", "1,-3"], ["--k", ""],
                                   ["--k", "auto", "--auto_confidence", "1.5"]])
def test_bad_k_lists_are_one_line_errors(flags, capsys):
    with pytest.raises(SystemExit) as exit_info:
        speedup.main(["--target", TINY, "--draft", TINY_DRAFT] + flags)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and ("--k" in err or "confidence" in err)
