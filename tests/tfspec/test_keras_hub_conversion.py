"""Numerical parity with keras-hub's T5 through a saved preset, and the config mapping."""

import keras
import keras_hub
import numpy as np
import pytest
from keras_hub.src.utils.keras_utils import gelu_approximate

from tfspec.checkpoints import load_model
from tfspec.keras_hub_conversion import feed_forward_proj_from_keras_hub

TOL = 1e-4
# keras-hub warns that its attention layers drop Keras masks; irrelevant to these checks.
pytestmark = pytest.mark.filterwarnings("ignore:.*does not support masking:UserWarning")


@pytest.mark.parametrize("activation, gated, tied, expected_proj", [
    ("relu", False, True, "relu"),                       # t5_*_multi presets (T5 v1.0)
    (gelu_approximate, True, False, "gated-gelu"),       # flan_*_multi presets
])
def test_preset_directory_matches_keras_hub(activation, gated, tied, expected_proj, tmp_path):
    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.T5Backbone(
        vocabulary_size=64, num_layers=2, num_heads=4, hidden_dim=16, intermediate_dim=32,
        dropout=0.0, activation=activation, use_gated_activation=gated,
        tie_embedding_weights=tied)
    backbone.save_to_preset(str(tmp_path))
    model = load_model(tmp_path)
    assert model.config.feed_forward_proj == expected_proj
    assert model.config.tie_word_embeddings == tied

    rng = np.random.default_rng(0)
    lengths = np.array([20, 9], np.int32)
    encoder_ids = rng.integers(2, 64, size=(2, 20)).astype(np.int32)
    encoder_mask = (np.arange(20)[None] < lengths[:, None]).astype(np.int32)
    encoder_ids[encoder_mask == 0] = 0
    decoder_ids = rng.integers(2, 64, size=(2, 24)).astype(np.int32)
    decoder_ids[:, 0] = 0
    outputs = backbone({"encoder_token_ids": encoder_ids, "encoder_padding_mask": encoder_mask,
                        "decoder_token_ids": decoder_ids,
                        "decoder_padding_mask": np.ones_like(decoder_ids)})
    keras_hub_states = outputs["decoder_sequence_output"].numpy()
    states = model.decoder_states(encoder_ids, lengths, decoder_ids).numpy()
    assert np.abs(states - keras_hub_states).max() < TOL

    # keras-hub's T5Seq2SeqLM head: rescale by hidden_dim**-0.5 when tied, then reverse embed.
    head_input = keras_hub_states * (16 ** -0.5) if tied else keras_hub_states
    keras_hub_logits = backbone.token_embedding(head_input, reverse=True).numpy()
    logits = model.forward(encoder_ids, lengths, decoder_ids).numpy()
    assert np.abs(logits - keras_hub_logits).max() < TOL
    assert keras_hub_logits.std() > 1e-2  # not a vacuous comparison


@pytest.mark.parametrize("activation, gated, expected", [
    ("relu", False, "relu"),
    ("relu", True, "gated-relu"),
    ("keras_nlp>gelu_approximate", True, "gated-gelu"),
    ({"module": "builtins", "class_name": "function", "config": "keras_hub>gelu_approximate",
      "registered_name": "function"}, True, "gated-gelu"),
    ("gelu", False, "gelu"),
    ("gelu", True, "gated-gelu"),  # exact GELU has no HF gated spelling: warned, tanh used
    ("silu", True, "gated-silu"),
])
def test_activation_mapping(activation, gated, expected):
    assert feed_forward_proj_from_keras_hub(activation, gated) == expected


def test_unknown_activation_is_rejected():
    with pytest.raises(ValueError, match="'tanh'"):
        feed_forward_proj_from_keras_hub("tanh", True)
