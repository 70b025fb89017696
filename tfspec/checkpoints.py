"""`load_model` and `save_model`: T5 checkpoints in the common layout, keras-hub, hubs, zoo.

The common layout (what HF transformers' `save_pretrained(safe_serialization=True)` writes
and what public T5 repositories hold):

    DIR/config.json                      T5Config fields (see tfspec.models.T5Config)
    DIR/model.safetensors                HF tensor names, Linear weights [out, in]
      or DIR/model.safetensors.index.json + the shards its "weight_map" names
    DIR/spiece.model                     optional SentencePiece tokenizer
    DIR/draft_vocabulary.json            optional, tfspec's own: {"ids": [...]}, the draft
                                         vocabulary of a draft (`T5.set_draft_vocabulary`);
                                         other loaders ignore it
    DIR/target_encoder.safetensors       optional, tfspec's own: "projection" [D_target, D]
                                         and the target's fingerprint and name (metadata), a
                                         draft's target-encoder adapter
                                         (`T5.attach_target_encoder`); other loaders ignore it

Specs accepted by `load_model`:

    "/path/to/dir"          a directory in the common layout, or a keras-hub T5 preset
                            directory (config.json naming "T5Backbone" + model.weights.h5)
    "hf://ORG/NAME"         a Hugging Face Hub repository (downloaded when online; offline, a
                            ValueError says how to fetch it)
    "t5_small_multi", ...   a keras-hub T5 preset name (or "kaggle://..." handle), same rules
    "zoo:NAME"              a model shipped in the package, `tfspec/zoo/NAME/`

No pickle-based format (pytorch_model.bin, .pt, .h5 state dicts of torch) is ever read.
"""

import json
import os
import pathlib
import shutil
from typing import Dict, Iterable, List, Mapping, Optional, Set, Tuple

import numpy as np
import tensorflow as tf

from tfspec import memory
from tfspec.models import feature_draft as feature_draft_lib
from tfspec.models import medusa as medusa_lib
from tfspec.models.t5 import T5
from tfspec.models.t5_config import T5Config

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
DRAFT_VOCABULARY_FILE = "draft_vocabulary.json"
TARGET_ENCODER_FILE = "target_encoder.safetensors"
TOKENIZER_FILE = "spiece.model"
ZOO_DIR = pathlib.Path(__file__).resolve().parent / "zoo"

# config.json "architectures" that are a T5 encoder-decoder with an LM head.
SUPPORTED_ARCHITECTURES = ("T5ForConditionalGeneration", "T5WithLMHeadModel",
                           "MT5ForConditionalGeneration")
# Tensors some checkpoints carry that the model does not need: copies of the shared
# embedding, and a cross-attention bias old transformers versions created (HF ignores it).
_IGNORED_TENSORS = ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight",
                    "decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight")
_PICKLE_FILES = ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.pt", "model.ckpt")
_HUB_PATTERNS = [CONFIG_FILE, WEIGHTS_FILE, INDEX_FILE, "model-*.safetensors", TOKENIZER_FILE]
_MAX_LISTED = 5


def _listing(names: Iterable[str]) -> str:
    """"3 (a, b, c)" or "12 (a, b, c, d, e, ...)": a count and the first few names."""
    names = list(names)
    shown = ", ".join(names[:_MAX_LISTED]) + (", ..." if len(names) > _MAX_LISTED else "")
    return f"{len(names)} ({shown})"


# ------------------------------------------------------------------------------ tensor files


