"""What ``cubicle --version`` and ``--help`` load (issue 43): the command line's own modules, never what a command runs.

Every command module is imported to register its command, so each keeps what it runs (Docker, the environment's
preparation, the sandbox, the server, the model's SDK, MCP) inside the command. How long a start takes is the
bench's row (``python -m bench --section cli``); this holds the import graph that makes it short.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

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


def _loaded(*words: str) -> tuple[str, list[str]]:
    """What ``cubicle WORDS`` prints and every module loaded by the time it returns, from a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", RUN_THE_ENTRY, json.dumps(words)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"COLUMNS": "200", "NO_COLOR": "1", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    output, _, modules = done.stdout.rstrip("\n").rpartition("\n")
    return output, json.loads(modules)


def _heavy(modules: list[str]) -> list[str]:
    return [name for name in modules if any(name == top or name.startswith(top + ".") for top in HEAVY)]


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
