"""Small data files written by the tests (no network, no downloaded datasets)."""

import json
import sys
import types

import tensorflow as tf


def write_jsonl(path, records):
    with open(path, "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")
    return str(path)


def write_tfrecord(path, records):
    """Writes dicts of str/int/list-of-str values as tf.train.Examples."""
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in records:
            features = {}
            for name, value in record.items():
                values = value if isinstance(value, list) else [value]
                if all(isinstance(v, int) for v in values):
                    features[name] = tf.train.Feature(
                        int64_list=tf.train.Int64List(value=values))
                else:
                    features[name] = tf.train.Feature(
                        bytes_list=tf.train.BytesList(value=[v.encode() for v in values]))
            example = tf.train.Example(features=tf.train.Features(feature=features))
            writer.write(example.SerializeToString())
    return str(path)


def failing_module(monkeypatch, name, attribute, error):
    """Installs a fake module `name` whose `attribute` raises `error` (an installed-but-
    offline data library)."""
    module = types.ModuleType(name)

    def fail(*args, **kwargs):
        raise error

    setattr(module, attribute, fail)
    monkeypatch.setitem(sys.modules, name, module)
    return module


def hide_module(monkeypatch, name):
    """Makes `import name` fail as if the package were not installed."""
    monkeypatch.setitem(sys.modules, name, None)
