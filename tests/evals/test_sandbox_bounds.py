"""Tests for the sandbox's hard bounds: memory per check, syscall filter, keyring, checker
memory, and no leftovers after a killed evaluator."""

import errno
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

from evals import sandbox
from evals import sandbox_cgroup
from evals._sandbox_child import seccomp

_GIB = 1 << 30
_MIB = 1 << 20
_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def isolation():
    return sandbox.probe_isolation()


def _needs_cgroup(isolation):
    if not isolation.get("cgroup"):
        pytest.skip("no usable memory cgroup here (not root, or no cgroup v1/v2 memory "
                    "controller delegated to the evaluator): the total is bounded only by "
                    "max_processes x memory_bytes (see WORKSPACE.md)")


def _needs_filter(isolation):
    if not str(isolation.get("syscall_filter", "")).startswith("seccomp"):
        pytest.skip(f"no seccomp filter here: {isolation.get('syscall_filter')}")


def _check(completion, test, limits=None):
    program = sandbox.Program("", textwrap.dedent(completion), textwrap.dedent(test), "f")
    return sandbox.run_check(program, limits or sandbox.Limits(timeout_s=30.0))


# ------------------------------------------------------------------------- syscall filter


_LIBC = "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"

_SYSCALLS = {
    # name: (call returning < 0 on failure, errno expected under the filter)
    "memfd_create": ("libc.memfd_create(b'x', 0)", errno.EPERM),
    "unshare_user_namespace": ("libc.unshare(0x10000000)", errno.EPERM),
    "unshare_mount_namespace": ("libc.unshare(0x00020000)", errno.EPERM),
    "clone_user_namespace": ("libc.syscall(56, 0x10000000 | 17, 0, 0, 0, 0)", errno.EPERM),
    "add_key": ("libc.syscall(248, b'user', b'k', b'v', 1, -3)", errno.EPERM),
    "keyctl": ("libc.syscall(250, 0, -4, 0)", errno.EPERM),
    "mount_tmpfs": ("libc.mount(b'tmpfs', b'/tmp', b'tmpfs', 0, None)", errno.EPERM),
    "io_uring_setup": ("libc.syscall(425, 1, 0)", errno.EPERM),
    "clone3": ("libc.syscall(435, 0, 0)", errno.ENOSYS),
}


@pytest.mark.skipif(seccomp.machine() != "x86_64", reason="syscall numbers below are x86-64")
@pytest.mark.parametrize("name", sorted(_SYSCALLS))
def test_syscall_filter_refuses(name, isolation):
    _needs_filter(isolation)
    call, expected = _SYSCALLS[name]
    result = _check(_LIBC + f"def f():\n    r = {call}\n    return ctypes.get_errno() if r < 0 "
                            "else 0\n",
                    f"def check(candidate):\n    assert candidate() == {expected}\n")
    assert result.passed, result.result


def test_syscall_filter_keeps_ordinary_processes_working(isolation):
    """Control: fork, threads, subprocess (clone3 falls back to clone), unshare without
    a namespace still work."""
    _needs_filter(isolation)
    completion = """
        import ctypes, os, subprocess, threading
        libc = ctypes.CDLL(None, use_errno=True)
        def f():
            pid = os.fork()
            if pid == 0:
                os._exit(7)
            status = os.waitpid(pid, 0)[1]
            out = []
            t = threading.Thread(target=lambda: out.append(1))
            t.start()
            t.join()
            echo = subprocess.run(["echo", "hi"], capture_output=True).stdout
            return [os.WEXITSTATUS(status), out, echo, libc.unshare(0x400)]  # CLONE_FILES
        """
    result = _check(completion,
                    "def check(candidate):\n    assert candidate() == [7, [1], b'hi\\n', 0]\n")
    assert result.passed, result.result


@pytest.mark.parametrize("arch", sorted(seccomp.SYSCALLS))
def test_filter_program_is_well_formed(arch):
    program = seccomp.build_program(arch)
    assert len(program) % 8 == 0 and 0 < len(program) // 8 < 4096
    names = set(seccomp.DENIED) | set(seccomp.DENIED_WITH_NEW_NAMESPACE) | set(
        seccomp.UNSUPPORTED)
    assert names <= set(seccomp.SYSCALLS[arch])


# ------------------------------------------------------------------------- memory


# Forks `n` children that each touch `mib` MiB and hold it; returns the MiB held at once
# (by the children alive once all have reported, or after 10 s).
_ANONYMOUS = """
    import os, select, time
    def f(n, mib):
        r, w = os.pipe()
        pids = []
        for _ in range(n):
            pid = os.fork()
            if pid == 0:
                block = bytearray(mib << 20)
                for i in range(0, len(block), 4096):
                    block[i] = 1
                os.write(w, b"x")
                time.sleep(60)
                os._exit(0)
            pids.append(pid)
        os.close(w)
        reported, end = 0, time.monotonic() + 10
        while reported < n and time.monotonic() < end:
            if select.select([r], [], [], 0.1)[0]:
                data = os.read(r, n)
                if not data:
                    break  # Every child is gone.
                reported += len(data)
        time.sleep(0.5)
        alive = [p for p in pids if os.waitpid(p, os.WNOHANG)[0] == 0]
        return len(alive) * mib
    """

