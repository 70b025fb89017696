"""Tests for evals.summarization and evals.rouge."""

import numpy as np
import pytest
from rouge_score import rouge_scorer

from evals import datasources
from evals import rouge
from evals import summarization
from tests.evals import fixtures

_PAIRS = [
    ("The cat sat on the mat. It was happy.", "A cat was sitting on the mat.\nThe cat was happy."),
    ("Police arrested two men in London on Monday.", "Two men were arrested by police in London."),
    ("Stocks fell sharply!", "Shares rose slightly on Tuesday."),
    ("running runners ran", "the runner runs"),
]


def _direct_fmeasures(prediction, reference):
    """rouge_score called directly: stemming on, Lsum over newline-separated sentences."""
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL", "rougeLsum"],
                                      use_stemmer=True)
    scores = scorer.score(rouge.split_sentences(reference), rouge.split_sentences(prediction))
    return {k: 100 * v.fmeasure for k, v in scores.items()}


@pytest.mark.parametrize("prediction, reference", _PAIRS)
def test_rouge_matches_rouge_score(prediction, reference):
    assert rouge.score(prediction, reference) == pytest.approx(
        _direct_fmeasures(prediction, reference), abs=1e-9)


def test_rouge_uses_stemming():
    assert rouge.score("running runners ran", "the runner runs")["rouge1"] > 0


@pytest.mark.parametrize("text, expected", [
    ("One. Two! Three? Four", "One.\nTwo!\nThree?\nFour"),
    ("Line one\n\n  Line two  ", "Line one\nLine two"),
    ("No split 3.5 here", "No split 3.5 here"),
])
def test_split_sentences(text, expected):
    assert rouge.split_sentences(text) == expected


def test_rougelsum_is_sentence_level():
    # Same words; Lsum (union LCS per sentence) differs from L (one LCS over the text).
    pred, ref = "b c. a b.", "a b c.\nd"
    s = rouge.score(pred, ref)
    assert s["rougeLsum"] != s["rougeL"]


def test_aggregate_is_mean_with_bracketing_seeded_bounds():
    per_example = rouge.score_pairs([p for p, _ in _PAIRS], [r for _, r in _PAIRS])
    result = rouge.aggregate(per_example, num_samples=500, seed=3)
    assert set(result) == set(rouge.metric_names())
    for t in rouge.ROUGE_TYPES:
        direct = np.mean([_direct_fmeasures(p, r)[t] for p, r in _PAIRS])
        assert result[t] == pytest.approx(direct)
        assert result[f"{t}_low"] <= result[t] <= result[f"{t}_high"]
        assert result[f"{t}_low"] < result[f"{t}_high"]
    assert rouge.aggregate(per_example, num_samples=500, seed=3) == result
    assert rouge.aggregate(per_example, num_samples=500, seed=4) != result


def test_bootstrap_interval():
    assert rouge.bootstrap_interval([2.0, 2.0, 2.0]) == (2.0, 2.0, 2.0)
    mean, low, high = rouge.bootstrap_interval(np.arange(100.0), num_samples=2000, seed=0)
    assert mean == 49.5
    # Normal approximation: 49.5 +- 1.96 * 28.87 / 10.
    assert low == pytest.approx(49.5 - 5.66, abs=1.0) and high == pytest.approx(55.2, abs=1.0)
    with pytest.raises(ValueError):
        rouge.bootstrap_interval([])
    with pytest.raises(ValueError):
        rouge.bootstrap_interval([1.0], confidence=1.5)


# ------------------------------------------------------------------------------ loaders

_XSUM = [{"id": "a1", "document": "Doc one. Long text.", "summary": "Sum one."},
         {"id": "a2", "document": "Doc two.", "summary": "Sum two."},
         {"id": "a3", "document": "Doc three.", "summary": "Sum three."}]
_CNN = [{"id": "c1", "article": "Article one.", "highlights": "High one.\nHigh two."}]


def test_xsum_local_jsonl(tmp_path):
    path = fixtures.write_jsonl(tmp_path / "xsum.jsonl", _XSUM)
    examples = summarization.load("xsum", "test", "local", path)
    assert [e.id for e in examples] == ["a1", "a2", "a3"]
    assert examples[0].prompt == "summarize: Doc one. Long text."
    assert examples[0].reference == "Sum one."
    assert summarization.format_prompt(examples[0]) == examples[0].prompt
    assert len(summarization.load("xsum", "test", "local", path, limit=2)) == 2


