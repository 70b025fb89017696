"""Tests of tfspec.checkpoints: save/load round trips, sharded files, spec resolution, errors."""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
from safetensors.tensorflow import load_file, save_file

from tfspec import checkpoints
from tfspec.checkpoints import load_model, save_model
from tfspec.models import T5, T5Config

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "hf_t5")
_TINY = dict(vocab_size=48, d_model=16, d_kv=4, d_ff=24, num_layers=2, num_heads=4)
CONFIGS = {
    "v1_0": T5Config(feed_forward_proj="relu", tie_word_embeddings=True, **_TINY),
    "v1_1": T5Config(feed_forward_proj="gated-gelu", tie_word_embeddings=False,
                     num_decoder_layers=3, **_TINY),
}
ENC = np.array([[5, 6, 7, 8], [9, 10, 0, 0]], np.int32)
LENGTHS = np.array([4, 2], np.int32)
DEC = np.array([[0, 11, 12], [0, 13, 14]], np.int32)


def _logits(model):
    return model.forward(ENC, LENGTHS, DEC).numpy()


def _copy_fixture(name, tmp_path):
    target = tmp_path / name
    shutil.copytree(os.path.join(FIXTURES, name), target)
    return target


def _rewrite(path, edit):
    with open(path) as f:
        values = json.load(f)
    edit(values)
    with open(path, "w") as f:
        json.dump(values, f)


# ------------------------------------------------------------------------------ round trips


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_save_load_round_trip_is_exact(name, tmp_path):
    model = T5(CONFIGS[name], seed=7)
    directory = save_model(model, tmp_path / "ckpt")
    assert sorted(os.listdir(directory)) == ["config.json", "model.safetensors"]
    names = set(load_file(os.path.join(directory, "model.safetensors")))
    assert ("lm_head.weight" in names) == (name == "v1_1")
    loaded = load_model(directory)
    assert loaded.config == model.config
    np.testing.assert_array_equal(_logits(loaded), _logits(model))


def test_draft_vocabulary_travels_with_the_model(tmp_path):
    model = T5(CONFIGS["v1_1"], seed=7).set_draft_vocabulary([9, 4, 30])
    directory = save_model(model, tmp_path / "ckpt")
    loaded = load_model(directory)
    np.testing.assert_array_equal(loaded.draft_vocab_ids, [1, 4, 9, 30])
    np.testing.assert_array_equal(_logits(loaded), _logits(model))  # forward: all of V
    save_model(loaded.set_draft_vocabulary(None), directory)  # Saved again without one.
    assert not os.path.exists(os.path.join(directory, checkpoints.DRAFT_VOCABULARY_FILE))
    assert load_model(directory).draft_vocab_ids is None


@pytest.mark.parametrize("content", ['{"ids": [3, 99]}', '{"idz": [3]}', "[1, 2"])
def test_bad_draft_vocabulary_file_is_one_line_error(content, tmp_path):
    directory = save_model(T5(CONFIGS["v1_0"], seed=7), tmp_path / "ckpt")
    with open(os.path.join(directory, checkpoints.DRAFT_VOCABULARY_FILE), "w") as f:
        f.write(content)
    with pytest.raises(ValueError, match="is not a draft vocabulary") as error:
        load_model(directory)
    assert "\n" not in str(error.value)


def test_saved_linear_weights_are_out_in(tmp_path):
    model = T5(CONFIGS["v1_1"], seed=1)
    tensors = load_file(os.path.join(save_model(model, tmp_path), "model.safetensors"))
    q = tensors["encoder.block.0.layer.0.SelfAttention.q.weight"].numpy()
    np.testing.assert_array_equal(q, model.encoder_blocks[0].self_attention.q.numpy().T)
    assert tensors["decoder.block.0.layer.2.DenseReluDense.wi_0.weight"].shape == (24, 16)
    assert tensors["lm_head.weight"].shape == (48, 16)


def test_bfloat16_round_trip(tmp_path):
    model = T5(CONFIGS["v1_0"], seed=2, dtype="bfloat16")
    directory = save_model(model, tmp_path)
    assert load_file(os.path.join(directory, "model.safetensors"))["shared.weight"].dtype == (
        tf.bfloat16)
    loaded = load_model(directory, dtype="bfloat16")
    assert loaded.model_dtype == "bfloat16"
    np.testing.assert_array_equal(_logits(loaded), _logits(model))
    # Loading bfloat16 files as float32 upcasts exactly, so logits stay close.
    assert np.abs(_logits(load_model(directory)) - _logits(model)).max() < 0.05


