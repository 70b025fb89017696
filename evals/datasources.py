"""Where examples come from: local JSONL/TFRecord files, TFDS and Hugging Face datasets.

All readers yield plain `dict` records (str/int/float values, lists for repeated
features, nested dicts where the source nests), so task loaders only pick fields.
`tensorflow_datasets` and `datasets` are imported lazily; without them, without a network,
or without the manual download a dataset needs, loaders raise `DataUnavailableError` with a
one-line message that says how to get the data and which flags to pass.
"""

import glob
import gzip
import itertools
import json
import os
from typing import Any, Iterator, Mapping, Optional, Sequence, Tuple

LOCAL = "local"
TFDS = "tfds"
HF = "hf"


class DataUnavailableError(ValueError):
    """The requested data cannot be loaded here; the message (one line) says what to do."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


def one_line(text: Any, limit: int = 200) -> str:
    """Collapses whitespace and truncates, for embedding an error text in a one-line message."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


# ------------------------------------------------------------------------------ local files


def resolve_local_path(data_path: Optional[str], split: Optional[str], hint: str) -> list:
    """Files named by `data_path` (a file, a glob, `{split}` is substituted).

    Args:
      data_path: Path or glob; `{split}` in it is replaced by the split name.
      split: The split, for the `{split}` substitution.
      hint: One-line advice used in the error when nothing matches.

    Returns:
      The sorted list of files.

    Raises:
      DataUnavailableError: if `data_path` is empty or matches no file.
    """
    if not data_path:
        raise DataUnavailableError(f"--data_source local needs --data_path FILE; {hint}")
    pattern = data_path.replace("{split}", split or "")
    files = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else (
        [pattern] if os.path.isfile(pattern) else [])
    if not files:
        raise DataUnavailableError(f"no file matches --data_path {pattern}; {hint}")
    return files


def _is_tfrecord(path: str) -> bool:
    return ".tfrecord" in os.path.basename(path)


def read_jsonl(path: str) -> Iterator[dict]:
    """Records of a JSON Lines file (optionally gzip-compressed); blank lines are skipped."""
    for _, record in read_jsonl_numbered(path):
        yield record


def read_jsonl_numbered(path: str) -> Iterator[Tuple[int, dict]]:
    """(line number, record) of a JSON Lines file; errors name the line.

    Raises:
      ValueError: a line that is not UTF-8, not JSON, or not a JSON object ("PATH:N: ...").
    """
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        for line_number, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(f"{path}:{line_number}: not UTF-8 text (byte "
                                 f"{raw[e.start]:#04x} at column {e.start + 1})") from None
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{line_number}: invalid JSON: {e.msg}") from None
            if not isinstance(record, dict):
                raise ValueError(f"{path}:{line_number}: expected a JSON object per line")
            yield line_number, record


def read_tfrecord(path: str) -> Iterator[dict]:
    """Records of a TFRecord file of `tf.train.Example`s (GZIP if the name ends in .gz).

    Bytes features are decoded as UTF-8 strings; a feature with one value becomes a scalar,
    with several a list.
    """
    import tfspec  # noqa: F401  pylint: disable=import-outside-toplevel  (quiet TF logs)
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    compression = "GZIP" if path.endswith(".gz") else ""
    for raw in tf.data.TFRecordDataset(path, compression_type=compression).as_numpy_iterator():
        yield _example_to_dict(tf.train.Example.FromString(raw))


def _example_to_dict(example) -> dict:
    record = {}
    for name, feature in example.features.feature.items():
        kind = feature.WhichOneof("kind")
        if kind == "bytes_list":
            values = [v.decode("utf-8") for v in feature.bytes_list.value]
        elif kind == "int64_list":
            values = list(feature.int64_list.value)
        elif kind == "float_list":
            values = list(feature.float_list.value)
        else:
            values = []
        record[name] = values[0] if len(values) == 1 else values
    return record


