"""The second wall: under runsc the agent's system calls meet gVisor's kernel, not the host's.

Under runc a command talks to the host's kernel through the engine's seccomp profile; a kernel bug
reachable by an allowed call crosses the container boundary. Under runsc the same command gets
answers from gVisor's own kernel: another release, its own boot log, and no implementation at all
of calls it does not support, even ones runc's profile lets through.
"""

from __future__ import annotations

import os

from controller.sandbox import isolation as runtimes
from controller.sandbox.docker import DockerSandbox
from tests.integration.helpers import sh

# sched_getattr(0, buf, 56, 0): in the engine's seccomp profile, answered by Linux since 3.14; gVisor has none.
SCHED_GETATTR = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
attr = ctypes.create_string_buffer(56)
number = {"x86_64": 315, "aarch64": 275}[__import__("platform").machine()]
print(libc.syscall(number, 0, attr, 56, 0), __import__("errno").errorcode.get(ctypes.get_errno(), "0"))
"""


async def test_the_kernel_a_command_talks_to(box: DockerSandbox) -> None:
    release = await sh(box, "uname -r")
    log = await sh(box, "dmesg 2>&1 | head -n 3")
    call = await sh(box, f"python3 -c '{SCHED_GETATTR}'")
    host = os.uname().release
    if box.limits.runtime == runtimes.GVISOR:
        assert release.stdout.text.strip() != host, release  # gVisor reports a release of its own
        assert "gVisor" in log.stdout.text, log  # and its own boot log, readable: it is not the host's
        assert call.stdout.text.split() == ["-1", "ENOSYS"], call  # not implemented: the host's code is not reached
    else:
        assert release.stdout.text.strip() == host, release
        assert "gVisor" not in log.stdout.text, log  # the host's log, which a process without capabilities may not read
        assert call.stdout.text.split() == ["0", "0"], call  # the host's kernel answers it


# ptrace(PTRACE_TRACEME) in a child of the command: the first step of having a tracer rewrite a call after the
# seccomp filter allowed it, which gVisor does not check again (Linux does, since 4.8).
TRACEME = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
pid = os.fork()
if pid == 0:
    rc = libc.ptrace(0, 0, None, None)
    print(rc, __import__("errno").errorcode.get(ctypes.get_errno(), "0"), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
"""


async def test_no_command_can_trace_under_gvisor(box: DockerSandbox) -> None:
    traced = await sh(box, f"python3 -c '{TRACEME}'")
    if box.limits.runtime == runtimes.GVISOR:
        assert traced.stdout.text.split() == ["-1", "EPERM"], traced  # the toolbox's filter refuses ptrace
    else:
        assert traced.stdout.text.split() == ["0", "0"], traced  # Linux checks a traced call's filter again
