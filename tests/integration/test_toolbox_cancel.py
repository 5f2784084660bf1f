"""The toolbox's `cancel` op: it kills a running command at once, and that command answers with what it printed.

These talk to the toolbox through the sandbox's channel directly, because the request id
that `cancel` names is the channel's.
"""

from __future__ import annotations

import asyncio
import warnings
from pathlib import Path
from typing import Any

from controller.sandbox.channel import ToolboxChannel
from controller.sandbox.docker import DockerSandbox
from controller.wire import protocol
from controller.wire.protocol import CancelResult, CommandResult, Response
from tests.eventually import eventually_async
from tests.integration.helpers import sh


def _channel(box: DockerSandbox) -> ToolboxChannel:
    assert box._channel is not None
    return box._channel


async def _start(box: DockerSandbox, command: str) -> tuple[int, asyncio.Task[Response]]:
    """Send a run_command and return its request id (the one pending on the channel) and its answer-to-be."""
    channel = _channel(box)
    before = set(channel._pending)
    task = asyncio.create_task(channel.request(protocol.call("run_command", command=command, timeout_s=60), 90))
    (rid,) = await eventually_async(
        lambda: set(channel._pending) - before, what="the request is pending on the channel", interval=0
    )
    return rid, task


async def _wait_for(path: Path) -> None:
    await eventually_async(path.exists, what=f"{path.name} appears: the command started", timeout=10, interval=0.02)


async def _cancel(box: DockerSandbox, rid: Any) -> bool:
    unchecked = protocol.CancelArgs.model_construct(id=rid)  # the toolbox's own check is under test
    with warnings.catch_warnings():  # pydantic warns that it serializes a non-int id: that is the point
        warnings.simplefilter("ignore", UserWarning)
        response = await _channel(box).request(protocol.Cancel(args=unchecked), 30)
    assert response.ok and response.result is not None, response
    return CancelResult.model_validate(response.result).cancelled


async def test_cancel_stops_a_running_command_and_it_answers_with_its_output(sandbox: DockerSandbox) -> None:
    """How soon the answer comes is a benchmark row (bench/responsiveness.py)."""
    rid, answer = await _start(sandbox, "echo before; echo oops >&2; touch started; sleep 60; echo after")
    await _wait_for(sandbox.layer.upper / "started")
    assert await _cancel(sandbox, rid) is True
    response = await answer
    assert response.ok and response.result is not None, response
    result = CommandResult.model_validate(response.result)
    assert result.cancelled is True and result.timed_out is False
    assert result.exit_code == 128 + 9
    assert result.stdout.text == "before\n" and result.stderr.text == "oops\n"  # never "after": the sleep was cut
    assert "sleep 60" not in (await sh(sandbox, "ps -eo args")).stdout.text


async def test_cancel_also_kills_what_escaped_the_command(sandbox: DockerSandbox) -> None:
    rid, answer = await _start(
        sandbox, "setsid sleep 941 > /dev/null 2>&1 < /dev/null & sleep 942 & touch started; sleep 60"
    )
    await _wait_for(sandbox.layer.upper / "started")
    assert await _cancel(sandbox, rid) is True
    assert CommandResult.model_validate((await answer).result).cancelled is True
    assert "sleep 94" not in (await sh(sandbox, "ps -eo args")).stdout.text


async def test_cancel_of_an_unknown_or_finished_request_is_false(sandbox: DockerSandbox) -> None:
    assert await _cancel(sandbox, 987654) is False
    rid, answer = await _start(sandbox, "echo done")
    finished = CommandResult.model_validate((await answer).result)
    assert finished.cancelled is False and finished.exit_code == 0
    assert await _cancel(sandbox, rid) is False
    assert await _cancel(sandbox, "not an id") is False


async def test_cancel_leaves_other_commands_running(sandbox: DockerSandbox) -> None:
    keep_rid, keep = await _start(sandbox, "touch kept-started; sleep 1; echo kept")
    drop_rid, drop = await _start(sandbox, "touch dropped-started; sleep 60")
    await _wait_for(sandbox.layer.upper / "kept-started")
    await _wait_for(sandbox.layer.upper / "dropped-started")
    assert await _cancel(sandbox, drop_rid) is True
    assert CommandResult.model_validate((await drop).result).cancelled is True
    kept = CommandResult.model_validate((await keep).result)
    assert kept.cancelled is False and kept.exit_code == 0 and kept.stdout.text == "kept\n"
    assert keep_rid != drop_rid
