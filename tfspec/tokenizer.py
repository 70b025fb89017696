"""SentencePiece tokenizers with T5's special ids, and `load_tokenizer`.

`Tokenizer` wraps a SentencePiece model (the `spiece.model` of T5 checkpoints) with the small
surface the library and the evals use:

    tok = load_tokenizer("zoo:tiny-code-target")
    ids = tok.encode("def f(x):\\n    return x\\n")          # no EOS unless add_eos=True
    tok.decode(ids + [tok.eos_id, tok.pad_id, tok.pad_id])  # -> the same string

Special ids are T5's: pad 0 (also the decoder start id), EOS 1, UNK 2, no BOS. A model file
with other special ids is rejected, because the decoding loop and the checkpoints assume them.

Exact round trip. With the project's tokenizer (`tfspec/zoo/assets/tiny-code/spiece.model`,
trained by the tiny-code recipe: identity normalisation, no whitespace folding, no dummy
prefix, byte fallback) `decode(encode(s)) == s` for every string `s` (any valid Unicode,
whitespace, tabs, newlines, control characters and emoji included). One character needs help
from this wrapper: SentencePiece writes spaces as U+2581 ("▁") internally, so a literal U+2581
in the input would come back as a space; `encode` emits it as its three UTF-8 byte-fallback
pieces instead, which decode to the literal character. Models without byte fallback (the
original T5 `spiece.model`) normalise text (NFKC, whitespace folding), so they do not round-trip;
`Tokenizer.is_lossless` tells which kind a model is.

In-graph use: `Tokenizer.tf_text_tokenizer()` returns a `tensorflow_text.SentencepieceTokenizer`
over the same model proto (optional dependency; it does not apply the U+2581 fix).
"""

import os
from typing import Any, Iterable, List, Optional, Sequence, Union

import numpy as np
import sentencepiece as spm

T5_PAD_ID = 0
T5_EOS_ID = 1
T5_UNK_ID = 2

SPIECE_FILENAME = "spiece.model"
# Where a keras-hub preset keeps its SentencePiece proto (keras_hub SentencePieceTokenizer's
# `VOCAB_FILENAME` under the preset's `assets/tokenizer/`).
KERAS_HUB_VOCAB_PATH = os.path.join("assets", "tokenizer", "vocabulary.spm")

ZOO_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "zoo")
TINY_CODE_TOKENIZER = os.path.join(ZOO_DIR, "assets", "tiny-code", SPIECE_FILENAME)

_META = "\u2581"  # SentencePiece's escaped space
_META_BYTES = tuple(f"<0x{b:02X}>" for b in _META.encode("utf-8"))

PathLike = Union[str, os.PathLike]

_LOSSLESS_PROBES = (
    "  def f(x):\n\treturn  x  \n\n\n",
    " \u00a0\uff21\u2160\ufb01 caf\u00e9 cafe\u0301 ",
    "\x00\x0c\r\n\x1b[0m \U0001F40D \u65e5\u672c\u8a9e \u2581",
)