# Writes `mib` MiB into one file of the private /tmp (tmpfs: shared memory, like memfd).
_TMPFS = """
    def f(n, mib):
        chunk = b"x" * (1 << 20)
        written = 0
        try:
            with open("/tmp/fill", "wb") as fh:
                for _ in range(mib):
                    fh.write(chunk)
                    fh.flush()
                    written += 1
        except OSError:
            pass
        return written
    """

# memfd_create, then fill 1.5 GiB: held past RLIMIT_AS before the bounds.
_MEMFD = _LIBC + """
def f(n, mib):
    fd = libc.memfd_create(b"fill", 0)
    if fd < 0:
        return -ctypes.get_errno()
    chunk = b"x" * (1 << 20)
    written = 0
    try:
        for _ in range(mib):
            os.write(fd, chunk)
            written += 1
    except OSError:
        pass
    return written
"""

# A tmpfs of its own in a nested user namespace, beyond the 64 MiB cap of the sandbox's.
_NESTED_USERNS_TMPFS = _LIBC + """
def f(n, mib):
    uid, gid = os.getuid(), os.getgid()
    os.makedirs("/tmp/mnt", exist_ok=True)
    libc.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: own /proc/self again after the uid change.
    if libc.unshare(0x10000000 | 0x00020000) != 0:
        return -ctypes.get_errno()
    for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"),
                       ("gid_map", f"0 {gid} 1")):
        with open(f"/proc/self/{name}", "w") as fh:
            fh.write(text)
    if libc.mount(b"none", b"/tmp/mnt", b"tmpfs", 0, b"size=4g") != 0:
        return -ctypes.get_errno() - 1000
    chunk = b"x" * (1 << 20)
    written = 0
    try:
        with open("/tmp/mnt/fill", "wb") as fh:
            for _ in range(mib):
                fh.write(chunk)
                fh.flush()
                written += 1
    except OSError:
        pass
    return written
"""


@pytest.mark.parametrize("attack, n, mib, total_fits", [
    ("anonymous", 2, 300, True),     # Control: 600 MiB in two processes fits in 1 GiB.
    ("anonymous", 4, 400, False),    # 1.6 GiB in four processes of 400 MiB (< RLIMIT_AS).
    ("tmpfs", 1, 600, True),         # Control: shared memory is held while it fits.
    ("tmpfs", 1, 1536, False),       # 1.5 GiB of tmpfs pages (tmpfs cap raised to 4 GiB).
])
def test_cgroup_bounds_the_whole_check(attack, n, mib, total_fits, isolation):
    _needs_cgroup(isolation)
    completion = {"anonymous": _ANONYMOUS, "tmpfs": _TMPFS}[attack]
    limits = sandbox.Limits(timeout_s=40.0, tmpfs_bytes=4 * _GIB, file_size_bytes=4 * _GIB)
    result = _check(completion, f"def check(candidate):\n"
                                f"    assert candidate({n}, {mib}) == {n * mib}\n", limits)
    assert result.passed == total_fits, result.result
    assert "sandbox error" not in result.result
    peak = result.isolation["cgroup_peak_bytes"]
    assert peak <= limits.total_memory_bytes
    if total_fits:
        assert peak >= n * mib * _MIB  # The cgroup did see the memory.


@pytest.mark.parametrize("attack", ["memfd", "nested_userns_tmpfs"])
def test_memory_outside_rlimits_is_refused(attack, isolation):
    if not isolation.get("cgroup"):
        _needs_filter(isolation)
    completion = {"memfd": _MEMFD, "nested_userns_tmpfs": _NESTED_USERNS_TMPFS}[attack]
    result = _check(completion, "def check(candidate):\n    held = candidate(1, 1536)\n"
                                "    assert held == 1536, held\n",
                    sandbox.Limits(timeout_s=40.0, file_size_bytes=4 * _GIB))
    assert not result.passed
    assert result.result.startswith(("failed: AssertionError", "failed: candidate process")), (
        result.result)
    if isolation.get("cgroup"):
        assert result.isolation["cgroup_peak_bytes"] <= sandbox.Limits().total_memory_bytes


# ------------------------------------------------------------------------- keyring


def test_keys_do_not_survive_a_check(isolation):
    add = _LIBC + ("def f():\n"
                   "    got = [libc.syscall(248, b'user', b'tfspec-probe', b'secret', 6, ring)\n"
                   "           for ring in (-3, -4, -5)]\n"  # session, user, user session
                   "    return [ctypes.get_errno() if g < 0 else 0 for g in got]\n")
    first = _check(add, "def check(candidate):\n    candidate()\n")
    assert first.passed, first.result
    find = _LIBC + ("def f():\n"
                    "    k = libc.syscall(249, b'user', b'tfspec-probe', None, 0)\n"
                    "    return -ctypes.get_errno() if k < 0 else k\n")
    second = _check(find, "def check(candidate):\n    assert candidate() < 0\n")
    assert second.passed, f"a key added by one check was found by the next: {second.result}"
    assert first.isolation["session_keyring"] == "new, empty" or str(
        first.isolation.get("syscall_filter")).startswith("seccomp")


