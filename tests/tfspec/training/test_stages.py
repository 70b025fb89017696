"""Tests of tfspec.training.stages and the shipped recipe configs/zoo_tiny_code.py."""

import os

import ml_collections
import numpy as np
import pytest

from tfspec.models import T5Config
from recipes.tiny_code.train import load_config
from tfspec.training import stages

CONFIG = os.path.join(os.path.dirname(__file__), "..", "..", "..", "configs",
                      "zoo_tiny_code.py")


def test_the_recipe_loads_and_validates():
    config = load_config(CONFIG)
    assert isinstance(config, ml_collections.ConfigDict)
    stages.validate_config(config)
    target = stages.model_config(config, "target")
    draft = stages.model_config(config, "draft")
    assert target.vocab_size == draft.vocab_size == 8192
    assert target.feed_forward_proj == "gated-gelu" and not target.tie_word_embeddings
    assert draft.num_decoder_layers < target.num_decoder_layers
    assert config.data.tasks == ("completion", "docsum")
    assert config.export.dtype == "bfloat16" and config.export.max_total_mb <= 60


def test_the_shipped_shapes_fit_the_size_budget():
    config = load_config(CONFIG)
    total = 0
    for role in ("target", "draft"):
        c = stages.model_config(config, role)
        inner = c.num_heads * c.d_kv
        ffn = c.d_model * c.d_ff * (3 if c.is_gated_act else 2)
        encoder = c.num_layers * (4 * c.d_model * inner + ffn + c.d_model * 2)
        decoder = c.num_decoder_layers * (8 * c.d_model * inner + ffn + c.d_model * 3)
        embeddings = c.vocab_size * c.d_model * (1 if c.tie_word_embeddings else 2)
        total += embeddings + encoder + decoder
    assert total * 2 / 2 ** 20 < config.export.max_total_mb  # bfloat16 bytes.


def test_smoke_variant_and_overrides():
    config = load_config(CONFIG + ":smoke", ["target.steps=7", "data.tasks=('docsum',)",
                                            "export.target_name=t"])
    assert config.target.steps == 7 and config.data.tasks == ("docsum",)
    assert config.export.target_name == "t"
    assert stages.model_config(config, "target").d_model < 128
    with pytest.raises(ValueError):
        load_config(CONFIG + ":nope")


@pytest.mark.parametrize("key,value,match", [
    ("data.max_encoder_length", 4096, "encoder bucket"),
    ("data.max_target_length", 4096, "target bucket"),
    ("data.tasks", ("translate",), "Unknown task"),
    ("target.warmup_steps", 10 ** 9, "warmup_steps"),
    ("export.weights", "latest", "export.weights"),
])
def test_validation_names_the_problem(key, value, match):
    config = load_config(CONFIG, [f"{key}={value!r}"])
    with pytest.raises(ValueError, match=match):
        stages.validate_config(config)


def test_vocabulary_mismatch_is_rejected():
    config = load_config(CONFIG)
    config.model.draft["vocab_size"] = 100
    with pytest.raises(ValueError, match="share the vocabulary"):
        stages.validate_config(config)


def test_untied_head_starts_with_unit_scale_logits():
    config = load_config(CONFIG + ":smoke")
    model = stages.build_model(config, "target")
    d_model = model.config.d_model
    assert np.std(model.lm_head.numpy()) == pytest.approx(d_model ** -0.5, rel=0.05)
    assert isinstance(model.config, T5Config)
