"""The trusted checker: runs the task's tests against the candidate over pipes.

The checker is the main process of `python -I evals/_sandbox_child RESULT_FD TAG`, run by
`evals.sandbox` as the evaluator's user. It reads the job from stdin in two frames: the
untrusted part first (prompt, completion, entry point, limits), then, only after the
init process (see `candidate`) has been forked, the test code and the nonce. So neither
the tests nor the nonce are ever in the candidate's memory. It runs the task's test code
(`check(candidate)`) itself, with `candidate` a proxy that forwards each call to the
candidate process over two pipes. Return values come back as plain data (see `codec`),
so the test compares plain values the checker built: no object of the candidate's (an
`__eq__` that always says True, a patched builtin) can reach the comparison. At the end
it writes `nonce + "\\n" + verdict JSON` to RESULT_FD, a pipe the evaluator opened and no
other process holds.

Its own memory is bounded twice: a reply of the candidate is refused above
`codec.MAX_RESPONSE_BYTES` before it is decoded, and RLIMIT_AS caps the whole process
(a MemoryError is the check's failure, not the checker's crash).
"""

import builtins
import json
import os
import resource
import signal
import time
import traceback

from . import candidate
from . import codec
from . import isolation

class _Abort(BaseException):
    """Ends a check whatever the test code catches; carries the verdict text."""

    def __init__(self, result):
        super().__init__(result)
        self.result = result


class CandidateError(Exception):
    """An exception raised in the candidate whose type is not a builtin one."""


class _Remote:
    """The candidate function as the test sees it: calls go to the candidate process."""

    def __init__(self, checker):
        self._checker = checker

    def __call__(self, *args, **kwargs):
        return self._checker.call(args, kwargs)


class _Checker:
    """Talks to the candidate process; all failures of the channel are sticky."""

    def __init__(self, req_w, resp_r, init_pid, deadline):
        self.req_w = req_w
        self.resp_r = resp_r
        self.init_pid = init_pid
        self.deadline = deadline
        self.failure = None
        self.isolation = {}

    def fail(self, result):
        if self.failure is None:
            self.failure = result
        raise _Abort(self.failure)

    def receive(self):
        try:
            frame = codec.read_frame(self.resp_r, self.deadline,
                                     codec.MAX_RESPONSE_BYTES)
        except TimeoutError:
            self.fail("timed out")
        except codec.ProtocolError as e:
            self.fail(f"failed: sandbox protocol error: {e}")
        if frame is None:
            self.fail(self.exit_reason())
        if type(frame) is not dict:
            self.fail("failed: sandbox protocol error: malformed frame")
        return frame

    def exit_reason(self):
        """Verdict text for a candidate process that went away."""
        status = None
        end = time.monotonic() + 2.0
        while time.monotonic() < end:
            pid, st = os.waitpid(self.init_pid, os.WNOHANG)
            if pid:
                status = st
                self.init_pid = None
                break
            time.sleep(0.005)
        if status is None or not os.WIFEXITED(status):
            return "failed: candidate process exited"
        code = os.WEXITSTATUS(status)
        if code > 128:
            signum = code - 128
            if signum == signal.SIGXCPU:
                return "timed out"
            try:
                name = signal.Signals(signum).name
            except ValueError:
                name = str(signum)
            return f"failed: candidate process killed by {name}"
        return f"failed: candidate process exited with code {code}"

    def handshake(self):
        try:
            frame = self.receive()
        except _Abort as e:  # Nothing untrusted has run yet: this is the sandbox's fault.
            if e.result == "timed out":
                raise
            self.failure = None
            self.fail(f"failed: sandbox error before the candidate ran ({e.result})")
        if "isolation" not in frame:
            self.fail("failed: sandbox protocol error: no isolation report")
        self.isolation = frame["isolation"]
        frame = self.receive()
        if frame.get("ready") is True:
            return
        self.raise_remote(frame)
        self.fail("failed: sandbox protocol error: unexpected frame")

    def call(self, args, kwargs):
        if self.failure is not None:
            raise _Abort(self.failure)
        try:
            codec.write_frame(self.req_w, {"args": codec.encode(list(args)),
                                           "kwargs": codec.encode(dict(kwargs))})
        except (BrokenPipeError, codec.ProtocolError, OSError):
            self.fail(self.exit_reason())
        frame = self.receive()
        if "ok" in frame and len(frame) == 1:
            try:
                return codec.decode(frame["ok"])
            except codec.ProtocolError as e:
                self.fail(f"failed: sandbox protocol error: {e}")
            except MemoryError:
                self.fail("failed: sandbox protocol error: reply too large to decode")
        self.raise_remote(frame)
        self.fail("failed: sandbox protocol error: unexpected frame")

    def raise_remote(self, frame):
        """Raises the exception the candidate reported in `frame`, if it is one."""
        exc = frame.get("exc")
        if not (isinstance(exc, list) and len(exc) == 3):
            return
        name, message, fatal = str(exc[0])[:100], str(exc[1])[:codec.MAX_MESSAGE_CHARS], exc[2]
        if fatal is not False:
            self.fail(_format_failure(name, message))
        cls = getattr(builtins, name, None)
        if isinstance(cls, type) and issubclass(cls, Exception):
            try:
                error = cls(message) if message else cls()
            except Exception:  # noqa: BLE001 (e.g. UnicodeDecodeError's 5 arguments)
                error = CandidateError(_format_failure(name, message)[len("failed: "):])
        else:
            safe = "".join(ch for ch in name if ch.isalnum() or ch == "_") or "Error"
            if not safe[0].isalpha():
                safe = "E" + safe
            error = type(safe, (CandidateError,), {})(message)
        raise error


