"""keras-hub side of bench.peers: our exported T5 decoded by keras-hub's `T5Seq2SeqLM`.

    load_backbone(export_dir)              common-layout checkpoint -> keras_hub T5Backbone
    KerasHubDecoder(export_dir, ...)       greedy batch-1 `T5Seq2SeqLM.generate` of id prompts

The inverse of `tfspec.keras_hub_conversion` (keras-hub names <- HF names, kernels [in, out]
<- Linear weights [out, in]), filled from the exported `model.safetensors`. keras-hub's T5
can hold a checkpoint only when it has one layer count for both stacks, 32 relative-attention
buckets with max distance 128, and the tied-head rescaling exactly when the head is tied
(`ValueError` otherwise). tfspec's "gated-gelu" (tanh GELU) is keras-hub's
`gelu_approximate`, as its FLAN presets use.

Generation is keras-hub's own: `compile(sampler="greedy")` and `generate` with
`preprocessor=None` (token ids in, token ids out), XLA-compiled by keras-hub. Encoder inputs
are right-padded to one fixed width (the longest prompt of the set, as a preprocessor with a
fixed `encoder_sequence_length` would), so every prompt runs the same compiled program.
"""

import json
import os
import warnings
from typing import List, Sequence

import numpy as np

INSTALL_HINT = "pip install keras-hub (a tfspec requirement: pip install -e .)"

# keras-hub's attention layers drop Keras masks (they take explicit padding masks instead).
_MASK_WARNING = ".*does not support masking.*"
_ACTIVATIONS = {"relu": "relu", "gelu_new": "gelu_approximate", "gelu": "gelu",
                "silu": "silu"}


def available() -> str:
    """"" if keras-hub's T5Seq2SeqLM imports, else why not (one line)."""
    try:
        from keras_hub.models import T5Seq2SeqLM  # noqa: F401
    except ImportError as e:
        return f"keras-hub T5Seq2SeqLM not importable ({e})"
    return ""


def version() -> str:
    import keras_hub
    return keras_hub.__version__


def _check_convertible(config) -> None:
    problems = []
    if config.num_layers != config.num_decoder_layers:
        problems.append(f"{config.num_layers} encoder vs {config.num_decoder_layers} decoder "
                        "layers (keras-hub has one num_layers)")
    if (config.relative_attention_num_buckets, config.relative_attention_max_distance) != (
            32, 128):
        problems.append("relative attention other than 32 buckets / max distance 128")
    if config.rescales_decoder_output != config.tie_word_embeddings:
        problems.append("a decoder-output rescaling that differs from the head tying")
    if config.dense_act_fn not in _ACTIVATIONS:
        problems.append(f"activation {config.dense_act_fn!r}")
    if problems:
        raise ValueError(f"keras-hub's T5 cannot hold this checkpoint: {'; '.join(problems)}")


