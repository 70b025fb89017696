"""Tests for pipelines.faults: signals and full disks end a run with one line."""

import errno
import logging
import os
import signal
import time

import pytest

from pipelines import faults


@pytest.mark.parametrize("error, expected", [
    (OSError(errno.ENOSPC, "No space left on device"), errno.ENOSPC),
    (OSError(errno.EDQUOT, "Disk quota exceeded"), errno.EDQUOT),
    # How Beam re-raises a worker's error: a new exception carrying the text.
    (RuntimeError("JournalWriteError: [Errno 28] cannot append [while running 'X']"),
     errno.ENOSPC),
    (OSError(errno.EACCES, "Permission denied"), None),
    (ValueError("bad value"), None),
])
def test_full_disk_errno(error, expected):
    assert faults.full_disk_errno(error) == expected


def test_full_disk_errno_follows_the_cause_chain():
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as cause:
            raise RuntimeError("wrapped") from cause
    except RuntimeError as e:
        assert faults.full_disk_errno(e) == errno.ENOSPC


def test_full_disk_inside_the_guard_is_one_line_naming_the_folder():
    with pytest.raises(faults.OutputFullError) as error:
        with faults.guard("/data/run"):
            raise RuntimeError("[Errno 28] No space left on device [while running 'W']")
    message = error.value.strerror
    assert message.startswith("no space left on device while writing to /data/run; ")
    assert message.endswith("continue with --output_dir /data/run --resume")
    assert "\n" not in message


def test_other_errors_leave_the_guard_unchanged():
    with pytest.raises(ValueError, match="unrelated"):
        with faults.guard("/data/run"):
            raise ValueError("unrelated")


@pytest.mark.parametrize("signum, exit_code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_ends_the_block_as_interrupted_even_when_beam_rewraps_it(signum, exit_code):
    before = signal.getsignal(signum)
    with pytest.raises(faults.Interrupted) as error:
        with faults.guard("/data/run"):
            try:
                os.kill(os.getpid(), signum)
                time.sleep(5)  # The handler raises KeyboardInterrupt here.
            except KeyboardInterrupt as e:
                # What Beam does with an exception raised inside a DoFn.
                raise RuntimeError("KeyboardInterrupt [while running 'Generate']") from e
    assert error.value.exit_code == exit_code
    assert isinstance(error.value, KeyboardInterrupt)
    assert "continue with --output_dir /data/run --resume" in str(error.value)
    assert signal.getsignal(signum) is before  # Handlers restored.


def test_beams_logged_copy_of_a_raised_exception_is_dropped_only_inside_the_guard(caplog):
    logger = logging.getLogger("apache_beam.runners.common")

    def log_error():
        try:
            raise ValueError("boom")
        except ValueError:
            logger.exception("boom")

    with caplog.at_level(logging.INFO, logger="apache_beam.runners.common"):
        with faults.guard("/data/run"):
            log_error()
            logger.warning("a warning")
        log_error()
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", "a warning"), ("ERROR", "boom")]
