"""One memory cgroup per sandbox check: a bound on everything the check's processes use.

RLIMIT_AS bounds one process's address space; it does not see memfds, tmpfs pages, SysV
shared memory, or the sum over processes. A memory cgroup counts all of these, for every
process of the check (the init process joins it before it forks the candidate, and
descendants cannot leave: the cgroup files belong to root). At the limit the kernel
reclaims, then refuses tmpfs and memfd pages (ENOSPC/ENOMEM) or OOM-kills inside the cgroup.

The cgroup is made inside the evaluator's own cgroup (a cgroup you may write to is one
delegated to you), or inside the one `TFSPEC_SANDBOX_CGROUP` names:

* cgroup v2 whose `cgroup.controllers` offers `memory`: `memory.max`, no swap,
  `memory.oom.group` (an OOM kill takes the whole check);
* cgroup v1 with the memory controller: `memory.limit_in_bytes` (and `memsw` when swap
  accounting exists).

Without either (not root, no delegation) `find_parent()` is None and the check runs with
rlimits and the syscall filter only; `CheckResult.isolation["cgroup"]` says which.

Each cgroup is named like the check's temporary folder and holds an flock on its own
directory while the check runs; `sweep()` removes the cgroups whose lock is free, that is,
those left by a killed evaluator.
"""

import dataclasses
import fcntl
import os
import signal
import time
from typing import Optional

ENV_PARENT = "TFSPEC_SANDBOX_CGROUP"


@dataclasses.dataclass(frozen=True)
class Parent:
    """Where check cgroups are made: `path` (a cgroup directory) of cgroup `version`."""

    path: str
    version: int


@dataclasses.dataclass
class CheckCgroup:
    """The cgroup of one check; `lock_fd` holds its directory's flock while it lives."""

    path: str
    version: int
    limit_bytes: int
    lock_fd: Optional[int]

    @property
    def procs(self):
        return os.path.join(self.path, "cgroup.procs")

    def describe(self):
        return f"cgroup v{self.version} memory limit {self.limit_bytes} bytes"

    def peak_bytes(self):
        """Highest memory use the cgroup saw, or None if the kernel does not say."""
        name = "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"
        try:
            with open(os.path.join(self.path, name)) as f:
                return int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def destroy(self, wait_s=2.0):
        """Kills what is left in the cgroup and removes it; True if it is gone."""
        try:
            return _remove(self.path, self.version, wait_s)
        finally:
            if self.lock_fd is not None:
                os.close(self.lock_fd)
                self.lock_fd = None


def _mounts():
    """(mount point, root, fstype, super options) of the cgroup file systems."""
    found = []
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fields, rfields = left.split(), right.split()
                if len(fields) >= 5 and len(rfields) >= 3 and rfields[0] in ("cgroup",
                                                                              "cgroup2"):
                    found.append((fields[4], fields[3], rfields[0], rfields[2].split(",")))
    except OSError:
        pass
    return found


def _own_cgroups():
    """{controller or "" (v2): path} of this process, from /proc/self/cgroup."""
    own = {}
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                parts = line.rstrip("\n").split(":", 2)
                if len(parts) == 3:
                    for controller in parts[1].split(",") if parts[1] else [""]:
                        own[controller] = parts[2]
    except OSError:
        pass
    return own


def _join(mount_point, root, path):
    if root != "/" and (path == root or path.startswith(root.rstrip("/") + "/")):
        path = path[len(root.rstrip("/")):]
    return os.path.join(mount_point, path.lstrip("/"))


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _usable_v2(path):
    """A v2 cgroup in which children get a memory controller (enabling it if we may)."""
    if "memory" not in _read(os.path.join(path, "cgroup.controllers")).split():
        return False
    if "memory" in _read(os.path.join(path, "cgroup.subtree_control")).split():
        return True
    try:  # Refused (EBUSY) when processes live in `path` itself and it is not the root.
        with open(os.path.join(path, "cgroup.subtree_control"), "w") as f:
            f.write("+memory")
        return True
    except OSError:
        return False


