"""Tests of tfspec.models.T5Config: presets, config.json round trips, validation."""

import dataclasses
import json
import os

import pytest

from tfspec.models import T5Config

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "hf_t5")

PRESET_NAMES = ["t5-small", "t5-base", "t5-large", "t5-3b", "t5-11b"] + [
    f"{family}-{size}" for family in ("t5-v1_1", "flan-t5")
    for size in ("small", "base", "large", "xl", "xxl")]

FIELDS = ("vocab_size", "d_model", "d_kv", "d_ff", "num_layers", "num_decoder_layers",
          "num_heads", "relative_attention_num_buckets", "relative_attention_max_distance",
          "feed_forward_proj", "tie_word_embeddings", "layer_norm_epsilon", "pad_token_id",
          "eos_token_id", "decoder_start_token_id")


def test_has_the_config_json_field_names():
    names = {f.name for f in dataclasses.fields(T5Config)}
    assert set(FIELDS) <= names
    # The one extra field is transformers >= 5's scale_decoder_outputs.
    assert names - set(FIELDS) == {"scale_decoder_outputs"}


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_presets_families(name):
    config = T5Config.preset(name)
    assert config.vocab_size == 32128
    assert config.num_decoder_layers == config.num_layers
    if name.startswith("t5-v1_1") or name.startswith("flan"):
        assert config.feed_forward_proj == "gated-gelu" and not config.tie_word_embeddings
        assert config.dense_act_fn == "gelu_new" and not config.rescales_decoder_output
    else:
        assert config.feed_forward_proj == "relu" and config.tie_word_embeddings
        assert config.rescales_decoder_output


@pytest.mark.parametrize("name, shape", [
    ("t5-small", (512, 64, 2048, 6, 8)),
    ("t5-11b", (1024, 128, 65536, 24, 128)),
    ("t5-v1_1-small", (512, 64, 1024, 8, 6)),
    ("flan-t5-large", (1024, 64, 2816, 24, 16)),
    ("flan-t5-xxl", (4096, 64, 10240, 24, 64)),
])
def test_preset_shapes(name, shape):
    c = T5Config.preset(name)
    assert (c.d_model, c.d_kv, c.d_ff, c.num_layers, c.num_heads) == shape


def test_preset_accepts_org_prefix_and_rejects_unknown():
    assert T5Config.preset("google/flan-t5-small") == T5Config.preset("flan-t5-small")
    with pytest.raises(ValueError, match="t5-tiny.*available: t5-small"):
        T5Config.preset("t5-tiny")


@pytest.mark.parametrize("value", ["swiglu", "gated-tanh", "gelu-gated"])
def test_unsupported_feed_forward_proj(value):
    with pytest.raises(ValueError) as e:
        T5Config(feed_forward_proj=value)
    message = str(e.value)
    assert repr(value) in message
    for supported in ("relu", "gelu", "gated-gelu", "gated-relu", "gated-silu", "silu"):
        assert supported in message


@pytest.mark.parametrize("proj, act, gated", [
    ("relu", "relu", False), ("gelu", "gelu", False), ("gated-gelu", "gelu_new", True),
    ("gated-relu", "relu", True), ("gated-silu", "silu", True), ("silu", "silu", False),
])
def test_activation_follows_hf(proj, act, gated):
    config = T5Config(feed_forward_proj=proj)
    assert (config.dense_act_fn, config.is_gated_act) == (act, gated)


def test_from_dict_defaults_and_unknown_keys():
    config = T5Config.from_dict({"d_model": 8, "d_kv": 2, "num_layers": 3, "dropout_rate": 0.1,
                                 "initializer_factor": 1.0, "n_positions": 512,
                                 "eos_token_id": [1, 5], "decoder_start_token_id": None})
    assert config.num_decoder_layers == 3
    assert config.decoder_start_token_id == config.pad_token_id == 0
    assert config.eos_token_id == 1
    assert T5Config.from_dict({"hidden_size": 24, "num_attention_heads": 3}).d_model == 24


def test_from_dict_rejects_other_model_types():
    with pytest.raises(ValueError, match="'bart'.*t5"):
        T5Config.from_dict({"model_type": "bart", "d_model": 8})


@pytest.mark.parametrize("bad", [{"d_model": 0}, {"num_heads": -1}, {"vocab_size": 2.5}])
def test_rejects_bad_sizes(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        T5Config(**bad)


def test_json_round_trip(tmp_path):
    config = T5Config.preset("flan-t5-base").replace(num_decoder_layers=4)
    path = tmp_path / "config.json"
    text = config.to_json(path)
    assert T5Config.from_json(path) == config == T5Config.from_json(text)
    values = json.loads(text)
    assert values["model_type"] == "t5" and values["dense_act_fn"] == "gelu_new"
    assert "scale_decoder_outputs" not in values  # implied by tie_word_embeddings


def test_scale_decoder_outputs_written_only_when_it_deviates():
    config = T5Config(tie_word_embeddings=True, scale_decoder_outputs=False)
    assert not config.rescales_decoder_output
    values = config.to_dict()
    assert values["scale_decoder_outputs"] is False
    assert T5Config.from_dict(values) == config


@pytest.mark.parametrize("name, tied, rescale, ffp", [
    ("v1_0", True, True, "relu"),
    ("v1_1", False, False, "gated-gelu"),
    ("v1_1_hf5_tied", True, False, "gated-gelu"),
])
def test_reads_transformers_config_files(name, tied, rescale, ffp):
    config = T5Config.from_json(os.path.join(FIXTURES, name, "config.json"))
    assert (config.tie_word_embeddings, config.rescales_decoder_output,
            config.feed_forward_proj) == (tied, rescale, ffp)
