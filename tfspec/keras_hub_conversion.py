"""Converts a keras-hub `T5Backbone` to a `T5Config` and HF-named weights.

keras-hub's T5 (keras_hub/src/models/t5/) is the same network as HF's T5 with other names:

    keras-hub                                   HF checkpoint name
    token_embedding.embeddings [V, D]           shared.weight
    token_embedding.reverse_embeddings [D, V]   lm_head.weight [V, D] (untied models only)
    {encoder,decoder}_transformer_layers[i]     {encoder,decoder}.block.i.layer...
      .self_attention.{query,key,value,         .0.SelfAttention.{q,k,v,o}.weight
        output}_projector.kernel [in, out]        ([out, in])
      .self_attention.relative_attention_bias   .0.SelfAttention.relative_attention_bias.weight
      .self_attention_layer_norm.weight         .0.layer_norm.weight
      .cross_attention.* (decoder)              .1.EncDecAttention.{q,k,v,o}.weight
      .cross_attention_layer_norm (decoder)     .1.layer_norm.weight
      .input_projector / .gate_projector /      .{1 enc, 2 dec}.DenseReluDense.wi (wi_0 when
        .output_projector                         gated) / wi_1 / wo
      .layer_norm                               .{1 enc, 2 dec}.layer_norm.weight
    {encoder,decoder}_layer_norm.weight         {encoder,decoder}.final_layer_norm.weight

Differences from HF semantics, and how they are handled:

- keras-hub hard-codes 32 relative-attention buckets and max distance 128 (HF's defaults),
  and uses one `num_layers` for both stacks: the converted config says so.
- keras-hub's activation "gelu" is Keras' *exact* erf GELU, while HF's "gated-gelu" (T5 v1.1,
  FLAN) is the tanh approximation. keras-hub's own FLAN presets use
  "keras_hub>gelu_approximate" (tanh), which converts exactly to "gated-gelu". A gated exact
  "gelu" has no HF `feed_forward_proj` spelling; it is converted to "gated-gelu" with a
  warning; logits then differ from keras-hub's by the GELU approximation error (1.5e-4
  on logits of size ~10 for a random 2-layer model; more for deep ones).
- keras-hub's `T5LayerNorm` computes in the layer dtype (bfloat16 for a bfloat16 preset),
  tfspec in float32; identical in float32.
- keras-hub masks attention with an additive -1e9 and tfspec with `tf.where`; identical
  unless every key of a query is masked (never the case for left-aligned prompts).
- The backbone has no LM head; `T5Seq2SeqLM` applies the v1.0 rescaling `d_model ** -0.5`
  before the tied head exactly as HF does, so no difference there.
"""

import logging
from typing import Any, Dict, Tuple

import numpy as np

from tfspec.models.t5_config import T5Config

_LOG = logging.getLogger(__name__)

# keras-hub's T5MultiHeadAttention constants (not in its config).
KERAS_HUB_NUM_BUCKETS = 32
KERAS_HUB_MAX_DISTANCE = 128


def _activation_name(activation: Any) -> str:
    """Serialized keras activation ("relu", "keras_hub>gelu_approximate", or a dict)."""
    if isinstance(activation, dict):
        activation = activation.get("config", activation.get("class_name", ""))
    if callable(activation):
        activation = getattr(activation, "__name__", str(activation))
    return str(activation).split(">")[-1]


def feed_forward_proj_from_keras_hub(activation: Any, use_gated_activation: bool) -> str:
    """Maps keras-hub (activation, use_gated_activation) to an HF `feed_forward_proj`."""
    name = _activation_name(activation)
    gated = bool(use_gated_activation)
    if name in ("gelu_approximate", "gelu_new"):
        return "gated-gelu" if gated else "gelu_new"
    if name == "gelu":
        if gated:
            _LOG.warning("keras-hub T5 uses exact GELU with gating; converting to HF "
                         "'gated-gelu' (tanh GELU, as T5 v1.1/FLAN were trained).")
            return "gated-gelu"
        return "gelu"
    if name in ("relu", "silu"):
        return f"gated-{name}" if gated else name
    if name == "swish":
        return "gated-silu" if gated else "silu"
    raise ValueError(f"keras-hub T5 activation {name!r} has no T5 feed_forward_proj "
                     "equivalent; supported: relu, gelu, gelu_approximate, silu.")