def read_local(data_path: Optional[str], split: Optional[str], hint: str) -> Iterator[dict]:
    """Records of local JSONL or TFRecord files (chosen per file by name: `.tfrecord`)."""
    for path in resolve_local_path(data_path, split, hint):
        yield from (read_tfrecord(path) if _is_tfrecord(path) else read_jsonl(path))


# ------------------------------------------------------------------------------ TFDS and HF


def read_tfds(name: str, split: str, data_dir: Optional[str], hint: str) -> Iterator[dict]:
    """Records of a TFDS dataset (prepared in `data_dir`, or downloaded and prepared there).

    Raises:
      DataUnavailableError: if tensorflow_datasets is missing or the data cannot be had.
    """
    try:
        import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
    except ImportError:
        raise DataUnavailableError(
            f"tensorflow_datasets is not installed (pip install tensorflow-datasets); "
            f"{hint}") from None
    try:
        dataset = tfds.load(name, split=split, data_dir=data_dir, shuffle_files=False)
        iterator = tfds.as_numpy(dataset)
    except Exception as e:  # noqa: BLE001  Network, manual download, unknown split, ...
        raise DataUnavailableError(
            f"cannot load TFDS {name} split {split} ({type(e).__name__}: {one_line(e, 120)}); "
            f"{hint}") from None
    for record in iterator:
        yield _to_python(record)


def read_hf(path: str, config: Optional[str], split: str, cache_dir: Optional[str],
            hint: str) -> Iterator[dict]:
    """Records of a Hugging Face dataset.

    Raises:
      DataUnavailableError: if `datasets` is missing or the data cannot be had.
    """
    try:
        import datasets  # pylint: disable=import-outside-toplevel
    except ImportError:
        raise DataUnavailableError(
            f"the Hugging Face datasets package is not installed (pip install datasets); "
            f"{hint}") from None
    try:
        dataset = datasets.load_dataset(path, config, split=split, cache_dir=cache_dir)
    except Exception as e:  # noqa: BLE001
        raise DataUnavailableError(
            f"cannot load Hugging Face dataset {path}"
            f"{'/' + config if config else ''} split {split} "
            f"({type(e).__name__}: {one_line(e, 120)}); {hint}") from None
    for record in dataset:
        yield _to_python(record)


def _to_python(value):
    """numpy/bytes values of TFDS records as plain Python values."""
    if isinstance(value, Mapping):
        return {k: _to_python(v) for k, v in value.items()}
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if hasattr(value, "tolist"):
        return _to_python(value.tolist())
    if isinstance(value, list):
        return [_to_python(v) for v in value]
    return value


# ------------------------------------------------------------------------------ fields


def get_field(record: Mapping[str, Any], field: str) -> Any:
    """The value of `field` in `record`; dots reach into nested dicts ("translation.de").

    Raises:
      KeyError: with the available field names, if the field is missing.
    """
    value: Any = record
    for part in field.split("."):
        if not isinstance(value, Mapping) or part not in value:
            available = sorted(record) if isinstance(record, Mapping) else []
            raise KeyError(f"field {field!r} not in record (fields: {', '.join(available)})")
        value = value[part]
    return value


def text_field(record: Mapping[str, Any], field: str) -> str:
    """A text field; a list of strings (a repeated feature) is joined with newlines."""
    value = get_field(record, field)
    if isinstance(value, (list, tuple)):
        return "\n".join(str(v) for v in value)
    return str(value)


def check_field_names(given: Mapping[str, Any], allowed: Sequence[str]) -> None:
    """Rejects unknown `**field_names` keyword arguments of a loader."""
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        raise TypeError(f"unknown field option(s) {', '.join(unknown)}; "
                        f"allowed: {', '.join(allowed)}")


def take(records, limit: Optional[int]):
    """The first `limit` records (all if None); validates `limit`."""
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    return itertools.islice(records, limit)


__all__ = ["DataUnavailableError", "LOCAL", "TFDS", "HF", "read_jsonl", "read_tfrecord",
           "read_local", "read_tfds", "read_hf", "get_field", "text_field", "take",
           "check_field_names", "resolve_local_path", "one_line"]
