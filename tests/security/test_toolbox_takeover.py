"""The toolbox is not the agent's to control: no code of the agent's runs in it, and no command can trace it.

Commands run as the toolbox's uid, so what keeps them out is that the toolbox runs isolated
(``python3 -I -S``: no workspace, user site or PYTHON* variable on its import path) and is
undumpable (no ptrace, no /proc/<pid>/mem, fd or environ for anyone but itself).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

from controller import workspace
from controller.config import DEFAULT_IMAGE
from controller.sandbox import isolation as runtimes
from controller.sandbox import owners
from controller.sandbox.attach import AttachStream
from controller.sandbox.channel import ToolboxChannel
from controller.sandbox.docker import (
    DockerSandbox,
    container_options,
    raw_socket,
    remove_volume,
    volume_kwargs,
    volume_name,
)
from controller.wire import protocol
from controller.wire.protocol import CommandResult, PingResult
from tests.integration.helpers import call, expect, failure, sh
from tests.sandbox_defaults import SECURE_LIMITS, TEST_INSTANCE
from tests.security.probes import OPEN, TRACE
from tests.shadow_modules import markers, plant_shadow_modules


async def test_workspace_modules_do_not_run_in_a_restarted_toolbox(
    make_repo: Callable[..., Path], sandbox_factory: Callable[..., DockerSandbox]
) -> None:
    repo = make_repo()
    plant_shadow_modules(repo)
    box = sandbox_factory(repo, SECURE_LIMITS)
    ping = expect(await call(box, "ping"), PingResult)
    first = box.container.id
    failure(await call(box, "run_command", command=f"kill -9 {ping.pid}; sleep 5"), "sandbox_died")
    again = expect(await call(box, "ping"), PingResult)
    assert box.container.id != first and box.restarts == 1 and again.uid == ping.uid
    assert (await sh(box, "echo still works")).stdout.text == "still works\n"
    assert markers(box.layer.upper) == []  # a module that ran would have written its marker into the layer
    assert (await sh(box, "touch HIJACKED-control")).exit_code == 0
    assert markers(box.layer.upper) == ["HIJACKED-control"]  # where a marker would be seen


async def test_python_variables_in_the_container_reach_commands_not_the_toolbox(
    make_repo: Callable[..., Path], docker_client: Any, tmp_path: Path
) -> None:
    """PYTHONPATH pointing into the workspace (as a repository's environment might) leaves the toolbox alone."""
    repo = make_repo()
    plant_shadow_modules(repo)
    session_id = "test-" + secrets.token_hex(4)
    labels = owners.labels(TEST_INSTANCE, session_id)
    layer = workspace.create(tmp_path / "data", session_id, repo)
    docker_client.volumes.create(**volume_kwargs(layer, volume_name(session_id), labels))
    options = container_options(DEFAULT_IMAGE, layer, SECURE_LIMITS, labels)
    options["environment"] |= {"PYTHONPATH": "/workspace", "PYTHONSTARTUP": "/workspace/json.py", "PYTHONINSPECT": "1"}
    container = await asyncio.to_thread(docker_client.containers.create, **options)
    channel = None
    try:
        attached = await asyncio.to_thread(
            docker_client.api.attach_socket, container.id, {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
        )
        channel = ToolboxChannel(await AttachStream.open(raw_socket(attached)))
        await asyncio.to_thread(container.start)
        ping = await channel.request(protocol.call("ping"), 30)
        assert ping.ok, ping
        ran = await channel.request(protocol.call("run_command", command="echo $PYTHONPATH"), 30)
        assert ran.ok and ran.result is not None, ran
        assert CommandResult.model_validate(ran.result).stdout.text == "/workspace\n"
        assert markers(layer.upper) == []
    finally:
        if channel is not None:
            await channel.close()
        await asyncio.to_thread(container.remove, force=True)
        await remove_volume(docker_client, session_id)


async def test_commands_cannot_ptrace_the_toolbox(box: DockerSandbox) -> None:
    ping = expect(await call(box, "ping"), PingResult)
    traced = await sh(box, f"python3 -c '{TRACE.format(pid=ping.pid)}'")
    assert traced.stdout.text == "-1 1\n", traced  # EPERM
    assert (await sh(box, "echo untouched")).stdout.text == "untouched\n"


async def test_commands_cannot_open_the_toolbox_memory_or_channel(box: DockerSandbox) -> None:
    """Its channel (stdin, stdout), memory and environment are closed to commands.

    What happens if a sandbox reaches the stream anyway: test_channel_flood.py. Pid 1, which holds
    the same stream: test_init_process.py.
    """
    ping = expect(await call(box, "ping"), PingResult)
    closed = ["fd/1 Permission denied", "fd/0 Permission denied", "mem Permission denied", "environ Permission denied"]
    if runtimes.guarded(box.limits.runtime):
        # The toolbox's parent is the guardian, which holds the controller's stream: all of it is closed.
        guardian = await sh(box, f"cut -d' ' -f4 /proc/{ping.pid}/stat")
        opened = await sh(box, f"python3 -c '{OPEN.format(pid=guardian.stdout.text.strip())}'")
        assert opened.stdout.text.splitlines() == [*closed[:3], "environ opened"], opened  # see test_init_process
        # The toolbox's own pipes (to the guardian) and memory are closed too.
        opened = await sh(box, f"python3 -c '{OPEN.format(pid=ping.pid)}'")
        assert opened.stdout.text.splitlines() == [*closed[:3], "environ opened"], opened
    else:
        opened = await sh(box, f"python3 -c '{OPEN.format(pid=ping.pid)}'; ls /proc/{ping.pid}/fd")
        assert opened.stdout.text.splitlines() == closed
        assert "Permission denied" in opened.stderr.text
    assert (await sh(box, "echo fine")).stdout.text == "fine\n" and box.restarts == 0


async def test_the_undumpable_toolbox_still_does_its_own_work(box: DockerSandbox) -> None:
    """It still raises its commands' OOM score and still sweeps what escapes their groups."""
    # The toolbox writes the score of the command's shell just after starting it: wait for it (a busy machine
    # may take longer than a moment), up to five seconds.
    wait = 'for _ in $(seq 50); do [ "$(cat /proc/$$/oom_score_adj)" = 1000 ] && break; sleep 0.1; done'
    assert (await sh(box, f"{wait}; cat /proc/$$/oom_score_adj")).stdout.text == "1000\n"
    await sh(box, "setsid sleep 931 > /dev/null 2>&1 < /dev/null &")
    assert "sleep 931" not in (await sh(box, "ps -eo args")).stdout.text
