"""examples.jsonl as a journal: each finished record is written once, as soon as it is done.

Resumability rests on three properties of this file:

1. **Only complete lines.** A record is appended as one `write` of one whole line, then
   `fdatasync`ed; a write that fails part-way (a full disk) is cut off again at once. A process killed at any point leaves the lines it finished; the only
   damage a crash *inside* a write can do is a partial last line, which the next writer or
   reader cuts off (under the lock) before doing anything else.
2. **Each key once.** Writers hold an exclusive `flock` on the file while they append. Under
   the lock a writer first reads what others appended since its last look, and skips a
   record whose key (id, sample, mode) is already there. So a bundle that Beam retries after
   a failure, or two worker processes racing on the same key, never duplicate a line; the
   first complete copy wins (all copies agree except for `time_s`).
3. **Any number of processes.** The lock is per open file description (`flock`), so it
   works between the worker processes of `--direct_running_mode multi_processing` and
   threads of one worker; each `JournalWriter` keeps its own descriptor and read offset.

A resumed run reads the journal (`read_lines`), skips the keys in it and appends the rest.

Object stores (gs://) cannot append. There the journal is a folder `examples.parts/` with one
object per record, named by a hash of its key (written whole, so never partial; a retry
overwrites the same name, so never duplicated); `finalize` at the end of the run merges
the parts into examples.jsonl (existing lines first, then new ones in key order) and
removes them. `read_lines` reads both, so a killed remote run resumes too.
"""

import contextlib
import fcntl
import hashlib
import json
import os
from typing import Callable, Dict, Iterator, List, Optional

from apache_beam.io.filesystems import FileSystems

from evals import records
from pipelines import outputs

LOCAL = "local"
PARTS = "parts"
PARTS_DIR = "examples.parts"


class JournalError(ValueError):
    """examples.jsonl is damaged beyond a partial last line."""


class JournalWriteError(OSError):
    """A record could not be appended (e.g. the disk is full); the journal is left whole."""


def backend_for(output_dir: str) -> str:
    return LOCAL if outputs.is_local(output_dir) else PARTS


