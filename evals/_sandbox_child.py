"""The process side of `evals.sandbox`: run one untrusted program and check it.

This file is executed as a script (`python -I _sandbox_child.py RESULT_FD`) by
`evals.sandbox`; it is self-contained and uses the standard library only, because `-I`
puts neither the repository nor the script's folder on `sys.path`. `evals.sandbox` also
imports it for the value codec and the frame format, which both sides share.

Three processes take part in one check:

* **checker** (this script's main process, trusted, same user as the evaluator). It reads
  the job from stdin in two frames: the untrusted part first (prompt, completion, entry
  point, limits), then, only after the candidate process has been forked, the test code and
  the nonce. So neither the tests nor the nonce are ever in the candidate's memory. It runs
  the task's test code (`check(candidate)`) itself, with `candidate` a proxy that forwards
  each call to the candidate process over two pipes. Return values come back as plain data
  (see `encode`/`decode`), so the test compares plain values the checker built: no object
  of the candidate's (an `__eq__` that always says True, a patched builtin) can reach the
  comparison. At the end it writes `nonce + "\\n" + verdict JSON` to RESULT_FD, a pipe the
  evaluator opened and no other process holds.
* **init** (forked, trusted). When namespaces are available it is PID 1 of a new PID
  namespace, in new mount, network and IPC namespaces. It mounts private tmpfs over the
  world-writable directories and over directories that hide the Python installation from
  unprivileged users (binding the installation back read-only), mounts a fresh /proc, then
  forks the candidate and reaps until the candidate exits. When it exits, the kernel kills
  everything left in the namespace (fork bombs, daemonised children).
* **candidate** (forked from init, untrusted after its set-up). Rlimits, a fresh working
  directory, a scrubbed environment, stdin/stdout/stderr on /dev/null, every other file
  descriptor closed, then (when running as root) all groups dropped and uid/gid set to the
  sandbox user, no_new_privs. It reports the isolation that took effect, executes
  `prompt + completion`, and serves calls of the entry point until its request pipe closes.

Frames are a 4-byte big-endian length followed by UTF-8 JSON.
"""

import builtins
import ctypes
import json
import numbers
import os
import resource
import select
import signal
import struct
import sys
import time
import traceback

# Largest frame either side accepts; a bigger return value is a failure.
MAX_FRAME_BYTES = 16 << 20
# Deepest nesting of containers the codec carries.
MAX_DEPTH = 100
# Longest message (exception text) kept in a verdict.
MAX_MESSAGE_CHARS = 500

_CLONE_NEWNS = 0x00020000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWPID = 0x20000000
_CLONE_NEWNET = 0x40000000
_MS_RDONLY = 1
_MS_NOSUID = 2
_MS_NODEV = 4
_MS_NOEXEC = 8
_MS_REMOUNT = 32
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18
_PR_SET_PDEATHSIG = 1
_PR_SET_NO_NEW_PRIVS = 38

# World-writable places masked by a private tmpfs in the candidate's mount namespace.
_WRITABLE_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/var/lock")
_WORKDIR_IN_TMPFS = "/tmp/sandbox"


class ProtocolError(Exception):
    """The candidate process sent something that is not a valid frame or value."""


# --------------------------------------------------------------------------------------
# Frames.


def write_frame(fd, obj):
    """Writes one length-prefixed JSON frame to a file descriptor."""
    data = json.dumps(obj, separators=(",", ":"), allow_nan=False).encode("utf-8")
    if len(data) > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame of {len(data)} bytes exceeds {MAX_FRAME_BYTES}")
    buf = memoryview(struct.pack(">I", len(data)) + data)
    while buf:
        n = os.write(fd, buf)
        buf = buf[n:]


def _read_exact(fd, n, deadline):
    """Reads exactly n bytes; None on EOF; TimeoutError past `deadline` (monotonic)."""
    chunks = []
    while n:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("timed out")
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                raise TimeoutError("timed out")
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_frame(fd, deadline=None):
    """Reads one frame; returns None on a clean EOF before the frame starts."""
    header = _read_exact(fd, 4, deadline)
    if header is None:
        return None
    (size,) = struct.unpack(">I", header)
    if size > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame of {size} bytes exceeds {MAX_FRAME_BYTES}")
    data = _read_exact(fd, size, deadline)
    if data is None:
        raise ProtocolError("truncated frame")
    try:
        return json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as e:
        raise ProtocolError(f"invalid frame: {type(e).__name__}") from None


