"""What ``cubicle --version`` and ``--help`` load (issue 43): the command line's own modules, never what a command runs.

Every command module is imported to register its command, so each keeps what it runs (Docker, the environment's
preparation, the sandbox, the server, the model's SDK, MCP) inside the command. The commands that only read a local
store (``sessions``, ``show``, ``changes``) load the store and the workspace, never what runs a turn. How long a
start takes is the bench's row (``python -m bench --section cli``); this holds the import graph that makes it short.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from controller import workspace
from controller.server.store import Row, Store
from controller.wire.events import Event, SessionFinished, SessionStarted, TextDelta, Usage
from tests.sandbox_defaults import AGENT_UID, owned_dir

HEAVY = (
    "docker",
    "anthropic",
    "mcp",
    "fastapi",
    "uvicorn",
    "starlette",
    "httpx",
    "requests",
    "pydantic_settings",
    "controller.environment",
    "controller.sandbox.docker",
    "controller.sandbox",
    "controller.server",
    "controller.workspace",
    "controller.agent",
    "controller.config",
    "controller.client",
)
"""Packages a start that only shows the version or the help must not import (a package: none of its modules)."""

TURN_ONLY = (
    "docker",
    "anthropic",
    "mcp",
    "fastapi",
    "uvicorn",
    "starlette",
    "controller.environment",
    "controller.sandbox.docker",
    "controller.sandbox.backends",
    "controller.agent.loop",
    "controller.agent.tools",
    "controller.server.live",
    "controller.server.api",
    "controller.server.mcpserver",
)
"""What only a turn, the API or MCP runs: ``sessions``, ``show`` and ``changes`` on a local store load none of it."""

RUN_THE_ENTRY = """
import json, sys
sys.argv = ["cubicle", *json.loads(sys.argv[1])]
from controller.cli import app
try:
    app()
except SystemExit:
    pass
print("\\n" + json.dumps(sorted(sys.modules)))
"""


def _loaded(*words: str, data_dir: Path | None = None) -> tuple[str, list[str]]:
    """What ``cubicle WORDS`` prints and every module loaded by the time it returns, from a fresh interpreter (on the
    local store in ``data_dir``, when given)."""
    env = {"COLUMNS": "200", "NO_COLOR": "1", "PATH": "/usr/bin:/bin"}
    if data_dir is not None:
        env["CUBICLE_DATA_DIR"] = str(data_dir)
    done = subprocess.run(
        [sys.executable, "-c", RUN_THE_ENTRY, json.dumps(words)], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    output, _, modules = done.stdout.rstrip("\n").rpartition("\n")
    return output, json.loads(modules)


def _heavy(modules: list[str], heavy: tuple[str, ...] = HEAVY) -> list[str]:
    return [name for name in modules if any(name == top or name.startswith(top + ".") for top in heavy)]


@pytest.mark.parametrize(
    "words", [("--version",), ("--help",), ("run", "--help"), ("env", "--help"), ("image", "build", "--help")]
)
def test_version_and_help_load_none_of_what_the_commands_run(words: tuple[str, ...]) -> None:
    output, modules = _loaded(*words)
    assert "cubicle" in output.lower() or "Usage" in output
    assert _heavy(modules) == []
    assert "controller.cli.run" in modules  # the commands were registered, lazily loading only what they run


def test_help_still_names_every_command() -> None:
    output, _ = _loaded("--help")
    for command in ("run", "continue", "mcp", "serve", "sessions", "show", "changes", "apply", "revert", "env", "gc"):
        assert f" {command} " in output, command


def test_sessions_on_an_empty_local_store_loads_none_of_what_a_turn_runs(tmp_path: Path) -> None:
    output, modules = _loaded("sessions", data_dir=tmp_path / "data")
    assert "0 sessions" in output
    assert _heavy(modules, TURN_ONLY) == []
    assert "controller.server.store" in modules
    assert _heavy(modules, ("controller.workspace", "controller.server.sessions")) == [], "the listing is the store's"


def _finished_session(data_dir: Path, root: Path) -> str:
    """A finished session in ``data_dir``'s store whose layer holds two files the agent wrote."""
    repo = owned_dir(root / "repo")
    (repo / "README.md").write_text("# repo\n")
    layer = workspace.create(data_dir, "cli-graph", repo)
    for name in ("a.py", "b.py"):
        (layer.upper / name).write_text("VALUE = 1\n")
        if os.geteuid() == 0:  # written as the sandbox writes them: by the checkout's owner
            os.chown(layer.upper / name, AGENT_UID, AGENT_UID)
    store = Store(data_dir / "cubicle.db")
    try:
        store.insert(Row.fresh("cli-graph", str(repo), "read", "m", status="idle", finish_reason="end_turn", steps=1))
        events: list[Event] = [
            SessionStarted(session_id="cli-graph", repo=str(repo), task="read", model="m"),
            TextDelta(session_id="cli-graph", text="Reading the tests.\n"),
            SessionFinished(session_id="cli-graph", reason="end_turn", steps=1, usage=Usage()),
        ]
        for seq, event in enumerate(events, 1):
            store.append_event(event.model_copy(update={"seq": seq}))
    finally:
        store.close()
    return "cli-graph"


@pytest.mark.parametrize("command", ["show", "changes"])
def test_show_and_changes_on_a_local_store_load_none_of_what_a_turn_runs(tmp_path: Path, command: str) -> None:
    session_id = _finished_session(tmp_path / "data", tmp_path)
    output, modules = _loaded(command, session_id, data_dir=tmp_path / "data")
    assert ("Reading the tests." if command == "show" else "a.py") in output
    assert _heavy(modules, TURN_ONLY) == []
