"""Training the tiny-code SentencePiece tokenizer (and others) so that it round-trips code.

The recipe (`TRAINER_OPTIONS`) keeps T5's special ids (pad 0, EOS 1, UNK 2, no BOS) and makes
the tokenizer lossless on source code:

- `normalization_rule_name="identity"`, `remove_extra_whitespaces=False`,
  `add_dummy_prefix=False`: the text is not changed before it is cut into pieces, so every
  space, tab, newline and trailing blank survives.
- `byte_fallback=True`: any character outside the vocabulary becomes its UTF-8 bytes, so there
  is no UNK and nothing is lost (emoji, CJK, control characters).
- `split_by_whitespace=False`, `allow_whitespace_only_pieces=True`: pieces may cross spaces
  and newlines, so the vocabulary learns `"):\\n    "`-style pieces and indentation runs.
  Newlines and indentation are *not* user-defined symbols: they round-trip either way, and
  forcing them to be separate pieces cost 10-25% more tokens per character on the code corpus.
  Only `"\\t"` is a user-defined symbol (tabs are rare in the standard library, so it would
  otherwise be left to byte fallback).
- `split_digits=True`: numbers are spelled digit by digit.

Training is deterministic: the input sample is drawn with a seeded RNG, the trainer does not
shuffle, and it runs with a fixed (small) thread count.

Command line, to re-create the shipped tokenizer from the standard library corpus:

    python -m recipes.tiny_code.tokenizer_training \
        --output tfspec/zoo/assets/tiny-code/spiece.model
"""

import argparse
import hashlib
import io
import json
import os
import random
import sys
import time
from typing import Any, Dict, Iterable, List, Optional, Sequence

import sentencepiece as spm

from recipes.tiny_code import corpus as corpus_lib
from tfspec import tokenizer as tokenizer_lib

# Options shared by every tokenizer the project trains (see the module docstring).
TRAINER_OPTIONS: Dict[str, Any] = {
    "model_type": "unigram",
    "pad_id": tokenizer_lib.T5_PAD_ID,
    "eos_id": tokenizer_lib.T5_EOS_ID,
    "unk_id": tokenizer_lib.T5_UNK_ID,
    "bos_id": -1,
    "normalization_rule_name": "identity",
    "remove_extra_whitespaces": False,
    "add_dummy_prefix": False,
    "byte_fallback": True,
    "split_digits": True,
    "split_by_whitespace": False,
    "allow_whitespace_only_pieces": True,
    "character_coverage": 0.9995,
    "max_sentence_length": 16384,
    "shuffle_input_sentence": False,
    "input_sentence_size": 0,
}

DEFAULT_USER_DEFINED_SYMBOLS = ("\t",)

# A few lines of code for `make_test_tokenizer`: enough for a tiny vocabulary in a second.
_TEST_TEXTS = (
    'def add(a, b):\n    """Returns a + b."""\n    return a + b\n',
    "import os\n\n\ndef exists(path):\n    return os.path.exists(path)\n",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n"
    "    def push(self, item):\n        self.items.append(item)\n",
    "for i in range(10):\n\tif i % 2 == 0:\n\t\tprint(i, 'is even')\n",
    "The quick brown fox jumps over the lazy dog. Numbers: 0123456789.\n",
    "x = {'key': [1, 2, 3], \"other\": (4.5, None)}  # comment\n",
)


def _chunks(text: str, max_bytes: int) -> List[str]:
    """Splits `text` at line ends into pieces of at most `max_bytes` UTF-8 bytes.

    A single line longer than that is cut by characters.
    """
    if len(text.encode("utf-8")) <= max_bytes:
        return [text]
    out, current, size = [], [], 0
    for line in text.splitlines(keepends=True):
        n = len(line.encode("utf-8"))
        if size + n > max_bytes and current:
            out.append("".join(current))
            current, size = [], 0
        while n > max_bytes:  # one huge line: cut it (max_bytes // 4 chars fit in any case)
            cut = max_bytes // 4
            out.append(line[:cut])
            line = line[cut:]
            n = len(line.encode("utf-8"))
        current.append(line)
        size += n
    if current:
        out.append("".join(current))
    return out


def train_sentencepiece(texts: Iterable[str], model_path: str, vocab_size: int = 8192,
                        seed: int = 0, max_sentences: Optional[int] = None,
                        num_threads: int = 1,
                        user_defined_symbols: Sequence[str] = DEFAULT_USER_DEFINED_SYMBOLS,
                        hard_vocab_limit: bool = True, **overrides) -> str:
    """Trains a SentencePiece model with `TRAINER_OPTIONS` and writes it to `model_path`.

    Args:
      texts: training documents; each may span many lines (longer than
        `max_sentence_length` bytes are cut at line ends).
      model_path: output file (e.g. `DIR/spiece.model`); its directory is created.
      vocab_size: number of pieces, special and byte pieces included (at least ~300 with byte
        fallback).
      seed: seeds the input sample (when `max_sentences` is set) and SentencePiece's RNG.
      max_sentences: train on a seeded random sample of this many documents (None: all).
      num_threads: trainer threads. The result is deterministic for a given thread count but
        differs between thread counts, so keep it fixed for reproducible models.
      user_defined_symbols: strings that are always single pieces.
      hard_vocab_limit: if False, `vocab_size` is an upper bound (useful for tiny corpora).
      **overrides: other SentencePiece trainer options.

    Returns:
      `model_path`.
    """
    options = dict(TRAINER_OPTIONS)
    options.update(overrides)
    docs = [t for t in texts if t]
    if max_sentences is not None and len(docs) > max_sentences:
        picked = sorted(random.Random(seed).sample(range(len(docs)), max_sentences))
        docs = [docs[i] for i in picked]
    sentences = [c for d in docs for c in _chunks(d, options["max_sentence_length"])]
    if not sentences:
        raise ValueError("No training text for the tokenizer.")
    spm.set_random_generator_seed(seed)
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_writer=model, vocab_size=vocab_size,
        user_defined_symbols=list(user_defined_symbols), num_threads=num_threads,
        hard_vocab_limit=hard_vocab_limit, minloglevel=2, **options)
    directory = os.path.dirname(os.path.abspath(model_path))
    os.makedirs(directory, exist_ok=True)
    with open(model_path, "wb") as f:
        f.write(model.getvalue())
    return model_path