# ------------------------------------------------------------------------- checker


_RAW_REPLY = """
    import os
    def f():
        body = b'{"ok":[' + b'[],' * COUNT + b'[]]}'
        frame = len(body).to_bytes(4, "big") + body
        for fd in range(3, 64):
            try:
                os.write(fd, frame)
            except OSError:
                pass
        return None
    """


@pytest.mark.parametrize("completion, expected", [
    ("def f():\n    return [[]] * 5000000\n", "failed: AssertionError"),
    (_RAW_REPLY.replace("COUNT", "5000000"), "failed: sandbox protocol error: frame of"),
    (_RAW_REPLY.replace("COUNT", "349000"), "failed: AssertionError"),  # Just under the cap.
])
def test_checker_memory_is_bounded(completion, expected):
    result = _check(completion, "def check(candidate):\n    assert candidate() is True\n")
    assert result.result.startswith(expected), result.result
    checker = result.isolation["checker"]
    assert checker["address_space_bytes"] == sandbox.Limits().checker_memory_bytes
    # Unbounded, the checker peaked at 717 MiB decoding the 5M-list reply.
    assert checker["max_rss_bytes"] < 128 * _MIB, checker


# ------------------------------------------------------------------------- leftovers


_EVALUATOR = """
import sys
from evals import sandbox
program = sandbox.Program("", sys.argv[1], "def check(candidate):\\n    candidate()\\n", "f")
print(sandbox.run_check(program, sandbox.Limits(timeout_s=60.0)).result, flush=True)
"""


def _start_evaluator(completion, tempdir):
    env = dict(os.environ, TMPDIR=str(tempdir), PYTHONPATH=_REPO)
    return subprocess.Popen([sys.executable, "-c", _EVALUATOR, completion], env=env,
                            stdout=subprocess.PIPE, cwd=_REPO)


def _leftover_cgroups(pid):
    parent = sandbox_cgroup.find_parent()
    if parent is None:
        return []
    prefix = f"{sandbox.TEMP_PREFIX}{pid}-"
    return [n for n in os.listdir(parent.path) if n.startswith(prefix)]


def _tagged_processes(pid):
    tag = f"{pid}-".encode()
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if b"TFSPEC_SANDBOX=" + tag in environ or b"\0" + tag in cmdline:
            found.append(int(entry))
    return found


def test_killed_evaluator_leaves_nothing_for_long(tmp_path):
    tempdir = tmp_path / "evaluator_tmp"
    tempdir.mkdir()
    victim = _start_evaluator("import time\ndef f():\n    time.sleep(600)\n", tempdir)
    try:
        end = time.monotonic() + 30
        while time.monotonic() < end and not (os.listdir(tempdir) and _tagged_processes(
                victim.pid)):
            time.sleep(0.05)
        folders = os.listdir(tempdir)
        assert len(folders) == 1 and folders[0].startswith(f"{sandbox.TEMP_PREFIX}{victim.pid}-")
        time.sleep(1.2)  # Older than the sweep's minimum age: only the lock protects it.
        assert sandbox.sweep_leftovers(str(tempdir)) == []  # A live run's folder stays.
        assert os.listdir(tempdir) == folders
        cgroups = _leftover_cgroups(victim.pid)
        assert len(cgroups) == (1 if sandbox_cgroup.find_parent() else 0)
        victim.send_signal(signal.SIGKILL)
        victim.wait()
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait()
    # The checker dies with its evaluator, and init and the candidate with the checker.
    end = time.monotonic() + 5
    while _tagged_processes(victim.pid) and time.monotonic() < end:
        time.sleep(0.05)
    assert _tagged_processes(victim.pid) == []
    # What kill -9 leaves: the folder (and the cgroup) ...
    assert os.listdir(tempdir) == folders
    assert _leftover_cgroups(victim.pid) == cgroups
    time.sleep(1.2)
    # ... goes with the next run's first check.
    successor = _start_evaluator("def f():\n    return 1\n", tempdir)
    out, _ = successor.communicate(timeout=60)
    assert out.decode().strip() == "passed"
    assert os.listdir(tempdir) == []
    assert _leftover_cgroups(victim.pid) == []


def test_no_folder_outlives_a_check(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    result = sandbox.run_check(sandbox.Program("", "def f():\n    return 1\n",
                                               "def check(c):\n    assert c() == 1\n", "f"))
    assert result.passed
    assert os.listdir(tmp_path) == []
    assert _leftover_cgroups(os.getpid()) == []