# --------------------------------------------------------------------------------------
# Values: plain data only. Lists are JSON arrays; every other non-JSON-scalar is a
# one-key object whose key says the type.


class Opaque:
    """Stands for a value the codec cannot carry; equal to nothing but itself."""

    __slots__ = ("type_name", "text")

    def __init__(self, type_name, text):
        self.type_name = type_name
        self.text = text

    def __eq__(self, other):
        return self is other

    def __ne__(self, other):
        return self is not other

    def __hash__(self):
        return id(self)

    def __repr__(self):
        return f"<opaque {self.type_name}: {self.text}>"


def encode(value, depth=0):
    """Encodes a plain value as JSON-ready data; anything else becomes an Opaque marker."""
    if depth > MAX_DEPTH:
        return {"o": ["<too deep>", ""]}
    t = type(value)
    if value is None or t is bool or t is str:
        return value
    if t is int:
        return value if -(1 << 53) < value < (1 << 53) else {"i": hex(value)}
    if t is float:
        return {"f": value.hex()}
    if t is list:
        return [encode(v, depth + 1) for v in value]
    if t is tuple:
        return {"t": [encode(v, depth + 1) for v in value]}
    if t is dict:
        return {"d": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    if t is set:
        return {"s": [encode(v, depth + 1) for v in value]}
    if t is frozenset:
        return {"z": [encode(v, depth + 1) for v in value]}
    if t is bytes or t is bytearray:
        return {"b": bytes(value).hex()}
    if t is complex:
        return {"c": [value.real.hex(), value.imag.hex()]}
    # Numeric types of other libraries (numpy scalars) compare like Python numbers.
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return encode(int(value), depth)
    if isinstance(value, numbers.Real):
        return encode(float(value), depth)
    return {"o": [t.__name__[:100], _safe_repr(value)]}


def decode(data, depth=0):
    """Inverse of `encode`; raises ProtocolError on anything malformed."""
    if depth > MAX_DEPTH + 1:
        raise ProtocolError("value nested too deeply")
    if data is None or isinstance(data, (bool, str)):
        return data
    if type(data) is int:
        return data
    if type(data) is float:  # Not produced by `encode`, but harmless.
        return data
    if type(data) is list:
        return [decode(v, depth + 1) for v in data]
    if type(data) is not dict or len(data) != 1:
        raise ProtocolError("malformed value")
    ((tag, payload),) = data.items()
    try:
        if tag == "i":
            return int(payload, 16)
        if tag == "f":
            return float.fromhex(payload)
        if tag == "t":
            return tuple(decode(v, depth + 1) for v in _as_list(payload))
        if tag == "d":
            return {decode(k, depth + 1): decode(v, depth + 1)
                    for k, v in (_as_pair(p) for p in _as_list(payload))}
        if tag == "s":
            return {decode(v, depth + 1) for v in _as_list(payload)}
        if tag == "z":
            return frozenset(decode(v, depth + 1) for v in _as_list(payload))
        if tag == "b":
            return bytes.fromhex(payload)
        if tag == "c":
            real, imag = _as_pair(payload)
            return complex(float.fromhex(real), float.fromhex(imag))
        if tag == "o":
            type_name, text = _as_pair(payload)
            return Opaque(str(type_name)[:100], str(text)[:200])
    except ProtocolError:
        raise
    except (TypeError, ValueError, AttributeError, OverflowError) as e:
        raise ProtocolError(f"malformed value: {type(e).__name__}") from None
    raise ProtocolError(f"unknown value tag {tag[:20]!r}")


def _as_list(payload):
    if type(payload) is not list:
        raise ProtocolError("malformed value")
    return payload


def _as_pair(payload):
    if type(payload) is not list or len(payload) != 2:
        raise ProtocolError("malformed value")
    return payload


def _safe_repr(value):
    try:
        return repr(value)[:200]
    except BaseException:  # noqa: BLE001 (hostile __repr__)
        return "<unrepresentable>"


def _safe_str(exc):
    try:
        text = str(exc)
    except BaseException:  # noqa: BLE001 (hostile __str__)
        text = "<unprintable>"
    return text[:MAX_MESSAGE_CHARS]


def _exception_name(exc):
    try:
        name = type(exc).__name__
        return name if isinstance(name, str) else "Exception"
    except BaseException:  # noqa: BLE001
        return "Exception"


# --------------------------------------------------------------------------------------
# Linux set-up, via libc (Python 3.11 has no os.unshare).

_libc = None


def _libc_call(name, *args):
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    if getattr(_libc, name)(*args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}: {os.strerror(err)}")


def _mount(source, target, fstype, flags, data=None):
    _libc_call("mount", _b(source), _b(target), _b(fstype), ctypes.c_ulong(flags), _b(data))


def _b(s):
    return None if s is None else s.encode()


def _unshare():
    """Enters new namespaces; returns the names of those that took effect."""
    attempts = [
        ({"mount", "pid", "net", "ipc"},
         _CLONE_NEWNS | _CLONE_NEWPID | _CLONE_NEWNET | _CLONE_NEWIPC),
        ({"net"}, _CLONE_NEWNET),
    ]
    for names, flags in attempts:
        try:
            _libc_call("unshare", ctypes.c_int(flags))
            return names
        except (OSError, AttributeError):
            continue
    return set()


def _needed_paths():
    """Folders the candidate needs to read: the Python installation and sys.path."""
    paths = {sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix}
    for entry in sys.path:
        if entry and os.path.isdir(entry):
            paths.add(entry)
    paths = sorted({os.path.realpath(p) for p in paths if os.path.isdir(p)})
    minimal = []
    for p in paths:
        if not any(p == m or p.startswith(m.rstrip("/") + "/") for m in minimal):
            minimal.append(p)
    return minimal


def _hidden_ancestor(path):
    """The shallowest ancestor of `path` (or itself) that others may not traverse."""
    parts = path.strip("/").split("/")
    for i in range(1, len(parts) + 1):
        prefix = "/" + "/".join(parts[:i])
        try:
            if not os.stat(prefix).st_mode & 0o001:
                return prefix
        except OSError:
            return None
    return None


def _mask(target, options, keep):
    """Mounts a tmpfs over `target`, binding the folders in `keep` back read-only."""
    fds = [(k, os.open(k, os.O_PATH | os.O_DIRECTORY)) for k in keep]
    try:
        _mount("tmpfs", target, "tmpfs", _MS_NOSUID | _MS_NODEV, options)
        for path, fd in fds:
            os.makedirs(path, 0o755, exist_ok=True)
            _mount(f"/proc/self/fd/{fd}", path, None, _MS_BIND | _MS_REC)
            _mount(None, path, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
    finally:
        for _, fd in fds:
            os.close(fd)


def _setup_mounts(limits, iso):
    """Private tmpfs over writable and hiding folders, fresh /proc (in init, as root)."""
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    needed = _needed_paths()
    hidden = {}
    for path in needed:
        h = _hidden_ancestor(path)
        if h is not None:
            hidden.setdefault(h, []).append(path)
    masked = []
    tmpfs_size = int(limits["tmpfs_bytes"])
    for d in _WRITABLE_DIRS:
        if os.path.isdir(d) and not os.path.islink(d):
            keep = [p for p in needed if p.startswith(d + "/")]
            _mask(d, f"mode=1777,size={tmpfs_size}", keep)
            masked.append(d)
    for h, keep in sorted(hidden.items()):
        if h not in masked:
            _mask(h, "mode=0755,size=1m", keep)
            masked.append(h)
    iso["masked_dirs"] = masked
    iso["private_tmp"] = "/tmp" in masked
    try:
        _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
        iso["private_proc"] = True
    except OSError:
        iso["private_proc"] = False
    os.makedirs(_WORKDIR_IN_TMPFS, 0o700)
    return _WORKDIR_IN_TMPFS


# --------------------------------------------------------------------------------------
# The candidate process.


def _set_rlimits(limits):
    cpu = int(limits["cpu_s"])
    settings = [
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),
        (resource.RLIMIT_AS, (int(limits["memory_bytes"]),) * 2),
        (resource.RLIMIT_FSIZE, (int(limits["file_size_bytes"]),) * 2),
        (resource.RLIMIT_NOFILE, (int(limits["open_files"]),) * 2),
        (resource.RLIMIT_CORE, (0, 0)),
    ]
    if limits.get("max_processes"):
        settings.append((resource.RLIMIT_NPROC, (int(limits["max_processes"]),) * 2))
    applied = {}
    for which, value in settings:
        try:
            resource.setrlimit(which, value)
            applied[_RLIMIT_NAMES[which]] = value[0]
        except (ValueError, OSError):
            pass
    return applied


_RLIMIT_NAMES = {
    resource.RLIMIT_CPU: "cpu_s",
    resource.RLIMIT_AS: "address_space_bytes",
    resource.RLIMIT_FSIZE: "file_size_bytes",
    resource.RLIMIT_NOFILE: "open_files",
    resource.RLIMIT_CORE: "core_bytes",
    resource.RLIMIT_NPROC: "processes",
}


def _disable_network():
    """In-process fallback when no network namespace exists: sockets raise.

    This is weak (C extensions, `_socket` internals or a subprocess can bypass it); it only
    stops ordinary code.
    """
    import socket  # pylint: disable=import-outside-toplevel

    def refuse(*args, **kwargs):
        raise OSError("network access is disabled in the sandbox")

    class NoSocket(socket.socket):
        def __init__(self, *args, **kwargs):
            refuse()

    socket.socket = NoSocket
    for name in ("create_connection", "create_server", "socketpair", "fromfd", "getaddrinfo"):
        setattr(socket, name, refuse)


def _candidate_main(job, req_r, resp_w, workdir, iso):
    """Drops privileges, runs prompt + completion, serves calls. Never returns."""
    limits = job["limits"]
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    keep = {0, 1, 2, req_r, resp_w}
    for fd in _open_fds():
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass
    os.chdir(workdir)
    os.umask(0o077)
    iso["rlimits"] = _set_rlimits(limits)
    uid, gid = job.get("uid"), job.get("gid")
    if os.geteuid() == 0 and uid is not None:
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    iso["uid"] = os.getuid()
    iso["gid"] = os.getgid()
    try:
        _libc_call("prctl", ctypes.c_int(_PR_SET_NO_NEW_PRIVS), ctypes.c_ulong(1),
                   ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))
        iso["no_new_privs"] = True
    except OSError:
        iso["no_new_privs"] = False
    # Set after the uid change, which clears it: die with init (matters without a PID ns).
    try:
        _libc_call("prctl", ctypes.c_int(_PR_SET_PDEATHSIG), ctypes.c_ulong(signal.SIGKILL),
                   ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))
    except OSError:
        pass
    os.environ.clear()
    os.environ.update({"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir,
                       "TMPDIR": "/tmp" if iso.get("private_tmp") else workdir,
                       "LANG": "C.UTF-8", "TFSPEC_SANDBOX": str(job.get("tag", ""))})
    if not iso.get("net_namespace"):
        _disable_network()
        iso["network"] = "sockets disabled in-process (weak)"
    else:
        iso["network"] = "private network namespace (no interfaces up)"
    write_frame(resp_w, {"isolation": iso})

    # ---- From here on the process runs untrusted code. ----
    source = job["prompt"] + job["completion"]
    namespace = {"__name__": "__sandbox__", "__builtins__": builtins}
    try:
        exec(compile(source, "<candidate>", "exec"), namespace)  # pylint: disable=exec-used
        fn = namespace.get(job["entry_point"])
        if fn is None:
            raise NameError(f"name {job['entry_point']!r} is not defined")
        write_frame(resp_w, {"ready": True})
    except BaseException as e:  # noqa: BLE001 (SystemExit too: it is a failure)
        _send_exception(resp_w, e)
        os._exit(0)
    while True:
        try:
            request = read_frame(req_r)
        except BaseException:  # noqa: BLE001
            os._exit(3)
        if request is None:
            os._exit(0)
        try:
            args = decode(request["args"])
            kwargs = decode(request["kwargs"])
            value = fn(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001
            _send_exception(resp_w, e)
            continue
        try:
            payload = encode(value)
        except BaseException:  # noqa: BLE001 (hostile containers)
            payload = {"o": ["<unencodable>", ""]}
        try:
            write_frame(resp_w, {"ok": payload})
        except ProtocolError:
            write_frame(resp_w, {"ok": {"o": ["<too large>", ""]}})


def _send_exception(fd, exc):
    name = _exception_name(exc)
    fatal = not isinstance(exc, Exception)
    write_frame(fd, {"exc": [name[:100], _safe_str(exc), fatal]})


def _open_fds():
    try:
        return [int(x) for x in os.listdir("/proc/self/fd")]
    except OSError:
        return list(range(3, 1024))


# --------------------------------------------------------------------------------------
# init: PID 1 of the namespace when there is one.


def _init_main(job, req_r, resp_w, namespaces, parent_tmp):
    """Sets up mounts, forks the candidate, exits with its status."""
    try:
        _libc_call("prctl", ctypes.c_int(_PR_SET_PDEATHSIG), ctypes.c_ulong(signal.SIGKILL),
                   ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))
    except OSError:
        pass
    iso = {"pid_namespace": "pid" in namespaces, "net_namespace": "net" in namespaces,
           "mount_namespace": "mount" in namespaces, "ipc_namespace": "ipc" in namespaces,
           "private_tmp": False, "private_proc": False, "masked_dirs": []}
    workdir = None
    if "mount" in namespaces and os.geteuid() == 0:
        try:
            workdir = _setup_mounts(job["limits"], iso)
        except OSError as e:
            iso["mount_error"] = str(e)[:200]
    if workdir is None:
        workdir = os.path.join(parent_tmp, "work")
        os.makedirs(workdir, 0o700, exist_ok=True)
    if os.geteuid() == 0 and job.get("uid") is not None:
        os.chown(workdir, job["uid"], job["gid"])
    pid = os.fork()
    if pid == 0:
        try:
            _candidate_main(job, req_r, resp_w, workdir, iso)
        finally:
            os._exit(4)
    os.close(req_r)
    os.close(resp_w)
    while True:  # As PID 1, also reap orphans until the candidate itself exits.
        try:
            reaped, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(5)
        if reaped == pid:
            break
    if os.WIFSIGNALED(status):
        os._exit(128 + os.WTERMSIG(status))
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 6)