def _format_failure(name, message):
    return f"failed: {name}: {message}" if message else f"failed: {name}"


def _stub_module(prompt):
    """The prompt made executable: a body for its last, unfinished function."""
    for source in (prompt + "    pass\n", prompt.rstrip("\n") + "\n    pass\n", prompt):
        try:
            return compile(source, "<prompt>", "exec")
        except SyntaxError:
            continue
    return None


def _run_tests(checker, job, test):
    """Runs the task's test code against the remote candidate; returns the verdict text."""
    remote = _Remote(checker)

    def on_alarm(signum, frame):
        raise _Abort("timed out")

    signal.signal(signal.SIGALRM, on_alarm)
    remaining = checker.deadline - time.monotonic()
    if remaining <= 0:
        return "timed out"
    signal.setitimer(signal.ITIMER_REAL, remaining)
    try:
        checker.handshake()
        namespace = {"__name__": "__check__", "__builtins__": builtins}
        stub = _stub_module(job["prompt"])
        if stub is not None:
            try:
                exec(stub, namespace)  # pylint: disable=exec-used (the task's own prompt)
            except Exception:  # noqa: BLE001  The helpers are then simply missing.
                pass
        namespace[job["entry_point"]] = remote
        exec(compile(test, "<test>", "exec"), namespace)  # pylint: disable=exec-used
        check = namespace.get("check")
        if check is None:
            return "failed: test code defines no check()"
        check(remote)
        result = "passed"
    except _Abort as e:
        result = e.result
    except BaseException as e:  # noqa: BLE001
        result = _format_failure(codec.exception_name(e), codec.safe_str(e))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    # A failure of the channel stands even if the test code swallowed the exception.
    return checker.failure or result


def _bound_own_memory(limit_bytes):
    """RLIMIT_AS on the checker itself (after init was forked, which must not inherit it)."""
    if not limit_bytes:
        return None
    try:
        resource.setrlimit(resource.RLIMIT_AS, (int(limit_bytes),) * 2)
    except (ValueError, OSError):
        return None
    return int(limit_bytes)


def _peak_rss_bytes(status_fd):
    """VmHWM: peak resident memory of this process image (getrusage's ru_maxrss would
    include the evaluator's, inherited through fork and exec).

    Args:
      status_fd: /proc/self/status opened before init mounted the namespace's own /proc
        (the checker shares init's mount namespace but not its PID namespace).
    """
    try:
        for line in os.pread(status_fd, 1 << 16, 0).decode().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def main(argv):
    """Entry point of the checker process."""
    result_fd = int(argv[1])
    # Die with the evaluator (kill -9 included), and with it init and the candidate; the
    # tag starts with the evaluator's pid, which tells a parent that died before the prctl.
    isolation.die_with_parent()
    if str(os.getppid()) != argv[2].split("-", 1)[0]:
        return 9
    job = codec.read_frame(0)
    status_fd = os.open("/proc/self/status", os.O_RDONLY)
    req_r, req_w = os.pipe()
    resp_r, resp_w = os.pipe()
    namespaces = isolation.unshare()
    parent_tmp = os.getcwd()
    init_pid = os.fork()
    if init_pid == 0:
        try:
            for fd in isolation.open_fds():
                if fd not in (2, req_r, resp_w):
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            candidate.init_main(job, req_r, resp_w, namespaces, parent_tmp)
        except BaseException:  # noqa: BLE001
            traceback.print_exc()
        finally:
            os._exit(7)
    os.close(req_r)
    os.close(resp_w)
    checker_limit = _bound_own_memory(job["limits"].get("checker_memory_bytes"))
    # Only now, with the candidate forked, read the test code and the nonce.
    secret = codec.read_frame(0)
    os.close(0)
    deadline = time.monotonic() + float(job["limits"]["timeout_s"])
    checker = _Checker(req_w, resp_r, init_pid, deadline)
    try:
        result = _run_tests(checker, job, secret["test"])
    except _Abort as e:  # The alarm fired just as the tests finished.
        result = e.result
    isolation_report = dict(checker.isolation) if isinstance(checker.isolation, dict) else {}
    isolation_report["checker"] = {
        "address_space_bytes": checker_limit,
        "max_rss_bytes": _peak_rss_bytes(status_fd)}
    verdict = {"passed": result == "passed", "result": result[:codec.MAX_MESSAGE_CHARS + 100],
               "isolation": isolation_report}
    # Tear the candidate's namespace down before reporting, so nothing outlives the check.
    for fd in (req_w, resp_r):
        os.close(fd)
    if checker.init_pid is not None:
        try:
            os.kill(checker.init_pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(checker.init_pid, 0)
    os.write(result_fd, secret["nonce"].encode() + b"\n" + json.dumps(verdict).encode())
    os.close(result_fd)
    return 0

