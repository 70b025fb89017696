"""Docstring summarization of Python code: the offline task of the embedded default model.

The data is the project's own code corpus (`tfspec.data.code_corpus`, built from Python
source every machine has): `build_corpus(seed, cache_dir).docsum(split)` gives records
{id, code, summary}, where the summary is the first sentence of the function's docstring.
The model sees `summarize: ` + code (validation split by default) and is scored with ROUGE,
as for news summarization. A local JSONL or TFRecord file with fields code/summary can be
used instead (`data_source="local"`).
"""

import importlib
from typing import Mapping, Optional, Sequence

from evals import datasources
from evals import example as example_lib
from evals import rouge
from evals.example import Example

NAME = "docsum"
PREFIX = "summarize: "
CORPUS = "corpus"
DATA_SOURCES = (CORPUS, datasources.LOCAL)
CORPUS_SEED = 0
# The code corpus has train and validation splits; evaluation uses validation.
DEFAULT_SPLIT = "validation"
FIELD_OPTIONS = ("input_field", "target_field", "id_field")
_HINT = ("docsum reads the project's code corpus (tfspec.data.code_corpus); or pass "
         "--data_source local --data_path FILE.jsonl with fields code and summary")


def _corpus_records(split: str, cache_dir: Optional[str]):
    try:
        code_corpus = importlib.import_module("tfspec.data.code_corpus")
    except ImportError as e:
        raise datasources.DataUnavailableError(
            f"cannot import tfspec.data.code_corpus ({datasources.one_line(e, 100)}); "
            f"{_HINT}") from None
    corpus = code_corpus.build_corpus(seed=CORPUS_SEED, cache_dir=cache_dir)
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
    try:
        return example_lib.from_records(
            datasources.take(iter(records), limit),
            input_field=field_names.get("input_field") or "code",
            target_field=field_names.get("target_field") or "summary",
            id_field=field_names.get("id_field") or "id",
            prefix=PREFIX, id_prefix=f"{NAME}-{split}-")
    except KeyError as e:
        raise ValueError(f"{NAME}: {e.args[0]}; set the field names "
                         f"(--input_field, --target_field)") from None


def format_prompt(example: Example) -> str:
    """`summarize: ` + code."""
    return PREFIX + example.source


def postprocess(text: str, example: Optional[Example] = None) -> str:
    """Strips surrounding whitespace."""
    del example
    return text.strip()


def score_samples(examples: Sequence[Example], outputs: Sequence[str]) -> list:
    """Per-sample ROUGE F-measures x100."""
    if len(examples) != len(outputs):
        raise ValueError(f"{len(examples)} examples but {len(outputs)} outputs")
    return rouge.score_pairs(list(outputs), [e.reference for e in examples])


def aggregate(examples: Sequence[Example], outputs: Sequence[str],
              qualities: Sequence[Mapping], num_bootstrap: int = 1000, seed: int = 0) -> dict:
    """Corpus ROUGE with seeded bootstrap bounds (see `evals.rouge.aggregate`)."""
    del examples, outputs
    return rouge.aggregate(qualities, num_samples=num_bootstrap, seed=seed)


def metric_names() -> tuple:
    return rouge.metric_names()