class _TensorFiles:
    """Read-only view of the safetensors file(s) of a common-layout directory.

    `shape(name)` needs no data read; `get(name)` reads one tensor (so a large model is loaded
    one tensor at a time).
    """

    def __init__(self, directory: str):
        from safetensors import safe_open  # Imported here: only loading needs it.

        self._safe_open = _checked_safe_open(safe_open)
        single = os.path.join(directory, WEIGHTS_FILE)
        index = os.path.join(directory, INDEX_FILE)
        self._file_of: Dict[str, str] = {}
        if os.path.isfile(single):
            with self._safe_open(single, framework="tf") as f:
                self._file_of = {name: single for name in f.keys()}
        elif os.path.isfile(index):
            with open(index, "r", encoding="utf-8") as f:
                weight_map = json.load(f).get("weight_map")
            if not isinstance(weight_map, dict):
                raise ValueError(f"{index} has no 'weight_map' object mapping tensor names to "
                                 "shard files.")
            for shard in sorted(set(weight_map.values())):
                path = os.path.join(directory, shard)
                if not os.path.isfile(path):
                    raise FileNotFoundError(f"Shard {path} listed in {index} does not exist.")
                with self._safe_open(path, framework="tf") as f:
                    present = set(f.keys())
                listed = [n for n, s in weight_map.items() if s == shard]
                absent = sorted(n for n in listed if n not in present)
                if absent:
                    raise ValueError(f"{index} lists tensors that shard {path} does not hold: "
                                     f"{_listing(absent)}.")
                self._file_of.update({n: path for n in listed})
        else:
            found = sorted(os.listdir(directory))
            pickled = [n for n in found if n in _PICKLE_FILES or n.endswith((".bin", ".pt"))]
            hint = (f" Found {', '.join(pickled)}: pickle-based formats are not loaded; "
                    "convert to safetensors (e.g. transformers' save_pretrained(dir, "
                    "safe_serialization=True))." if pickled else "")
            raise FileNotFoundError(
                f"No weights in {directory}: expected {WEIGHTS_FILE} or {INDEX_FILE} with its "
                f"shards.{hint}")

    def names(self) -> Set[str]:
        return set(self._file_of)

    def file_of(self, name: str) -> str:
        return self._file_of[name]

    def shape(self, name: str) -> Tuple[int, ...]:
        with self._safe_open(self._file_of[name], framework="tf") as f:
            return tuple(f.get_slice(name).get_shape())

    def get(self, name: str) -> tf.Tensor:
        with self._safe_open(self._file_of[name], framework="tf") as f:
            return f.get_tensor(name)


class _CheckedFile:
    """A safetensors file whose read errors are ValueErrors naming the file."""

    def __init__(self, handle, path: str):
        self._handle = handle
        self._path = path

    def __enter__(self):
        self._handle.__enter__()
        return self

    def __exit__(self, *exc):
        return self._handle.__exit__(*exc)

    def keys(self):
        return self._call("keys")

    def get_slice(self, name):
        return self._call("get_slice", name)

    def get_tensor(self, name):
        return self._call("get_tensor", name)

    def _call(self, method, *args):
        try:
            return getattr(self._handle, method)(*args)
        except Exception as e:  # noqa: BLE001  safetensors' SafetensorError and friends.
            raise _corrupt(self._path, e) from None


def _corrupt(path: str, error: BaseException) -> ValueError:
    text = " ".join(str(error).split()) or type(error).__name__
    return ValueError(f"{path} is not a readable safetensors file ({text}); it may be "
                      f"truncated or damaged: download or save it again")


def _checked_safe_open(safe_open):
    """safe_open whose errors (SafetensorError, a header that is not JSON, ...) are
    ValueErrors naming the file; a missing or unreadable file stays an OSError."""

    def open_checked(path, framework):
        try:
            handle = safe_open(path, framework=framework)
        except OSError:
            raise
        except Exception as e:  # noqa: BLE001  SafetensorError is no OSError/ValueError.
            raise _corrupt(path, e) from None
        return _CheckedFile(handle, path)

    return open_checked


class _ArrayTensors:
    """Same interface as `_TensorFiles` over in-memory arrays (keras-hub conversion)."""

    def __init__(self, arrays: Mapping[str, np.ndarray]):
        self._arrays = dict(arrays)

    def names(self) -> Set[str]:
        return set(self._arrays)

    def file_of(self, unused_name: str) -> str:
        return "(in memory)"

    def shape(self, name: str) -> Tuple[int, ...]:
        return tuple(np.shape(self._arrays[name]))

    def get(self, name: str) -> tf.Tensor:
        return tf.convert_to_tensor(self._arrays[name])


