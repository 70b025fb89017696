"""Tests for pipelines.progress: the bar follows the journal."""

import io

import tqdm

from pipelines import journal as journal_lib
from pipelines import progress


def _line(i, k, accepted, drafted):
    return {"id": f"e{i}", "sample": 0, "mode": "speculative" if k else "autoregressive",
            "num_tokens": 10, "time_s": 0.5, "batch_size": 1, "k": k, "accepted": accepted,
            "drafted": drafted}


def test_counts_tokens_per_second_and_acceptance(tmp_path, monkeypatch):
    stream = io.StringIO()
    original = tqdm.tqdm
    monkeypatch.setattr(tqdm, "tqdm", lambda **kw: original(file=stream, **kw))
    journal = journal_lib.Journal(str(tmp_path))
    journal.append(_line(0, 0, 0, 0))  # Written before the run: not counted.
    bar = progress.JournalProgress(journal, total=3, interval_s=60)
    with bar:
        journal.append(_line(1, 0, 0, 0))
        journal.append(_line(2, 4, 3, 4))
        bar.poll()
        assert bar._done == 2  # pylint: disable=protected-access
    text = stream.getvalue()
    assert "2/3" in text and "tok/s=20" in text and "accept=0.75" in text


def test_disabled_or_nothing_to_do_shows_nothing(tmp_path):
    journal = journal_lib.Journal(str(tmp_path))
    with progress.JournalProgress(journal, total=0) as bar:
        bar.poll()
    with progress.JournalProgress(journal, total=5, enabled=False) as bar:
        bar.poll()
