"""The progress display of a run: what is happening now, and how many examples are done.

Beam runners do not report elements to the driver while they run, so the display is fed by
two files the workers write as they go:

* every finished record is appended to examples.jsonl at once (`pipelines.journal`),
  whichever process made it; a driver thread reads the new lines every `interval_s`;
* the current phase: workers call `pipelines.status.report_phase("...")`, which writes
  one line of text to the status file named by the environment variable TFSPEC_STATUS_FILE
  (set by the driver for the runner's local worker processes; a no-op where it is unset,
  e.g. on remote workers).

On stderr (tqdm) it shows:

    decoding:  40%|████   | 66/164 [00:31<00:47, 2.1ex/s, AR 66/164 · k=4 67/164, tok/s=812]

the phase as the bar's label (starting the pipeline, loading models, compiling k=4 batch 1
prompt bucket 384 (untimed warm-up call), decoding, scoring in the sandbox, measuring the
draft cost, writing outputs); examples done out of the examples this invocation works on,
counted like the run's header ("164 examples x 1 samples"): an example is done when all
its samples and modes are; then per mode the records done ("AR" the autoregressive
baseline, "k=K" a speculative mode); decoding throughput (tokens per second spent in timed
generate calls, all modes together); and the running acceptance rate of the speculative
records. For an object-store journal (gs://) only the count of finished records is known.

`transient(text)` shows a one-line status while the driver itself works (loading models
before the pipeline starts), on a terminal only, and erases it afterwards.
"""

import collections
import contextlib
import os
import sys
import tempfile
import threading
from typing import Dict, Iterable, Optional, Sequence, Tuple

from evals import records
from pipelines import journal as journal_lib
from pipelines.status import STATUS_ENV

AUTOREGRESSIVE_LABEL = "AR"


def mode_label(mode: str, k: Optional[int]) -> str:
    """Short label of a mode: "AR" for k = 0, "k=K" for a speculative mode."""
    if not k:
        return AUTOREGRESSIVE_LABEL if mode != "completions" else "scored"
    return f"k={k}"


@contextlib.contextmanager
def transient(text: str, stream=None):
    """Shows `text...` on a terminal while the block runs, then erases it."""
    stream = stream or sys.stderr
    shown = hasattr(stream, "isatty") and stream.isatty()
    if shown:
        stream.write(f"{text}...")
        stream.flush()
    try:
        yield
    finally:
        if shown:
            stream.write("\r" + " " * (len(text) + 3) + "\r")
            stream.flush()


