"""Pid 1 holds the toolbox's stdio too, so it is as unreachable from commands as the toolbox itself.

Docker's own init ran dumpable as the agent's uid: a command opened /proc/1/fd/0 and /proc/1/fd/1,
stole the controller's requests, forged their answers and injected commands of its own that the
sweep then left running. The image's init is an execute-only tini, which the kernel starts undumpable.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from pathlib import Path

from controller.sandbox import isolation as runtimes
from controller.sandbox.docker import DockerSandbox
from tests.integration.helpers import sh
from tests.sandbox_defaults import SECURE_LIMITS
from tests.security.probes import OPEN, TRACE

INJECT = """
import json, os
request = {"id": 900001, "op": "run_command", "args": {"command": "touch /workspace/INJECTED", "timeout_s": 5}}
try:
    fd = os.open("/proc/1/fd/0", os.O_WRONLY | os.O_NONBLOCK)
    os.write(fd, json.dumps(request).encode() + b"\\n")
    print("injected")
except OSError as err:
    print(err.strerror)
"""


async def test_commands_cannot_reach_pid_1(
    make_repo: Callable[..., Path], sandbox_factory: Callable[..., DockerSandbox]
) -> None:
    """As the repository's uid; a root-owned repository is refused (test_privilege), so no command runs as uid 0."""
    box = sandbox_factory(make_repo(), SECURE_LIMITS)
    who = await sh(box, "id -u; cat /proc/1/comm")
    init = posixpath.basename(runtimes.GUARDED_INIT) if runtimes.guarded(box.limits.runtime) else "tini"
    assert who.stdout.text == f"1000\n{init}\n", who
    traced = await sh(box, f"python3 -c '{TRACE.format(pid=1)}'")
    assert traced.stdout.text == "-1 1\n", traced  # EPERM
    opened = await sh(box, f"python3 -c '{OPEN.format(pid=1)}'")
    # gVisor's /proc shows any process's environment (the variables every command gets) to everyone.
    environ = "opened" if box.limits.runtime == runtimes.GVISOR else "Permission denied"
    assert opened.stdout.text.splitlines() == [
        "fd/1 Permission denied",
        "fd/0 Permission denied",
        "mem Permission denied",
        f"environ {environ}",
    ]
    injected = await sh(box, f"python3 -c '{INJECT}'; sleep 0.5; ls /workspace/INJECTED")
    assert injected.stdout.text == "Permission denied\n" and injected.exit_code != 0, injected
    assert not (box.repo / "INJECTED").exists()
    assert (await sh(box, "echo fine")).stdout.text == "fine\n" and box.restarts == 0