class Journal:
    """The examples.jsonl journal of an output folder (picklable: paths only).

    Args:
      output_dir: the run's folder.
      backend: LOCAL (append with a lock) or PARTS (one object per record); default by path.
    """

    def __init__(self, output_dir: str, backend: Optional[str] = None):
        self.output_dir = output_dir
        self.backend = backend or backend_for(output_dir)
        if self.backend not in (LOCAL, PARTS):
            raise ValueError(f"unknown journal backend {self.backend!r}")
        self.path = outputs.join(output_dir, outputs.EXAMPLES)
        self._fd = None
        self._offset = 0
        self._keys = set()
        self._merged_keys = None

    def __getstate__(self):
        return {"output_dir": self.output_dir, "backend": self.backend}

    def __setstate__(self, state):
        self.__init__(state["output_dir"], state["backend"])

    # ---------------------------------------------------------------------------- reading

    def read_lines(self, problem_fn: Optional[Callable[[dict], Optional[str]]] = None
                   ) -> List[dict]:
        """Every record in the journal, each key once (first copy), in file order.

        Cuts off a partial last line left by a crash (local backend).

        Args:
          problem_fn: line -> why it is unusable, or None (e.g. `records.line_problem`, for
            a resumed run that reuses the lines); by default only the key is checked.

        Raises:
          JournalError: a complete line that is not a JSON record (or that problem_fn
            rejects); the message names the file and the line.
        """
        lines: Dict[records.Key, dict] = {}
        if self.backend == LOCAL:
            path = outputs.local_path(self.path)
            if os.path.exists(path):
                fd = os.open(path, os.O_RDWR)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    data = _read_from(fd, 0)
                    complete = _repair_tail(fd, data)
                    for line in _parse(data[:complete], self.path, problem_fn):
                        lines.setdefault(records.key_of(line), line)
                finally:
                    os.close(fd)  # Releases the lock.
        else:
            if outputs.exists(self.path):
                data = outputs.read_bytes(self.path)
                for line in _parse(data[:data.rfind(b"\n") + 1], self.path,
                                   problem_fn):
                    lines.setdefault(records.key_of(line), line)
            for line in self._read_parts(problem_fn):
                lines.setdefault(records.key_of(line), line)
        return list(lines.values())

    def _parts_glob(self) -> str:
        return outputs.join(outputs.join(self.output_dir, PARTS_DIR), "*.json")

    def _part_paths(self) -> List[str]:
        try:
            results = FileSystems.match([self._parts_glob()])
        except Exception:  # noqa: BLE001  No parts folder yet.
            return []
        return sorted(m.path for r in results for m in r.metadata_list)

    def _read_parts(self, problem_fn=None) -> Iterator[dict]:
        for path in self._part_paths():
            data = outputs.read_bytes(path)
            if data.endswith(b"\n"):
                yield from _parse(data, path, problem_fn)

    def count_parts(self) -> int:
        return len(self._part_paths())

    # ---------------------------------------------------------------------------- writing

    def append(self, line: dict) -> bool:
        """Adds a record unless its key is already in the journal; True if written."""
        if self.backend == PARTS:
            return self._append_part(line)
        data = records.dumps(line).encode("utf-8")
        key = records.key_of(line)
        fd = self._open()
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            self._catch_up(fd)
            if key in self._keys:
                return False
            try:
                _write_all(fd, data)
                os.fdatasync(fd)
            except OSError as e:
                # A full disk can take part of the line: cut it off again, so the journal
                # keeps whole lines only (we hold the lock, and _offset is the file's size).
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, self._offset)
                raise JournalWriteError(e.errno, f"cannot append to {self.path}: "
                                        f"{e.strerror or e}") from e
            self._offset += len(data)
            self._keys.add(key)
            return True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def _open(self) -> int:
        if self._fd is None:
            self._fd = os.open(outputs.local_path(self.path),
                               os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            self._offset = 0
            self._keys = set()
        return self._fd

    def _catch_up(self, fd: int) -> None:
        """Reads lines appended since our last look (caller holds the lock)."""
        data = _read_from(fd, self._offset)
        if not data:
            return
        complete = _repair_tail(fd, data, base=self._offset)
        for line in _parse(data[:complete], self.path):
            self._keys.add(records.key_of(line))
        self._offset += complete

    def _append_part(self, line: dict) -> bool:
        key = records.key_of(line)
        if self._merged_keys is None:  # Lines merged by an earlier run (read once).
            self._merged_keys = set()
            if outputs.exists(self.path):
                data = outputs.read_bytes(self.path)
                complete = data[:data.rfind(b"\n") + 1]
                self._merged_keys = {records.key_of(row) for row in _parse(complete, self.path)}
        if key in self._merged_keys:
            return False
        name = hashlib.sha256(json.dumps(list(key)).encode("utf-8")).hexdigest()[:40]
        path = outputs.join(outputs.join(self.output_dir, PARTS_DIR), f"{name}.json")
        if outputs.exists(path):
            return False
        if outputs.is_local(path):
            os.makedirs(os.path.dirname(outputs.local_path(path)), exist_ok=True)
        outputs.write_bytes(path, records.dumps(line).encode("utf-8"))
        return True

    def finalize(self) -> None:
        """Parts backend: merges the parts into examples.jsonl and removes them."""
        if self.backend != PARTS:
            return
        parts = self._part_paths()
        if not parts:
            return
        existing = []
        if outputs.exists(self.path):
            data = outputs.read_bytes(self.path)
            existing = list(_parse(data[:data.rfind(b"\n") + 1], self.path))
        seen = {records.key_of(line) for line in existing}
        new = {}
        for line in self._read_parts():
            key = records.key_of(line)
            if key not in seen:
                new.setdefault(key, line)
        merged = existing + [new[key] for key in sorted(new)]
        outputs.write_bytes(self.path, "".join(records.dumps(row) for row in merged)
                            .encode("utf-8"))
        FileSystems.delete(parts)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class Tail:
    """Reads lines appended to a local journal since it was created (no lock; progress)."""

    def __init__(self, journal: Journal):
        self._path = outputs.local_path(journal.path)
        self._offset = os.path.getsize(self._path) if os.path.exists(self._path) else 0

    def new_lines(self) -> List[dict]:
        if not os.path.exists(self._path):
            return []
        with open(self._path, "rb") as f:
            f.seek(self._offset)
            data = f.read()
        complete = data.rfind(b"\n") + 1
        self._offset += complete
        out = []
        for raw in data[:complete].splitlines():
            try:
                out.append(json.loads(raw))
            except ValueError:
                continue
        return out


def _read_from(fd: int, offset: int) -> bytes:
    chunks = []
    while True:
        chunk = os.pread(fd, 1 << 20, offset)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        offset += len(chunk)


def _repair_tail(fd: int, data: bytes, base: int = 0) -> int:
    """Cuts a partial last line (a crashed writer's) off the file; returns the complete size.

    The caller holds the lock, so no live writer is in the middle of a line.
    """
    complete = data.rfind(b"\n") + 1
    if complete < len(data):
        os.ftruncate(fd, base + complete)
    return complete


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _parse(data: bytes, source: str, problem_fn=None) -> Iterator[dict]:
    """The JSON records of `data`; each needs its key, and to pass `problem_fn` if given."""
    for number, raw in enumerate(data.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
            records.key_of(line)
        except (ValueError, KeyError, TypeError):
            raise JournalError(f"{source} line {number} is not a complete record; remove "
                               f"that line (and any after it) to resume") from None
        problem = problem_fn(line) if problem_fn is not None else None
        if problem:
            raise JournalError(f"{source} line {number} is not a complete record ({problem}); "
                               f"remove that line to resume (its record is then generated "
                               f"again)")
        yield line
