"""bench.peers: our side, the TV statistics, the CTranslate2 and keras-hub peers on the same
exported weights (greedy identity with tfspec), and clean skips of missing peers."""

import json
import os
import sys

import numpy as np
import pytest
from scipy import special

import tfspec
from bench import _hf_peer
from bench import ctranslate2_peer
from bench import keras_hub_peer
from bench import models as bench_models
from bench import peers
from tests.bench.bench_fixtures import TINY, TINY_DRAFT, ZOO_TARGET

MAX_NEW_TOKENS = 8
needs_ctranslate2 = pytest.mark.skipif(
    bool(ctranslate2_peer.available()),
    reason=f"ctranslate2 not installed ({ctranslate2_peer.INSTALL_HINT})")


def _tfspec_greedy(model, prompts):
    return [tfspec.generate(model, [p], k=0, sampling=tfspec.Sampling(temperature=0.0),
                            max_new_tokens=MAX_NEW_TOKENS).row_tokens(0) for p in prompts]


def _exported(spec, tmp_path):
    """(model, two prompts, its float32 export directory) for a SPEC."""
    model = bench_models.load(spec)
    prompts = bench_models.prompts(spec, model, 2, prompt_length=6)
    return model, prompts, tfspec.save_model(model, tmp_path / "export", dtype="float32")


def test_tv_distance_and_noise_floor():
    probs = np.array([0.5, 0.25, 0.25])
    assert peers.tv_distance([2, 1, 1], probs) == pytest.approx(0.0)
    assert peers.tv_distance([1, 0, 0], probs) == pytest.approx(0.5)
    floor_small, floor_large = (peers.tv_noise_floor(probs, n) for n in (100, 10000))
    assert 0 < floor_large < floor_small < 0.2


@pytest.mark.parametrize("reference, rows, expected", [
    ([[5, 6, 1], [7]], [[5, 6, 1], [7]], (0, 0, 4)),
    ([[5, 6, 1], [7]], [[5, 9, 1], [7]], (1, 1, 4)),
    ([[5, 6, 1], [7]], [[5, 6], [7, 8, 1]], (2, 3, 6)),  # a missing or extra token differs
])
def test_greedy_diff_counts_rows_and_tokens(reference, rows, expected):
    diff = peers.greedy_diff(reference, rows)
    assert (diff["greedy_rows_differing"], diff["greedy_tokens_differing"],
            diff["greedy_tokens_compared"]) == expected
    assert diff["greedy_rows_compared"] == len(reference)


@pytest.mark.parametrize("sequence, expected", [
    ([0, 5, 6, 1, 0, 0], [5, 6, 1]),   # stops at EOS (id 1), keeps it
    ([0, 5, 6, 7], [5, 6, 7]),         # no EOS: every generated token
])
def test_hf_worker_rows_follow_tfspec_counting(sequence, expected):
    assert _hf_peer._emitted(np.asarray(sequence), eos_id=1) == expected


@needs_ctranslate2
@pytest.mark.parametrize("spec", [ZOO_TARGET, TINY])  # gated-gelu untied; relu tied + rescale
def test_ctranslate2_conversion_decodes_like_tfspec(spec, tmp_path):
    model, prompts, export_dir = _exported(spec, tmp_path)
    model_dir = ctranslate2_peer.convert(export_dir, str(tmp_path / "ct2"))
    expected = _tfspec_greedy(model, prompts)
    rows = ctranslate2_peer.Ct2Decoder(model_dir, "float32", MAX_NEW_TOKENS).greedy(prompts)
    assert rows == expected
    assert all(0 < len(r) <= MAX_NEW_TOKENS for r in rows)
    # Beyond argmaxes (which a wrong output scale would not change): the log-probs.
    decoder_ids = [[model.config.decoder_start_token_id] + expected[0][:-1]]
    logits = model.forward(np.asarray([prompts[0]], np.int32), None,
                           np.asarray(decoder_ids, np.int32)).numpy()[0]
    log_probs = special.log_softmax(logits.astype(np.float64), axis=-1)
    ours = log_probs[np.arange(len(expected[0])), expected[0]]
    theirs = ctranslate2_peer.Ct2Decoder(model_dir, "float32", MAX_NEW_TOKENS).token_log_probs(
        prompts[0], expected[0])
    np.testing.assert_allclose(theirs, ours, atol=1e-3)
    # int8 decodes the same converted model (quantized at load); identity is not promised.
    int8_rows = ctranslate2_peer.Ct2Decoder(model_dir, "int8", MAX_NEW_TOKENS).greedy(prompts)
    assert len(int8_rows) == 2 and all(0 < len(r) <= MAX_NEW_TOKENS for r in int8_rows)


@pytest.mark.parametrize("spec", [ZOO_TARGET, TINY])
def test_keras_hub_generation_decodes_like_tfspec(spec, tmp_path):
    model, prompts, export_dir = _exported(spec, tmp_path)
    decoder = keras_hub_peer.KerasHubDecoder(export_dir, max(map(len, prompts)), MAX_NEW_TOKENS)
    assert decoder.greedy(prompts) == _tfspec_greedy(model, prompts)


