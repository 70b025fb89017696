"""Tests for evals.orchestration.progress (and pipelines.status): phases, examples counted like the header, modes apart."""

import io
import os

import pytest
import tqdm

from pipelines import journal as journal_lib
from evals.orchestration import progress
from pipelines import status


def _line(i, k, accepted=0, drafted=0, sample=0):
    return {"id": f"e{i}", "sample": sample, "mode": "speculative" if k else "autoregressive",
            "num_tokens": 10, "time_s": 0.5, "batch_size": 1, "k": k, "accepted": accepted,
            "drafted": drafted}


def _keys(num_examples, num_samples=1, ks=(0, 4)):
    return [(f"e{i}", s, "speculative" if k else "autoregressive", k)
            for i in range(num_examples) for s in range(num_samples) for k in ks]


@pytest.fixture
def captured(monkeypatch):
    stream = io.StringIO()
    original = tqdm.tqdm
    monkeypatch.setattr(tqdm, "tqdm", lambda **kw: original(file=stream, **kw))
    return stream


def test_counts_examples_like_the_header_and_each_mode_apart(tmp_path, captured):
    journal = journal_lib.Journal(str(tmp_path))
    journal.append(_line(9, 0))  # Written before this invocation: not counted.
    bar = progress.JournalProgress.for_work(journal, _keys(3), interval_s=60)
    with bar:
        journal.append(_line(0, 0))
        journal.append(_line(0, 4, 3, 4))  # e0 complete: both modes.
        journal.append(_line(1, 0))        # e1 half done: not an example yet.
        bar.poll()
        text = captured.getvalue()
        assert "1/3" in text  # Examples, as the header counts them (not 3/6 records).
        assert "AR 2/3 · k=4 1/3" in text
        assert "tok/s=20" in text and "accept=0.75" in text
    assert "ex" in captured.getvalue()


@pytest.mark.parametrize("num_samples", [1, 3])
def test_an_example_is_done_when_all_its_samples_are(tmp_path, captured, num_samples):
    journal = journal_lib.Journal(str(tmp_path))
    bar = progress.JournalProgress.for_work(journal, _keys(2, num_samples, ks=(0,)),
                                            interval_s=60)
    with bar:
        for sample in range(num_samples - 1):
            journal.append(_line(0, 0, sample=sample))
        bar.poll()
        assert "0/2" in captured.getvalue()
        journal.append(_line(0, 0, sample=num_samples - 1))
        bar.poll()
        assert "1/2" in captured.getvalue()


@pytest.mark.parametrize("phase", [
    "loading models", "compiling k=4, batch 1, prompt bucket 384 (untimed warm-up call)",
    "decoding", "scoring in the sandbox", "writing outputs"])
def test_the_label_is_the_phase_the_workers_report(tmp_path, captured, phase):
    journal = journal_lib.Journal(str(tmp_path))
    bar = progress.JournalProgress.for_work(journal, _keys(1), interval_s=60)
    with bar:
        assert os.environ[status.STATUS_ENV] == bar.status_path
        bar.poll()
        assert "starting the pipeline" in captured.getvalue()
        status.report_phase(phase)  # What a worker process calls.
        bar.poll()
        assert phase in captured.getvalue()
        status_dir = os.path.dirname(bar.status_path)
    assert status.STATUS_ENV not in os.environ and not os.path.exists(status_dir)
    status.report_phase("after the run")  # No display: a no-op, no error.


def test_disabled_or_nothing_to_do_shows_nothing(tmp_path, captured):
    journal = journal_lib.Journal(str(tmp_path))
    with progress.JournalProgress.for_work(journal, []) as bar:
        bar.poll()
    with progress.JournalProgress.for_work(journal, _keys(2), enabled=False) as bar:
        bar.poll()
    assert captured.getvalue() == "" and status.STATUS_ENV not in os.environ


@pytest.mark.parametrize("mode,k,label", [("autoregressive", 0, "AR"), ("speculative", 4, "k=4"),
                                          ("speculative_k2", 2, "k=2"),
                                          ("completions", None, "scored")])
def test_mode_labels(mode, k, label):
    assert progress.mode_label(mode, k) == label


def test_transient_status_only_on_a_terminal():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    piped, terminal = io.StringIO(), Terminal()
    with progress.transient("loading models", piped):
        pass
    with progress.transient("loading models", terminal):
        assert terminal.getvalue() == "loading models..."
    assert piped.getvalue() == "" and terminal.getvalue().endswith("\r")