# --------------------------------------------------------------------------- model building


def _check_architecture(raw: Mapping, source: str):
    if "model_type" not in raw and "d_model" not in raw:
        raise ValueError(f"{source} is not a T5 config.json (no model_type, no d_model).")
    architectures = raw.get("architectures") or []
    if architectures and not any(a in SUPPORTED_ARCHITECTURES for a in architectures):
        raise ValueError(f"{source}: unsupported architectures {architectures}; tfspec loads "
                         f"{', '.join(SUPPORTED_ARCHITECTURES)}.")


def _resolve_head(config: T5Config, raw: Mapping, tensors) -> T5Config:
    """Decides whether the LM head is tied, from the config and the tensors present.

    Classic files: `tie_word_embeddings` decides (a stray `lm_head.weight` in a tied
    checkpoint is ignored, as transformers < 5 overwrites it with `shared.weight`).
    transformers >= 5 files (they carry `scale_decoder_outputs` and always say
    `tie_word_embeddings: true`): the head is separate iff `lm_head.weight` is present and
    differs from `shared.weight`, which is how transformers >= 5 itself decides.
    """
    if "scale_decoder_outputs" not in raw or not config.tie_word_embeddings:
        return config
    if "lm_head.weight" not in tensors.names():
        return config
    head, shared = tensors.get("lm_head.weight"), tensors.get("shared.weight")
    if head.shape == shared.shape and bool(tf.reduce_all(head == shared)):
        return config
    return config.replace(tie_word_embeddings=False,
                          scale_decoder_outputs=config.rescales_decoder_output)


def build_model(config: T5Config, tensors, dtype: Optional[str], source: str) -> T5:
    """Builds a T5 and fills every variable from HF-named tensors.

    Args:
      config: the architecture.
      tensors: object with names() / shape(name) / get(name) (HF names, [out, in] Linears).
      dtype: "float32" (default when None) or "bfloat16".
      source: path or spec for error messages.

    Raises:
      ValueError: missing or unexpected tensor names, or shapes that do not match the config
        (the message names the tensors: a count and the first few).
    """
    # Refused before anything is allocated: a config with absurd sizes would otherwise take
    # the machine's memory for seconds before failing.
    count = memory.t5_num_parameters(config)
    itemsize = 2 if dtype == "bfloat16" else 4
    memory.check_fits(count * itemsize,
                      f"Checkpoint {source}: its config (d_model={config.d_model}, "
                      f"num_layers={config.num_layers}/{config.num_decoder_layers}, "
                      f"vocab_size={config.vocab_size}, d_ff={config.d_ff}) describes "
                      f"{count:,} parameters, which",
                      "check the sizes in its config.json")
    model = T5(config, dtype=dtype or "float32", initialize="zeros")
    mapping = model.hf_weight_map()
    present = tensors.names()
    aliases = {}
    if "shared.weight" not in present:
        # Some exports keep only the per-stack copies of the shared embedding.
        for alias in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight"):
            if alias in present:
                aliases["shared.weight"] = alias
                break
    ignored = set(_IGNORED_TENSORS)
    if config.tie_word_embeddings:
        ignored.add("lm_head.weight")
    missing = sorted(n for n in mapping if n not in present and n not in aliases)
    unexpected = sorted(n for n in present if n not in mapping and n not in ignored)
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing tensors {_listing(missing)}")
        if unexpected:
            parts.append(f"unexpected tensors {_listing(unexpected)}")
        raise ValueError(f"Checkpoint {source} does not match its T5 config "
                         f"({config.num_layers} encoder / {config.num_decoder_layers} decoder "
                         f"layers, feed_forward_proj={config.feed_forward_proj!r}, "
                         f"tie_word_embeddings={config.tie_word_embeddings}): "
                         f"{'; '.join(parts)}.")
    wrong = []
    for name, (variable, transposed) in mapping.items():
        expected = tuple(variable.shape)[::-1] if transposed else tuple(variable.shape)
        actual = tensors.shape(aliases.get(name, name))
        if actual != expected:
            wrong.append(f"{name} {list(actual)} != expected {list(expected)}")
    if wrong:
        raise ValueError(f"Checkpoint {source} has tensors of the wrong shape for its config: "
                         f"{_listing(wrong)}.")
    for name, (variable, transposed) in mapping.items():
        value = tensors.get(aliases.get(name, name))
        # NaN or inf weights decode silently into garbage (one token repeated): refuse them.
        if value.dtype.is_floating:
            bad = int(tf.size(value)) - int(tf.math.count_nonzero(
                tf.math.is_finite(tf.cast(value, tf.float32))))
            if bad:
                stored = aliases.get(name, name)
                raise ValueError(f"Checkpoint {source}: tensor {stored} "
                                 f"({tensors.file_of(stored)}) holds {bad} non-finite "
                                 f"values (NaN or inf); the file is damaged or its training "
                                 f"diverged")
        if transposed:
            value = tf.transpose(value)
        variable.assign(tf.cast(value, variable.dtype))
    return model