def test_keras_hub_rejects_what_it_cannot_hold(tmp_path):
    model = bench_models.load(TINY + ",num_decoder_layers=2")
    export_dir = tfspec.save_model(model, tmp_path / "export", dtype="float32")
    with pytest.raises(ValueError, match="1 encoder vs 2 decoder layers"):
        keras_hub_peer.load_backbone(export_dir)


def test_missing_peer_is_skipped_with_its_pip_command(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # makes `import ctranslate2` fail
    out = tmp_path / "peers.json"
    peers.main(["--target", TINY, "--draft", TINY_DRAFT, "--peers", "ctranslate2", "--k", "2",
                "--num_prompts", "1", "--prompt_length", "5", "--max_new_tokens", "4",
                "--repeats", "1", "--tv_samples", "0", "--eager", "--json", str(out)])
    printed = capsys.readouterr().out
    assert "ctranslate2: skipped" in printed and "pip install ctranslate2" in printed
    result = json.loads(out.read_text())
    assert "pip install ctranslate2" in result["skipped_peers"]["ctranslate2"]
    assert [r["implementation"] for r in result["records"]] == ["tfspec", "tfspec",
                                                                "ctranslate2"]


def test_unknown_peer_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        peers.main(["--peers", "ctranslate2,vllm"])
    assert exit_info.value.code == 2 and "unknown vllm" in capsys.readouterr().err


def test_keras_hub_status_gives_a_reason():
    status = peers.keras_hub_status()
    assert isinstance(status, str) and status


def test_main_skips_cleanly_without_torch(tmp_path, capsys):
    out = tmp_path / "peers.json"
    peers.main(["--target", TINY, "--draft", TINY_DRAFT, "--tv_target", TINY,
                "--tv_draft", TINY_DRAFT, "--k", "2", "--num_prompts", "1",
                "--prompt_length", "5", "--max_new_tokens", "6", "--repeats", "1",
                "--tv_samples", "64", "--hf_python", str(tmp_path / "no-such-python"),
                "--eager", "--json", str(out)])
    assert peers.SKIP_MESSAGE in capsys.readouterr().out
    result = json.loads(out.read_text())
    assert result["skipped"] == peers.SKIP_MESSAGE
    by_impl = {(r["implementation"], r["mode"]): r for r in result["records"]}
    ours = by_impl[("tfspec", "speculative")]
    assert ours["ms_per_token"] > 0 and by_impl[("tfspec", "autoregressive")]["ms_per_token"] > 0
    # Exact sampling: the first-token TV to the target sits at the sampling noise floor.
    assert 0.0 < ours["tv_first_token"] < 2.0 * ours["tv_noise_floor"]
    assert ours["greedy_tokens_differing"] == 0  # speculative greedy == autoregressive greedy
    assert "note" in by_impl[("keras-hub", "SpeculativeSampler")]
    in_process = [r for r in result["records"] if r["implementation"] in ("ctranslate2",
                                                                          "keras-hub")
                  and r["mode"] == "autoregressive"]
    expected = {("keras-hub", "float32")}
    if not ctranslate2_peer.available():
        expected |= {("ctranslate2", "float32"), ("ctranslate2", "int8")}
    assert {(r["implementation"], r["dtype"]) for r in in_process} == expected
    for record in in_process:
        assert record["ms_per_token"] > 0 and record["greedy_tokens_compared"] > 0
        assert record["tfspec_spec_speedup_over_this"] == pytest.approx(
            record["ms_per_token"] / ours["ms_per_token"])
        if record["dtype"] == "float32":
            assert record["greedy_rows_differing"] == 0


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("TFSPEC_HF_PYTHON"),
                    reason="set TFSPEC_HF_PYTHON to a python with torch + transformers")
def test_transformers_side_runs():
    target, draft = bench_models.load_pair(TINY, TINY_DRAFT)
    prompts = bench_models.prompts(TINY, target, 1, prompt_length=5)
    result = peers.run(target, draft, prompts, k=2, max_new_tokens=6, repeats=1,
                       tv_target=target, tv_draft=draft, tv_samples=50,
                       hf_python=os.environ["TFSPEC_HF_PYTHON"])
    assert result["skipped"] is None
    assisted = next(r for r in result["records"] if r["mode"] == "assisted")
    assert assisted["ms_per_token"] > 0
    assert assisted["tv_first_token"] < 2.0 * assisted["tv_noise_floor"]  # Exact too.
    assert assisted["exact_probs_max_abs_diff_vs_tfspec"] < 1e-4
    hf_ar = next(r for r in result["records"]
                 if r["implementation"] == "transformers" and r["mode"] == "autoregressive")
    assert hf_ar["greedy_tokens_compared"] > 0 and hf_ar["greedy_rows_differing"] == 0
