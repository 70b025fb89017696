"""News summarization: XSum and CNN/DailyMail, scored with ROUGE (see `evals.rouge`).

Sources (`data_source`):
  * "tfds" (default): `tensorflow_datasets` (`xsum`, which needs a manual download, and
    `cnn_dailymail:3.*.*`), prepared in or downloaded to `data_path` (the TFDS data_dir).
  * "hf": Hugging Face `datasets` (`EdinburghNLP/xsum`, `abisee/cnn_dailymail` 3.0.0),
    cached in `data_path`.
  * "local": JSONL or TFRecord (`tf.train.Example`) files at `data_path` (a glob;
    `{split}` is replaced by the split name).
Field names default to the datasets' own (XSum: document/summary/id; CNN/DailyMail:
article/highlights/id) and can be overridden with `input_field`, `target_field`, `id_field`.
"""

import dataclasses
import functools
from typing import Mapping, Optional, Sequence

from evals import datasources
from evals import example as example_lib
from evals import rouge
from evals.example import Example

PREFIX = "summarize: "
DATA_SOURCES = (datasources.TFDS, datasources.HF, datasources.LOCAL)
FIELD_OPTIONS = ("input_field", "target_field", "id_field")


@dataclasses.dataclass(frozen=True)
class _Dataset:
    name: str
    tfds_name: str
    hf_path: str
    hf_config: Optional[str]
    input_field: str
    target_field: str
    id_field: str
    hint: str


DATASETS = {
    "xsum": _Dataset(
        name="xsum", tfds_name="xsum", hf_path="EdinburghNLP/xsum", hf_config=None,
        input_field="document", target_field="summary", id_field="id",
        hint=("XSum needs a manual download for TFDS: put the XSum files in "
              "DATA_DIR/downloads/manual and pass --data_source tfds --data_path DATA_DIR, "
              "or pass --data_source hf when online, or --data_source local "
              "--data_path FILE.jsonl with fields document and summary")),
    "cnn_dailymail": _Dataset(
        name="cnn_dailymail", tfds_name="cnn_dailymail:3.*.*", hf_path="abisee/cnn_dailymail",
        hf_config="3.0.0", input_field="article", target_field="highlights", id_field="id",
        hint=("CNN/DailyMail: pass --data_source tfds --data_path DATA_DIR with "
              "tensorflow-datasets installed and the dataset prepared there (or a network), "
              "or --data_source hf when online, or --data_source local "
              "--data_path FILE.jsonl with fields article and highlights")),
}


def read_records(dataset: _Dataset, split: str, data_source: str,
                 data_path: Optional[str]):
    """Raw records of a dataset from one source (lazy)."""
    if data_source == datasources.TFDS:
        return datasources.read_tfds(dataset.tfds_name, split, data_path, dataset.hint)
    if data_source == datasources.HF:
        return datasources.read_hf(dataset.hf_path, dataset.hf_config, split, data_path,
                                   dataset.hint)
    if data_source == datasources.LOCAL:
        return datasources.read_local(data_path, split, dataset.hint)
    raise ValueError(f"unknown data_source {data_source!r} for {dataset.name}; "
                     f"choose from {', '.join(DATA_SOURCES)}")


def examples_from_records(records, *, name: str, split: str, limit: Optional[int],
                          prefix: str, field_names: Mapping[str, Optional[str]],
                          input_field: str, target_field: str, id_field: str) -> list:
    """The first `limit` records as Examples of a text-to-text task (also docsum, wmt_ende).

    `field_names` (`input_field`, `target_field`, `id_field`) override the task's default
    field names; ids default to f"{name}-{split}-{index}".

    Raises:
      ValueError: a record lacks a field, naming the flags that set the field names.
    """
    try:
        return example_lib.from_records(
            datasources.take(records, limit),
            input_field=field_names.get("input_field") or input_field,
            target_field=field_names.get("target_field") or target_field,
            id_field=field_names.get("id_field") or id_field,
            prefix=prefix, id_prefix=f"{name}-{split}-")
    except KeyError as e:
        raise ValueError(f"{name}: {e.args[0]}; set the field names "
                         f"(--input_field, --target_field)") from None


def load(name: str, split: Optional[str] = "test", data_source: Optional[str] = None,
         data_path: Optional[str] = None, limit: Optional[int] = None,
         **field_names) -> list:
    """Examples of `name` ("xsum" or "cnn_dailymail").

    Args:
      name: Dataset name.
      split: "train", "validation" or "test" (None: "test").
      data_source: "tfds" (default), "hf" or "local".
      data_path: TFDS data_dir, HF cache_dir, or the local file(s).
      limit: Keep the first `limit` examples.
      **field_names: `input_field`, `target_field`, `id_field` overrides.

    Raises:
      DataUnavailableError: (a ValueError) the data cannot be had; one-line message.
    """
    datasources.check_field_names(field_names, FIELD_OPTIONS)
    dataset = DATASETS[name]
    split = split or "test"
    records = read_records(dataset, split, data_source or datasources.TFDS, data_path)
    return examples_from_records(
        records, name=name, split=split, limit=limit, prefix=PREFIX, field_names=field_names,
        input_field=dataset.input_field, target_field=dataset.target_field,
        id_field=dataset.id_field)


load_xsum = functools.partial(load, "xsum")
load_cnn_dailymail = functools.partial(load, "cnn_dailymail")


def format_prompt(example: Example) -> str:
    """`summarize: ` + document (the T5 task prefix)."""
    return PREFIX + example.source


def postprocess(text: str, example: Optional[Example] = None) -> str:
    """Strips surrounding whitespace."""
    del example
    return text.strip()


def score_samples(examples: Sequence[Example], outputs: Sequence[str]) -> list:
    """Per-sample ROUGE F-measures x100 against the example's reference."""
    if len(examples) != len(outputs):
        raise ValueError(f"{len(examples)} examples but {len(outputs)} outputs")
    return rouge.score_pairs(list(outputs), [e.reference for e in examples])


def aggregate(examples: Sequence[Example], outputs: Sequence[str],
              qualities: Sequence[Mapping], num_bootstrap: int = 1000, seed: int = 0) -> dict:
    """Corpus ROUGE (mean F x100) with seeded bootstrap 95% bounds from per-sample scores."""
    del examples, outputs
    return rouge.aggregate(qualities, num_samples=num_bootstrap, seed=seed)


def metric_names() -> tuple:
    return rouge.metric_names()
