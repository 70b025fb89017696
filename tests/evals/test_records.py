"""Tests for evals.records: keys, row keys, the line format."""

import json

import pytest

from evals import records


def test_mode_names():
    assert records.mode_name(0, 4) == "autoregressive"
    assert records.mode_name(4, 4) == "speculative"
    assert records.mode_name(2, 4) == "speculative_k2"
    assert records.mode_list([0, 2, 4], 4) == (("autoregressive", 0), ("speculative_k2", 2),
                                               ("speculative", 4))


def test_row_key_is_stable_and_spreads():
    # Fixed value: a change would silently change every sampled output of past runs.
    assert records.row_key("HumanEval/0", 0) == 0x0e920974edd06538
    keys = {records.row_key(f"id{i}", s) for i in range(50) for s in range(4)}
    assert len(keys) == 200 and all(0 <= k < 2 ** 63 for k in keys)
    assert records.row_key("a", 10) != records.row_key("a1", 0)


def test_make_line_field_order_and_deterministic_view():
    record = {"id": "x", "sample": 1, "mode": "speculative", "prompt_sha256": "h",
              "num_tokens": 3, "time_s": 0.25, "rounds": 2, "accepted": 1, "k": 2,
              "batch_size": 1, "drafted": 4, "verified": 3, "beta_sum": 1.5,
              "accepted_per_position": [1, 0], "raw_output": "ignored"}
    line = records.make_line(record, "out\u00e9", {"passed": False, "result": "failed: x"})
    assert tuple(line) == records.FIELDS
    assert tuple(line)[:10] == ("id", "sample", "mode", "prompt_sha256", "output",
                                "num_tokens", "time_s", "rounds", "accepted", "quality")
    text = records.dumps(line)
    assert text.endswith("\n") and text.count("\n") == 1 and "\u00e9" in text
    assert json.loads(text) == line
    other = dict(line, time_s=9.0)
    assert records.deterministic_view(other) == records.deterministic_view(line)
    assert records.key_of(line) == ("x", 1, "speculative")


@pytest.mark.parametrize("text, problem", [
    ("plain é text", None),
    ("x\ud800y", "lone UTF-16 surrogate '\\ud800' at character 1"),
    ("\udfff", "lone UTF-16 surrogate '\\udfff' at character 0"),
    (None, "expected text, got NoneType"),
])
def test_text_problem(text, problem):
    found = records.text_problem(text)
    assert found == problem if problem is None else problem in found


def test_sanitize_makes_every_string_utf8_encodable_and_keeps_valid_text():
    value = {"output": "a\ud800b", "quality": {"result": "failed: ValueError: x\udcffy",
                                               "passed": False}, "n": [1, "é\ud83d"]}
    clean = records.sanitize(value)
    assert clean == {"output": "a\\ud800b", "quality": {"result": "failed: ValueError: "
                                                                  "x\\udcffy", "passed": False},
                     "n": [1, "é\\ud83d"]}
    records.dumps(clean).encode("utf-8")
    assert records.sanitize({"ok": "é 😀"}) == {"ok": "é 😀"}


@pytest.mark.parametrize("change, problem", [
    ({}, None),
    ({"rounds": None, "drafted": None}, None),
    ({"output": None}, "output is not a string"),
    ({"sample": "x"}, "id, sample or mode of the wrong type"),
    ({"num_tokens": 2.5}, "num_tokens is not an integer"),
    ({"accepted_per_position": [1, "a"]}, "accepted_per_position is not a list of integers"),
])
def test_line_problem(change, problem):
    line = records.make_line({"id": "a", "sample": 0, "mode": "speculative", "k": 2,
                              "prompt_sha256": "h", "num_tokens": 3, "time_s": 0.1,
                              "rounds": 2, "accepted": 1, "batch_size": 1, "drafted": 4,
                              "verified": 2, "beta_sum": 1.5, "accepted_per_position": [1, 0]},
                             "out", {"rouge1": 1.0})
    line.update(change)
    assert records.line_problem(line) == problem
    trimmed = {f: line[f] for f in ("id", "sample", "mode")}
    assert records.line_problem(trimmed).startswith("missing fields prompt_sha256, output")
