"""bench.round_breakdown on tiny random models (no wall-time assertions)."""

import json
import math

import numpy as np
import pytest

import tfspec
from bench import component_loops
from bench import free_models
from bench import round_breakdown
from tests.bench.bench_fixtures import TINY, TINY_DRAFT

# Times measured directly (a wall time or a slope): positive. commit_ms and unexplained_ms
# are differences of measurements, so they only have to be finite.
MEASURED_MS = ("round_ms", "ar_step_ms", "draft_ar_step_ms", "prepare_ms", "draft_step_ms",
               "sample_ms", "catch_up_ms", "verify_ms", "accept_ms", "free_round_ms")
DERIVED = ("commit_ms", "explained_ms", "unexplained_ms", "call_overhead_ms",
           "call_overhead_per_round_ms", "verify_over_step", "round_over_formula",
           "catch_up_fraction", "catch_up_needed_fraction", "mean_tokens_per_round",
           "acceptance_rate")
SETTINGS = ("pair", "target", "draft", "batch_size", "num_batches", "k", "temperature",
            "top_k", "top_p", "max_new_tokens", "prompt_widths", "rounds", "ar_rounds",
            "draft_ar_rounds", "tokens", "free_rounds_per_loop", "iterations",
            "ms_by_prompt_width", "catch_up_every_round")
SHARED_LOOPS = ("sample", "accept", "free_loop")
WIDTH_LOOPS = ("draft_step", "catch_up", "verify")


