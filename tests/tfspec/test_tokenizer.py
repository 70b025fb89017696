"""Tests for tfspec.tokenizer: exact round trips, special ids, loading, clear errors."""

import glob
import os
import shutil
import sysconfig

import numpy as np
import pytest

from tfspec import tokenizer as tokenizer_lib
from recipes.tiny_code import corpus as code_corpus
from recipes.tiny_code import tokenizer_training as spm_training
from tfspec.tokenizer import Tokenizer, check_vocab, load_tokenizer

TRICKY = [
    "",
    " ",
    "\n",
    "\t",
    "   \n\n\n",
    "def f(x):\n\treturn x\t# tab\n",
    "x = 1   \ny = 2\t \n",  # trailing blanks
    "\n\n\ndef g():\n\n\n    pass\n\n",  # blank lines
    "        deeply = indented\n                more\n",
    "  leading spaces",
    "a  b   c    d",
    "\r\n\r\nwindows\r\n",
    "form\x0cfeed\x0b vt \x00 nul \x1b[31m esc",
    "caf\u00e9 cafe\u0301 \u00c5ngstr\u00f6m",  # precomposed vs combining (no NFKC)
    "\uff21\u2160\ufb01 \u00a0nbsp \u3000ideographic space",  # NFKC would change these
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8 \ud55c\uad6d\uc5b4 "
    "\u0627\u0644\u0639\u0631\u0628\u064a\u0629",  # CJK, Hangul, Arabic
    "emoji \U0001F40D\U0001F680 \U0001F468\u200d\U0001F469\u200d\U0001F467 \u2764\ufe0f",
    "\u2581 the meta symbol \u2581\u2581 itself\u2581",
    "</s><pad><unk><0x41> look like special pieces",
    "0123456789 3.14159 1e-10 0xFF",
    "\"\"\"docstring\"\"\" '''other''' f'{x!r:>10}'",
]


def _same_file_bytes(a, b):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


@pytest.fixture(scope="module")
def shipped():
    return load_tokenizer("zoo:tiny-code-target")


@pytest.fixture(scope="module")
def corpus():
    return code_corpus.build_corpus()


def test_shipped_tokenizer_special_ids_and_size(shipped):
    # Each shipped model directory carries its own copy of the shared tokenizer asset.
    assert shipped.path.endswith(os.path.join("tiny-code-target", "spiece.model"))
    assert _same_file_bytes(shipped.path, tokenizer_lib.TINY_CODE_TOKENIZER)
    assert (shipped.pad_id, shipped.eos_id, shipped.unk_id) == (0, 1, 2)
    assert shipped.vocab_size == len(shipped) == 8192
    assert shipped.id_to_piece(0) == "<pad>" and shipped.id_to_piece(1) == "</s>"
    assert shipped.id_to_piece(2) == "<unk>"
    assert shipped.is_lossless
    assert os.path.getsize(shipped.path) < 1_000_000


def test_shipped_round_trips_1000_held_out_snippets(shipped, corpus):
    """Validation-split code (never seen in tokenizer training) decodes to itself exactly."""
    snippets = []
    for row in corpus.completion("validation"):
        snippets += [row["prompt"], row["completion"], row["prompt"] + row["completion"]]
    for row in corpus.docsum("validation"):
        snippets += [row["code"], row["summary"]]
    assert len(snippets) >= 1000
    train = set(corpus.text_for_tokenizer())
    assert not train & {r["prompt"] + r["completion"] for r in corpus.completion("validation")}
    mismatches = [s for s in snippets if shipped.decode(shipped.encode(s)) != s]
    assert not mismatches, mismatches[:3]
    unk = sum(ids.count(shipped.unk_id) for ids in shipped.batch_encode(snippets))
    assert unk == 0
    code = [r["prompt"] + r["completion"] for r in corpus.completion("validation")]
    assert spm_training.tokens_per_char(shipped, code) < 0.3


def test_shipped_round_trips_held_out_files(shipped):
    """Whole standard-library test modules (excluded from the corpus), read byte-exactly."""
    files = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "test", "*.py")))
    if not files:
        pytest.skip("no Lib/test in this Python installation")
    checked = 0
    for path in files[::8]:
        with open(path, "rb") as f:
            try:
                text = f.read().decode("utf-8")
            except UnicodeDecodeError:
                continue
        assert shipped.decode(shipped.encode(text)) == text, path
        checked += 1
    assert checked >= 20


@pytest.mark.parametrize("text", TRICKY)
def test_tricky_strings_round_trip(shipped, text):
    ids = shipped.encode(text)
    assert shipped.unk_id not in ids
    assert shipped.decode(ids) == text
    assert shipped.decode(shipped.encode(text, add_eos=True)) == text


def test_tricky_strings_concatenated_round_trip(shipped):
    text = "".join(TRICKY) * 3
    assert shipped.decode(shipped.encode(text)) == text


def test_eos_and_pad_handling(shipped):
    ids = shipped.encode("return x\n")
    assert shipped.eos_id not in ids and shipped.pad_id not in ids
    assert shipped.encode("return x\n", add_eos=True) == ids + [1]
    # Decoding stops at EOS and skips pads and ids past the tokenizer's vocabulary.
    assert shipped.decode(ids + [1] + shipped.encode("junk")) == "return x\n"
    assert shipped.decode([0] + ids + [0, 0]) == "return x\n"
    assert shipped.decode(ids + [8192, 32127, -1]) == "return x\n"
    assert shipped.decode([]) == "" and shipped.decode([1]) == ""
    assert shipped.decode(np.array(ids, dtype=np.int32)) == "return x\n"