def make_test_tokenizer(directory: str, texts: Optional[Iterable[str]] = None,
                        vocab_size: int = 320, seed: int = 0) -> tokenizer_lib.Tokenizer:
    """Trains a tiny lossless tokenizer in about a second, for tests.

    Args:
      directory: where `spiece.model` is written.
      texts: training text (default: a few built-in lines of code).
      vocab_size: upper bound on the vocabulary (byte fallback alone takes 259 ids).
      seed: training seed.

    Returns:
      The tokenizer, loaded from `directory/spiece.model`.
    """
    path = os.path.join(directory, tokenizer_lib.SPIECE_FILENAME)
    train_sentencepiece(list(texts) if texts is not None else list(_TEST_TEXTS), path,
                        vocab_size=vocab_size, seed=seed, hard_vocab_limit=False)
    return tokenizer_lib.Tokenizer(path)


def tokens_per_char(tokenizer: tokenizer_lib.Tokenizer, texts: Iterable[str]) -> float:
    """Mean number of tokens per character over `texts`."""
    tokens = chars = 0
    for t in texts:
        tokens += len(tokenizer.encode(t))
        chars += len(t)
    return tokens / max(1, chars)


def train_code_tokenizer(output: str, corpus=None, vocab_size: int = 8192, seed: int = 0,
                         num_threads: int = 1,
                         max_sentences: Optional[int] = None) -> Dict[str, Any]:
    """Trains the project's code tokenizer on the train split of the code corpus.

    Writes `output` (the `spiece.model`) and, beside it, `spiece.json` with the recipe, the
    corpus it came from and its tokens-per-character on the validation split.

    Args:
      output: path of the model file.
      corpus: a `CodeCorpus` (default: `build_corpus()`, the standard library).
      vocab_size: number of pieces.
      seed: training seed.
      num_threads: trainer threads (part of the recipe: see `train_sentencepiece`).
      max_sentences: optional cap on training documents.

    Returns:
      The provenance dict written to `spiece.json`.
    """
    corpus = corpus if corpus is not None else corpus_lib.build_corpus()
    start = time.time()
    train_sentencepiece(corpus.text_for_tokenizer(), output, vocab_size=vocab_size, seed=seed,
                        max_sentences=max_sentences, num_threads=num_threads)
    seconds = time.time() - start
    tok = tokenizer_lib.Tokenizer(output)
    validation = [r["prompt"] + r["completion"] for r in corpus.completion("validation")]
    mismatches = sum(tok.decode(tok.encode(t)) != t for t in validation)
    with open(output, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    manifest = corpus.manifest
    info = {
        "file": os.path.basename(output),
        "sha256": sha,
        "vocab_size": tok.vocab_size,
        "special_ids": {"pad": tok.pad_id, "eos": tok.eos_id, "unk": tok.unk_id, "bos": None},
        "trainer_options": TRAINER_OPTIONS,
        "user_defined_symbols": list(DEFAULT_USER_DEFINED_SYMBOLS),
        "seed": seed,
        "num_threads": num_threads,
        "max_sentences": max_sentences,
        "sentencepiece_version": spm.__version__,
        "training_seconds": round(seconds, 1),
        "corpus": {
            "cache_entry": os.path.basename(corpus.directory),
            "python_version": manifest["python_version"],
            "source_fingerprint": manifest["source_fingerprint"],
            "seed": manifest["seed"],
            "counts": manifest["counts"],
            "train_sha256": {k: v for k, v in manifest["sha256"].items() if "train" in k},
            "chars": manifest["chars"],
        },
        "validation": {
            "texts": len(validation),
            "tokens_per_char": round(tokens_per_char(tok, validation), 4),
            "round_trip_mismatches": mismatches,
        },
        "command": "python -m recipes.tiny_code.tokenizer_training --output " + output,
    }
    with open(os.path.join(os.path.dirname(os.path.abspath(output)), "spiece.json"), "w",
              encoding="utf-8") as f:
        json.dump(info, f, indent=1, sort_keys=True, ensure_ascii=True)
        f.write("\n")
    return info


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description="Train the code tokenizer (spiece.model).")
    parser.add_argument("--output", required=True, help="Path of the spiece.model to write.")
    parser.add_argument("--vocab_size", type=int, default=8192)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num_threads", type=int, default=1)
    parser.add_argument("--max_sentences", type=int, default=None)
    args = parser.parse_args(argv)
    info = train_code_tokenizer(args.output, vocab_size=args.vocab_size, seed=args.seed,
                                num_threads=args.num_threads, max_sentences=args.max_sentences)
    json.dump(info, sys.stdout, indent=1, sort_keys=True)
    print()


if __name__ == "__main__":
    main()