class Tokenizer:
    """A SentencePiece model with T5's special ids.

    Attributes:
      path: the model file, or None when built from a serialized proto.
      vocab_size: number of pieces (ids are in `[0, vocab_size)`).
      pad_id, eos_id, unk_id: 0, 1 and 2.
    """

    def __init__(self, path: Optional[PathLike] = None, *, model_proto: Optional[bytes] = None):
        """Loads a model from `path` or from serialized `model_proto` bytes.

        Raises:
          FileNotFoundError: `path` does not exist.
          ValueError: the model's pad/EOS/UNK ids are not T5's 0/1/2, or it cannot be parsed.
        """
        if (path is None) == (model_proto is None):
            raise ValueError("Pass exactly one of `path` and `model_proto`.")
        if path is not None:
            path = os.fspath(path)
            if not os.path.isfile(path):
                raise FileNotFoundError(f"SentencePiece model not found: {path}")
            with open(path, "rb") as f:
                model_proto = f.read()
        self.path = path
        self._proto = model_proto
        self._sp = spm.SentencePieceProcessor()
        try:
            self._sp.LoadFromSerializedProto(model_proto)
        except Exception as e:  # sentencepiece raises RuntimeError/OSError by version
            raise ValueError(f"Not a SentencePiece model: {path or '<model_proto>'} ({e})") from e
        special = (self._sp.pad_id(), self._sp.eos_id(), self._sp.unk_id())
        if special != (T5_PAD_ID, T5_EOS_ID, T5_UNK_ID):
            raise ValueError(
                f"Tokenizer {path or '<model_proto>'} has special ids pad={special[0]}, "
                f"eos={special[1]}, unk={special[2]}; T5 models need pad={T5_PAD_ID}, "
                f"eos={T5_EOS_ID}, unk={T5_UNK_ID}.")
        meta_ids = [self._sp.piece_to_id(p) for p in _META_BYTES]
        self._meta_ids = meta_ids if all(self._sp.is_byte(i) for i in meta_ids) else None

    # -- Properties ---------------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        return self._sp.get_piece_size()

    @property
    def pad_id(self) -> int:
        return T5_PAD_ID

    @property
    def eos_id(self) -> int:
        return T5_EOS_ID

    @property
    def unk_id(self) -> int:
        return T5_UNK_ID

    @property
    def is_lossless(self) -> bool:
        """True if the model round-trips text exactly (see the module docstring).

        Checked on probe strings that a normalising or UNK-producing model changes: runs of
        spaces, tabs, newlines, leading and trailing blanks, NFKC-sensitive characters,
        control characters, emoji and CJK.
        """
        return all(self.decode(self.encode(p)) == p for p in _LOSSLESS_PROBES)

    def serialized_model_proto(self) -> bytes:
        """The model file's bytes."""
        return self._proto

    # -- Encoding -----------------------------------------------------------------------------

    def encode(self, text: str, add_eos: bool = False) -> List[int]:
        """Token ids of `text`; EOS (1) is appended only if `add_eos`."""
        if not isinstance(text, str):
            raise TypeError(f"encode() takes a str, got {type(text).__name__}.")
        if _META in text and self._meta_ids is not None:
            ids: List[int] = []
            for i, segment in enumerate(text.split(_META)):
                if i:
                    ids.extend(self._meta_ids)
                if segment:
                    ids.extend(self._sp.encode(segment))
        else:
            ids = self._sp.encode(text)
        if add_eos:
            ids.append(self.eos_id)
        return ids

    def decode(self, ids: Union[Sequence[int], np.ndarray, Any]) -> str:
        """Text of a sequence of ids: the exact inverse of `encode`.

        Decoding stops at the first EOS; pad ids are skipped, and so are ids outside
        `[0, vocab_size)` (a model's vocabulary is often padded past the tokenizer's, e.g.
        32128 vs 32100 for T5, so a sampled id can land there).

        Args:
          ids: a list of ints, or a 1-D array or tensor of them.
        """
        ids = np.asarray(ids).reshape(-1).tolist()
        kept = []
        for i in ids:
            i = int(i)
            if i == self.eos_id:
                break
            if i == self.pad_id or i < 0 or i >= self.vocab_size:
                continue
            kept.append(i)
        return self._sp.decode(kept)

    def batch_encode(self, texts: Iterable[str], add_eos: bool = False) -> List[List[int]]:
        """`encode` for each text (ragged lists, as `tfspec.generate` accepts)."""
        return [self.encode(t, add_eos=add_eos) for t in texts]

    def batch_decode(self, ids: Union[Sequence[Sequence[int]], np.ndarray, Any]) -> List[str]:
        """`decode` for each row of a ragged list or a 2-D array (e.g. `Generation.tokens`)."""
        if not isinstance(ids, (list, tuple)):
            ids = np.asarray(ids)
            if ids.ndim != 2:
                raise ValueError(f"batch_decode() takes a 2-D array, got shape {ids.shape}.")
        return [self.decode(row) for row in ids]

    def id_to_piece(self, i: int) -> str:
        return self._sp.id_to_piece(int(i))

    def piece_to_id(self, piece: str) -> int:
        return self._sp.piece_to_id(piece)

    def tf_text_tokenizer(self, add_eos: bool = False):
        """The same model as a `tensorflow_text.SentencepieceTokenizer` (in-graph path).

        Note it encodes a literal U+2581 as a space (the fix in `encode` is Python-side).
        """
        import tensorflow_text  # pylint: disable=import-outside-toplevel
        return tensorflow_text.SentencepieceTokenizer(model=self._proto, add_eos=add_eos)

    def __len__(self) -> int:
        return self.vocab_size

    def __repr__(self) -> str:
        return f"Tokenizer(path={self.path!r}, vocab_size={self.vocab_size})"


