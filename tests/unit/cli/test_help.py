"""What ``--help`` says, command by command (issue 36): no placeholders a person would type, each flag its own text."""

from __future__ import annotations

import re
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from controller.agent.anthropic_model import make_client
from controller.cli import app
from controller.config import Settings
from controller.errors import ConfigError


def _commands(group: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command and group, as the words that name it (groups by their ``commands``: Typer may carry its own
    copy of click)."""
    found: list[tuple[str, ...]] = [prefix]
    for name, command in group.commands.items():
        path = (*prefix, name)
        found += _commands(command, path) if hasattr(command, "commands") else [path]
    return found


COMMANDS = _commands(typer.main.get_group(app))


def _help(*words: str) -> str:
    done = CliRunner().invoke(app, [*words, "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert done.exit_code == 0, done.output
    return done.output


@pytest.mark.parametrize("words", COMMANDS, ids=lambda words: " ".join(words) or "cubicle")
def test_help_shows_arguments_and_flags_plainly(words: tuple[str, ...]) -> None:
    text = _help(*words)
    assert "<bool>" not in text  # a flag takes no value
    usage = next(line for line in text.splitlines() if "Usage:" in line)
    assert not re.search(r"\{\w+\}", usage), usage  # REPO, not {REPO}


def test_run_usage_names_repo_and_task() -> None:
    assert re.search(r"Usage: \S+ run \[OPTIONS\] REPO TASK", _help("run"))
    assert re.search(r"Usage: \S+ apply \[OPTIONS\] ID \[PATH\]\.\.\.", _help("apply"))
    assert re.search(r"Usage: \S+ env show \[OPTIONS\] \[REPO\]", _help("env", "show"))
    assert len(COMMANDS) > 20 and ("image", "build") in COMMANDS


def test_revert_force_speaks_of_revert() -> None:
    text = " ".join(_help("revert").split())
    assert "Restore PATH" in text and "since the apply" in text
    assert "Overwrite" not in text and "definition file" not in text  # apply's --force, not revert's


def test_a_missing_api_key_points_at_the_offline_demo() -> None:
    with pytest.raises(ConfigError) as raised:
        make_client(Settings(api_key=None))
    assert "--scenario demo" in (raised.value.hint or "")