def test_batch_encode_decode(shipped):
    texts = ["def a():\n    return 1\n", "", "x\ty\n"]
    batch = shipped.batch_encode(texts, add_eos=True)
    assert [b[-1] for b in batch] == [1, 1, 1]
    assert shipped.batch_decode(batch) == texts
    width = max(map(len, batch)) + 2
    padded = np.array([b + [0] * (width - len(b)) for b in batch], dtype=np.int32)
    assert shipped.batch_decode(padded) == texts
    with pytest.raises(ValueError, match="2-D"):
        shipped.batch_decode(np.zeros([2, 2, 2], np.int32))
    with pytest.raises(TypeError, match="str"):
        shipped.encode(b"bytes")


def test_tf_text_in_graph_path(shipped):
    pytest.importorskip("tensorflow_text")
    tf_tok = shipped.tf_text_tokenizer()
    text = "def f(x):\n    return x  # ok\n"
    ids = tf_tok.tokenize(text).numpy().tolist()
    assert ids == shipped.encode(text)
    assert tf_tok.detokenize(ids).numpy().decode("utf-8") == text


def test_load_tokenizer_specs(shipped, tmp_path):
    path = tokenizer_lib.TINY_CODE_TOKENIZER
    assert load_tokenizer(path).vocab_size == 8192
    assert load_tokenizer(os.path.dirname(path)).path == path
    assert load_tokenizer(shipped) is shipped
    assert _same_file_bytes(load_tokenizer("zoo:tiny-code-draft").path, path)
    assert load_tokenizer("zoo:tiny-code").path == path
    # A checkpoint directory in the common T5 layout.
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    shutil.copy(path, ckpt / "spiece.model")
    assert load_tokenizer(str(ckpt)).path == str(ckpt / "spiece.model")
    # A keras-hub preset directory.
    preset = tmp_path / "preset"
    (preset / "assets" / "tokenizer").mkdir(parents=True)
    shutil.copy(path, preset / "assets" / "tokenizer" / "vocabulary.spm")
    assert load_tokenizer(preset).path.endswith(os.path.join("assets", "tokenizer",
                                                             "vocabulary.spm"))

    # A model object carrying its tokenizer path.
    class Model:
        tokenizer_path = str(ckpt / "spiece.model")

    assert load_tokenizer(Model()).path == Model.tokenizer_path
    assert Tokenizer(model_proto=shipped.serialized_model_proto()).vocab_size == 8192


def test_load_tokenizer_errors(tmp_path):
    missing = str(tmp_path / "missing" / "spiece.model")
    with pytest.raises(FileNotFoundError, match="missing"):
        load_tokenizer(missing)
    with pytest.raises(FileNotFoundError, match="spiece.model"):
        load_tokenizer(str(tmp_path))  # a directory without a tokenizer
    with pytest.raises(FileNotFoundError, match="no-such-model"):
        load_tokenizer("zoo:no-such-model")
    with pytest.raises(ValueError, match="Invalid zoo name"):
        load_tokenizer(f"zoo:{os.pardir}/etc")  # Path traversal out of the zoo.
    with pytest.raises(ValueError, match="tfspec.load_model"):
        load_tokenizer("hf://google/t5-v1_1-small")
    with pytest.raises(TypeError, match="tokenizer_path"):
        load_tokenizer(42)

    class NoTokenizer:
        tokenizer_path = None

    with pytest.raises(ValueError, match="no tokenizer"):
        load_tokenizer(NoTokenizer())
    bad = tmp_path / "bad.model"
    bad.write_bytes(b"not a sentencepiece model")
    with pytest.raises(ValueError, match="bad.model"):
        load_tokenizer(str(bad))


def test_non_t5_special_ids_are_rejected(tmp_path):
    # SentencePiece's own defaults: unk 0, bos 1, eos 2, no pad.
    path = spm_training.train_sentencepiece(
        ["def f(x):\n    return x\n"] * 20, str(tmp_path / "spiece.model"), vocab_size=300,
        hard_vocab_limit=False, pad_id=-1, unk_id=0, bos_id=1, eos_id=2)
    with pytest.raises(ValueError, match=r"pad=-1, eos=2, unk=0.*pad=0, eos=1, unk=2"):
        load_tokenizer(path)


def test_check_vocab(shipped):
    check_vocab(shipped, 8192)
    check_vocab(shipped, 32128)  # padded model vocabularies are fine
    with pytest.raises(ValueError, match=r"8192.*4096"):
        check_vocab(shipped, 4096)


def test_lossless_flag_detects_lossy_models(tmp_path):
    """A T5-style model (NFKC, whitespace folding, no byte fallback) is flagged lossy."""
    path = spm_training.train_sentencepiece(
        ["The quick brown fox.\n"] * 20, str(tmp_path / "spiece.model"), vocab_size=60,
        hard_vocab_limit=False, normalization_rule_name="nmt_nfkc", remove_extra_whitespaces=True,
        add_dummy_prefix=True, byte_fallback=False, user_defined_symbols=())
    tok = load_tokenizer(path)
    assert not tok.is_lossless
    assert tok.decode(tok.encode("a   b")) != "a   b"