def zoo_tokenizer_path(name: str) -> str:
    """Path of the tokenizer of zoo model `name`.

    `tfspec/zoo/NAME/spiece.model`; names starting with `tiny-code` fall back to the shared
    `tfspec/zoo/assets/tiny-code/spiece.model`.

    Raises:
      FileNotFoundError: naming the paths that were tried.
    """
    if not name or "/" in name or "\\" in name or name.startswith("."):
        raise ValueError(f"Invalid zoo name {name!r}.")
    tried = [os.path.join(ZOO_DIR, name, SPIECE_FILENAME)]
    if name.startswith("tiny-code"):
        tried.append(TINY_CODE_TOKENIZER)
    for path in tried:
        if os.path.isfile(path):
            return path
    raise FileNotFoundError(f"No tokenizer for zoo:{name}; looked for " + ", ".join(tried))


def find_tokenizer_file(directory: PathLike) -> str:
    """The SentencePiece file of a checkpoint or keras-hub preset directory.

    Looks for `spiece.model` (common T5 layout), then `assets/tokenizer/vocabulary.spm`
    (keras-hub preset), then `vocabulary.spm`.

    Raises:
      FileNotFoundError: naming the paths that were tried.
    """
    directory = os.fspath(directory)
    tried = [os.path.join(directory, p)
             for p in (SPIECE_FILENAME, KERAS_HUB_VOCAB_PATH, "vocabulary.spm")]
    for path in tried:
        if os.path.isfile(path):
            return path
    raise FileNotFoundError(f"No SentencePiece tokenizer in {directory}; looked for "
                            + ", ".join(tried))


def load_tokenizer(spec: Any) -> Tokenizer:
    """Loads a tokenizer.

    Args:
      spec: one of
        - a `Tokenizer` (returned as is);
        - a path to a SentencePiece model file;
        - a directory holding one (`spiece.model`, or a keras-hub preset's
          `assets/tokenizer/vocabulary.spm`);
        - `"zoo:NAME"`: the tokenizer shipped with zoo model NAME (see `zoo_tokenizer_path`);
        - a model object with a `tokenizer_path` attribute (as set by `tfspec.load_model`).

    Returns:
      The tokenizer.

    Raises:
      FileNotFoundError: the file is missing (the message names the path(s) tried).
      ValueError: the spec cannot be resolved offline, or the special ids are not T5's.
      TypeError: the spec is of an unsupported type.
    """
    if isinstance(spec, Tokenizer):
        return spec
    if not isinstance(spec, (str, os.PathLike)):
        if not hasattr(spec, "tokenizer_path"):
            raise TypeError(f"load_tokenizer() takes a path, 'zoo:NAME' or a model with a "
                            f"`tokenizer_path`, got {type(spec).__name__}.")
        path = getattr(spec, "tokenizer_path")
        if path is None:
            raise ValueError(f"{type(spec).__name__} has no tokenizer (tokenizer_path is None).")
        return load_tokenizer(path)
    spec = os.fspath(spec)
    if spec.startswith("zoo:"):
        return Tokenizer(zoo_tokenizer_path(spec[len("zoo:"):]))
    if "://" in spec:
        raise ValueError(f"load_tokenizer({spec!r}): remote specs are not read directly; load "
                         "the model with tfspec.load_model (which downloads it) and pass the "
                         "model or its local directory.")
    if os.path.isdir(spec):
        return Tokenizer(find_tokenizer_file(spec))
    if os.path.isfile(spec):
        return Tokenizer(spec)
    raise FileNotFoundError(f"Tokenizer not found: {spec} is neither a SentencePiece model file "
                            "nor a directory holding one (keras-hub preset names must be "
                            "downloaded first and passed as their local directory).")


def check_vocab(tokenizer: Any, model_vocab_size: int) -> None:
    """Checks that every token id of `tokenizer` is a valid id of a model.

    A model vocabulary larger than the tokenizer's is fine (T5 pads 32100 to 32128).

    Args:
      tokenizer: a `Tokenizer` (or anything with `vocab_size`).
      model_vocab_size: the model's output size.

    Raises:
      ValueError: naming both sizes, when the tokenizer's vocabulary is larger.
    """
    size = int(tokenizer.vocab_size)
    if size > int(model_vocab_size):
        raise ValueError(f"Tokenizer vocabulary size {size} exceeds the model's vocabulary size "
                         f"{int(model_vocab_size)}: the model cannot represent all token ids.")