def _find_tokenizer(directory: str) -> Optional[str]:
    for relative in (TOKENIZER_FILE, os.path.join("assets", "tokenizer", "vocabulary.spm")):
        path = os.path.join(directory, relative)
        if os.path.isfile(path):
            return os.path.abspath(path)
    return None


def _is_keras_hub_config(raw: Mapping) -> bool:
    return "class_name" in raw and isinstance(raw.get("config"), dict)


def _load_directory(directory: str, dtype: Optional[str]) -> T5:
    config_path = os.path.join(directory, CONFIG_FILE)
    if not os.path.isfile(config_path):
        raise FileNotFoundError(
            f"No {CONFIG_FILE} in {directory}: expected a T5 checkpoint directory "
            f"({CONFIG_FILE} + {WEIGHTS_FILE} or {INDEX_FILE}) or a keras-hub T5 preset.")
    with open(config_path, "r", encoding="utf-8") as f:
        try:
            raw = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{config_path} is not valid JSON: {e}") from e
    if _is_keras_hub_config(raw):
        return _load_keras_hub(directory, dtype, raw)
    if raw.get("architectures") == [feature_draft_lib.ARCHITECTURE]:
        return _load_bound_draft(directory, raw, feature_draft_lib.FeatureDraftConfig,
                                 feature_draft_lib.FeatureDraft)
    if raw.get("architectures") == [medusa_lib.ARCHITECTURE]:
        return _load_bound_draft(directory, raw, medusa_lib.MedusaConfig,
                                 medusa_lib.MedusaHeads)
    _check_architecture(raw, config_path)
    config = T5Config.from_dict(raw)
    tensors = _TensorFiles(directory)
    config = _resolve_head(config, raw, tensors)
    model = build_model(config, tensors, dtype, directory)
    model.tokenizer_path = _find_tokenizer(directory)
    _load_draft_vocabulary(model, directory)
    _load_target_encoder(model, directory)
    return model


def _load_target_encoder(model: T5, directory: str) -> None:
    path = os.path.join(directory, TARGET_ENCODER_FILE)
    if not os.path.isfile(path):
        return
    from safetensors import safe_open  # pylint: disable=g-import-not-at-top
    try:
        with safe_open(path, framework="np") as f:
            metadata = f.metadata() or {}
            projection = f.get_tensor("projection")
        model.attach_target_encoder(projection, metadata.get("target_fingerprint", ""),
                                    metadata.get("target_name", ""))
    except Exception as e:  # pylint: disable=broad-except  (safetensors raises its own types)
        raise ValueError(f"{path} is not a target-encoder adapter ({' '.join(str(e).split())}"
                         "); expected a safetensors file with a [target d_model, "
                         f"{model.config.d_model}] tensor named projection, or delete the "
                         "file to load the draft with its own encoder") from None


