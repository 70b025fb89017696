"""`T5Config`: the hyper-parameters of a T5 encoder-decoder, named as in T5 `config.json` files.

The field names are those of the `config.json` that ships with public T5 checkpoints
(`t5-small`, `google/flan-t5-base`, ...), so a config round-trips through that file unchanged:

    config = T5Config.from_json("/path/to/checkpoint/config.json")
    config = T5Config.preset("flan-t5-small")
    text = config.to_json()

Semantics follow Hugging Face transformers' `modeling_t5` exactly:

- `feed_forward_proj` is `ACT` or `gated-ACT`. `"gated-gelu"` means the tanh approximation
  of GELU (HF's `gelu_new`), while plain `"gelu"` is the exact erf GELU.
- `tie_word_embeddings=True` (T5 v1.0): the LM head reuses `shared.weight` and the decoder
  output is multiplied by `d_model ** -0.5` first. `False` (T5 v1.1, FLAN-T5): a separate
  `lm_head.weight` and no rescaling.
- `scale_decoder_outputs` is the one field that is not in older files: transformers >= 5 writes
  it, because it always sets `tie_word_embeddings: true` and records the v1.0 rescaling
  separately. `None` (the default, and how older files read) means "rescale iff tied".
"""

import dataclasses
import json
import os
from typing import Any, Dict, Mapping, Optional, Union

# Activation names accepted after an optional "gated-" prefix, as HF's ACT2FN spells them.
# "gelu" is the exact erf GELU and "gelu_new" the tanh approximation; HF special-cases the
# spelling "gated-gelu" to mean gated "gelu_new" (T5 v1.1 / FLAN), and so do we.
_ACTIVATIONS = ("relu", "gelu", "gelu_new", "silu")
SUPPORTED_FEED_FORWARD_PROJ = (
    "relu", "gelu", "gelu_new", "silu", "gated-gelu", "gated-relu", "gated-silu",
    "gated-gelu_new")

# config.json spellings of `model_type` whose checkpoints have the T5 layout. mT5 is T5 v1.1
# with a larger vocabulary; umT5 (per-layer relative biases) is not the same architecture.
SUPPORTED_MODEL_TYPES = ("t5", "mt5")

# Alternative key names that HF's PretrainedConfig.attribute_map accepts for T5.
_KEY_ALIASES = {
    "hidden_size": "d_model",
    "num_attention_heads": "num_heads",
    "num_hidden_layers": "num_layers",
    "head_dim": "d_kv",
}


