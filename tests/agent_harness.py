"""Run the real agent loop on a scenario: the real SDK over HTTP to the scripted server.

``run_scenario`` runs it against a real Docker sandbox; ``run_in_memory`` against a
MemorySandbox holding the same small repository, for loop tests that need no container.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from controller.agent.anthropic_model import AnthropicModel
from controller.agent.loop import Agent, Conversation, Hooks, TurnOutcome
from controller.agent.model import SYSTEM_PROMPT
from controller.agent.scripted import Scenario, ScriptedServer
from controller.agent.tools import Approver
from controller.sandbox.docker import DockerSandbox
from controller.sandbox.sandboxes import Sandbox
from controller.testing import MemorySandbox, Reply
from controller.wire.events import ListSink
from controller.wire.limits import Limits
from controller.wire.policies import ContextPolicy

LIMITS = Limits(memory_mb=512, pids=256, tmpfs_mb=64, max_steps=20)
REPO_FILES = {"README.md": "# demo\n", "src/app.py": "def total(items):\n    return sum(items)\n"}
"""What every scenario's repository holds, in Docker (see make_repo) and in memory alike."""


def register(server: ScriptedServer, turns: list[dict[str, Any]], prefix: str = "t", **scenario: Any) -> str:
    """Add a scenario under a fresh model name; requests naming that model get its turns."""
    name = f"{prefix}-{secrets.token_hex(4)}"
    server.scenarios[name] = Scenario.model_validate({"name": name, "turns": turns, **scenario})
    return name


def open_gate(server_url: str, name: str) -> None:
    """Let the scripted server answer the turns held ``after`` this gate (see ``Turn.after``)."""
    httpx.post(f"{server_url}/_gates/{name}", timeout=30).raise_for_status()


def tool(name: str, **args: Any) -> dict[str, Any]:
    return {"type": "tool_use", "name": name, "input": args}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


class Run:
    """One scripted session: its scenario, the sink's events and what the server recorded."""

    def __init__(
        self,
        server: ScriptedServer,
        name: str,
        sink: ListSink,
        convo: Conversation,
        outcome: TurnOutcome,
        sandbox: Sandbox,
    ) -> None:
        self.sandbox = sandbox
        self.requests = server.requests_for(name)
        self.events = sink.events
        self.convo = convo
        self.outcome = outcome

    def results(self, request: int) -> list[dict[str, Any]]:
        """The tool_result blocks of the last user message of the ``request``-th request."""
        last = self.requests[request]["messages"][-1]
        assert last["role"] == "user"
        return [b for b in last["content"] if b["type"] == "tool_result"]

    def of_type(self, kind: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]


async def run_turn(
    server: ScriptedServer,
    sandbox: Sandbox,
    turns: list[dict[str, Any]],
    limits: Limits = LIMITS,
    approver: Approver | None = None,
    retries: int = 3,
    context: ContextPolicy | None = None,
    convo: Conversation | None = None,
    name: str | None = None,
) -> Run:
    """One turn of the real loop on ``turns`` answering "do the task" (or continuing ``convo`` under ``name``)."""
    name = name or register(server, turns)
    client = anthropic.AsyncAnthropic(api_key="test", base_url=server.url, max_retries=retries)  # type: ignore[attr-defined]
    sink, convo = ListSink(), convo or Conversation()
    agent = Agent(
        session_id=name,
        model=AnthropicModel(client, name, 1024, context.server_edits() if context else None),
        sandbox=sandbox,
        sink=sink,
        limits=limits,
        system=SYSTEM_PROMPT,
        context=context,
        hooks=Hooks(approver=approver),
    )
    convo.add_user_text("do the task")
    try:
        outcome = await agent.run_turn(convo)
    finally:
        await client.close()
    return Run(server, name, sink, convo, outcome, sandbox)


@pytest.fixture
def run_scenario(
    model_server: ScriptedServer, make_repo: Callable[..., Path], sandbox_factory: Callable[..., DockerSandbox]
) -> Callable[..., Any]:
    async def run(turns: list[dict[str, Any]], limits: Limits = LIMITS, **options: Any) -> Run:
        return await run_turn(model_server, sandbox_factory(make_repo(), limits), turns, limits, **options)

    return run


@pytest.fixture
def run_in_memory(model_server: ScriptedServer) -> Callable[..., Any]:
    """Like run_scenario, on a MemorySandbox; ``commands`` answers run_command (see controller.testing)."""

    async def run(
        turns: list[dict[str, Any]],
        limits: Limits = LIMITS,
        commands: dict[str, Reply] | None = None,
        sandbox: Sandbox | None = None,
        **options: Any,
    ) -> Run:
        box = sandbox or MemorySandbox(REPO_FILES, commands)
        return await run_turn(model_server, box, turns, limits, **options)

    return run