# --------------------------------------------------------------------------------------
# The checker.


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
            frame = read_frame(self.resp_r, self.deadline)
        except TimeoutError:
            self.fail("timed out")
        except ProtocolError as e:
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
            write_frame(self.req_w, {"args": encode(list(args)), "kwargs": encode(dict(kwargs))})
        except (BrokenPipeError, ProtocolError, OSError):
            self.fail(self.exit_reason())
        frame = self.receive()
        if "ok" in frame and len(frame) == 1:
            try:
                return decode(frame["ok"])
            except ProtocolError as e:
                self.fail(f"failed: sandbox protocol error: {e}")
        self.raise_remote(frame)
        self.fail("failed: sandbox protocol error: unexpected frame")

    def raise_remote(self, frame):
        """Raises the exception the candidate reported in `frame`, if it is one."""
        exc = frame.get("exc")
        if not (isinstance(exc, list) and len(exc) == 3):
            return
        name, message, fatal = str(exc[0])[:100], str(exc[1])[:MAX_MESSAGE_CHARS], exc[2]
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
        result = _format_failure(_exception_name(e), _safe_str(e))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    # A failure of the channel stands even if the test code swallowed the exception.
    return checker.failure or result


def main(argv):
    """Entry point of the checker process."""
    result_fd = int(argv[1])
    job = read_frame(0)
    req_r, req_w = os.pipe()
    resp_r, resp_w = os.pipe()
    namespaces = _unshare()
    parent_tmp = os.getcwd()
    init_pid = os.fork()
    if init_pid == 0:
        try:
            for fd in _open_fds():
                if fd not in (2, req_r, resp_w):
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            _init_main(job, req_r, resp_w, namespaces, parent_tmp)
        except BaseException:  # noqa: BLE001
            traceback.print_exc()
        finally:
            os._exit(7)
    os.close(req_r)
    os.close(resp_w)
    # Only now, with the candidate forked, read the test code and the nonce.
    secret = read_frame(0)
    os.close(0)
    deadline = time.monotonic() + float(job["limits"]["timeout_s"])
    checker = _Checker(req_w, resp_r, init_pid, deadline)
    try:
        result = _run_tests(checker, job, secret["test"])
    except _Abort as e:  # The alarm fired just as the tests finished.
        result = e.result
    verdict = {"passed": result == "passed", "result": result[:MAX_MESSAGE_CHARS + 100],
               "isolation": checker.isolation}
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


if __name__ == "__main__":
    sys.exit(main(sys.argv))
