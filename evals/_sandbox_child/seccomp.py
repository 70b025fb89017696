"""A seccomp syscall filter for the candidate, built by hand (standard library only).

The filter refuses, with EPERM, the system calls that step around the sandbox's memory
bounds or outlive a check, and the kernel interfaces no generated function needs:

* memory the rlimits do not count: `memfd_create`, `memfd_secret`;
* new namespaces (a nested user namespace makes the candidate root there, free to mount a
  tmpfs of any size): `unshare` and `clone` with any CLONE_NEW* flag, `setns`; `clone3`
  passes its flags in memory a filter cannot read, so it gets ENOSYS and the C library
  falls back to `clone`;
* mounts (old and new API), `pivot_root`;
* the kernel keyrings, which persist per user between checks: `keyctl`, `add_key`,
  `request_key`;
* io_uring (its operations bypass the filter), `bpf`, `perf_event_open`, `userfaultfd`,
  `ptrace`, modules, kexec, swap, reboot, file handles.

Any other architecture (x32 calls on x86-64, 32-bit calls) is refused too. libseccomp is
not used so that the sandbox needs nothing beyond Python; the program is 85 BPF
instructions and `build_program` is tested against the kernel in `tests/evals/`.
"""

import ctypes
import errno
import platform
import struct

_PR_SET_NO_NEW_PRIVS = 38
_SECCOMP_SET_MODE_FILTER = 1
_SYS_SECCOMP = {"x86_64": 317, "aarch64": 277}

_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_X32_SYSCALL_BIT = 0x40000000

# BPF opcodes (linux/filter.h) and seccomp return values (linux/seccomp.h).
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_RET_KILL_PROCESS = 0x80000000

# Offsets in struct seccomp_data: nr, arch, instruction_pointer, args[6] (little endian).
_OFF_NR = 0
_OFF_ARCH = 4
_OFF_ARG0_LOW = 16

_CLONE_NEW_FLAGS = (0x00000080 | 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000
                    | 0x10000000 | 0x20000000 | 0x40000000)  # TIME NS CGROUP UTS IPC USER PID NET

# Refused outright (EPERM), by name; numbers per architecture below.
DENIED = ("memfd_create", "memfd_secret", "keyctl", "add_key", "request_key", "mount",
          "umount2", "pivot_root", "setns", "userfaultfd", "perf_event_open", "bpf",
          "io_uring_setup", "io_uring_enter", "io_uring_register", "open_tree", "move_mount",
          "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr", "ptrace", "kexec_load",
          "kexec_file_load", "init_module", "finit_module", "delete_module", "swapon",
          "swapoff", "reboot", "open_by_handle_at", "name_to_handle_at")
# Refused when arg 0 (the flags) asks for a new namespace.
DENIED_WITH_NEW_NAMESPACE = ("unshare", "clone")
# Refused with ENOSYS, so that callers fall back to an older call the filter can inspect.
UNSUPPORTED = ("clone3",)

SYSCALLS = {
    "x86_64": {
        "memfd_create": 319, "memfd_secret": 447, "keyctl": 250, "add_key": 248,
        "request_key": 249, "mount": 165, "umount2": 166, "pivot_root": 155, "unshare": 272,
        "clone": 56, "clone3": 435, "setns": 308, "userfaultfd": 323, "perf_event_open": 298,
        "bpf": 321, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
        "fspick": 433, "mount_setattr": 442, "ptrace": 101, "kexec_load": 246,
        "kexec_file_load": 320, "init_module": 175, "finit_module": 313,
        "delete_module": 176, "swapon": 167, "swapoff": 168, "reboot": 169,
        "open_by_handle_at": 304, "name_to_handle_at": 303,
    },
    "aarch64": {
        "memfd_create": 279, "memfd_secret": 447, "keyctl": 219, "add_key": 217,
        "request_key": 218, "mount": 40, "umount2": 39, "pivot_root": 41, "unshare": 97,
        "clone": 220, "clone3": 435, "setns": 268, "userfaultfd": 282, "perf_event_open": 241,
        "bpf": 280, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
        "fspick": 433, "mount_setattr": 442, "ptrace": 117, "kexec_load": 104,
        "kexec_file_load": 294, "init_module": 105, "finit_module": 273,
        "delete_module": 106, "swapon": 224, "swapoff": 225, "reboot": 142,
        "open_by_handle_at": 265, "name_to_handle_at": 264,
    },
}


def machine():
    """The running architecture's name as used by `SYSCALLS`, or None if unsupported."""
    name = platform.machine().lower()
    name = {"amd64": "x86_64", "arm64": "aarch64"}.get(name, name)
    return name if name in SYSCALLS else None


def _insn(code, k, jt=0, jf=0):
    return struct.pack("=HBBI", code, jt, jf, k)


def build_program(arch):
    """The filter for `arch` as packed `struct sock_filter` records (bytes, 8 per insn)."""
    numbers = SYSCALLS[arch]
    deny = _RET_ERRNO | errno.EPERM
    insns = [
        _insn(_LD_W_ABS, _OFF_ARCH),
        _insn(_JEQ_K, _AUDIT_ARCH[arch], jt=1, jf=0),
        _insn(_RET_K, _RET_KILL_PROCESS),
        _insn(_LD_W_ABS, _OFF_NR),
    ]
    if arch == "x86_64":  # x32 calls reach the same kernel entry with this bit set.
        insns += [_insn(_JGE_K, _X32_SYSCALL_BIT, jt=0, jf=1), _insn(_RET_K, deny)]
    for name in DENIED:
        insns += [_insn(_JEQ_K, numbers[name], jt=0, jf=1), _insn(_RET_K, deny)]
    for name in UNSUPPORTED:
        insns += [_insn(_JEQ_K, numbers[name], jt=0, jf=1),
                  _insn(_RET_K, _RET_ERRNO | errno.ENOSYS)]
    for name in DENIED_WITH_NEW_NAMESPACE:
        # nr == name ? (load arg0; arg0 & CLONE_NEW* ? deny : allow) : next.
        insns += [_insn(_JEQ_K, numbers[name], jt=0, jf=4),
                  _insn(_LD_W_ABS, _OFF_ARG0_LOW),
                  _insn(_JSET_K, _CLONE_NEW_FLAGS, jt=0, jf=1),
                  _insn(_RET_K, deny),
                  _insn(_RET_K, _RET_ALLOW)]
    insns.append(_insn(_RET_K, _RET_ALLOW))
    return b"".join(insns)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install():
    """Installs the filter on the calling thread (and every process it starts).

    Sets no_new_privs first, which an unprivileged process needs for a filter.

    Returns:
      A short description of what took effect, for the isolation report.

    Raises:
      OSError: if the kernel refuses (no seccomp) or the architecture is unsupported.
    """
    arch = machine()
    if arch is None:
        raise OSError(errno.ENOSYS, f"no syscall table for {platform.machine()}")
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(ctypes.c_int(_PR_SET_NO_NEW_PRIVS), ctypes.c_ulong(1), ctypes.c_ulong(0),
                  ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(NO_NEW_PRIVS): {errno.errorcode.get(err, err)}")
    program = build_program(arch)
    buf = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    libc.syscall.restype = ctypes.c_long
    if libc.syscall(ctypes.c_long(_SYS_SECCOMP[arch]), ctypes.c_ulong(_SECCOMP_SET_MODE_FILTER),
                    ctypes.c_ulong(0), ctypes.byref(prog)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"seccomp: {errno.errorcode.get(err, err)}")
    return f"seccomp filter ({len(program) // 8} BPF instructions, {arch})"
