"""bench.draft_kinds on tiny random models (eager; no wall-time assertions)."""

import contextlib
import io
import json
import math

import pytest

from bench import draft_kinds
from bench import models as bench_models
from tests.bench.bench_fixtures import (CONTRACT_KEYS, FOREIGN, TINY, TINY_DRAFT,
                                        save_feature_draft, save_medusa_heads)

KS = (1, 2)
TEMPERATURES = (0.0, 1.0)
FAST = ["--max_new_tokens", "4", "--repeats", "1", "--num_prompts", "1", "--eager"]


@pytest.fixture(scope="module")
def feature_draft(tmp_path_factory):
    return save_feature_draft(tmp_path_factory.mktemp("feature_draft"))


@pytest.fixture(scope="module")
def medusa(tmp_path_factory):
    return save_medusa_heads(tmp_path_factory.mktemp("medusa"))


@pytest.fixture(scope="module")
def foreign(tmp_path_factory):
    """A feature draft trained for another target: it refuses the tiny one."""
    return save_feature_draft(tmp_path_factory.mktemp("foreign"), **FOREIGN)


@pytest.fixture(scope="module")
def result(feature_draft, medusa, tmp_path_factory):
    """One run of main over all five kinds, both temperatures and two ks: (JSON, stdout)."""
    out = tmp_path_factory.mktemp("out") / "draft_kinds.json"
    printed = io.StringIO()  # Module scope: capsys is per test.
    with contextlib.redirect_stdout(printed):
        draft_kinds.main(["--target", TINY, "--draft", TINY_DRAFT, "--feature_draft",
                          feature_draft, "--medusa", medusa, "--k", ",".join(map(str, KS)),
                          "--temperature", "0,1", "--json", str(out), *FAST])
    return json.loads(out.read_text()), printed.getvalue()


def test_json_has_every_kind_temperature_and_k(result):
    payload, _ = result
    for key in ("benchmark", "target", "batch_size", "k", "temperatures", "kinds", "records",
                "summary", "markdown", "max_new_tokens", "repeats", "machine"):
        assert key in payload, key
    assert payload["batch_size"] == 1 and payload["target"] == TINY
    assert [k["kind"] for k in payload["kinds"]] == list(draft_kinds.KINDS)
    assert all(k["skipped"] is None for k in payload["kinds"])
    assert {k["kind"]: k["class"] for k in payload["kinds"]} == {
        "t5": "T5", "feature": "FeatureDraft", "medusa": "MedusaHeads", "ngram": "NGram",
        "prompt_lookup": "PromptLookup"}
    got = sorted((r["kind"], r["temperature"], r["k"]) for r in payload["records"])
    assert got == sorted((kind, t, k) for kind in draft_kinds.KINDS for t in TEMPERATURES
                         for k in KS)
    for record in payload["records"]:
        for key in CONTRACT_KEYS + ("identical_to_ar", "rows_differing", "draft",
                                    "tokens_ar", "tokens_spec"):
            assert key in record, key
        assert record["batch_size"] == 1 and record["num_batches"] == 1
        assert math.isfinite(record["speedup"]) and record["draft_cost_ratio"] > 0
        assert 0.0 <= record["acceptance_rate"] <= 1.0


def test_every_kind_shares_one_autoregressive_baseline_per_temperature(result):
    payload, _ = result
    for t in TEMPERATURES:
        rows = [r for r in payload["records"] if r["temperature"] == t]
        assert len({r["ar_ms_per_token"] for r in rows}) == 1  # One interleaved run.
        assert len({r["tokens_ar"] for r in rows}) == 1


def test_greedy_outputs_are_the_autoregressive_ones_for_every_kind(result):
    payload, _ = result
    for record in payload["records"]:
        if record["temperature"] == 0:
            assert record["identical_to_ar"] is True, record["kind"]
            assert record["rows_differing"] == 0
            assert record["tokens_spec"] == record["tokens_ar"]
        else:
            assert record["identical_to_ar"] is None and record["rows_differing"] is None


def test_summary_and_markdown_give_each_kind_its_best_k(result):
    payload, printed = result
    summary = payload["summary"]
    assert sorted((s["kind"], s["temperature"]) for s in summary) == sorted(
        (kind, t) for kind in draft_kinds.KINDS for t in TEMPERATURES)
    for s in summary:
        rows = [r for r in payload["records"]
                if r["kind"] == s["kind"] and r["temperature"] == s["temperature"]]
        # Sampled: every speculative call was split too, so the best k is the best at one
        # request length where every k's split worked (greedy: never split, the plain one).
        matched = [r["matched_speedup"] for r in rows]
        assert all(math.isnan(m) for m in matched) if s["temperature"] == 0 else True
        by_length = s["temperature"] > 0 and all(math.isfinite(m) for m in matched)
        key = "matched_speedup" if by_length else "speedup"
        best = max(rows, key=lambda r: r[key])
        assert (s["best_k"], s["speedup"], s["beta_mean"], s["draft_cost_ratio"]) == (
            best["k"], best["speedup"], best["beta_mean"], best["draft_cost_ratio"])
        if by_length:
            assert s["matched_speedup"] == best["matched_speedup"]
        else:
            assert math.isnan(s["matched_speedup"])
        assert s["identical_to_ar"] is (True if s["temperature"] == 0 else None)
        draft_ms, target_ms = best["draft_step_ms"], best["target_step_ms"]
        # Eager timings of one prompt can be too noisy to split: a step's slope below zero.
        if draft_ms > 0 and target_ms > 0:
            assert s["step_cost_ratio"] == pytest.approx(draft_ms / target_ms)
        else:
            assert math.isnan(s["step_cost_ratio"])
    table = payload["markdown"].splitlines()
    assert table[0].startswith("| kind | draft | T=0 best k | T=0 speed-up | T=0 beta | T=0 c | "
                               "T=0 c per step")
    assert "| T=1 best k | T=1 speed-up | T=1 length-matched | T=1 beta |" in table[0]
    assert table[0].endswith("| greedy = AR |")
    assert [line.split("|")[1].strip() for line in table[2:]] == list(draft_kinds.KINDS)
    assert all(line.rstrip().endswith("| yes |") for line in table[2:])
    assert payload["markdown"] in printed  # Printed after the table of records.


