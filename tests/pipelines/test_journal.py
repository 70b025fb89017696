"""Tests for pipelines.journal: complete lines only, each key once, across processes."""

import errno
import json
import multiprocessing
import os
import pickle

import pytest

from evals import records
from pipelines import journal as journal_lib


def _line(i, sample=0, mode="speculative", time_s=0.5):
    return {"id": f"ex{i}", "sample": sample, "mode": mode, "prompt_sha256": "x",
            "output": f"out {i}\n\u00e9", "num_tokens": 3, "time_s": time_s, "rounds": 1,
            "accepted": 1, "quality": {"passed": True, "result": "passed"}}


def _raw(path):
    with open(path, "rb") as f:
        return f.read()


def test_append_writes_each_key_once(tmp_path):
    journal = journal_lib.Journal(str(tmp_path))
    assert journal.append(_line(0))
    assert journal.append(_line(1))
    assert not journal.append(_line(0, time_s=9.0))  # A retry of a finished key.
    other = journal_lib.Journal(str(tmp_path))  # Another worker: sees the file's keys.
    assert not other.append(_line(1))
    assert other.append(_line(1, mode="autoregressive"))
    lines = journal.read_lines()
    assert [records.key_of(row) for row in lines] == [("ex0", 0, "speculative"),
                                                  ("ex1", 0, "speculative"),
                                                  ("ex1", 0, "autoregressive")]
    assert lines[0]["time_s"] == 0.5
    assert _raw(journal.path).decode("utf-8").count("\n") == 3


def test_partial_last_line_is_cut_before_reading_or_appending(tmp_path):
    journal = journal_lib.Journal(str(tmp_path))
    journal.append(_line(0))
    good = _raw(journal.path)
    with open(journal.path, "ab") as f:
        f.write(records.dumps(_line(1)).encode()[:20])  # A writer killed mid-line.
    assert [row["id"] for row in journal_lib.Journal(str(tmp_path)).read_lines()] == ["ex0"]
    assert _raw(journal.path) == good
    with open(journal.path, "ab") as f:
        f.write(b'{"id": "ex9", "sam')
    writer = journal_lib.Journal(str(tmp_path))
    assert writer.append(_line(2))
    assert _raw(journal.path) == good + records.dumps(_line(2)).encode()


def test_damaged_complete_line_is_an_error(tmp_path):
    journal = journal_lib.Journal(str(tmp_path))
    journal.append(_line(0))
    with open(journal.path, "ab") as f:
        f.write(b"not json\n")
    with pytest.raises(journal_lib.JournalError, match="line 2 is not a complete record"):
        journal.read_lines()


def _complete_line(i):
    line = records.make_line(dict(_line(i), k=2, batch_size=1, drafted=2, verified=1,
                                  beta_sum=0.5, accepted_per_position=[1, 0]),
                             f"out {i}", {"passed": True})
    assert records.line_problem(line) is None
    return line


@pytest.mark.parametrize("bad, problem", [
    ({"id": "ex1", "sample": 0, "mode": "speculative"}, "missing fields prompt_sha256"),
    (dict(_line(1), rounds=None, quality="passed"), "quality is not an object"),
    (dict(_line(1), rounds=2), "missing fields drafted, verified"),
])
def test_incomplete_record_is_a_one_line_error_naming_the_line_when_reused(
        tmp_path, bad, problem):
    journal = journal_lib.Journal(str(tmp_path))
    journal.append(_complete_line(0))
    journal.append(bad)
    journal.append(_complete_line(2))
    with pytest.raises(journal_lib.JournalError) as error:
        journal.read_lines(records.line_problem)
    message = str(error.value)
    assert f"{journal.path} line 2 is not a complete record ({problem}" in message
    assert "\n" not in message
    assert len(journal.read_lines()) == 3  # Writers only need the keys.


def test_a_write_that_fails_part_way_leaves_whole_lines_only(tmp_path, monkeypatch):
    journal = journal_lib.Journal(str(tmp_path))
    journal.append(_line(0))
    good = _raw(journal.path)
    original = journal_lib._write_all  # pylint: disable=protected-access

    def disk_full(fd, data):
        os.write(fd, data[:len(data) // 2])  # The part that still fitted.
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(journal_lib, "_write_all", disk_full)
    with pytest.raises(journal_lib.JournalWriteError, match=r"\[Errno 28\] cannot append to "
                                                           r".*: No space left on device"):
        journal.append(_line(1))
    assert _raw(journal.path) == good
    monkeypatch.setattr(journal_lib, "_write_all", original)
    assert journal.append(_line(1))  # Room again: the same writer goes on.
    assert [row["id"] for row in journal_lib.Journal(str(tmp_path)).read_lines()] == [
        "ex0", "ex1"]


def test_journal_pickles_as_paths_only(tmp_path):
    journal = journal_lib.Journal(str(tmp_path))
    journal.append(_line(0))
    clone = pickle.loads(pickle.dumps(journal))
    assert clone.path == journal.path and clone.backend == journal_lib.LOCAL
    assert not clone.append(_line(0))


def _append_many(args):
    directory, start = args
    journal = journal_lib.Journal(directory)
    return sum(journal.append(_line(i % 40, sample=i // 40)) for i in range(start, start + 60))


def test_concurrent_processes_never_duplicate_or_tear_lines(tmp_path):
    # Four processes append overlapping ranges of 80 keys.
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        written = pool.map(_append_many, [(str(tmp_path), s) for s in (0, 20, 40, 60)])
    raw = _raw(os.path.join(tmp_path, "examples.jsonl")).decode("utf-8")
    lines = [json.loads(row) for row in raw.splitlines()]
    keys = [records.key_of(row) for row in lines]
    assert len(keys) == len(set(keys)) == sum(written)
    assert set(keys) == {(f"ex{i % 40}", i // 40, "speculative") for i in range(120)}
    assert raw.endswith("\n")


def test_parts_backend_for_object_stores(tmp_path):
    journal = journal_lib.Journal(str(tmp_path), journal_lib.PARTS)
    assert journal.append(_line(1))
    assert journal.append(_line(0))
    assert not journal.append(_line(0, time_s=3.0))
    assert not os.path.exists(journal.path)  # Nothing appended: one object per record.
    assert journal.count_parts() == 2
    assert sorted(row["id"] for row in journal.read_lines()) == ["ex0", "ex1"]
    journal.finalize()
    assert journal.count_parts() == 0
    assert [row["id"] for row in journal.read_lines()] == ["ex0", "ex1"]
    # A resumed run adds parts; finalize keeps the existing lines first.
    assert not journal_lib.Journal(str(tmp_path), journal_lib.PARTS).append(_line(0))
    assert journal.append(_line(2))
    journal.finalize()
    assert [row["id"] for row in journal.read_lines()] == ["ex0", "ex1", "ex2"]
    assert _raw(journal.path).decode().count("\n") == 3


def test_tail_reads_complete_new_lines_only(tmp_path):
    journal = journal_lib.Journal(str(tmp_path))
    journal.append(_line(0))
    tail = journal_lib.Tail(journal)
    assert tail.new_lines() == []
    journal.append(_line(1))
    with open(journal.path, "ab") as f:
        f.write(b'{"id": "partial')
    assert [row["id"] for row in tail.new_lines()] == ["ex1"]
    assert tail.new_lines() == []