def config_from_keras_hub(backbone_config: Dict[str, Any]) -> T5Config:
    """`T5Backbone.get_config()` (or the "config" of a preset config.json) -> T5Config."""
    hidden = int(backbone_config["hidden_dim"])
    heads = int(backbone_config["num_heads"])
    return T5Config(
        vocab_size=int(backbone_config["vocabulary_size"]),
        d_model=hidden,
        d_kv=int(backbone_config.get("key_value_dim") or hidden // heads),
        d_ff=int(backbone_config["intermediate_dim"]),
        num_layers=int(backbone_config["num_layers"]),
        num_decoder_layers=int(backbone_config["num_layers"]),
        num_heads=heads,
        relative_attention_num_buckets=KERAS_HUB_NUM_BUCKETS,
        relative_attention_max_distance=KERAS_HUB_MAX_DISTANCE,
        feed_forward_proj=feed_forward_proj_from_keras_hub(
            backbone_config.get("activation", "relu"),
            backbone_config.get("use_gated_activation", True)),
        tie_word_embeddings=bool(backbone_config.get("tie_embedding_weights", True)),
        layer_norm_epsilon=float(backbone_config.get("layer_norm_epsilon", 1e-6)),
        pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)


def _np(variable) -> np.ndarray:
    return np.asarray(variable.numpy()) if hasattr(variable, "numpy") else np.asarray(variable)


def weights_from_keras_hub(backbone) -> Dict[str, np.ndarray]:
    """HF-named weights ([out, in] Linear layout) of a keras-hub `T5Backbone`."""
    out: Dict[str, np.ndarray] = {"shared.weight": _np(backbone.token_embedding.embeddings)}
    if not backbone.tie_embedding_weights:
        out["lm_head.weight"] = _np(backbone.token_embedding.reverse_embeddings).T

    def attention(attn, prefix, with_bias):
        for proj, n in ((attn.query_projector, "q"), (attn.key_projector, "k"),
                        (attn.value_projector, "v"), (attn.output_projector, "o")):
            out[f"{prefix}.{n}.weight"] = _np(proj.kernel).T
        if with_bias and attn.use_relative_attention_bias:
            out[f"{prefix}.relative_attention_bias.weight"] = _np(attn.relative_attention_bias)

    def ffn(layer, prefix):
        if layer.use_gated_activation:
            out[f"{prefix}.DenseReluDense.wi_0.weight"] = _np(layer.input_projector.kernel).T
            out[f"{prefix}.DenseReluDense.wi_1.weight"] = _np(layer.gate_projector.kernel).T
        else:
            out[f"{prefix}.DenseReluDense.wi.weight"] = _np(layer.input_projector.kernel).T
        out[f"{prefix}.DenseReluDense.wo.weight"] = _np(layer.output_projector.kernel).T
        out[f"{prefix}.layer_norm.weight"] = _np(layer.layer_norm.weight)

    for i, layer in enumerate(backbone.encoder_transformer_layers):
        p = f"encoder.block.{i}.layer"
        attention(layer.self_attention, f"{p}.0.SelfAttention", with_bias=True)
        out[f"{p}.0.layer_norm.weight"] = _np(layer.self_attention_layer_norm.weight)
        ffn(layer, f"{p}.1")
    out["encoder.final_layer_norm.weight"] = _np(backbone.encoder_layer_norm.weight)
    for i, layer in enumerate(backbone.decoder_transformer_layers):
        p = f"decoder.block.{i}.layer"
        attention(layer.self_attention, f"{p}.0.SelfAttention", with_bias=True)
        out[f"{p}.0.layer_norm.weight"] = _np(layer.self_attention_layer_norm.weight)
        attention(layer.cross_attention, f"{p}.1.EncDecAttention", with_bias=False)
        out[f"{p}.1.layer_norm.weight"] = _np(layer.cross_attention_layer_norm.weight)
        ffn(layer, f"{p}.2")
    out["decoder.final_layer_norm.weight"] = _np(backbone.decoder_layer_norm.weight)
    return out


def convert_backbone(backbone) -> Tuple[T5Config, Dict[str, np.ndarray]]:
    """keras-hub `T5Backbone` -> (T5Config, HF-named numpy weights)."""
    return config_from_keras_hub(backbone.get_config()), weights_from_keras_hub(backbone)