def test_a_missing_zoo_feature_draft_is_skipped_with_a_note(tmp_path, capsys):
    out = tmp_path / "dk.json"
    draft_kinds.main(["--target", TINY, "--kinds", "feature,ngram", "--feature_draft",
                      "zoo:no-such-eagle", "--k", "1", "--temperature", "0", "--json",
                      str(out), "--max_new_tokens", "2", "--repeats", "1", "--num_prompts",
                      "1", "--eager"])
    printed = capsys.readouterr().out
    payload = json.loads(out.read_text())
    (skipped,) = [k for k in payload["kinds"] if k["kind"] == "feature"]
    assert "zoo:no-such-eagle is not in tfspec/zoo/" in skipped["skipped"]
    assert {r["kind"] for r in payload["records"]} == {"ngram"}
    assert "note: draft kind feature skipped" in printed
    assert "- feature: skipped (zoo:no-such-eagle" in payload["markdown"]


@pytest.mark.parametrize("flags, message", [
    (["--kinds", "feature", "--feature_draft", "FOREIGN"],
     "--feature_draft FOREIGN cannot draft for --target random:"),
    (["--kinds", "t5", "--draft", "FOREIGN"], "--draft FOREIGN is a feature draft"),
    (["--kinds", "feature", "--feature_draft", TINY_DRAFT], "is not a feature draft (a T5)"),
    (["--kinds", "t5", "--draft", "NOWHERE"], "cannot load --draft NOWHERE"),
    (["--kinds", "t5,banana"], "--kinds takes a comma-separated subset"),
    (["--kinds", "medusa", "--medusa", TINY_DRAFT], "is not a set of Medusa heads (a T5)"),
    (["--k", "1,auto"], '--k takes integers >= 1 here'),
    (["--temperature", "-1"], "--temperature takes comma-separated numbers >= 0"),
])
def test_bad_input_is_one_line_and_exit_2(flags, message, foreign, tmp_path, capsys):
    flags = [f.replace("FOREIGN", foreign).replace("NOWHERE", str(tmp_path / "none"))
             for f in flags]
    message = message.replace("FOREIGN", foreign).replace("NOWHERE", str(tmp_path / "none"))
    with pytest.raises(SystemExit) as exit_info:
        draft_kinds.main(["--target", TINY, *flags, *FAST])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert message in err, err


def test_a_k_beyond_the_medusa_heads_is_one_line_before_decoding(medusa, capsys):
    with pytest.raises(SystemExit) as exit_info:
        draft_kinds.main(["--target", TINY, "--kinds", "t5,medusa", "--draft", TINY_DRAFT,
                          "--medusa", medusa, "--k", "2,4", *FAST])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert "--k 4 is too long for draft kind medusa" in err, err
    assert "has 3 heads, so it drafts at most k = 3" in err, err


def test_load_drafts_binds_the_feature_draft_and_adopts_the_vocabulary(feature_draft, medusa):
    target = bench_models.load(TINY)
    drafts, described = draft_kinds.load_drafts(
        target, TINY, draft_kinds.KINDS, TINY_DRAFT, feature_draft, "ngram:unigram", 2,
        medusa_spec=medusa)
    assert drafts["feature"][1].target is target
    assert drafts["medusa"][1].target is target
    assert drafts["prompt_lookup"][0] == "prompt_lookup:2"
    assert drafts["prompt_lookup"][1].max_ngram == 2
    assert all(d.vocab_size == target.vocab_size for _, d in drafts.values())
    assert [d["kind"] for d in described] == list(draft_kinds.KINDS)


def test_t5_own_encoder_is_the_draft_without_its_adapter(tmp_path):
    """Kind t5_own_encoder detaches a draft's target-encoder adapter (kind t5 keeps it), and
    is skipped with a note for a draft that has none."""
    import numpy as np
    from tfspec import checkpoints
    from tfspec.models import target_binding
    target = bench_models.load(TINY)
    kinds = (draft_kinds.T5, draft_kinds.T5_OWN_ENCODER)
    drafts, described = draft_kinds.load_drafts(target, TINY, kinds, TINY_DRAFT, "", "", 2)
    assert list(drafts) == ["t5"] and "has no target-encoder adapter" in described[1]["skipped"]
    draft = bench_models.load(TINY_DRAFT)
    projection = np.eye(target.config.d_model, draft.config.d_model)
    draft.attach_target_encoder(projection, target_binding.target_fingerprint(target))
    checkpoints.save_model(draft, tmp_path / "adapted")
    drafts, _ = draft_kinds.load_drafts(target, TINY, kinds, str(tmp_path / "adapted"), "",
                                        "", 2)
    assert drafts["t5"][1].reads_target_encoder
    assert not drafts["t5_own_encoder"][1].reads_target_encoder
