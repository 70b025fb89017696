"""The processes inside a check's namespaces: init (trusted) and the candidate.

* **init** (forked by the checker, trusted). It joins the check's cgroup, so that every
  process it starts is counted in one memory bound. When namespaces are available it is
  PID 1 of a new PID namespace, in new mount, network and IPC namespaces. It mounts private
  tmpfs over the world-writable directories and over directories that hide the Python
  installation from unprivileged users (binding the installation back read-only), mounts a
  fresh /proc, then forks the candidate and reaps until the candidate exits. When it exits,
  the kernel kills everything left in the namespace (fork bombs, daemonised children).
* **candidate** (forked from init, untrusted after its set-up). Rlimits, a fresh working
  directory, a scrubbed environment, stdin/stdout/stderr on /dev/null, every other file
  descriptor closed, then (when running as root) all groups dropped and uid/gid set to the
  sandbox user, no_new_privs, a new empty session keyring and the syscall filter. It
  reports the isolation that took effect, executes `prompt + completion`, and serves calls
  of the entry point until its request pipe closes.
"""

import builtins
import os

from . import codec
from . import isolation
from . import seccomp


def candidate_main(job, req_r, resp_w, workdir, iso):
    """Drops privileges, runs prompt + completion, serves calls. Never returns."""
    limits = job["limits"]
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    keep = {0, 1, 2, req_r, resp_w}
    for fd in isolation.open_fds():
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass
    os.chdir(workdir)
    os.umask(0o077)
    iso["rlimits"] = isolation.set_rlimits(limits)
    uid, gid = job.get("uid"), job.get("gid")
    if os.geteuid() == 0 and uid is not None:
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    iso["uid"] = os.getuid()
    iso["gid"] = os.getgid()
    iso["no_new_privs"] = isolation.set_no_new_privs()
    # Set after the uid change, which clears it: die with init (matters without a PID ns).
    isolation.die_with_parent()
    # As the sandbox user, before the filter forbids keyctl.
    iso["session_keyring"] = "new, empty" if isolation.new_session_keyring() else "inherited"
    try:
        iso["syscall_filter"] = seccomp.install()
    except OSError as e:
        iso["syscall_filter"] = f"none ({str(e)[:100]})"
    os.environ.clear()
    os.environ.update({"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir,
                       "TMPDIR": "/tmp" if iso.get("private_tmp") else workdir,
                       "LANG": "C.UTF-8", "TFSPEC_SANDBOX": str(job.get("tag", ""))})
    if not iso.get("net_namespace"):
        isolation.disable_network()
        iso["network"] = "sockets disabled in-process (weak)"
    else:
        iso["network"] = "private network namespace (no interfaces up)"
    codec.write_frame(resp_w, {"isolation": iso})

    # ---- From here on the process runs untrusted code. ----
    source = job["prompt"] + job["completion"]
    namespace = {"__name__": "__sandbox__", "__builtins__": builtins}
    try:
        exec(compile(source, "<candidate>", "exec"), namespace)  # pylint: disable=exec-used
        fn = namespace.get(job["entry_point"])
        if fn is None:
            raise NameError(f"name {job['entry_point']!r} is not defined")
        codec.write_frame(resp_w, {"ready": True})
    except BaseException as e:  # noqa: BLE001 (SystemExit too: it is a failure)
        _send_exception(resp_w, e)
        os._exit(0)
    while True:
        try:
            request = codec.read_frame(req_r)
        except BaseException:  # noqa: BLE001
            os._exit(3)
        if request is None:
            os._exit(0)
        try:
            args = codec.decode(request["args"])
            kwargs = codec.decode(request["kwargs"])
            value = fn(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001
            _send_exception(resp_w, e)
            continue
        try:
            payload = codec.encode(value)
        except BaseException:  # noqa: BLE001 (hostile containers)
            payload = {"o": ["<unencodable>", ""]}
        try:
            codec.write_frame(resp_w, {"ok": payload}, codec.MAX_RESPONSE_BYTES)
        except codec.ProtocolError:
            codec.write_frame(resp_w, {"ok": {"o": ["<too large>", ""]}})



def _send_exception(fd, exc):
    name = codec.exception_name(exc)
    fatal = not isinstance(exc, Exception)
    codec.write_frame(fd, {"exc": [name[:100], codec.safe_str(exc), fatal]})


def init_main(job, req_r, resp_w, namespaces, parent_tmp):
    """Joins the cgroup, sets up mounts, forks the candidate, exits with its status."""
    isolation.die_with_parent()
    iso = {"pid_namespace": "pid" in namespaces, "net_namespace": "net" in namespaces,
           "mount_namespace": "mount" in namespaces, "ipc_namespace": "ipc" in namespaces,
           "private_tmp": False, "private_proc": False, "masked_dirs": []}
    cgroup = job.get("cgroup")
    if cgroup:
        # Fails closed: without the cgroup the memory bound would not hold.
        isolation.join_cgroup(cgroup["procs"])
        iso["cgroup"] = cgroup["description"]
    else:
        iso["cgroup"] = None
    workdir = None
    if "mount" in namespaces and os.geteuid() == 0:
        try:
            workdir = isolation.setup_mounts(job["limits"], iso)
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
            candidate_main(job, req_r, resp_w, workdir, iso)
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
