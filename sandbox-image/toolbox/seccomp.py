"""A seccomp filter of the toolbox's own, for runtimes where the engine's profile does not apply (gVisor).

Under runc, Docker's default seccomp profile refuses the calls that make namespaces to a process
without CAP_SYS_ADMIN: no user namespace, so no capabilities in one. runsc does not apply that
profile (its ``--oci-seccomp`` breaks thread creation in Debian's release), and gVisor's kernel lets
anyone make a user namespace. The guardian installs this filter before it forks the toolbox, so it
holds for the toolbox and every command after (a filter is inherited and cannot be removed):

- ``unshare`` and ``setns``: EPERM, as under Docker's profile;
- ``clone`` with any namespace flag: EPERM; a plain clone (fork, threads) is allowed;
- ``clone3``: ENOSYS, as Docker's profile answers, so libc falls back to ``clone``, whose flags
  the filter can read (clone3's are behind a pointer);
- ``ptrace``: EPERM. gVisor checks the filter before a tracer's syscall-entry stop and runs the
  call the tracer leaves in the registers without checking it again (Linux checks again since
  4.8), so a command tracing its own child could turn an allowed ``getpid`` into
  ``unshare(CLONE_NEWUSER)``; and with no tracer, a filter of the agent's own that answers
  RET_TRACE gets ENOSYS. So strace and gdb do not work in a guarded sandbox;
- a call of another architecture's table, or an x32 call (number ``0x40000000`` and above, which
  carries x86_64's architecture): ENOSYS.

It needs no_new_privs, which every sandbox has (``no-new-privileges``).
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct

PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
NAMESPACE_FLAGS = 0x7E020000
"""CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET."""

X32_SYSCALL_BIT = 0x40000000
# (audit arch, unshare, setns, clone, clone3, ptrace) by machine
TABLES = {
    "x86_64": (0xC000003E, 272, 308, 56, 435, 101),
    "aarch64": (0xC00000B7, 97, 268, 220, 435, 117),
}

LD_ABS, JEQ, JGE, JSET, RET = 0x20, 0x15, 0x35, 0x45, 0x06
ARCH_AT, NR_AT, ARG0_AT = 4, 0, 16  # offsets in struct seccomp_data (arg 0's low 32 bits on little-endian machines)


def program(machine: str) -> list[tuple[int, int, int, int]]:
    """The filter's instructions, (code, jump if true, jump if false, k) each."""
    arch, unshare, setns, clone, clone3, ptrace = TABLES[machine]
    eperm, enosys = RET_ERRNO | errno.EPERM, RET_ERRNO | errno.ENOSYS
    return [
        (LD_ABS, 0, 0, ARCH_AT),  # 0
        (JEQ, 1, 0, arch),
        (RET, 0, 0, enosys),  # another architecture's call
        (LD_ABS, 0, 0, NR_AT),
        (JGE, 9, 0, X32_SYSCALL_BIT),  # 4: an x32 call -> 14
        (JEQ, 6, 0, unshare),  # -> 12
        (JEQ, 5, 0, setns),  # -> 12
        (JEQ, 4, 0, ptrace),  # -> 12
        (JEQ, 5, 0, clone3),  # 8: -> 14
        (JEQ, 0, 5, clone),  # -> 10, else -> 15
        (LD_ABS, 0, 0, ARG0_AT),
        (JSET, 0, 1, NAMESPACE_FLAGS),
        (RET, 0, 0, eperm),  # 12: unshare, setns, ptrace, or clone into a namespace
        (RET, 0, 0, RET_ALLOW),
        (RET, 0, 0, enosys),  # 14: clone3, an x32 call
        (RET, 0, 0, RET_ALLOW),
    ]


def install() -> None:
    """Install the filter on this process (and so on every process it starts); SystemExit if it cannot be."""
    machine = os.uname().machine
    if machine not in TABLES:
        raise SystemExit(f"toolbox: no seccomp filter for {machine}; this runtime needs one")
    instructions = program(machine)
    raw = b"".join(struct.pack("=HBBI", *instruction) for instruction in instructions)
    buffer = ctypes.create_string_buffer(raw, len(raw))

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = Program(len(instructions), ctypes.cast(buffer, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        raise SystemExit(f"toolbox: cannot install its seccomp filter: {os.strerror(ctypes.get_errno())}")
