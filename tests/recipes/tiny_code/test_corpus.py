"""Tests of recipes.tiny_code.corpus (with its extraction and decontamination): layout,
dedup, splits, HumanEval exclusion, cache."""

import ast
import json
import os
import textwrap

import pytest

from recipes.tiny_code import corpus as corpus_lib
from recipes.tiny_code import decontamination
from recipes.tiny_code import extraction

# A small package: imports (absolute, relative, guarded), a method, a nested function,
# trivial and undocumented functions, a duplicate body, and a test directory to skip.
_PKG_INIT = '''\
"""A package."""
'''

_MOD = '''\
"""Module docstring."""
import os
import sys, re
from typing import List, Optional
from . import helpers
try:
    import zlib
except ImportError:
    zlib = None


def join_all(parts: List[str], sep: Optional[str] = None) -> str:
    """Joins parts with os.sep. Ignores sys entirely.

    More text.
    """
    sep = sep or os.sep
    return sep.join(parts)


def compress(data):
    """Compresses data, e.g. bytes, with zlib."""
    # A comment at the top of the body.
    return helpers.wrap(zlib.compress(data))


def undocumented(x):
    return x + 1


def trivial(x):
    """Does nothing."""
    pass


def abstract(x):
    """Not implemented here."""
    raise NotImplementedError("subclass")


class Box:
    """A box."""

    def __init__(self, value):
        """Stores the value."""
        self.value = value

    def describe(self, prefix=''):
        """Describes the box.

        Returns a string.
        """
        text = textwrap_like("""
first line
  second line""")

        def inner(v):
            """Formats one value."""
            return f"<{v}>"
        return prefix + inner(self.value) + text
'''

_DUP = '''\
def join_again(parts, sep=None):
    """Same body as a function elsewhere, other layout."""
    sep = sep or os.sep
    return sep.join(  parts  )
'''

_BROKEN = "def broken(:\n    pass\n"


def _humaneval_problem(task_id="HumanEval/0"):
    problems = {p["task_id"]: p for p in decontamination.read_humaneval()}
    return problems[task_id]


def _write(root, rel, text, mode="w"):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, mode) as f:
        f.write(text)


@pytest.fixture
def src_root(tmp_path):
    """A fake source root with the package above, many distinct functions and planted items."""
    root = str(tmp_path / "src")
    _write(root, "pkg/__init__.py", _PKG_INIT)
    _write(root, "pkg/mod.py", _MOD)
    _write(root, "pkg/helpers.py", 'def wrap(b):\n    """Wraps b."""\n    return [b]\n')
    _write(root, "zdup.py", _DUP)
    _write(root, "broken.py", _BROKEN)
    _write(root, "latin.py", b"# no coding line\nx = '\xff\xfe'\n", mode="wb")
    _write(root, "tests/skipped.py", 'def in_tests():\n    """Skipped."""\n    return 1\n')
    _write(root, "test_skipped.py", 'def in_test_file():\n    """Skipped."""\n    return 1\n')
    many = []
    for i in range(60):
        many.append(f'def f{i}(x):\n    """Returns x times {i} plus one."""\n'
                    f'    y = x * {i}\n    return y + 1\n\n\n')
    _write(root, "many.py", "".join(many))
    # HumanEval/0 verbatim (entry-point rule) and renamed (shingle rule).
    p = _humaneval_problem()
    _write(root, "planted_exact.py", p["prompt"] + p["canonical_solution"])
    renamed = ((p["prompt"] + p["canonical_solution"]).replace(p["entry_point"], "pairs_near")
               .replace("threshold", "limit"))  # not an exact duplicate either
    _write(root, "planted_renamed.py", renamed)
    return root


def _build(root, cache, **kwargs):
    kwargs.setdefault("validation_fraction", 0.3)
    kwargs.setdefault("seed", 0)
    return corpus_lib.build_corpus([root], cache_dir=str(cache), **kwargs)


def _ids(corpus, kind="completion"):
    get = corpus.completion if kind == "completion" else corpus.docsum
    return {s: [r["id"] for r in get(s)] for s in corpus_lib.SPLITS}


def _by_id(corpus):
    return {r["id"]: r for s in corpus_lib.SPLITS for r in corpus.completion(s)}