def test_cnn_dailymail_local_jsonl_with_split_placeholder(tmp_path):
    fixtures.write_jsonl(tmp_path / "cnn-validation.jsonl", _CNN)
    examples = summarization.load("cnn_dailymail", "validation", "local",
                                  str(tmp_path / "cnn-{split}.jsonl"))
    assert examples[0].reference == "High one.\nHigh two."
    assert examples[0].prompt == "summarize: Article one."


def test_tfrecord_with_custom_feature_names(tmp_path):
    records = [{"doc_text": "Tf doc.", "gold": "Tf sum.", "key": 7},
               {"doc_text": "Tf doc 2.", "gold": ["Part one.", "Part two."], "key": 8}]
    path = fixtures.write_tfrecord(tmp_path / "data.tfrecord", records)
    examples = summarization.load("xsum", "test", "local", path, input_field="doc_text",
                                  target_field="gold", id_field="key")
    assert [(e.id, e.source, e.reference) for e in examples] == [
        ("7", "Tf doc.", "Tf sum."), ("8", "Tf doc 2.", "Part one.\nPart two.")]


def test_missing_id_field_gets_generated_ids(tmp_path):
    path = fixtures.write_jsonl(tmp_path / "x.jsonl", [{"document": "d", "summary": "s"}] * 2)
    assert [e.id for e in summarization.load("xsum", "test", "local", path)] == [
        "xsum-test-0", "xsum-test-1"]


def test_wrong_field_names_say_which(tmp_path):
    path = fixtures.write_jsonl(tmp_path / "x.jsonl", _CNN)
    with pytest.raises(ValueError, match="field 'document' not in record"):
        summarization.load("xsum", "test", "local", path)
    with pytest.raises(TypeError, match="unknown field option"):
        summarization.load("xsum", "test", "local", path, source_field="x")


@pytest.mark.parametrize("name", ["xsum", "cnn_dailymail"])
@pytest.mark.parametrize("source, module", [("tfds", "tensorflow_datasets"), ("hf", "datasets")])
def test_offline_error_is_one_line_when_library_missing(monkeypatch, name, source, module):
    fixtures.hide_module(monkeypatch, module)
    with pytest.raises(datasources.DataUnavailableError) as info:
        summarization.load(name, "test", source)
    message = str(info.value)
    assert "\n" not in message
    assert "--data_source local --data_path FILE.jsonl" in message
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("name", ["xsum", "cnn_dailymail"])
@pytest.mark.parametrize("source, module, attribute", [
    ("tfds", "tensorflow_datasets", "load"), ("hf", "datasets", "load_dataset")])
def test_offline_error_is_one_line_when_download_fails(monkeypatch, name, source, module,
                                                       attribute):
    fixtures.failing_module(monkeypatch, module, attribute,
                            ConnectionError("Failed to reach host\nretry later"))
    with pytest.raises(datasources.DataUnavailableError) as info:
        summarization.load(name, "test", source, "/nonexistent/data_dir")
    message = str(info.value)
    assert "\n" not in message and "ConnectionError" in message
    assert "--data_source" in message
    if name == "xsum" and source == "tfds":
        assert "downloads/manual" in message


def test_local_without_path_is_data_unavailable():
    with pytest.raises(datasources.DataUnavailableError, match="--data_path"):
        summarization.load("xsum", "test", "local", None)
    with pytest.raises(datasources.DataUnavailableError, match="no file matches"):
        summarization.load("xsum", "test", "local", "/nonexistent/*.jsonl")


def test_unknown_source():
    with pytest.raises(ValueError, match="unknown data_source"):
        summarization.load("xsum", "test", "s3")


def test_score_samples_and_aggregate(tmp_path):
    examples = summarization.load("xsum", "test", "local",
                                  fixtures.write_jsonl(tmp_path / "x.jsonl", _XSUM))
    outputs = [summarization.postprocess("  Sum one.\n", examples[0]), "Sum", "nothing alike"]
    qualities = summarization.score_samples(examples, outputs)
    assert qualities[0]["rouge1"] == pytest.approx(100.0)
    assert qualities[2]["rouge1"] == 0.0
    summary = summarization.aggregate(examples, outputs, qualities, num_bootstrap=200, seed=1)
    assert summary["rouge1"] == pytest.approx(np.mean([q["rouge1"] for q in qualities]))
    assert set(summary) == set(summarization.metric_names())
