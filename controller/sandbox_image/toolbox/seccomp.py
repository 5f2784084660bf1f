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
- a call of another architecture's table: ENOSYS.

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

# (audit arch, unshare, setns, clone, clone3) by machine
TABLES = {
    "x86_64": (0xC000003E, 272, 308, 56, 435),
    "aarch64": (0xC00000B7, 97, 268, 220, 435),
}

LD_ABS, JEQ, JSET, RET = 0x20, 0x15, 0x45, 0x06
ARCH_AT, NR_AT, ARG0_AT = 4, 0, 16  # offsets in struct seccomp_data (arg 0's low 32 bits on little-endian machines)


def program(machine: str) -> list[tuple[int, int, int, int]]:
    """The filter's instructions, (code, jump if true, jump if false, k) each."""
    arch, unshare, setns, clone, clone3 = TABLES[machine]
    eperm, enosys = RET_ERRNO | errno.EPERM, RET_ERRNO | errno.ENOSYS
    return [
        (LD_ABS, 0, 0, ARCH_AT),
        (JEQ, 1, 0, arch),
        (RET, 0, 0, enosys),  # another architecture's call
        (LD_ABS, 0, 0, NR_AT),
        (JEQ, 5, 0, unshare),
        (JEQ, 4, 0, setns),
        (JEQ, 5, 0, clone3),
        (JEQ, 0, 5, clone),
        (LD_ABS, 0, 0, ARG0_AT),
        (JSET, 0, 1, NAMESPACE_FLAGS),
        (RET, 0, 0, eperm),  # unshare, setns, or clone into a namespace
        (RET, 0, 0, RET_ALLOW),
        (RET, 0, 0, enosys),  # clone3
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