def test_tokenizer_file_travels_with_the_model(tmp_path):
    spm = tmp_path / "my.model"
    spm.write_bytes(b"not really a sentencepiece model")
    model = T5(CONFIGS["v1_0"])
    assert model.tokenizer_path is None
    model.tokenizer_path = str(spm)
    directory = save_model(model, tmp_path / "out")
    assert (tmp_path / "out" / "spiece.model").read_bytes() == spm.read_bytes()
    loaded = load_model(directory)
    assert loaded.tokenizer_path == os.path.abspath(os.path.join(directory, "spiece.model"))
    assert load_model(os.path.join(FIXTURES, "v1_0")).tokenizer_path is None


def test_sharded_index_layout_loads(tmp_path):
    source = os.path.join(FIXTURES, "v1_1")
    target = tmp_path / "sharded"
    target.mkdir()
    shutil.copy(os.path.join(source, "config.json"), target)
    tensors = load_file(os.path.join(source, "model.safetensors"))
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    weight_map = {}
    for shard, shard_names in shards.items():
        save_file({n: tensors[n] for n in shard_names}, str(target / shard),
                  metadata={"format": "pt"})
        weight_map.update({n: shard for n in shard_names})
    with open(target / "model.safetensors.index.json", "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f)
    np.testing.assert_array_equal(_logits(load_model(target)), _logits(load_model(source)))

    # A shard that the index names but that is missing is an error naming the shard.
    os.remove(target / "model-00002-of-00002.safetensors")
    with pytest.raises(FileNotFoundError, match="model-00002-of-00002.safetensors"):
        load_model(target)


def test_transformers5_config_with_separate_head_is_untied(tmp_path):
    # transformers >= 5 re-saving a FLAN model writes tie_word_embeddings: true together with
    # scale_decoder_outputs: false and keeps the (different) lm_head tensor.
    directory = _copy_fixture("v1_1", tmp_path)

    def edit(values):
        values["tie_word_embeddings"] = True
        values["scale_decoder_outputs"] = False

    _rewrite(directory / "config.json", edit)
    model = load_model(directory)
    assert not model.config.tie_word_embeddings and not model.config.rescales_decoder_output
    golden = np.load(directory / "golden.npz")
    logits = model.forward(golden["encoder_ids"], golden["encoder_lengths"],
                           golden["decoder_input_ids"]).numpy()
    assert np.abs(logits - golden["logits"]).max() < 1e-4


def test_zoo_spec_loads_a_packaged_directory(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoints, "ZOO_DIR", tmp_path)
    save_model(T5(CONFIGS["v1_0"], seed=3), tmp_path / "tiny-test")
    assert checkpoints.zoo_names() == ["tiny-test"]
    np.testing.assert_array_equal(_logits(load_model("zoo:tiny-test")),
                                  _logits(T5(CONFIGS["v1_0"], seed=3)))


# ----------------------------------------------------------------------------------- errors


def test_missing_config_json(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"No config\.json in .*expected"):
        load_model(tmp_path)


def test_missing_weights_file(tmp_path):
    T5Config(**_TINY).to_json(tmp_path / "config.json")
    with pytest.raises(FileNotFoundError, match=r"model\.safetensors or model\.safetensors"):
        load_model(tmp_path)
    (tmp_path / "pytorch_model.bin").write_bytes(b"pickle")
    with pytest.raises(FileNotFoundError, match="pickle-based formats are not loaded"):
        load_model(tmp_path)


def test_nonexistent_path_and_file_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="no/such/dir.*hf://ORG/NAME"):
        load_model(str(tmp_path / "no" / "such" / "dir"))
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ValueError, match="is a file"):
        load_model(tmp_path / "model.safetensors")


def test_wrong_tensor_shape_names_the_tensor(tmp_path):
    directory = _copy_fixture("v1_0", tmp_path)
    path = str(directory / "model.safetensors")
    tensors = load_file(path)
    tensors["decoder.block.1.layer.1.EncDecAttention.k.weight"] = tf.zeros([16, 15])
    save_file(tensors, path, metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"decoder\.block\.1\.layer\.1\.EncDecAttention\.k\."
                                         r"weight \[16, 15\] != expected \[16, 16\]"):
        load_model(directory)


def test_missing_and_unexpected_tensors_are_named(tmp_path):
    directory = _copy_fixture("v1_0", tmp_path)
    path = str(directory / "model.safetensors")
    tensors = load_file(path)
    del tensors["encoder.block.1.layer.1.DenseReluDense.wo.weight"]
    del tensors["decoder.final_layer_norm.weight"]
    tensors["decoder.block.7.layer.0.SelfAttention.q.weight"] = tf.zeros([16, 16])
    save_file(tensors, path, metadata={"format": "pt"})
    with pytest.raises(ValueError) as e:
        load_model(directory)
    message = str(e.value)
    assert "missing tensors 2 (decoder.final_layer_norm.weight, " in message
    assert "encoder.block.1.layer.1.DenseReluDense.wo.weight" in message
    assert "unexpected tensors 1 (decoder.block.7.layer.0.SelfAttention.q.weight)" in message