def _check_record(record):
    for key in MEASURED_MS + DERIVED + SETTINGS:
        assert key in record, key
    # Finite, not positive: differences of timings (commit_ms, round_ms after prepare) can
    # dip below 0 on a loaded machine, and tests never assert on speed.
    for key in MEASURED_MS:
        assert math.isfinite(record[key]), (key, record[key])
    for key in DERIVED:
        assert math.isfinite(record[key]), (key, record[key])
    widths = record["prompt_widths"]
    assert widths and sum(widths.values()) == pytest.approx(1.0)
    assert set(record["iterations"]) == set(SHARED_LOOPS) | {
        f"{name}@{width}" for name in WIDTH_LOOPS for width in widths}
    by_width = record["ms_by_prompt_width"]
    assert set(by_width) == {f"{name}_ms" for name in WIDTH_LOOPS}
    for name in WIDTH_LOOPS:
        assert set(by_width[f"{name}_ms"]) == set(widths)
        assert record[f"{name}_ms"] == pytest.approx(
            sum(widths[w] * by_width[f"{name}_ms"][w] for w in widths))
    assert all(n >= 5 for n in record["iterations"].values())
    k = record["k"]
    # The breakdown adds up to the measured round: an identity, not a measurement.
    parts = (k * record["draft_step_ms"] + record["catch_up_fraction"] * record["catch_up_ms"]
             + record["verify_ms"] + record["accept_ms"] + record["commit_ms"])
    assert parts + record["unexplained_ms"] == pytest.approx(record["round_ms"], rel=1e-9,
                                                             abs=1e-12)
    assert record["explained_ms"] == pytest.approx(parts, rel=1e-12, abs=1e-15)
    assert record["commit_ms"] == pytest.approx(
        record["free_round_ms"] - record["accept_ms"] - k * record["sample_ms"],
        rel=1e-9, abs=1e-12)
    assert record["verify_over_step"] == pytest.approx(record["verify_ms"] / record["ar_step_ms"])
    assert record["round_over_formula"] == pytest.approx(
        record["round_ms"] / (k * record["draft_ar_step_ms"] + record["ar_step_ms"]))
    assert record["call_overhead_per_round_ms"] == pytest.approx(
        record["call_overhead_ms"] * record["num_batches"] / record["rounds"])
    assert record["catch_up_fraction"] == (
        1.0 if record["catch_up_every_round"] else record["catch_up_needed_fraction"])
    assert record["mean_tokens_per_round"] == pytest.approx(record["tokens"] / record["rounds"])
    # The free pair accepts every draft: ceil(max_new_tokens / (k + 1)) rounds per loop.
    assert record["free_rounds_per_loop"] == -(-record["max_new_tokens"] // (k + 1))


def test_main_writes_a_self_explaining_breakdown(tmp_path, capsys):
    out = tmp_path / "round_breakdown.json"
    round_breakdown.main([
        "--target", TINY, "--draft", TINY_DRAFT, "--batch_sizes", "2", "--k", "2",
        "--temperature", "0,1", "--max_new_tokens", "8", "--repeats", "3",
        "--num_prompts", "2", "--component_seconds", "0.03", "--json", str(out)])
    printed = capsys.readouterr().out
    assert "unexplained_ms" in printed and "round_over_formula" in printed
    result = json.loads(out.read_text())
    assert set(round_breakdown.METHOD) <= set(result["method"])
    for key in ("round_ms", "commit_ms", "catch_up_fraction", "unexplained_ms",
                "isolated_loops", "free_round_ms"):
        assert isinstance(result["method"][key], str) and result["method"][key]
    assert result["settings"]["k"] == [2] and result["settings"]["temperature"] == [0.0, 1.0]
    records = result["records"]
    assert [(r["batch_size"], r["k"], r["temperature"]) for r in records] == [
        (2, 2, 0.0), (2, 2, 1.0)]
    for record in records:
        assert (record["pair"], record["target"], record["draft"]) == ("custom", TINY,
                                                                       TINY_DRAFT)
        assert record["max_new_tokens"] == 8 and record["num_batches"] == 1
        _check_record(record)


def test_catch_up_needed_fraction_from_per_row_counters():
    def stats(rounds, full):
        rounds = np.asarray(rounds)
        per_position = np.stack([rounds, np.asarray(full)], axis=1)  # k = 2
        zeros = np.zeros_like(rounds)
        return tfspec.DecodeStats(rounds=rounds, drafted=zeros, accepted=zeros,
                                  verified=zeros, accepted_per_position=per_position,
                                  beta_sum=zeros.astype(np.float32), tokens=zeros)

    # Batch 1: the row's own fraction of all-k rounds.
    assert round_breakdown.catch_up_needed_fraction([stats([4], [2])], k=2) == pytest.approx(0.5)
    # Batch 2, f = (0.5, 0.25): loop rounds 0-1 have both rows running (1 - 0.5 * 0.75),
    # rounds 2-3 only the second (0.25).
    assert round_breakdown.catch_up_needed_fraction([stats([2, 4], [1, 1])], k=2) == pytest.approx(
        (2 * 0.625 + 2 * 0.25) / 4)
    # Calls add up by loop rounds.
    assert round_breakdown.catch_up_needed_fraction(
        [stats([4], [4]), stats([4], [0])], k=2) == pytest.approx(0.5)
    assert round_breakdown.catch_up_needed_fraction([stats([0], [0])], k=2) == 0.0


def test_width_weights_share_the_loop_rounds():
    class Gen:  # The part of a tfspec.Generation the weights read.
        def __init__(self, rounds):
            self.stats = type("Stats", (), {"rounds": np.asarray(rounds)})

    gens = [Gen([3, 5]), Gen([2, 1]), Gen([10, 4])]
    weights = component_loops.width_weights(gens, [8, 16, 8])
    assert weights == pytest.approx({8: 15 / 17, 16: 2 / 17})


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_free_pair_accepts_every_draft_and_never_stops_early(temperature):
    target, draft = free_models.free_pair(vocab_size=16, eos_id=1, pad_id=0, seed=3)
    gen = tfspec.generate(target, [[3, 4, 5], [6, 7]], draft=draft, k=3, max_new_tokens=8,
                          sampling=tfspec.Sampling(temperature=temperature), jit_compile=None)
    assert gen.stats.acceptance_rate == 1.0
    assert gen.lengths.tolist() == [8, 8] and not np.any(gen.tokens == 1)
    assert gen.stats.rounds.tolist() == [2, 2]


@pytest.mark.parametrize("argv", [
    ["--k", "0"],
    ["--k", "two"],
    ["--batch_sizes", "0"],
    ["--temperature", "-1"],
    ["--top_p", "2"],
    ["--max_new_tokens", "0"],
    ["--repeats", "three"],
    ["--component_seconds", "0"],
    ["--pairs", "t5-large"],
    ["--pairs", ","],
    ["--pairs", "embedded", "--target", TINY],
    ["--eager"],
    ["--pairs", "t5-base", "--prompts", "prompts.jsonl"],
    ["--pairs", "embedded", "--prompts", "/nonexistent/prompts.jsonl"],
])
def test_bad_flags_exit_2_with_one_line(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        round_breakdown.main(argv)
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "error" in lines[0], captured.err
    assert captured.out == ""


def test_help_shows_defaults(capsys):
    with pytest.raises(SystemExit) as exit_info:
        round_breakdown.main(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    assert "(default: 1,8)" in text and "embedded,t5-base" in text and "--component_seconds" in text
