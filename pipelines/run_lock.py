"""One run per output folder: an exclusive lock held for the life of a run.

    check(output_dir)                 # RunLockedError if a live run holds the folder
    with hold(output_dir):            # RunLockedError, or the lock until the block ends
        ...run...

The lock is an `flock` on `OUTPUT_DIR/.run.lock`, so it works between processes (and, on
NFSv4, between machines). The kernel releases an `flock` when the last descriptor of its
holder closes, however the holder ends (kill -9 included): a lock file that a killed run
left behind is stale by construction, and the next run simply takes it over. The file holds
the holder's pid, host and start time (JSON) for the message a second run prints.

The descriptor is close-on-exec, so programs the run starts (sandboxes, Beam's worker
processes) do not keep the folder locked after the run ends.

Object stores (gs://) have no locks: remote folders are not locked (the journal's parts
backend keeps each key once there anyway).
"""

import contextlib
import datetime
import errno
import fcntl
import json
import os
import socket
from typing import Iterator, Optional

from pipelines import outputs

LOCK_FILE = ".run.lock"


class RunLockedError(OSError):
    """Another live run holds the output folder (the message names it)."""


def lock_path(output_dir: str) -> str:
    return os.path.join(outputs.local_path(output_dir), LOCK_FILE)


def check(output_dir: str) -> None:
    """Raises RunLockedError if a live run holds `output_dir`; writes nothing."""
    if not outputs.is_local(output_dir):
        return
    path = lock_path(output_dir)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return  # No lock file (or an unreadable one: `hold` reports it).
    try:
        if not _try_lock(fd, fcntl.LOCK_SH):
            raise RunLockedError(errno.EBUSY, _locked_message(output_dir, fd))
    finally:
        os.close(fd)  # Releases the shared probe lock, if taken.


@contextlib.contextmanager
def hold(output_dir: str) -> Iterator[Optional[str]]:
    """Holds the exclusive lock of `output_dir` (a local folder that exists) for the block.

    Yields the lock file's path (None for object stores, which are not locked).

    Raises:
      RunLockedError: another live run holds the folder.
      OSError: the lock file cannot be created (e.g. a full disk).
    """
    if not outputs.is_local(output_dir):
        yield None
        return
    path = lock_path(output_dir)
    fd = _acquire(output_dir, path)
    try:
        _write_holder(fd)
        yield path
    finally:
        # Unlink before unlocking: a run that opens the path afterwards creates a new file;
        # one that opened the old file in between sees it unlinked and retries (_acquire).
        with contextlib.suppress(OSError):
            os.unlink(path)
        os.close(fd)


def _acquire(output_dir: str, path: str) -> int:
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        if not _try_lock(fd, fcntl.LOCK_EX):
            message = _locked_message(output_dir, fd)
            os.close(fd)
            raise RunLockedError(errno.EBUSY, message)
        # The holder we waited on may have unlinked the file we locked: lock the new one.
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)


def _try_lock(fd: int, kind: int) -> bool:
    try:
        fcntl.flock(fd, kind | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def _write_holder(fd: int) -> None:
    holder = {"pid": os.getpid(), "host": socket.gethostname(),
              "started_at": datetime.datetime.now(datetime.timezone.utc)
              .strftime("%Y-%m-%dT%H:%M:%SZ")}
    data = (json.dumps(holder) + "\n").encode("utf-8")
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


def holder(fd: int) -> dict:
    """The holder recorded in an open lock file ({} if unreadable or not yet written)."""
    try:
        value = json.loads(os.pread(fd, 4096, 0).decode("utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _locked_message(output_dir: str, fd: int) -> str:
    who = holder(fd)
    if who:
        name = f"pid {who.get('pid')} on {who.get('host')}, started {who.get('started_at')}"
        if who.get("host") == socket.gethostname() and not _alive(who.get("pid")):
            name += ("; that process has ended but a process it started still holds "
                     "the lock")
    else:
        name = "a run that is just starting"
    return (f"--output_dir {output_dir} is in use by another run ({name}); wait for it to "
            f"finish or choose another --output_dir")


def _alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except (TypeError, ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True
