"""Tests of recipes.tiny_code.tokenizer_training: the lossless recipe, determinism, the
shipped model."""

import hashlib
import json
import os
import sys

import pytest

from tfspec import tokenizer as tokenizer_lib
from recipes.tiny_code import corpus as corpus_lib
from recipes.tiny_code import tokenizer_training as spm_training

_TEXTS = [
    f"def f{i}(x, y={i}):\n    \"\"\"Adds {i}.\"\"\"\n    if x:\n        return x + y\n"
    f"    return [v * {i} for v in range(y)]  # done\n\n"
    for i in range(50)
]


def test_make_test_tokenizer_is_quick_lossless_and_t5(tmp_path):
    tok = spm_training.make_test_tokenizer(str(tmp_path))
    assert tok.path == os.path.join(str(tmp_path), "spiece.model")
    assert (tok.pad_id, tok.eos_id, tok.unk_id) == (0, 1, 2)
    assert 259 < tok.vocab_size <= 320
    assert tok.is_lossless
    text = "class A:\n\tdef f(self):  \n\t\treturn 'é 🐍'\n"
    assert tok.decode(tok.encode(text)) == text


def test_make_test_tokenizer_custom_texts(tmp_path):
    tok = spm_training.make_test_tokenizer(str(tmp_path), texts=_TEXTS, vocab_size=400)
    assert tok.vocab_size <= 400
    assert tok.decode(tok.encode(_TEXTS[3])) == _TEXTS[3]


def test_training_is_deterministic(tmp_path):
    a = spm_training.train_sentencepiece(_TEXTS * 3, str(tmp_path / "a" / "spiece.model"),
                                         vocab_size=350, hard_vocab_limit=False)
    b = spm_training.train_sentencepiece(_TEXTS * 3, str(tmp_path / "b" / "spiece.model"),
                                         vocab_size=350, hard_vocab_limit=False)
    with open(a, "rb") as fa, open(b, "rb") as fb:
        assert fa.read() == fb.read()
    # Seeded sampling of the input is deterministic too.
    c = spm_training.train_sentencepiece(_TEXTS, str(tmp_path / "c.model"), vocab_size=350,
                                         hard_vocab_limit=False, max_sentences=20, seed=3)
    d = spm_training.train_sentencepiece(_TEXTS, str(tmp_path / "d.model"), vocab_size=350,
                                         hard_vocab_limit=False, max_sentences=20, seed=3)
    with open(c, "rb") as fc, open(d, "rb") as fd:
        assert fc.read() == fd.read()


def test_recipe_learns_newline_and_indent_pieces():
    """Pieces may span newlines and indentation (split_by_whitespace=False)."""
    tok = tokenizer_lib.Tokenizer(tokenizer_lib.TINY_CODE_TOKENIZER)
    pieces = [tok.id_to_piece(i) for i in range(tok.vocab_size)]
    assert tok.id_to_piece(3) == "\t"  # the user-defined symbol
    assert "\n" in pieces and "\u2581" * 8 in pieces
    assert "\u2581" * 4 + "return" in pieces
    assert any(p.startswith("\n\u2581\u2581\u2581\u2581") for p in pieces)
    assert any(p.startswith("):\n\u2581\u2581\u2581\u2581") for p in pieces)


def test_chunks_split_long_documents_at_line_ends():
    text = "".join(f"line {i}\n" for i in range(1000))
    chunks = spm_training._chunks(text, 100)  # pylint: disable=protected-access
    assert "".join(chunks) == text
    assert all(len(c.encode()) <= 100 for c in chunks)
    assert all(c.endswith("\n") for c in chunks)
    huge = "x" * 1000
    assert "".join(spm_training._chunks(huge, 100)) == huge  # pylint: disable=protected-access


def test_no_text_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="No training text"):
        spm_training.train_sentencepiece(["", ""], str(tmp_path / "x.model"))


def test_shipped_tokenizer_provenance():
    """spiece.json describes the shipped spiece.model and the corpus it was trained on."""
    path = tokenizer_lib.TINY_CODE_TOKENIZER
    with open(os.path.join(os.path.dirname(path), "spiece.json")) as f:
        info = json.load(f)
    with open(path, "rb") as f:
        data = f.read()
    assert len(data) < 1_000_000
    assert info["sha256"] == hashlib.sha256(data).hexdigest()
    assert info["vocab_size"] == tokenizer_lib.Tokenizer(path).vocab_size == 8192
    assert info["validation"]["round_trip_mismatches"] == 0
    assert info["trainer_options"] == spm_training.TRAINER_OPTIONS
    corpus = corpus_lib.build_corpus()
    if corpus.manifest["source_fingerprint"] != info["corpus"]["source_fingerprint"]:
        pytest.skip(f"the tokenizer was trained on another standard library (Python "
                    f"{info['corpus']['python_version']}), this is {sys.version.split()[0]}")
    # Same standard library: today's corpus must be the one the tokenizer was trained on, so
    # that `python -m recipes.tiny_code.tokenizer_training` re-creates the shipped model.
    for name, sha in info["corpus"]["train_sha256"].items():
        assert corpus.manifest["sha256"][name] == sha, (
            f"{name} changed since the shipped tokenizer was trained; retrain it (and the zoo "
            "models) or restore the corpus rules")
