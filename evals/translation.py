"""WMT English-German translation (Leviathan et al.'s translation row), scored with BLEU.

Sources (`data_source`):
  * "tfds" (default): `wmt14_translate/de-en` (or `wmt_t2t_translate/de-en` via
    `tfds_name`), prepared in or downloaded to `data_path` (the TFDS data_dir).
  * "hf": Hugging Face `wmt14`, config `de-en` (records nest: translation.en/.de).
  * "local": JSONL or TFRecord files at `data_path` with fields en/de by default.
The prompt is `translate English to German: ` + the English sentence; BLEU is sacrebleu's
corpus BLEU with its default 13a tokenization, reported as `bleu`.
"""

from typing import Mapping, Optional, Sequence

from evals import bleu
from evals import datasources
from evals import summarization
from evals.example import Example

NAME = "wmt_ende"
PREFIX = "translate English to German: "
DATA_SOURCES = (datasources.TFDS, datasources.HF, datasources.LOCAL)
TFDS_NAMES = ("wmt14_translate/de-en", "wmt_t2t_translate/de-en")
HF_PATH, HF_CONFIG = "wmt14", "de-en"
FIELD_OPTIONS = ("input_field", "target_field", "id_field", "tfds_name")
_HINT = ("WMT En-De: pass --data_source tfds --data_path DATA_DIR with tensorflow-datasets "
         "installed and wmt14_translate/de-en prepared there (or a network), or "
         "--data_source hf when online, or --data_source local --data_path FILE.jsonl "
         "with fields en and de")
_DEFAULT_FIELDS = {
    datasources.TFDS: ("en", "de"),
    datasources.HF: ("translation.en", "translation.de"),
    datasources.LOCAL: ("en", "de"),
}


def load(split: Optional[str] = "test", data_source: Optional[str] = None,
         data_path: Optional[str] = None, limit: Optional[int] = None,
         **field_names) -> list:
    """WMT En-De examples (test = newstest2014 for wmt14).

    Args:
      split: "train", "validation" or "test" (None: "test").
      data_source: "tfds" (default), "hf" or "local".
      data_path: TFDS data_dir, HF cache_dir, or the local file(s).
      limit: Keep the first `limit` examples.
      **field_names: `input_field` (English), `target_field` (German), `id_field`
        overrides, and `tfds_name` (one of TFDS_NAMES).

    Raises:
      DataUnavailableError: (a ValueError) the data cannot be had; one-line message.
    """
    datasources.check_field_names(field_names, FIELD_OPTIONS)
    split = split or "test"
    source = data_source or datasources.TFDS
    if source == datasources.TFDS:
        tfds_name = field_names.get("tfds_name") or TFDS_NAMES[0]
        if tfds_name not in TFDS_NAMES:
            raise ValueError(f"tfds_name must be one of {', '.join(TFDS_NAMES)}")
        records = datasources.read_tfds(tfds_name, split, data_path, _HINT)
    elif source == datasources.HF:
        records = datasources.read_hf(HF_PATH, HF_CONFIG, split, data_path, _HINT)
    elif source == datasources.LOCAL:
        records = datasources.read_local(data_path, split, _HINT)
    else:
        raise ValueError(f"unknown data_source {source!r} for {NAME}; "
                         f"choose from {', '.join(DATA_SOURCES)}")
    input_default, target_default = _DEFAULT_FIELDS[source]
    return summarization.examples_from_records(
        records, name=NAME, split=split, limit=limit, prefix=PREFIX, field_names=field_names,
        input_field=input_default, target_field=target_default, id_field="id")


def format_prompt(example: Example) -> str:
    """`translate English to German: ` + the English sentence."""
    return PREFIX + example.source


postprocess = summarization.postprocess  # Strips surrounding whitespace.


def score_samples(examples: Sequence[Example], outputs: Sequence[str]) -> list:
    """Per-sample sentence BLEU, a diagnostic for examples.jsonl (the metric is corpus BLEU)."""
    if len(examples) != len(outputs):
        raise ValueError(f"{len(examples)} examples but {len(outputs)} outputs")
    return [{"sentence_bleu": bleu.sentence_bleu(o, e.reference)}
            for e, o in zip(examples, outputs)]


def aggregate(examples: Sequence[Example], outputs: Sequence[str],
              qualities: Sequence[Mapping]) -> dict:
    """Corpus BLEU of all outputs against their references: {"bleu": score}."""
    del qualities
    return bleu.corpus_bleu(list(outputs), [e.reference for e in examples])


def metric_names() -> tuple:
    return ("bleu",)
