"""A progress bar that follows the journal while the pipeline runs.

Beam runners do not report elements to the driver while they run, but every finished record
is appended to examples.jsonl at once (`pipelines.journal`), whichever process made it. A
driver thread reads the new lines every `interval_s` and shows, on stderr (tqdm):

    examples:  40%|████      | 52/130 [00:31<00:47, 1.6rec/s, tok/s=812, accept=0.71]

records done (one per (example, sample, mode)) out of the records this invocation has to
produce; decoding throughput (tokens generated per second spent in timed generate calls,
all modes together); and the running acceptance rate (accepted / drafted over the
speculative records so far). For an object-store journal (gs://) only the count of
finished records is shown. The draft cost measurement runs after or between records and
is not shown.
"""

import threading
from typing import Optional

from pipelines import journal as journal_lib


class JournalProgress:
    """Context manager: a tqdm bar fed by a journal-following thread.

    Args:
      journal: the run's journal.
      total: records this invocation will produce.
      enabled: False for no bar.
      interval_s: polling period.
    """

    def __init__(self, journal: journal_lib.Journal, total: int, enabled: bool = True,
                 interval_s: float = 0.5):
        self._journal = journal
        self._total = total
        self._enabled = enabled and total > 0
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._bar = None
        self._tail = None
        self._tokens = 0
        self._seconds = 0.0
        self._accepted = 0
        self._drafted = 0
        self._done = 0
        self._parts_at_start = 0

    def __enter__(self):
        if not self._enabled:
            return self
        import tqdm  # pylint: disable=import-outside-toplevel
        self._bar = tqdm.tqdm(total=self._total, desc="examples", unit="rec", mininterval=0.5,
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

    def poll(self) -> None:
        """Reads new records and updates the bar."""
        if self._bar is None:
            return
        try:
            if self._tail is not None:
                lines = self._tail.new_lines()
                for line in lines:
                    if line.get("time_s") is not None:
                        self._tokens += int(line.get("num_tokens") or 0)
                        self._seconds += float(line["time_s"]) / max(
                            1, int(line.get("batch_size") or 1))
                    if line.get("k"):
                        self._accepted += int(line.get("accepted") or 0)
                        self._drafted += int(line.get("drafted") or 0)
                done = self._done + len(lines)
            else:
                done = max(self._done, self._journal.count_parts() - self._parts_at_start)
        except (OSError, ValueError):
            return
        postfix = {}
        if self._tail is not None:
            postfix["tok/s"] = f"{self._tokens / self._seconds:.0f}" if self._seconds else "-"
            postfix["accept"] = (f"{self._accepted / self._drafted:.2f}" if self._drafted
                                 else "-")
        self._bar.set_postfix(postfix, refresh=False)
        self._bar.update(min(done, self._total) - min(self._done, self._total))
        self._done = done

    def __exit__(self, *exc):
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self.poll()
        if self._bar is not None:
            self._bar.close()
        return False