def _load_draft_vocabulary(model: T5, directory: str) -> None:
    path = os.path.join(directory, DRAFT_VOCABULARY_FILE)
    if not os.path.isfile(path):
        return
    try:
        with open(path, "r", encoding="utf-8") as f:
            ids = json.load(f)["ids"]
        model.set_draft_vocabulary(ids)
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{path} is not a draft vocabulary ({e}); expected "
                         f'{{"ids": [token ids in [0, {model.vocab_size})]}}, or delete the '
                         f"file to load the model with its full vocabulary") from None


# ------------------------------------------------------------------------- remote sources


def _offline_error(spec: str, fetch: str) -> ValueError:
    return ValueError(f"{spec} is not available offline (no network and not in the local "
                      f"cache): on a machine with network run `{fetch}`, then pass DIR to "
                      "tfspec.load_model.")


def _hf_snapshot(spec: str) -> str:
    repo = spec[len("hf://"):].strip("/")
    if repo.count("/") > 1 or not repo:
        raise ValueError(f"Expected hf://ORG/NAME, got {spec!r}.")
    fetch = f"hf download {repo} --local-dir DIR"
    try:
        import huggingface_hub
        from huggingface_hub import errors as hub_errors
    except ImportError as e:
        raise _offline_error(spec, f"pip install huggingface_hub && {fetch}") from e
    # Decided here, not by huggingface_hub's import-time constant, so that setting
    # HF_HUB_OFFLINE after import (tests, notebooks) never reaches for the network.
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
    try:
        return huggingface_hub.snapshot_download(repo, allow_patterns=_HUB_PATTERNS,
                                                 local_files_only=offline)
    except (hub_errors.RepositoryNotFoundError, hub_errors.GatedRepoError) as e:
        raise ValueError(f"{spec}: repository not found or not accessible "
                         f"({type(e).__name__}).") from e
    except (hub_errors.LocalEntryNotFoundError, OSError) as e:
        raise _offline_error(spec, fetch) from e


def _keras_hub_preset_names() -> Tuple[str, ...]:
    try:
        import keras_hub
    except ImportError:
        return ()
    return tuple(keras_hub.models.T5Backbone.presets)


def _load_keras_hub(preset: str, dtype: Optional[str], raw: Optional[Mapping] = None) -> T5:
    """Loads a keras-hub T5 preset (directory, name or kaggle:// handle) into a tfspec T5."""
    import keras_hub

    from tfspec import keras_hub_conversion

    if raw is not None and "T5Backbone" not in str(raw.get("class_name")):
        raise ValueError(f"{preset} is a keras-hub preset of {raw.get('class_name')!r}, not "
                         "T5Backbone.")
    try:
        backbone = keras_hub.models.T5Backbone.from_preset(preset)
    except (OSError, ConnectionError) as e:
        if os.path.isdir(preset):
            raise
        raise _offline_error(
            preset, f"python -c \"import keras_hub; keras_hub.models.T5Backbone.from_preset("
                    f"'{preset}').save_to_preset('DIR')\"") from e
    config, arrays = keras_hub_conversion.convert_backbone(backbone)
    model = build_model(config, _ArrayTensors(arrays), dtype, preset)
    if os.path.isdir(preset):
        model.tokenizer_path = _find_tokenizer(preset)
    return model


def zoo_names() -> List[str]:
    """Names loadable as "zoo:NAME" (directories under tfspec/zoo with a config.json)."""
    if not ZOO_DIR.is_dir():
        return []
    return sorted(p.name for p in ZOO_DIR.iterdir() if (p / CONFIG_FILE).is_file())


# ----------------------------------------------------------------------------------- public


