"""bench.peers: our side, the TV statistics, and a clean skip without torch."""

import json
import os

import numpy as np
import pytest

from bench import models as bench_models
from bench import peers
from tests.bench.bench_fixtures import TINY, TINY_DRAFT


def test_tv_distance_and_noise_floor():
    probs = np.array([0.5, 0.25, 0.25])
    assert peers.tv_distance([2, 1, 1], probs) == pytest.approx(0.0)
    assert peers.tv_distance([1, 0, 0], probs) == pytest.approx(0.5)
    floor_small, floor_large = (peers.tv_noise_floor(probs, n) for n in (100, 10000))
    assert 0 < floor_large < floor_small < 0.2


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
    assert 0.0 <= ours["tv_first_token"] <= 1.0 and 0.0 < ours["tv_noise_floor"] <= 1.0
    assert "note" in by_impl[("keras-hub", "SpeculativeSampler")]


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
    assert assisted["ms_per_token"] > 0 and 0 <= assisted["tv_first_token"] <= 1
    assert assisted["exact_probs_max_abs_diff_vs_tfspec"] < 1e-4