def load_backbone(export_dir: str):
    """A float32 keras-hub `T5Backbone` with the weights of a common-layout checkpoint.

    Raises:
      ValueError: an architecture keras-hub's T5 cannot express (see the module docstring).
    """
    import keras_hub
    from safetensors.numpy import load_file

    from tfspec.models.t5_config import T5Config

    with open(os.path.join(export_dir, "config.json"), encoding="utf-8") as f:
        config = T5Config.from_dict(json.load(f))
    _check_convertible(config)
    activation = _ACTIVATIONS[config.dense_act_fn]
    if activation == "gelu_approximate":  # Registered by keras-hub, not a Keras name.
        from keras_hub.src.utils.keras_utils import gelu_approximate
        activation = gelu_approximate
    tensors = {n: np.asarray(v, np.float32)
               for n, v in load_file(os.path.join(export_dir, "model.safetensors")).items()}
    backbone = keras_hub.models.T5Backbone(
        vocabulary_size=config.vocab_size, num_layers=config.num_layers,
        num_heads=config.num_heads, hidden_dim=config.d_model, intermediate_dim=config.d_ff,
        key_value_dim=config.d_kv, dropout=0.0, activation=activation,
        use_gated_activation=config.is_gated_act, layer_norm_epsilon=config.layer_norm_epsilon,
        tie_embedding_weights=config.tie_word_embeddings, dtype="float32")

    def kernel(dense, name):  # HF Linear [out, in] -> Keras Dense kernel [in, out].
        dense.kernel.assign(tensors[f"{name}.weight"].T)

    def attention(attn, prefix):
        for proj, n in ((attn.query_projector, "q"), (attn.key_projector, "k"),
                        (attn.value_projector, "v"), (attn.output_projector, "o")):
            kernel(proj, f"{prefix}.{n}")
        if attn.use_relative_attention_bias:
            attn.relative_attention_bias.assign(
                tensors[f"{prefix}.relative_attention_bias.weight"])

    def ffn(layer, prefix):
        dense = f"{prefix}.DenseReluDense"
        if layer.use_gated_activation:
            kernel(layer.input_projector, f"{dense}.wi_0")
            kernel(layer.gate_projector, f"{dense}.wi_1")
        else:
            kernel(layer.input_projector, f"{dense}.wi")
        kernel(layer.output_projector, f"{dense}.wo")
        layer.layer_norm.weight.assign(tensors[f"{prefix}.layer_norm.weight"])

    backbone.token_embedding.embeddings.assign(tensors["shared.weight"])
    if not config.tie_word_embeddings:
        backbone.token_embedding.reverse_embeddings.assign(tensors["lm_head.weight"].T)
    for stack, layers in (("encoder", backbone.encoder_transformer_layers),
                          ("decoder", backbone.decoder_transformer_layers)):
        for i, layer in enumerate(layers):
            p = f"{stack}.block.{i}.layer"
            attention(layer.self_attention, f"{p}.0.SelfAttention")
            layer.self_attention_layer_norm.weight.assign(tensors[f"{p}.0.layer_norm.weight"])
            if stack == "decoder":
                attention(layer.cross_attention, f"{p}.1.EncDecAttention")
                layer.cross_attention_layer_norm.weight.assign(
                    tensors[f"{p}.1.layer_norm.weight"])
            ffn(layer, f"{p}.{2 if stack == 'decoder' else 1}")
    backbone.encoder_layer_norm.weight.assign(tensors["encoder.final_layer_norm.weight"])
    backbone.decoder_layer_norm.weight.assign(tensors["decoder.final_layer_norm.weight"])
    return backbone, config


class KerasHubDecoder:
    """Greedy decoding of token-id prompts with keras-hub's `T5Seq2SeqLM.generate`.

    Args:
      export_dir: a directory written by `tfspec.save_model(model, dir, dtype="float32")`.
      encoder_width: the padded encoder width every prompt is decoded at (>= longest prompt).
      max_new_tokens: decoder length after the start token (fixed at construction: keras-hub
        compiles one program per width).
    """

    def __init__(self, export_dir: str, encoder_width: int, max_new_tokens: int):
        import keras_hub

        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", _MASK_WARNING)
            backbone, config = load_backbone(export_dir)
            self._lm = keras_hub.models.T5Seq2SeqLM(backbone=backbone, preprocessor=None)
        self._lm.compile(sampler="greedy")
        self._config = config
        self.encoder_width = int(encoder_width)
        self.max_new_tokens = int(max_new_tokens)

    def greedy(self, prompts: Sequence[Sequence[int]]) -> List[List[int]]:
        """Greedy continuations, one list of ids per prompt (EOS included when emitted).

        Decodes `prompts` one at a time (batch 1).
        """
        config = self._config
        width, length = self.encoder_width, self.max_new_tokens + 1
        out = []
        for prompt in prompts:
            if len(prompt) > width:
                raise ValueError(f"prompt of {len(prompt)} tokens is wider than the encoder "
                                 f"width {width}")
            encoder_ids = np.full((1, width), config.pad_token_id, np.int32)
            encoder_ids[0, :len(prompt)] = prompt
            decoder_ids = np.full((1, length), config.pad_token_id, np.int32)
            decoder_ids[0, 0] = config.decoder_start_token_id
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", _MASK_WARNING)
                result = self._lm.generate(
                    {"encoder_token_ids": encoder_ids,
                     "encoder_padding_mask": np.arange(width)[None] < len(prompt),
                     "decoder_token_ids": decoder_ids,
                     "decoder_padding_mask": np.arange(length)[None] < 1},
                    stop_token_ids=[config.eos_token_id])
            ids = np.asarray(result["decoder_token_ids"])[0, 1:]
            mask = np.asarray(result["decoder_padding_mask"])[0, 1:]
            out.append(ids[mask.astype(bool)].tolist())
        return out