def test_extraction_prompt_completion_layout(src_root, tmp_path):
    items = _by_id(_build(src_root, tmp_path / "cache"))
    item = items["pkg.mod.join_all"]
    # Only the imports the function names (sys appears only in its docstring), then two blank
    # lines, the signature and the docstring up to its newline.
    assert item["prompt"] == textwrap.dedent('''\
        import os
        from typing import List, Optional


        def join_all(parts: List[str], sep: Optional[str] = None) -> str:
            """Joins parts with os.sep. Ignores sys entirely.

            More text.
            """
        ''')
    assert item["completion"] == "    sep = sep or os.sep\n    return sep.join(parts)\n"
    # Relative imports become absolute; guarded imports are found; comments stay in the body.
    compress = items["pkg.mod.compress"]
    assert compress["prompt"].startswith("from pkg import helpers\nimport zlib\n\n\n")
    assert compress["completion"].startswith("    # A comment")


def test_methods_and_nested_functions_are_dedented(src_root, tmp_path):
    items = _by_id(_build(src_root, tmp_path / "cache"))
    describe = items["pkg.mod.Box.describe"]
    assert describe["prompt"].startswith("def describe(self, prefix=''):\n")
    assert '    """Describes the box.\n\n    Returns a string.\n    """\n' in describe["prompt"]
    # Less-indented lines inside a string literal are kept as they are.
    assert "\nfirst line\n  second line" in describe["completion"]
    inner = items["pkg.mod.Box.describe.<locals>.inner"]
    assert inner["prompt"] == 'def inner(v):\n    """Formats one value."""\n'
    assert inner["completion"] == '    return f"<{v}>"\n'
    for item in items.values():
        tree = ast.parse(item["prompt"] + item["completion"])
        assert isinstance(tree.body[-1], (ast.FunctionDef, ast.AsyncFunctionDef))
        assert item["prompt"].endswith('"""\n') or item["prompt"].endswith("'\n")
        assert item["completion"].strip()


def test_skips_trivial_undocumented_tests_and_broken_files(src_root, tmp_path):
    corpus = _build(src_root, tmp_path / "cache")
    ids = set(_by_id(corpus))
    assert "pkg.mod.Box.__init__" in ids
    for skipped in ("pkg.mod.undocumented", "pkg.mod.trivial", "pkg.mod.abstract",
                    "tests.skipped.in_tests", "test_skipped.in_test_file", "broken.broken"):
        assert skipped not in ids
    assert corpus.manifest["files"]["failed"] == 2  # broken.py and latin.py
    assert corpus.manifest["skipped"]["trivial_body"] == 2
    assert corpus.manifest["skipped"]["no_docstring"] >= 1


def test_dedup_by_normalized_body(src_root, tmp_path):
    corpus = _build(src_root, tmp_path / "cache")
    ids = set(_by_id(corpus))
    # zdup.join_again has join_all's body with other spacing; the first one (sorted paths) wins.
    assert "pkg.mod.join_all" in ids and "zdup.join_again" not in ids
    assert corpus.manifest["skipped"]["duplicate_body"] >= 1


def test_planted_humaneval_functions_are_excluded(src_root, tmp_path):
    corpus = _build(src_root, tmp_path / "cache")
    report = corpus.manifest["humaneval_exclusion"]
    entry = _humaneval_problem()["entry_point"]
    assert f"planted_exact.{entry}" in report["by_rule"]["entry_point"]
    assert "planted_renamed.pairs_near" in report["by_rule"]["shingle"]
    assert report["details"]["planted_renamed.pairs_near"]["task_id"] == "HumanEval/0"
    assert set(report["excluded"]) >= {f"planted_exact.{entry}", "planted_renamed.pairs_near"}
    assert report["humaneval_problems"] == 164 and report["checked"] > 60
    ids = set(_by_id(corpus)) | {r["id"] for s in corpus_lib.SPLITS for r in corpus.docsum(s)}
    assert not ids & set(report["excluded"])
    # With the exclusion off, both are kept: the test above is not vacuous.
    kept = set(_by_id(_build(src_root, tmp_path / "cache2", exclude_humaneval=False)))
    assert {f"planted_exact.{entry}", "planted_renamed.pairs_near"} <= kept


def test_build_is_deterministic_and_cached(src_root, tmp_path, monkeypatch):
    a = _build(src_root, tmp_path / "a")
    b = _build(src_root, tmp_path / "b")
    assert a.manifest["sha256"] == b.manifest["sha256"]
    assert _ids(a) == _ids(b) and _ids(a, "docsum") == _ids(b, "docsum")
    assert os.path.basename(a.directory) == os.path.basename(b.directory)
    assert os.path.basename(a.directory).startswith("py3.")

    def fail(*args, **kwargs):
        raise AssertionError("rebuilt although cached")

    monkeypatch.setattr(corpus_lib, "_collect", fail)
    again = _build(src_root, tmp_path / "a")
    assert again.directory == a.directory
    # Another config is another cache entry.
    monkeypatch.undo()
    other = _build(src_root, tmp_path / "a", seed=1)
    assert other.directory != a.directory


