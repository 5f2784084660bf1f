"""A dead or silent toolbox becomes an error result, and the next call gets a fresh sandbox."""

from __future__ import annotations

import asyncio
from typing import Any

from docker.errors import NotFound

from controller.sandbox.docker import DockerSandbox
from controller.wire import protocol
from controller.wire.protocol import CommandResult, ReadResult
from tests.eventually import eventually_async
from tests.integration.helpers import call, expect, failure, sh


def _runs(client: Any, container: str, needle: str) -> bool:
    """Whether a process of ``container`` (a runc one: its ``top`` shows arguments) runs ``needle``."""
    return any(needle in " ".join(p) for p in client.api.top(container)["Processes"] or [])


def _state(client: Any, container: str) -> str:
    """The container's state (``running``, ``exited``…), or ``gone`` once it is removed."""
    try:
        return str(client.api.inspect_container(container)["State"]["Status"])
    except NotFound:
        return "gone"


async def test_container_killed_from_outside_mid_call(sandbox: DockerSandbox, docker_client: Any) -> None:
    """How soon the call answers is a benchmark row (bench/responsiveness.py); here it must answer, and say why."""
    first = sandbox.container.id
    pending = asyncio.create_task(call(sandbox, "run_command", command="sleep 30.373"))
    await eventually_async(
        lambda: asyncio.to_thread(_runs, docker_client, first, "sleep 30.373"), what="the command runs mid-call"
    )
    await asyncio.to_thread(docker_client.api.kill, first)
    err = failure(await pending, "sandbox_died")
    assert "fresh sandbox" in err.message
    assert expect(await call(sandbox, "read_file", path="README.md"), ReadResult).content.endswith("# demo")
    assert sandbox.container.id != first and sandbox.restarts == 1


async def test_toolbox_killed_from_inside(sandbox: DockerSandbox) -> None:
    failure(await call(sandbox, "run_command", command="kill -9 -1"), "sandbox_died")
    assert (await sh(sandbox, "echo back")).stdout.text == "back\n"


async def test_controller_deadline_when_toolbox_is_silent(sandbox: DockerSandbox) -> None:
    """The controller's 1 s deadline ends the call (the toolbox would have answered after 60 s, with a result)."""
    outcome = await sandbox.call(protocol.call("run_command", command="sleep 60", timeout_s=60), 1.0)
    err = failure(outcome, "deadline")
    assert "restarted" in err.message
    assert expect(await call(sandbox, "run_command", command="true"), CommandResult).exit_code == 0


async def test_workspace_survives_restart(sandbox: DockerSandbox, docker_client: Any) -> None:
    await call(sandbox, "write_file", path="kept.txt", content="still here\n")
    killed = sandbox.container.id
    await asyncio.to_thread(docker_client.api.kill, killed)
    await eventually_async(
        lambda: asyncio.to_thread(_state, docker_client, killed), until=lambda s: s != "running", what="it stops"
    )
    read = await call(sandbox, "read_file", path="kept.txt")
    assert expect(read, ReadResult).content.endswith("still here")


async def test_stop_removes_the_container_and_what_runs_in_it(sandbox: DockerSandbox, docker_client: Any) -> None:
    """How long a stop takes is a benchmark row (bench/responsiveness.py)."""
    cid = sandbox.container.id
    await call(sandbox, "run_command", command="sleep 100 & echo")
    await sandbox.stop()
    assert not docker_client.containers.list(all=True, filters={"id": cid})
