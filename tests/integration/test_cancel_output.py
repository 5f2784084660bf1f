"""A command stopped with its turn is reported as what it was: cancelled after N s, with its output so far."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic

from controller.agent.anthropic_model import AnthropicModel
from controller.agent.loop import Agent, Conversation
from controller.agent.model import SYSTEM_PROMPT
from controller.sandbox.docker import DockerSandbox
from controller.wire.events import ListSink, ToolCall, ToolResult
from controller.wire.limits import Limits
from tests.agent_harness import LIMITS, register, text, tool
from tests.eventually import eventually_async
from tests.integration.helpers import container_running

TURNS = [
    {
        "content": [
            tool("read_file", path="README.md"),
            tool("run_command", command="echo started; sleep 60.529; echo never"),
        ]
    },
    {"content": [text("unreachable")]},
]


async def _agent(server: Any, box: DockerSandbox, limits: Limits) -> tuple[Agent, ListSink, anthropic.AsyncAnthropic]:
    name = register(server, TURNS, prefix="cancel")
    client = anthropic.AsyncAnthropic(api_key="test", base_url=server.url, max_retries=0)
    sink = ListSink()
    agent = Agent(
        session_id=name,
        model=AnthropicModel(client, name, 1024),
        sandbox=box,
        sink=sink,
        limits=limits,
        system=SYSTEM_PROMPT,
    )
    return agent, sink, client


def _answers(convo: Conversation) -> list[dict[str, Any]]:
    last = convo.messages[-1]
    assert last["role"] == "user"
    return list(last["content"])


async def test_cancelling_the_turn_reports_the_command_with_its_output(
    model_server: Any, make_repo: Callable[..., Path], sandbox_factory: Callable[..., DockerSandbox], docker_client: Any
) -> None:
    """How soon the cancelled turn ends is a benchmark row (bench/responsiveness.py)."""
    agent, sink, client = await _agent(model_server, sandbox_factory(make_repo()), LIMITS)
    convo = Conversation()
    convo.add_user_text("go")
    turn = asyncio.create_task(agent.run_turn(convo))
    await eventually_async(
        lambda: any(isinstance(e, ToolCall) and e.name == "run_command" for e in sink.events),
        what="the agent calls run_command",
        interval=0.02,
    )
    await eventually_async(
        lambda: asyncio.to_thread(container_running, docker_client, "sleep 60.529"), what="the command runs"
    )
    turn.cancel()
    outcome = await turn
    await client.close()
    assert outcome.reason == "cancelled"
    read, command = _answers(convo)
    assert not read.get("is_error") and "# demo" in read["content"]  # it finished before the cancel: kept
    assert command["is_error"] and re.match(r"cancelled after \d+\.\ds: the turn was stopped", command["content"]), (
        command
    )
    assert "<stdout>\nstarted\n</stdout>" in command["content"] and "never" not in command["content"]
    result = next(e for e in sink.events if isinstance(e, ToolResult) and e.name == "run_command")
    assert result.is_error and result.exit_code == 137 and "started" in result.output


async def test_the_wall_clock_limit_reports_the_command_with_its_output(
    model_server: Any, make_repo: Callable[..., Path], sandbox_factory: Callable[..., DockerSandbox]
) -> None:
    limits = LIMITS.model_copy(update={"wall_clock_s": 3})
    agent, _, client = await _agent(model_server, sandbox_factory(make_repo()), limits)
    convo = Conversation()
    convo.add_user_text("go")
    outcome = await agent.run_turn(convo)
    await client.close()
    assert outcome.reason == "timeout"
    _, command = _answers(convo)
    assert command["is_error"] and command["content"].startswith("cancelled after"), command
    assert "started" in command["content"]
