"""Tests of the export stage and of `python -m recipes.tiny_code.train` end to end on tiny shapes."""

import json
import os
import types

import numpy as np
import pytest
import tensorflow as tf

from tfspec import checkpoints
from tfspec.tokenizer import TINY_CODE_TOKENIZER, load_tokenizer
from recipes.tiny_code.train import load_config
from tfspec.training import examples as examples_lib, export, stages

from tests.tfspec.training.tiny_data import fake_corpus

CONFIG = os.path.join(os.path.dirname(__file__), "..", "..", "..", "configs",
                      "zoo_tiny_code.py")


def _tiny_config():
    config = load_config(CONFIG + ":smoke")
    for stage in (config.target, config.draft):
        stage.steps = 3
        stage.warmup_steps = 1
        stage.eval_every = 0
        stage.checkpoint_every = 2
    config.export.num_prompts = 2
    config.export.max_new_tokens = 4
    config.export.batch_size = 2
    return config


def _data(config):
    corpus = fake_corpus(n=4)
    tokenizer = load_tokenizer(TINY_CODE_TOKENIZER)
    kwargs = dict(max_encoder_length=config.data.max_encoder_length,
                  max_target_length=config.data.max_target_length)
    return stages.Data(tokenizer, corpus,
                       examples_lib.make_examples(corpus, tokenizer, "train", **kwargs),
                       examples_lib.make_examples(corpus, tokenizer, "validation", **kwargs),
                       ("fake",))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A workdir whose target and draft stages finished (3 steps each) and its export."""
    config = _tiny_config()
    data = _data(config)
    workdir = str(tmp_path_factory.mktemp("recipe"))
    stages.train_target(config, workdir, data, progress=False)
    stages.train_draft(config, workdir, data, progress=False)
    zoo = os.path.join(workdir, "zoo")
    metrics = export.export_pair(config, workdir, zoo, data, measure_speed=False)
    return config, data, workdir, zoo, metrics


def test_draft_stage_adds_the_targets_cached_continuations(trained):
    config, data, workdir, _, _ = trained
    path = os.path.join(workdir, "draft", stages.GENERATED_FILE)
    generated = stages.target_generated(config, workdir, None, data)  # From the cache.
    assert len(generated) == min(config.draft.generated_prompts, len(data.train))
    assert os.path.exists(path) and all(g.id.startswith("generated:") for g in generated)
    assert all(len(g.target_ids) <= config.draft.generated_max_new_tokens for g in generated)


def test_cached_continuations_of_another_count_are_refused(trained):
    """A resumed stage whose recipe now asks for another number of continuations stops with
    one line instead of training on (and reporting) the old count."""
    config, data, workdir, _, _ = trained
    path = os.path.join(workdir, "draft", stages.GENERATED_FILE)
    cached = len(stages.target_generated(config, workdir, None, data))
    with pytest.raises(ValueError, match=f"holds the .* of {cached} prompts but the recipe "
                                         f"asks for {cached - 1}; .*delete the file"):
        stages.continuations(config, None, data, path, "target's continuations",
                             count=cached - 1, salt=0, temperature=0.0, max_new_tokens=4,
                             batch_size=1, id_prefix="x", progress=False)


def test_draft_stage_needs_a_finished_target(tmp_path):
    config = _tiny_config()
    with pytest.raises(RuntimeError, match="target stage"):
        stages.train_draft(config, str(tmp_path), _data(config), progress=False)


def test_export_writes_loadable_bfloat16_directories_with_cards(trained):
    config, _, workdir, zoo, metrics = trained
    for role, name in (("target", "tiny-code-target"), ("draft", "tiny-code-draft")):
        directory = os.path.join(zoo, name)
        assert sorted(os.listdir(directory)) == ["MODEL_CARD.md", "config.json",
                                                 "model.safetensors", "spiece.model"]
        with open(os.path.join(directory, "config.json")) as f:
            assert json.load(f)["torch_dtype"] == "bfloat16"
        from safetensors import safe_open
        with safe_open(os.path.join(directory, "model.safetensors"), framework="tf") as f:
            assert {f.get_tensor(k).dtype for k in f.keys()} == {tf.bfloat16}
        card = open(os.path.join(directory, "MODEL_CARD.md")).read()
        for text in ("Parameters", "acceptance_rate", "validation loss", "Steps: 3"):
            assert text in card
        # bfloat16 round trip: the loaded float32 weights are the trained ones, rounded.
        loaded = checkpoints.load_model(directory)
        trained_model = stages.load_trained(config, workdir, role, config.export.weights)
        for name_, (var, _) in trained_model.hf_weight_map().items():
            expected = tf.cast(tf.cast(var, tf.bfloat16), tf.float32).numpy()
            np.testing.assert_array_equal(loaded.hf_weight_map()[name_][0].numpy(), expected)
        assert loaded.tokenizer_path.endswith("spiece.model")
    assert metrics["total_mb"] < config.export.max_total_mb
    assert [a["temperature"] for a in metrics["acceptance"]] == [0.0, 1.0]
    for row in metrics["acceptance"]:  # Every round emits at least one token.
        assert row["mean_tokens_per_round"] >= 1.0
    assert set(metrics["validation"]) == {"target_ce", "draft_ce", "kl", "overlap"}
    with open(os.path.join(workdir, "export", "metrics.json")) as f:
        assert json.load(f)["total_mb"] == pytest.approx(metrics["total_mb"])


def test_export_refuses_a_pair_over_the_size_budget(trained):
    config, data, workdir, zoo, _ = trained
    config.export.max_total_mb = 0.01
    with pytest.raises(ValueError, match="max_total_mb"):
        export.export_pair(config, workdir, zoo, data, measure_speed=False)



@pytest.mark.parametrize("accepted, drafted, expected", [
    ([3, 8, 4], [4, 8, 100], 0.04),   # one request fails: the pooled rate would hide it
    ([0, 5], [0, 5], 1.0),            # a row that never drafted does not count
    ([0], [0], None),
])
def test_worst_row_acceptance_is_the_lowest_request(accepted, drafted, expected):
    stats = types.SimpleNamespace(accepted=np.array(accepted), drafted=np.array(drafted))
    got = export.worst_row_acceptance(stats)
    assert got == (None if expected is None else pytest.approx(expected))