def load_model(spec, dtype: Optional[str] = None) -> T5:
    """Loads a T5 from a directory, a hub name or the zoo (see the module docstring).

    Args:
      spec: str or path-like: a directory, "hf://ORG/NAME", a keras-hub T5 preset name or
        "kaggle://" handle, or "zoo:NAME".
      dtype: "float32" (default) or "bfloat16": dtype of the variables and matmuls. A
        feature draft (`tfspec.models.FeatureDraft`) or Medusa draft (`MedusaHeads`) is always
        float32.

    Returns:
      A `tfspec.models.T5` with `tokenizer_path` set to the checkpoint's SentencePiece model
      when the directory has one (else None).

    Raises:
      FileNotFoundError: a path that does not exist, or a directory without config/weights.
      ValueError: unknown zoo name, offline hub spec, config or tensors that do not describe
        a supported T5.
    """
    spec = os.fspath(spec)
    if spec.startswith("zoo:"):
        name = spec[len("zoo:"):]
        directory = ZOO_DIR / name
        if not name or not (directory / CONFIG_FILE).is_file():
            available = zoo_names()
            raise ValueError(f"Unknown zoo model {name!r}; available: "
                             f"{', '.join(available) if available else 'none'} "
                             f"(in {ZOO_DIR}).")
        return _load_directory(str(directory), dtype)
    if spec.startswith("hf://"):
        return _load_directory(_hf_snapshot(spec), dtype)
    if os.path.isdir(spec):
        return _load_directory(spec, dtype)
    if os.path.exists(spec):
        raise ValueError(f"{spec} is a file; load_model expects a checkpoint directory "
                         f"({CONFIG_FILE} + {WEIGHTS_FILE}).")
    if spec.startswith("kaggle://") or spec in _keras_hub_preset_names():
        return _load_keras_hub(spec, dtype)
    raise FileNotFoundError(
        f"{spec!r} is neither an existing directory nor a known spec: use a checkpoint "
        "directory, hf://ORG/NAME, zoo:NAME, or a keras-hub T5 preset name "
        f"({', '.join(_keras_hub_preset_names()) or 'keras-hub not installed'}).")


def _load_bound_draft(directory: str, raw: dict, config_cls, model_cls):
    """A draft bound to its target at `generate` time (`FeatureDraft`, `MedusaHeads`) from
    its directory (float32 variables; unbound: `tfspec.generate` binds it to the target it
    is given, and refuses any other target)."""
    from safetensors.numpy import load_file

    config = config_cls.from_dict(raw)
    model = model_cls(config, initialize="zeros")
    path = os.path.join(directory, WEIGHTS_FILE)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"No {WEIGHTS_FILE} in {directory}.")
    tensors = load_file(path)
    mapping = model.weight_map()
    missing = sorted(set(mapping) - set(tensors))
    unexpected = sorted(set(tensors) - set(mapping))
    if missing or unexpected:
        raise ValueError(f"{path} does not match its config: missing {missing[:3]}, "
                         f"unexpected {unexpected[:3]}")
    for name, (variable, transposed) in mapping.items():
        value = tensors[name]
        value = value.T if transposed else value
        if tuple(value.shape) != tuple(variable.shape):
            raise ValueError(f"{path}: {name} is {tuple(value.shape)}, the config needs "
                             f"{tuple(variable.shape)}")
        variable.assign(value.astype(variable.dtype if isinstance(variable.dtype, str)
                                     else variable.dtype.name))
    return model


