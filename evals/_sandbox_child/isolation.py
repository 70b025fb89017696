"""Linux isolation of one check: namespaces, private mounts, rlimits, keyring, cgroup.

Called by the trusted init process (namespaces are entered by the checker; mounts and the
cgroup by init) and by the candidate process before it runs untrusted code. Python 3.11
has no `os.unshare`, so namespaces and mounts go through libc with ctypes.
"""

import ctypes
import os
import resource
import signal
import sys

from . import seccomp

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
_KEYCTL_JOIN_SESSION_KEYRING = 1
_SYS_KEYCTL = {"x86_64": 250, "aarch64": 219}

# World-writable places masked by a private tmpfs in the candidate's mount namespace.
_WRITABLE_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/var/lock")
WORKDIR_IN_TMPFS = "/tmp/sandbox"

_libc = None


def _lib():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def libc_call(name, *args):
    """Calls a libc function that returns 0 on success; raises OSError otherwise."""
    if getattr(_lib(), name)(*args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}: {os.strerror(err)}")


def prctl(option, value):
    libc_call("prctl", ctypes.c_int(option), ctypes.c_ulong(value), ctypes.c_ulong(0),
              ctypes.c_ulong(0), ctypes.c_ulong(0))


def die_with_parent():
    """SIGKILL when the parent exits (cleared by a uid change: call it after one)."""
    try:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


def set_no_new_privs():
    try:
        prctl(_PR_SET_NO_NEW_PRIVS, 1)
        return True
    except OSError:
        return False


def _mount(source, target, fstype, flags, data=None):
    libc_call("mount", _b(source), _b(target), _b(fstype), ctypes.c_ulong(flags), _b(data))


def _b(s):
    return None if s is None else s.encode()


def unshare():
    """Enters new namespaces; returns the names of those that took effect."""
    attempts = [
        ({"mount", "pid", "net", "ipc"},
         _CLONE_NEWNS | _CLONE_NEWPID | _CLONE_NEWNET | _CLONE_NEWIPC),
        ({"net"}, _CLONE_NEWNET),
    ]
    for names, flags in attempts:
        try:
            libc_call("unshare", ctypes.c_int(flags))
            return names
        except (OSError, AttributeError):
            continue
    return set()


def join_cgroup(procs_path):
    """Moves the calling process (and so all it starts) into the check's cgroup.

    Args:
      procs_path: The `cgroup.procs` file of the cgroup the evaluator made for the check.

    Raises:
      OSError: if the cgroup cannot be joined (the check must then not run unbounded).
    """
    with open(procs_path, "w") as f:
        f.write("0")  # 0 is the writer itself, whatever PID namespace it is in.


def new_session_keyring():
    """Replaces the session keyring by a new, empty, anonymous one; True if it worked.

    The user keyring (@u) stays reachable through keyctl: the syscall filter is what keeps
    keys from surviving a check; this only gives a process without it a fresh @s.
    """
    number = _SYS_KEYCTL.get(seccomp.machine())
    if number is None:
        return False
    libc = _lib()
    libc.syscall.restype = ctypes.c_long
    return libc.syscall(ctypes.c_long(number), ctypes.c_long(_KEYCTL_JOIN_SESSION_KEYRING),
                         ctypes.c_void_p(None)) >= 0


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


def setup_mounts(limits, iso):
    """Private tmpfs over writable and hiding folders, fresh /proc (in init, as root).

    Returns:
      The candidate's working directory (inside the private /tmp).
    """
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
    os.makedirs(WORKDIR_IN_TMPFS, 0o700)
    return WORKDIR_IN_TMPFS


_RLIMIT_NAMES = {
    resource.RLIMIT_CPU: "cpu_s",
    resource.RLIMIT_AS: "address_space_bytes",
    resource.RLIMIT_FSIZE: "file_size_bytes",
    resource.RLIMIT_NOFILE: "open_files",
    resource.RLIMIT_CORE: "core_bytes",
    resource.RLIMIT_NPROC: "processes",
}


def set_rlimits(limits):
    """Applies the candidate's rlimits; returns those that took effect, by name."""
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


def disable_network():
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


def open_fds():
    try:
        return [int(x) for x in os.listdir("/proc/self/fd")]
    except OSError:
        return list(range(3, 1024))