def test_config_with_wrong_layout_reports_the_weights(tmp_path):
    # A relu (wi) checkpoint whose config claims gated-gelu (wi_0, wi_1).
    directory = _copy_fixture("v1_0", tmp_path)
    _rewrite(directory / "config.json", lambda v: v.update(feed_forward_proj="gated-gelu"))
    with pytest.raises(ValueError, match=r"missing tensors 8 \(.*wi_0.*unexpected tensors 4"):
        load_model(directory)


def test_unsupported_feed_forward_proj_in_config(tmp_path):
    directory = _copy_fixture("v1_0", tmp_path)
    _rewrite(directory / "config.json", lambda v: v.update(feed_forward_proj="gated-swiglu"))
    with pytest.raises(ValueError, match="'gated-swiglu'.*supported: relu"):
        load_model(directory)


@pytest.mark.parametrize("edit, pattern", [
    ({"model_type": "bart"}, "model_type 'bart'"),
    ({"architectures": ["T5ForSequenceClassification"]}, "unsupported architectures"),
])
def test_unknown_model_type_or_architecture(tmp_path, edit, pattern):
    directory = _copy_fixture("v1_0", tmp_path)
    _rewrite(directory / "config.json", lambda v: v.update(edit))
    with pytest.raises(ValueError, match=pattern):
        load_model(directory)


def test_hf_spec_offline_says_how_to_fetch(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError) as e:
        load_model("hf://tfspec-tests/no-such-model")
    message = str(e.value)
    assert "\n" not in message
    assert "hf download tfspec-tests/no-such-model --local-dir DIR" in message
    assert "pass DIR" in message


def test_keras_hub_preset_name_offline_says_how_to_fetch(monkeypatch):
    import keras_hub

    def no_network(*args, **kwargs):
        raise ConnectionError("Failed to resolve 'api.kaggle.com'")

    monkeypatch.setattr(keras_hub.models.T5Backbone, "from_preset", no_network)
    with pytest.raises(ValueError) as e:
        load_model("t5_small_multi")
    assert "\n" not in str(e.value)
    assert "save_to_preset('DIR')" in str(e.value)


def test_unknown_zoo_name_lists_available(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoints, "ZOO_DIR", tmp_path)
    with pytest.raises(ValueError, match="Unknown zoo model 'nope'; available: none"):
        load_model("zoo:nope")
    save_model(T5(CONFIGS["v1_0"]), tmp_path / "a-model")
    with pytest.raises(ValueError, match="available: a-model"):
        load_model("zoo:nope")


def test_save_model_rejects_other_models(tmp_path):
    with pytest.raises(TypeError, match="T5"):
        save_model(object(), tmp_path)


# --------------------------------------------------------------------------- damaged input


@pytest.mark.parametrize("damage", ["truncated", "garbage", "header_not_json"])
def test_corrupt_safetensors_is_a_value_error_naming_the_file(tmp_path, damage):
    directory = _copy_fixture("v1_0", tmp_path)
    path = directory / "model.safetensors"
    data = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[:len(data) // 2])
    elif damage == "garbage":
        path.write_bytes(b"\x00\xff" * 64)
    else:  # A plausible header length followed by bytes that are not JSON.
        path.write_bytes((40).to_bytes(8, "little") + b"{" * 40 + data[48:])
    with pytest.raises(ValueError, match=f"{path} is not a readable safetensors file"):
        load_model(directory)


@pytest.mark.parametrize("field, value", [("d_model", 10**7), ("num_layers", 10**6),
                                          ("vocab_size", 10**9)])
def test_absurd_config_is_refused_before_allocation(tmp_path, field, value):
    directory = _copy_fixture("v1_0", tmp_path)
    # t5-small's sizes with one of them absurd (the tensors never get read).
    sizes = dict(d_model=512, d_kv=64, d_ff=2048, num_heads=8, num_layers=6,
                 num_decoder_layers=6, vocab_size=32128)
    sizes[field] = value
    if field == "num_layers":
        sizes["num_decoder_layers"] = value
    _rewrite(directory / "config.json", lambda values: values.update(sizes))
    with pytest.raises(ValueError, match=r"describes [\d,]+ parameters, which needs about "
                                         r"[\d,.]+ GiB, more than this machine's"):
        load_model(directory)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_weights_are_refused_at_load(tmp_path, bad):
    directory = _copy_fixture("v1_0", tmp_path)
    path = str(directory / "model.safetensors")
    tensors = load_file(path)
    name = "decoder.block.0.layer.0.SelfAttention.q.weight"
    value = tensors[name].numpy().copy()
    value[1, 2] = bad
    tensors[name] = tf.constant(value)
    save_file(tensors, path, metadata={"format": "pt"})
    with pytest.raises(ValueError, match=rf"tensor {name} .*holds 1 non-finite values"):
        load_model(directory)