def test_cache_root_from_env(src_root, tmp_path, monkeypatch):
    monkeypatch.setenv("TFSPEC_CACHE", str(tmp_path / "envcache"))
    corpus = corpus_lib.build_corpus([src_root], validation_fraction=0.3)
    assert corpus.directory.startswith(str(tmp_path / "envcache" / "code_corpus"))
    assert os.path.isfile(os.path.join(corpus.directory, "manifest.json"))


def test_splits_disjoint_and_stable_when_corpus_grows(src_root, tmp_path):
    corpus = _build(src_root, tmp_path / "cache")
    ids = _ids(corpus)
    assert ids["train"] and ids["validation"]
    assert not set(ids["train"]) & set(ids["validation"])
    hashes = {s: {hash(r["completion"]) for r in corpus.completion(s)} for s in corpus_lib.SPLITS}
    assert not hashes["train"] & hashes["validation"]
    assert corpus.manifest["counts"]["completion"] == {s: len(v) for s, v in ids.items()}
    # Docsum ids are a subset of completion ids, in the same split.
    for split, rows in ((s, corpus.docsum(s)) for s in corpus_lib.SPLITS):
        assert {r["id"] for r in rows} <= set(ids[split])
    # Growing the corpus does not move existing items between splits.
    _write(src_root, "zz_new.py", "".join(
        f'def g{i}(x):\n    """Returns x minus {i}."""\n    return x - {i}\n\n' for i in range(30)))
    grown = _build(src_root, tmp_path / "cache")
    assert grown.directory != corpus.directory
    grown_ids = _ids(grown)
    for split in corpus_lib.SPLITS:
        assert set(ids[split]) <= set(grown_ids[split])


def test_docsum_summaries_are_one_sentence(src_root, tmp_path):
    corpus = _build(src_root, tmp_path / "cache")
    rows = {r["id"]: r for s in corpus_lib.SPLITS for r in corpus.docsum(s)}
    assert rows["pkg.mod.join_all"]["summary"] == "Joins parts with os.sep."
    assert rows["pkg.mod.compress"]["summary"] == "Compresses data, e.g. bytes, with zlib."
    code = rows["pkg.mod.join_all"]["code"]
    assert code == ("def join_all(parts: List[str], sep: Optional[str] = None) -> str:\n"
                    "    sep = sep or os.sep\n    return sep.join(parts)\n")
    for row in rows.values():
        assert "\n" not in row["summary"] and row["summary"] == row["summary"].strip()
        assert ast.get_docstring(ast.parse(row["code"]).body[0]) is None


def test_split_of_is_a_pure_function():
    assert corpus_lib.split_of("a.b", seed=0) == corpus_lib.split_of("a.b", seed=0)
    splits = [corpus_lib.split_of(f"m.f{i}") for i in range(4000)]
    assert 0.035 < splits.count("validation") / 4000 < 0.065


def test_unknown_split_and_missing_root(src_root, tmp_path):
    corpus = _build(src_root, tmp_path / "cache")
    with pytest.raises(ValueError, match="split"):
        corpus.completion("test")
    with pytest.raises(FileNotFoundError, match="nope"):
        corpus_lib.build_corpus([str(tmp_path / "nope")], cache_dir=str(tmp_path / "c"))


def test_text_for_tokenizer_uses_train_only(src_root, tmp_path):
    corpus = _build(src_root, tmp_path / "cache")
    texts = list(corpus.text_for_tokenizer())
    train = corpus.completion("train")
    assert texts[:len(train)] == [r["prompt"] + r["completion"] for r in train]
    validation = {r["prompt"] + r["completion"] for r in corpus.completion("validation")}
    assert not validation & set(texts)


def test_standard_library_corpus():
    """The real corpus (cached in ~/.cache/tfspec or $TFSPEC_CACHE; ~3 s to build)."""
    corpus = corpus_lib.build_corpus()
    m = corpus.manifest
    assert m["config"]["roots"] == list(extraction.default_roots())
    assert m["counts"]["completion"]["train"] > 3000
    assert m["counts"]["completion"]["validation"] > 100
    assert m["counts"]["docsum"]["validation"] > 100
    report = m["humaneval_exclusion"]
    assert report["humaneval_problems"] == 164 and report["checked"] > 3000
    entry_points = {p["entry_point"] for p in decontamination.read_humaneval()}
    for split in corpus_lib.SPLITS:
        rows = corpus.completion(split)
        assert not {r["id"].rsplit(".", 1)[-1] for r in rows} & entry_points
        for row in rows[::25]:
            ast.parse(row["prompt"] + row["completion"])
    with open(os.path.join(corpus.directory, "manifest.json")) as f:
        assert json.load(f)["counts"] == m["counts"]
