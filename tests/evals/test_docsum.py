"""Tests for evals.docsum, on the project's real code corpus when it is importable."""

import importlib
import sys
import types

import pytest

from evals import datasources
from evals import docsum
from evals import rouge
from tests.evals import fixtures

try:
    importlib.import_module("recipes.tiny_code.corpus")
    _HAVE_CORPUS = True
except ImportError:  # The corpus module is written in parallel; fake it until it lands.
    _HAVE_CORPUS = False


@pytest.fixture(scope="module")
def corpus_cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("code_corpus"))


@pytest.fixture()
def corpus(monkeypatch, corpus_cache):
    """The real code corpus module, or a stand-in with its API when it is missing."""
    if _HAVE_CORPUS:
        return corpus_cache
    rows = {"validation": [{"id": f"m.f{i}", "code": f"def f{i}(x):\n    return x + {i}\n",
                            "summary": f"Adds {i}."} for i in range(5)]}
    module = types.ModuleType("recipes.tiny_code.corpus")

    class FakeCorpus:
        def docsum(self, split):
            return rows[split]

    module.build_corpus = lambda seed=0, cache_dir=None: FakeCorpus()
    monkeypatch.setitem(sys.modules, "recipes.tiny_code.corpus", module)
    return corpus_cache


def test_loads_the_code_corpus(corpus):
    examples = docsum.load(data_path=corpus, limit=20)
    assert 0 < len(examples) <= 20
    first = examples[0]
    assert first.prompt == "summarize: " + first.source
    assert docsum.format_prompt(first) == first.prompt
    assert first.source == first.record["code"] and first.reference == first.record["summary"]
    assert first.id == first.record["id"]
    assert len({e.id for e in examples}) == len(examples)
    assert "def " in first.source and first.reference


def test_corpus_load_is_deterministic(corpus):
    a = docsum.load(data_path=corpus, limit=5)
    b = docsum.load(data_path=corpus, limit=5)
    assert [(e.id, e.prompt, e.reference) for e in a] == [(e.id, e.prompt, e.reference)
                                                         for e in b]


def test_local_jsonl(tmp_path):
    path = fixtures.write_jsonl(tmp_path / "d.jsonl", [
        {"id": "x.add", "code": "def add(a, b):\n    return a + b\n", "summary": "Add."},
        {"code": "def neg(a):\n    return -a\n", "summary": "Negate."}])
    examples = docsum.load("validation", "local", path)
    assert [e.id for e in examples] == ["x.add", "docsum-validation-1"]
    assert examples[1].prompt == "summarize: def neg(a):\n    return -a\n"


def test_missing_corpus_module_is_data_unavailable(monkeypatch):
    fixtures.hide_module(monkeypatch, "recipes.tiny_code.corpus")
    with pytest.raises(datasources.DataUnavailableError) as info:
        docsum.load()
    assert "\n" not in str(info.value) and "--data_source local" in str(info.value)


def test_unknown_source():
    with pytest.raises(ValueError, match="unknown data_source"):
        docsum.load(data_source="tfds")


def test_scoring_is_rouge(tmp_path):
    path = fixtures.write_jsonl(tmp_path / "d.jsonl", [
        {"code": "def f(): pass", "summary": "Return the sum of two numbers."},
        {"code": "def g(): pass", "summary": "Open the file."}])
    examples = docsum.load("validation", "local", path)
    outputs = [docsum.postprocess(" Return the sum of numbers. ", examples[0]), "Close it."]
    qualities = docsum.score_samples(examples, outputs)
    assert qualities == [rouge.score(o, e.reference) for o, e in zip(outputs, examples)]
    summary = docsum.aggregate(examples, outputs, qualities, num_bootstrap=100)
    assert summary["rouge1"] == pytest.approx((qualities[0]["rouge1"] + qualities[1]["rouge1"])
                                              / 2)
    assert set(summary) == set(docsum.metric_names())