def _save_bound_draft(model, directory: str, dtype) -> str:
    from safetensors.tensorflow import save_file

    tensors = {}
    for name, (variable, transposed) in model.weight_map().items():
        value = tf.convert_to_tensor(variable)
        if value.dtype.is_floating:
            value = tf.cast(value, dtype)
        tensors[name] = tf.transpose(value) if transposed else value
    save_file(tensors, os.path.join(directory, WEIGHTS_FILE), metadata={"format": "pt"})
    config = model.config.to_dict()
    config["dtype"] = dtype.name
    with open(os.path.join(directory, CONFIG_FILE), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    return directory


def save_model(model: T5, directory, dtype: Optional[str] = None) -> str:
    """Writes `model` in the common layout (loadable by tfspec and HF transformers).

    Writes DIR/config.json, DIR/model.safetensors (HF names, Linear weights [out, in]) and,
    when `model.tokenizer_path` is set, DIR/spiece.model.

    Args:
      model: a `tfspec.models.T5`.
      directory: output directory (created if needed; existing files are overwritten).
      dtype: dtype of the saved tensors, "float32" or "bfloat16"; default the model's.

    Returns:
      The directory, as a string.
    """
    from safetensors.tensorflow import save_file

    is_feature_draft = isinstance(model, (feature_draft_lib.FeatureDraft,
                                          medusa_lib.MedusaHeads))
    if not isinstance(model, T5) and not is_feature_draft:
        raise TypeError(f"save_model saves tfspec.models.T5 models, feature drafts and Medusa "
                        f"heads, got "
                        f"{type(model).__name__}.")
    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    dtype = tf.as_dtype(dtype or ("float32" if is_feature_draft else model.model_dtype))
    if dtype not in (tf.float32, tf.bfloat16):
        raise ValueError(f"save_model dtype must be float32 or bfloat16, got {dtype.name}.")
    if is_feature_draft:
        return _save_bound_draft(model, directory, dtype)
    tensors = {}
    for name, (variable, transposed) in model.hf_weight_map().items():
        value = tf.cast(tf.convert_to_tensor(variable), dtype)
        tensors[name] = tf.transpose(value) if transposed else value
    # "format": "pt" is what transformers checks before loading a safetensors file.
    save_file(tensors, os.path.join(directory, WEIGHTS_FILE), metadata={"format": "pt"})
    config = model.config.to_dict()
    config["torch_dtype"] = config["dtype"] = dtype.name
    with open(os.path.join(directory, CONFIG_FILE), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    tokenizer = getattr(model, "tokenizer_path", None)
    if tokenizer:
        target = os.path.join(directory, TOKENIZER_FILE)
        if not (os.path.exists(target) and os.path.samefile(tokenizer, target)):
            shutil.copyfile(tokenizer, target)
    stale_index = os.path.join(directory, INDEX_FILE)
    if os.path.exists(stale_index):
        os.remove(stale_index)  # model.safetensors now holds everything.
    save_draft_vocabulary(model, directory)
    save_target_encoder(model, directory)
    return directory


def save_draft_vocabulary(model: T5, directory) -> Optional[str]:
    """Writes `model`'s draft vocabulary (`T5.set_draft_vocabulary`) as
    DIR/draft_vocabulary.json, or removes that file for a full vocabulary; returns its path
    or None. Written beside and then renamed over the old file, so a crash leaves the old
    vocabulary or the new one, never half of one."""
    path = os.path.join(os.fspath(directory), DRAFT_VOCABULARY_FILE)
    if model.draft_vocab_ids is None:
        if os.path.exists(path):
            os.remove(path)  # The model has its full vocabulary again.
        return None
    partial = path + ".partial"
    with open(partial, "w", encoding="utf-8") as f:
        json.dump({"ids": model.draft_vocab_ids.tolist()}, f)
        f.write("\n")
    os.replace(partial, path)
    return path


def save_target_encoder(model: T5, directory) -> Optional[str]:
    """Writes `model`'s target-encoder adapter as DIR/target_encoder.safetensors (removes a
    stale one if it has none; `save_model` calls this). Returns the path written, or None."""
    from safetensors.tensorflow import save_file  # pylint: disable=g-import-not-at-top
    path = os.path.join(os.fspath(directory), TARGET_ENCODER_FILE)
    if not model.reads_target_encoder:
        if os.path.exists(path):
            os.remove(path)  # The model runs its own encoder again.
        return None
    save_file({"projection": tf.convert_to_tensor(model.target_encoder_projection)}, path,
              metadata={"target_fingerprint": model.target_encoder_fingerprint,
                        "target_name": model.target_encoder_name})
    return path
