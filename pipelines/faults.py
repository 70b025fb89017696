"""How a run ends when something outside it stops it: a signal or a full disk.

    with faults.guard(output_dir):
        evaluation.run(...)

Inside the block, SIGINT (Ctrl-C) and SIGTERM raise KeyboardInterrupt in the main thread.
Beam catches exceptions raised inside a pipeline and re-raises them wrapped (a
KeyboardInterrupt in a DoFn surfaces as a RuntimeError), so the guard remembers which
signal arrived and, whatever exception leaves the block after it, raises `Interrupted`
instead (a KeyboardInterrupt whose `exit_code` is 128 + the signal number: 130 for Ctrl-C,
143 for SIGTERM). A second Ctrl-C while Beam unwinds is ignored: the first one already
decided how the run ends.

While the block runs, the copies of a failed bundle's traceback that Beam logs are dropped
(the exception itself still leaves the block, translated or whole).

An exception whose cause, anywhere in its chain or in the text Beam made of it, is a full
disk or quota (ENOSPC, EDQUOT) becomes `OutputFullError`, one line naming the folder. The
journal keeps whole lines only (`pipelines.journal`), and summary files are replaced
atomically, so the folder stays resumable, on this disk once there is room or elsewhere.
"""

import contextlib
import errno
import logging
import os
import signal
import threading
from typing import Iterator, Optional

FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
SIGNALS = (signal.SIGINT, signal.SIGTERM)
# Loggers whose error records repeat an exception that leaves the pipeline anyway.
BEAM_LOGGERS = ("apache_beam.runners.common", "apache_beam.runners.worker.sdk_worker",
                "apache_beam.runners.portability.fn_api_runner.fn_runner")


class Interrupted(KeyboardInterrupt):
    """The run was stopped by a signal; finished records are kept in the folder."""

    def __init__(self, signum: int, output_dir: str):
        self.signum = signum
        self.exit_code = 128 + signum
        self.output_dir = output_dir
        super().__init__(f"{signal.Signals(signum).name}: stopped; finished records are in "
                         f"{output_dir}; continue with --output_dir {output_dir} --resume")


class OutputFullError(OSError):
    """The output folder's disk (or quota) is full; the message says how to continue."""


def full_disk_errno(error: BaseException) -> Optional[int]:
    """ENOSPC/EDQUOT if `error` or anything it was raised from is a full disk, else None.

    Beam re-raises a worker's exception as a new one carrying the original's text, so the
    text is searched too ("[Errno 28] ...").
    """
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in FULL_ERRNOS:
            return error.errno
        text = str(error)
        for number in FULL_ERRNOS:
            if f"[Errno {number}]" in text or os.strerror(number) in text:
                return number
        error = error.__cause__ or error.__context__
    return None


def full_disk_error(output_dir: str, number: int) -> OutputFullError:
    return OutputFullError(
        number, f"{os.strerror(number).lower()} while writing to {output_dir}; its finished "
                f"records are kept: free space (or copy the folder to another disk) and "
                f"continue with --output_dir {output_dir} --resume")


@contextlib.contextmanager
def guard(output_dir: str) -> Iterator[None]:
    """Turns signals and full disks inside the block into `Interrupted`/`OutputFullError`.

    Signal handlers can only be installed from the main thread; elsewhere only the disk
    errors are translated.
    """
    received = []

    def on_signal(signum, unused_frame):
        if received:
            return  # Already stopping: let Beam unwind.
        received.append(signum)
        beam_errors.stopping = True  # The caller prints one line instead.
        raise KeyboardInterrupt

    main = threading.current_thread() is threading.main_thread()
    previous = {}
    beam_errors = _BeamErrorFilter()
    beam_loggers = [logging.getLogger(name) for name in BEAM_LOGGERS]
    for logger in beam_loggers:
        logger.addFilter(beam_errors)
    if main:
        for signum in SIGNALS:
            previous[signum] = signal.signal(signum, on_signal)
    try:
        yield
    except BaseException as e:  # noqa: BLE001  Translated or re-raised below.
        if received:
            raise Interrupted(received[0], output_dir) from None
        number = full_disk_errno(e)
        if number is not None:
            raise full_disk_error(output_dir, number) from None
        raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for logger in beam_loggers:
            logger.removeFilter(beam_errors)
    if received:  # A signal that arrived as the pipeline was finishing anyway.
        raise Interrupted(received[0], output_dir)


class _BeamErrorFilter(logging.Filter):
    """Drops Beam's logged copies of an exception it then raises.

    When a DoFn raises, Beam logs the exception with its whole traceback and then raises
    it (the in-process runner does not retry); what leaves `guard` is either translated to
    one line (signal, full disk) or re-raised with its traceback intact, so the logged copy
    only buries the message. After a signal, every Beam error record is dropped: they all
    describe the interrupt.
    """

    def __init__(self):
        super().__init__()
        self.stopping = False

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR:
            return True
        return not (self.stopping or record.exc_info)
