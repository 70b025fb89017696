"""Tests for pipelines.run_lock: one run per output folder, across processes."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from pipelines import run_lock

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_HOLD = """
import sys, time
from pipelines import run_lock
with run_lock.hold(sys.argv[1]):
    print("held", flush=True)
    time.sleep(600)
"""


def _holder_process(folder):
    proc = subprocess.Popen([sys.executable, "-c", _HOLD, str(folder)],
                            stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=REPO))
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_second_run_fails_at_once_naming_the_holder(tmp_path):
    proc = _holder_process(tmp_path)
    try:
        start = time.monotonic()
        for attempt in (run_lock.check, lambda d: run_lock.hold(d).__enter__()):
            with pytest.raises(run_lock.RunLockedError) as error:
                attempt(str(tmp_path))
            message = error.value.strerror
            assert f"is in use by another run (pid {proc.pid} on {socket.gethostname()}, " \
                   f"started 20" in message
            assert "\n" not in message
        assert time.monotonic() - start < 5
    finally:
        proc.kill()
        proc.wait()


def test_stale_lock_of_a_killed_run_is_taken_over(tmp_path):
    proc = _holder_process(tmp_path)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    path = tmp_path / run_lock.LOCK_FILE
    assert json.loads(path.read_text())["pid"] == proc.pid  # Left behind by kill -9.
    run_lock.check(str(tmp_path))
    with run_lock.hold(str(tmp_path)) as held:
        assert held == str(path)
        assert json.loads(path.read_text())["pid"] == os.getpid()
    assert not path.exists()  # Released and removed at the end of the run.


def test_the_same_process_cannot_hold_a_folder_twice_and_can_hold_it_again_later(tmp_path):
    with run_lock.hold(str(tmp_path)):
        with pytest.raises(run_lock.RunLockedError, match=f"pid {os.getpid()} "):
            with run_lock.hold(str(tmp_path)):
                pass
    with run_lock.hold(str(tmp_path)):
        pass


def test_object_store_folders_are_not_locked():
    run_lock.check("gs://bucket/run")
    with run_lock.hold("gs://bucket/run") as held:
        assert held is None
