"""Tests for evals.translation and evals.bleu."""

import sys
import types

import pytest
import sacrebleu

from evals import bleu
from evals import datasources
from evals import translation
from tests.evals import fixtures

_HYPS = ["Die Katze sitzt auf der Matte.", "Das ist ein Test.", "Guten Morgen, Welt!"]
_REFS = ["Die Katze saß auf der Matte.", "Dies ist ein Test.", "Guten Morgen, Welt!"]


def test_corpus_bleu_matches_sacrebleu():
    expected = sacrebleu.corpus_bleu(_HYPS, [_REFS]).score
    assert bleu.corpus_bleu(_HYPS, _REFS) == {"bleu": pytest.approx(expected, abs=1e-12)}
    assert 0 < expected < 100


def test_corpus_bleu_is_corpus_level_not_mean_of_sentences():
    sentence_mean = sum(bleu.sentence_bleu(h, r) for h, r in zip(_HYPS, _REFS)) / len(_HYPS)
    assert bleu.corpus_bleu(_HYPS, _REFS)["bleu"] != pytest.approx(sentence_mean)


def test_bleu_signature_is_13a():
    assert "tok:13a" in bleu.signature()


@pytest.mark.parametrize("hyps, refs", [([], []), (["a"], ["a", "b"])])
def test_bleu_errors(hyps, refs):
    with pytest.raises(ValueError):
        bleu.corpus_bleu(hyps, refs)


def test_local_jsonl(tmp_path):
    path = fixtures.write_jsonl(tmp_path / "wmt.jsonl", [
        {"en": "The cat sits.", "de": "Die Katze sitzt.", "id": "s0"},
        {"en": "Hello.", "de": "Hallo."}])
    examples = translation.load("test", "local", path)
    assert [e.id for e in examples] == ["s0", "wmt_ende-test-1"]
    assert examples[0].prompt == "translate English to German: The cat sits."
    assert translation.format_prompt(examples[0]) == examples[0].prompt
    assert examples[0].reference == "Die Katze sitzt."
    assert len(translation.load("test", "local", path, limit=1)) == 1


def test_local_tfrecord_with_custom_fields(tmp_path):
    path = fixtures.write_tfrecord(tmp_path / "wmt.tfrecord", [
        {"source": "Good night.", "target": "Gute Nacht."}])
    examples = translation.load("test", "local", path, input_field="source",
                                target_field="target")
    assert (examples[0].source, examples[0].reference) == ("Good night.", "Gute Nacht.")


def test_hf_records_nest_translation(monkeypatch, tmp_path):
    calls = {}
    module = types.ModuleType("datasets")

    def load_dataset(path, config, split, cache_dir):
        calls.update(path=path, config=config, split=split, cache_dir=cache_dir)
        return [{"translation": {"en": "Yes.", "de": "Ja."}}]

    module.load_dataset = load_dataset
    monkeypatch.setitem(sys.modules, "datasets", module)
    examples = translation.load("validation", "hf", str(tmp_path))
    assert calls == {"path": "wmt14", "config": "de-en", "split": "validation",
                     "cache_dir": str(tmp_path)}
    assert (examples[0].source, examples[0].reference) == ("Yes.", "Ja.")


def test_tfds_records_are_decoded(monkeypatch):
    module = types.ModuleType("tensorflow_datasets")
    module.load = lambda name, split, data_dir, shuffle_files: [
        {"en": b"Thanks.", "de": "Danke.".encode()}]
    module.as_numpy = lambda ds: iter(ds)
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", module)
    examples = translation.load("test", "tfds", "/data")
    assert (examples[0].source, examples[0].reference) == ("Thanks.", "Danke.")


@pytest.mark.parametrize("source, module", [("tfds", "tensorflow_datasets"), ("hf", "datasets")])
def test_offline_error_is_one_line(monkeypatch, source, module):
    fixtures.hide_module(monkeypatch, module)
    with pytest.raises(datasources.DataUnavailableError) as info:
        translation.load("test", source)
    assert "\n" not in str(info.value)
    assert "--data_source local --data_path FILE.jsonl" in str(info.value)


def test_tfds_failure_is_one_line(monkeypatch):
    fixtures.failing_module(monkeypatch, "tensorflow_datasets", "load",
                            OSError("no network\nat all"))
    with pytest.raises(datasources.DataUnavailableError) as info:
        translation.load("test", "tfds")
    assert "\n" not in str(info.value) and "wmt14_translate/de-en" in str(info.value)


def test_bad_options():
    with pytest.raises(ValueError, match="tfds_name"):
        translation.load("test", "tfds", tfds_name="wmt19_translate/de-en")
    with pytest.raises(ValueError, match="unknown data_source"):
        translation.load("test", "gcs")


def test_score_samples_and_aggregate(tmp_path):
    path = fixtures.write_jsonl(tmp_path / "wmt.jsonl",
                                [{"en": str(i), "de": r} for i, r in enumerate(_REFS)])
    examples = translation.load("test", "local", path)
    outputs = [translation.postprocess(f"  {h}\n", e) for h, e in zip(_HYPS, examples)]
    qualities = translation.score_samples(examples, outputs)
    assert qualities[2]["sentence_bleu"] == pytest.approx(100.0)
    assert translation.aggregate(examples, outputs, qualities) == {
        "bleu": pytest.approx(sacrebleu.corpus_bleu(_HYPS, [_REFS]).score)}
