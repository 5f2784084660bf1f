"""The sandbox fails under a running agent: calls return within their deadline and the session ends recorded."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.agent_harness import text, tool
from tests.eventually import eventually_async
from tests.integration.helpers import container_running


async def test_container_killed_from_outside_mid_command(run_scenario: Any, docker_client: Any) -> None:
    async def killer() -> None:
        container = await eventually_async(
            lambda: asyncio.to_thread(container_running, docker_client, "sleep 77.031"),
            what="the sandbox runs `sleep 77.031`",
            timeout=30,
        )
        container.kill()

    task = asyncio.create_task(killer())
    run = await run_scenario(
        [
            {"content": [tool("run_command", command="sleep 77.031")]},
            {"content": [tool("run_command", command="echo recovered")]},
            {"content": [text("ok")]},
        ]
    )
    await task
    killed, recovered = run.results(1)[0], run.results(2)[0]
    assert killed["is_error"] is True and "fresh sandbox" in killed["content"]
    assert "recovered" in recovered["content"] and not recovered.get("is_error")
    assert run.outcome.reason == "end_turn"


async def test_toolbox_killed_from_inside(run_scenario: Any) -> None:
    run = await run_scenario(
        [
            {"content": [tool("run_command", command="kill -9 -1")]},
            {"content": [tool("read_file", path="README.md")]},
            {"content": [text("ok")]},
        ]
    )
    assert run.results(1)[0]["is_error"] is True
    assert "# demo" in run.results(2)[0]["content"]
    assert run.outcome.reason == "end_turn"
