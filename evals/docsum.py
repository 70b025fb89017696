"""Docstring summarization of Python code: the offline task of the embedded default model.

The data is the project's own code corpus (`recipes.tiny_code.corpus`, built from Python
source every machine has): `build_corpus(seed, cache_dir).docsum(split)` gives records
{id, code, summary}, where the summary is the first sentence of the function's docstring.
The model sees `summarize: ` + code (validation split by default) and is scored with ROUGE,
as for news summarization. A local JSONL or TFRecord file with fields code/summary can be
used instead (`data_source="local"`).
"""

import importlib
from typing import Optional

from evals import datasources
from evals import summarization
from evals.example import Example

NAME = "docsum"
PREFIX = summarization.PREFIX
CORPUS = "corpus"
DATA_SOURCES = (CORPUS, datasources.LOCAL)
CORPUS_SEED = 0
# The code corpus has train and validation splits; evaluation uses validation.
DEFAULT_SPLIT = "validation"
FIELD_OPTIONS = ("input_field", "target_field", "id_field")
_HINT = ("docsum reads the project's code corpus (recipes.tiny_code.corpus); or pass "
         "--data_source local --data_path FILE.jsonl with fields code and summary")


def _corpus_records(split: str, cache_dir: Optional[str]):
    try:
        corpus_lib = importlib.import_module("recipes.tiny_code.corpus")
    except ImportError as e:
        raise datasources.DataUnavailableError(
            f"cannot import recipes.tiny_code.corpus ({datasources.one_line(e, 100)}); "
            f"{_HINT}") from None
    corpus = corpus_lib.build_corpus(seed=CORPUS_SEED, cache_dir=cache_dir)
    return corpus.docsum(split)


def load(split: Optional[str] = DEFAULT_SPLIT, data_source: Optional[str] = None,
         data_path: Optional[str] = None, limit: Optional[int] = None,
         **field_names) -> list:
    """docsum examples.

    Args:
      split: A split of the code corpus, "train" or "validation" (None: "validation").
      data_source: "corpus" (default: build the project's code corpus) or "local".
      data_path: The corpus cache_dir for "corpus"; the file(s) for "local".
      limit: Keep the first `limit` examples.
      **field_names: `input_field` (default code), `target_field` (summary), `id_field`.
    """
    datasources.check_field_names(field_names, FIELD_OPTIONS)
    split = split or DEFAULT_SPLIT
    source = data_source or CORPUS
    if source == CORPUS:
        records = _corpus_records(split, data_path)
    elif source == datasources.LOCAL:
        records = datasources.read_local(data_path, split, _HINT)
    else:
        raise ValueError(f"unknown data_source {source!r} for {NAME}; "
                         f"choose from {', '.join(DATA_SOURCES)}")
    return summarization.examples_from_records(
        iter(records), name=NAME, split=split, limit=limit, prefix=PREFIX,
        field_names=field_names, input_field="code", target_field="summary", id_field="id")


def format_prompt(example: Example) -> str:
    """`summarize: ` + code."""
    return PREFIX + example.source


# Scored like news summarization: per-sample ROUGE x100, corpus ROUGE with bootstrap bounds.
postprocess = summarization.postprocess
score_samples = summarization.score_samples
aggregate = summarization.aggregate
metric_names = summarization.metric_names
