"""A dead or silent toolbox becomes an error result, and the next call gets a fresh sandbox."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from controller.sandbox.docker import DockerSandbox
from controller.wire import protocol
from controller.wire.protocol import CommandResult, ReadResult
from tests.integration.helpers import call, expect, failure, sh


@pytest.mark.solo
async def test_container_killed_from_outside_mid_call(sandbox: DockerSandbox, docker_client: Any) -> None:
    first = sandbox.container.id
    pending = asyncio.create_task(call(sandbox, "run_command", command="sleep 30"))
    await asyncio.sleep(0.5)
    started = time.monotonic()
    await asyncio.to_thread(docker_client.api.kill, first)
    err = failure(await pending, "sandbox_died")
    assert time.monotonic() - started < 5
    assert "fresh sandbox" in err.message
    assert expect(await call(sandbox, "read_file", path="README.md"), ReadResult).content.endswith("# demo")
    assert sandbox.container.id != first and sandbox.restarts == 1


async def test_toolbox_killed_from_inside(sandbox: DockerSandbox) -> None:
    failure(await call(sandbox, "run_command", command="kill -9 -1"), "sandbox_died")
    assert (await sh(sandbox, "echo back")).stdout.text == "back\n"


@pytest.mark.solo
async def test_controller_deadline_when_toolbox_is_silent(sandbox: DockerSandbox) -> None:
    started = time.monotonic()
    outcome = await sandbox.call(protocol.call("run_command", command="sleep 60", timeout_s=60), 1.0)
    assert time.monotonic() - started < 3
    err = failure(outcome, "deadline")
    assert "restarted" in err.message
    assert expect(await call(sandbox, "run_command", command="true"), CommandResult).exit_code == 0


async def test_workspace_survives_restart(sandbox: DockerSandbox, docker_client: Any) -> None:
    await call(sandbox, "write_file", path="kept.txt", content="still here\n")
    await asyncio.to_thread(docker_client.api.kill, sandbox.container.id)
    await asyncio.sleep(0.2)
    read = await call(sandbox, "read_file", path="kept.txt")
    assert expect(read, ReadResult).content.endswith("still here")


@pytest.mark.solo
async def test_stop_is_fast_and_removes_the_container(sandbox: DockerSandbox, docker_client: Any) -> None:
    cid = sandbox.container.id
    await call(sandbox, "run_command", command="sleep 100 & echo")
    started = time.monotonic()
    await sandbox.stop()
    assert time.monotonic() - started < 2
    assert not docker_client.containers.list(all=True, filters={"id": cid})