def find_parent() -> Optional[Parent]:
    """The cgroup to make check cgroups in, or None when none is usable here."""
    explicit = os.environ.get(ENV_PARENT)
    if explicit:
        if os.path.exists(os.path.join(explicit, "cgroup.controllers")):
            return Parent(explicit, 2) if _usable_v2(explicit) else None
        if os.path.exists(os.path.join(explicit, "memory.limit_in_bytes")):
            return Parent(explicit, 1) if os.access(explicit, os.W_OK) else None
        return None
    own = _own_cgroups()
    for mount_point, root, fstype, options in _mounts():
        if fstype == "cgroup2" and "" in own:
            path = _join(mount_point, root, own[""])
            if os.access(path, os.W_OK) and _usable_v2(path):
                return Parent(path, 2)
    for mount_point, root, fstype, options in _mounts():
        if fstype == "cgroup" and "memory" in options and "memory" in own:
            path = _join(mount_point, root, own["memory"])
            if os.access(path, os.W_OK):
                return Parent(path, 1)
    return None


def create(parent: Parent, name: str, limit_bytes: int) -> CheckCgroup:
    """Makes the cgroup `name` under `parent` with a memory limit of `limit_bytes`.

    Raises:
      OSError: if the cgroup cannot be made or limited (it is removed again).
    """
    path = os.path.join(parent.path, name)
    os.mkdir(path)
    group = CheckCgroup(path, parent.version, int(limit_bytes), None)
    try:
        group.lock_fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(group.lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if parent.version == 2:
            _write(path, "memory.max", str(group.limit_bytes))
            _write(path, "memory.swap.max", "0", optional=True)
            _write(path, "memory.oom.group", "1", optional=True)
        else:
            _write(path, "memory.limit_in_bytes", str(group.limit_bytes))
            _write(path, "memory.memsw.limit_in_bytes", str(group.limit_bytes), optional=True)
    except BaseException:
        group.destroy(wait_s=0.0)
        raise
    return group


def _write(folder, name, value, optional=False):
    try:
        with open(os.path.join(folder, name), "w") as f:
            f.write(value)
    except OSError:
        if not (optional and not os.path.exists(os.path.join(folder, name))):
            raise


def _procs(path):
    return [int(p) for p in _read(os.path.join(path, "cgroup.procs")).split()]


def _remove(path, version, wait_s):
    """Empties and removes one check cgroup; True if it is gone."""
    end = time.monotonic() + wait_s
    while True:
        try:
            os.rmdir(path)
            return True
        except FileNotFoundError:
            return True
        except OSError:
            pass
        # Only sandbox processes are in here (without a PID namespace, strays of the check).
        if version == 2 and os.path.exists(os.path.join(path, "cgroup.kill")):
            try:
                _write(path, "cgroup.kill", "1")
            except OSError:
                pass
        else:
            for pid in _procs(path):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        if time.monotonic() > end:
            return False
        time.sleep(0.01)


def sweep(parent: Optional[Parent], name_pattern, min_age_s: float) -> list:
    """Removes check cgroups under `parent` whose lock no live evaluator holds.

    Args:
      parent: Where this evaluator makes its cgroups (None: nothing to do).
      name_pattern: Compiled regular expression that check cgroup names match.
      min_age_s: Leaves younger ones alone (made but not yet locked by their owner).

    Returns:
      The paths removed.
    """
    if parent is None:
        return []
    removed = []
    try:
        names = [n for n in os.listdir(parent.path) if name_pattern.match(n)]
    except OSError:
        return []
    for name in names:
        path = os.path.join(parent.path, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            continue
        try:
            if time.time() - os.fstat(fd).st_mtime < min_age_s:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # Its evaluator is alive.
            if _remove(path, parent.version, 2.0):
                removed.append(path)
        finally:
            os.close(fd)
    return removed