@dataclasses.dataclass(frozen=True)
class T5Config:
    """Hyper-parameters of a T5 model (field names as in HF `config.json`).

    Attributes:
      vocab_size: size V of the (shared) vocabulary and of the output distribution.
      d_model: width D of the residual stream.
      d_kv: size of one attention head; the attention inner width is `num_heads * d_kv`.
      d_ff: width of the feed-forward hidden layer.
      num_layers: number of encoder blocks.
      num_decoder_layers: number of decoder blocks; `None` means `num_layers`.
      num_heads: number of attention heads H.
      relative_attention_num_buckets: number of relative-position buckets.
      relative_attention_max_distance: distance beyond which buckets saturate.
      feed_forward_proj: one of `SUPPORTED_FEED_FORWARD_PROJ`.
      tie_word_embeddings: whether the LM head reuses the input embedding `shared.weight`.
      layer_norm_epsilon: epsilon of the RMS norms.
      pad_token_id: padding id, also the decoder start id in every public T5 checkpoint.
      eos_token_id: end-of-sequence id (a list in a config.json is reduced to its first item).
      decoder_start_token_id: first decoder input id; `None` means `pad_token_id`.
      scale_decoder_outputs: multiply the final decoder states by `d_model ** -0.5` before
        the LM head; `None` means "iff `tie_word_embeddings`" (see the module docstring).
    """

    vocab_size: int = 32128
    d_model: int = 512
    d_kv: int = 64
    d_ff: int = 2048
    num_layers: int = 6
    num_decoder_layers: Optional[int] = None
    num_heads: int = 8
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    feed_forward_proj: str = "relu"
    tie_word_embeddings: bool = True
    layer_norm_epsilon: float = 1e-6
    pad_token_id: int = 0
    eos_token_id: int = 1
    decoder_start_token_id: Optional[int] = None
    scale_decoder_outputs: Optional[bool] = None

    def __post_init__(self):
        # Frozen dataclass: normalise defaults through object.__setattr__.
        if self.num_decoder_layers is None:
            object.__setattr__(self, "num_decoder_layers", self.num_layers)
        if self.decoder_start_token_id is None:
            object.__setattr__(self, "decoder_start_token_id", self.pad_token_id)
        if isinstance(self.eos_token_id, (list, tuple)):
            object.__setattr__(self, "eos_token_id", int(self.eos_token_id[0]))
        if self.feed_forward_proj not in SUPPORTED_FEED_FORWARD_PROJ:
            raise ValueError(
                f"Unsupported feed_forward_proj {self.feed_forward_proj!r}; supported: "
                f"{', '.join(SUPPORTED_FEED_FORWARD_PROJ)}.")
        for name in ("vocab_size", "d_model", "d_kv", "d_ff", "num_layers",
                     "num_decoder_layers", "num_heads", "relative_attention_num_buckets",
                     "relative_attention_max_distance"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"T5Config.{name} must be a positive int, got {value!r}.")
        if self.relative_attention_num_buckets < 4:
            # Bidirectional buckets are halved, then halved again into exact/log ranges.
            raise ValueError("T5Config.relative_attention_num_buckets must be >= 4, got "
                             f"{self.relative_attention_num_buckets}.")

    # ----------------------------------------------------------------------------- derived

    @property
    def is_gated_act(self) -> bool:
        """Whether the feed-forward block is gated: `wo(act(wi_0 x) * wi_1 x)`."""
        return self.feed_forward_proj.startswith("gated-")

    @property
    def dense_act_fn(self) -> str:
        """The activation name after HF's special case: "gated-gelu" -> "gelu_new"."""
        if self.feed_forward_proj == "gated-gelu":
            return "gelu_new"
        return self.feed_forward_proj.split("-", 1)[-1]

    @property
    def rescales_decoder_output(self) -> bool:
        """Whether final decoder states are multiplied by `d_model ** -0.5` before the head."""
        if self.scale_decoder_outputs is None:
            return bool(self.tie_word_embeddings)
        return bool(self.scale_decoder_outputs)

    def replace(self, **changes) -> "T5Config":
        """Returns a copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------------------------- I/O

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "T5Config":
        """Builds a config from a `config.json`-style mapping.

        Unknown keys (`dropout_rate`, `initializer_factor`, `architectures`, ...) are ignored.
        A `model_type` other than those in `SUPPORTED_MODEL_TYPES` is a ValueError.
        """
        model_type = values.get("model_type")
        if model_type is not None and model_type not in SUPPORTED_MODEL_TYPES:
            raise ValueError(
                f"config model_type {model_type!r} is not a T5 model; supported: "
                f"{', '.join(SUPPORTED_MODEL_TYPES)}.")
        known = {f.name for f in dataclasses.fields(cls)}
        kwargs: Dict[str, Any] = {}
        for alias, name in _KEY_ALIASES.items():
            if alias in values and name not in values:
                kwargs[name] = values[alias]
        kwargs.update({k: v for k, v in values.items() if k in known})
        return cls(**kwargs)

    @classmethod
    def from_json(cls, path_or_text: Union[str, os.PathLike]) -> "T5Config":
        """Reads a config from a `config.json` path, or from JSON text starting with '{'."""
        text = str(path_or_text)
        if not text.lstrip().startswith("{"):
            with open(path_or_text, "r", encoding="utf-8") as f:
                text = f.read()
        try:
            values = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"Invalid JSON in T5 config {str(path_or_text)[:200]!r}: {e}") from e
        if not isinstance(values, dict):
            raise ValueError(f"T5 config JSON must be an object, got {type(values).__name__}.")
        return cls.from_dict(values)

    def to_dict(self) -> Dict[str, Any]:
        """Returns the `config.json` mapping (HF-compatible; loadable by transformers)."""
        values = dataclasses.asdict(self)
        if values["scale_decoder_outputs"] is None or (
                values["scale_decoder_outputs"] == self.tie_word_embeddings):
            # The classic rule already implies it; older readers do not know the key.
            del values["scale_decoder_outputs"]
        values.update({
            "model_type": "t5",
            "architectures": ["T5ForConditionalGeneration"],
            "is_encoder_decoder": True,
            "dense_act_fn": self.dense_act_fn,
            "is_gated_act": self.is_gated_act,
        })
        return values

    def to_json(self, path: Optional[Union[str, os.PathLike]] = None) -> str:
        """Returns the config as JSON text, and writes it to `path` when given."""
        text = json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"
        if path is not None:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        return text

    # ----------------------------------------------------------------------------- presets

    @classmethod
    def preset(cls, name: str) -> "T5Config":
        """Returns the published architecture of a named checkpoint (no weights).

        Names: t5-small, t5-base, t5-large, t5-3b, t5-11b, t5-v1_1-{small,base,large,xl,xxl},
        flan-t5-{small,base,large,xl,xxl}. A leading "google/" or "google-t5/" is accepted.
        """
        key = name.split("/", 1)[1] if name.startswith(("google/", "google-t5/")) else name
        if key not in _PRESETS:
            raise ValueError(f"Unknown T5 preset {name!r}; available: {', '.join(_PRESETS)}.")
        return cls(**_PRESETS[key])

    @staticmethod
    def preset_names():
        """Names accepted by `T5Config.preset`."""
        return tuple(_PRESETS)


def _v1_0(d_model, d_kv, d_ff, num_layers, num_heads):
    return dict(vocab_size=32128, d_model=d_model, d_kv=d_kv, d_ff=d_ff, num_layers=num_layers,
                num_decoder_layers=num_layers, num_heads=num_heads, feed_forward_proj="relu",
                tie_word_embeddings=True)


def _v1_1(d_model, d_kv, d_ff, num_layers, num_heads):
    return dict(vocab_size=32128, d_model=d_model, d_kv=d_kv, d_ff=d_ff, num_layers=num_layers,
                num_decoder_layers=num_layers, num_heads=num_heads,
                feed_forward_proj="gated-gelu", tie_word_embeddings=False)


# Shapes as published in the config.json of each checkpoint.
_V1_1_SHAPES = {
    "small": (512, 64, 1024, 8, 6),
    "base": (768, 64, 2048, 12, 12),
    "large": (1024, 64, 2816, 24, 16),
    "xl": (2048, 64, 5120, 24, 32),
    "xxl": (4096, 64, 10240, 24, 64),
}
_PRESETS = {
    "t5-small": _v1_0(512, 64, 2048, 6, 8),
    "t5-base": _v1_0(768, 64, 3072, 12, 12),
    "t5-large": _v1_0(1024, 64, 4096, 24, 16),
    "t5-3b": _v1_0(1024, 128, 16384, 24, 32),
    "t5-11b": _v1_0(1024, 128, 65536, 24, 128),
    **{f"t5-v1_1-{size}": _v1_1(*shape) for size, shape in _V1_1_SHAPES.items()},
    **{f"flan-t5-{size}": _v1_1(*shape) for size, shape in _V1_1_SHAPES.items()},
}