class JournalProgress:
    """Context manager: a tqdm bar fed by the journal and the workers' phase reports.

    Args:
      journal: the run's journal.
      expected: records this invocation will produce per example id, as
        {id: [(sample, mode, k), ...]}; the bar counts the examples, the postfix the
        records of each mode.
      enabled: False for no display.
      interval_s: polling period.
    """

    def __init__(self, journal: journal_lib.Journal,
                 expected: Dict[str, Sequence[Tuple[int, str, Optional[int]]]],
                 enabled: bool = True, interval_s: float = 0.5):
        self._journal = journal
        self._remaining = {i: {(s, m) for s, m, _ in keys} for i, keys in expected.items()
                           if keys}
        self._total_records = sum(len(keys) for keys in self._remaining.values())
        self._total = len(self._remaining)
        labels = {m: mode_label(m, k) for keys in expected.values() for _, m, k in keys}
        self._ks = {m: k for keys in expected.values() for _, m, k in keys}
        self._mode_total = collections.Counter(m for keys in expected.values()
                                               for _, m, _ in keys)
        self._mode_done = collections.Counter()
        self._labels = dict(sorted(labels.items(),
                                   key=lambda kv: records.k_order(self._ks[kv[0]] or 0)))
        self._enabled = enabled and self._total > 0
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._bar = None
        self._tail = None
        self._status_dir = None
        self._saved_env = None
        self._phase = "starting the pipeline"
        self._tokens = 0
        self._seconds = 0.0
        self._accepted = 0
        self._drafted = 0
        self._done = 0
        self._records = 0
        self._parts_at_start = 0

    @classmethod
    def for_work(cls, journal: journal_lib.Journal, keys: Iterable[Tuple[str, int, str, int]],
                 **kwargs) -> "JournalProgress":
        """From the (id, sample, mode, k) keys still to produce."""
        expected = collections.defaultdict(list)
        for example_id, sample, mode, k in keys:
            expected[str(example_id)].append((int(sample), str(mode), k))
        return cls(journal, dict(expected), **kwargs)

    @property
    def status_path(self) -> Optional[str]:
        return None if self._status_dir is None else os.path.join(self._status_dir, "phase")

    def __enter__(self):
        if not self._enabled:
            return self
        import tqdm  # pylint: disable=import-outside-toplevel
        self._status_dir = tempfile.mkdtemp(prefix="tfspec-status-")
        self._saved_env = os.environ.get(STATUS_ENV)
        os.environ[STATUS_ENV] = self.status_path
        self._bar = tqdm.tqdm(total=self._total, desc=self._phase, unit="ex", mininterval=0.5,
                              dynamic_ncols=True)
        if self._journal.backend == journal_lib.LOCAL:
            self._tail = journal_lib.Tail(self._journal)
        else:
            self._parts_at_start = self._journal.count_parts()
        self._thread = threading.Thread(target=self._loop, name="journal-progress",
                                        daemon=True)
        self._thread.start()
        return self

    def _loop(self):
        while not self._stop.wait(self._interval_s):
            self.poll()

    def _read_phase(self) -> None:
        try:
            with open(self.status_path, encoding="utf-8") as f:
                text = f.read().strip()
        except OSError:
            return
        if text:
            self._phase = text

    def poll(self) -> None:
        """Reads the phase and the new records, and updates the display."""
        if self._bar is None:
            return
        self._read_phase()
        try:
            if self._tail is not None:
                for line in self._tail.new_lines():
                    self._count(line)
                done = self._total - len(self._remaining)
            else:
                self._records = self._journal.count_parts() - self._parts_at_start
                done = 0
        except (OSError, ValueError):
            return
        self._bar.set_description_str(self._phase, refresh=False)
        self._bar.set_postfix_str(self._postfix(), refresh=False)
        self._bar.update(min(done, self._total) - min(self._done, self._total))
        self._done = done
        self._bar.refresh()

    def _count(self, line: dict) -> None:
        keys = self._remaining.get(str(line.get("id")))
        key = (int(line.get("sample") or 0), str(line.get("mode")))
        if keys is None or key not in keys:
            return  # A record of another invocation (or written before this one started).
        keys.discard(key)
        if not keys:
            del self._remaining[str(line.get("id"))]
        self._records += 1
        self._mode_done[key[1]] += 1
        if line.get("time_s") is not None:
            self._tokens += int(line.get("num_tokens") or 0)
            self._seconds += float(line["time_s"]) / max(1, int(line.get("batch_size") or 1))
        if line.get("k"):
            self._accepted += int(line.get("accepted") or 0)
            self._drafted += int(line.get("drafted") or 0)

    def _postfix(self) -> str:
        if self._tail is None:
            return f"records {self._records}/{self._total_records}"
        parts = [" · ".join(f"{label} {self._mode_done[mode]}/{self._mode_total[mode]}"
                            for mode, label in self._labels.items())]
        if self._seconds:
            parts.append(f"tok/s={self._tokens / self._seconds:.0f}")
        if self._drafted:
            parts.append(f"accept={self._accepted / self._drafted:.2f}")
        return ", ".join(parts)

    def __exit__(self, *exc):
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self.poll()
        if self._bar is not None:
            self._bar.close()
        if self._status_dir is not None:
            if self._saved_env is None:
                os.environ.pop(STATUS_ENV, None)
            else:
                os.environ[STATUS_ENV] = self._saved_env
            for name in os.listdir(self._status_dir):
                os.remove(os.path.join(self._status_dir, name))
            os.rmdir(self._status_dir)
        return False
