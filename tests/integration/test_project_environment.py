"""A real project's own test suite, run by the agent in its environment: built, set up, then offline.

The fixture is inflection (a small public Python package, MIT, see tests/fixtures/inflection/FIXTURE.md)
with a devcontainer.json: a Dockerfile that installs Debian's pytest, and a setup step that makes a
virtualenv in the workspace. A scripted session breaks one function, runs the suite with network
``none`` and sees it fail, fixes it, and sees it pass; the assertions read pytest's real output.
A second session on the same checkout reuses the image and the setup tree.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cli_helpers import cubicle
from tests.integration.pty_helpers import scenario_file
from tests.sandbox_defaults import AGENT_UID

pytestmark = pytest.mark.integration

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "inflection"
FIXED = "    return word.replace('_', '-')\n"
BROKEN = "    return word.replace('_', '+')\n"
PYTEST = ".venv/bin/python -m pytest -q -p no:cacheprovider test_inflection.py 2>&1 | tail -n 15"


def _tool(name: str, **args: Any) -> dict[str, Any]:
    return {"type": "tool_use", "name": name, "input": args}


SCENARIO = {
    "name": "break-and-fix",
    "turns": [
        {"content": [_tool("edit_file", path="inflection/__init__.py", old_string=FIXED, new_string=BROKEN)]},
        {"content": [_tool("run_command", command=PYTEST, timeout_s=120)]},
        {"content": [_tool("edit_file", path="inflection/__init__.py", old_string=BROKEN, new_string=FIXED)]},
        {"content": [_tool("run_command", command=PYTEST, timeout_s=120)]},
        {
            "content": [
                _tool("run_command", command="python3 -c \"import socket; socket.getaddrinfo('deb.debian.org', 80)\"")
            ]
        },
        {"content": [{"type": "text", "text": "dasherize is fixed and the suite passes."}]},
    ],
}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    repo = tmp_path / "inflection"
    shutil.copytree(FIXTURE, repo, symlinks=True)
    (repo / ".git").mkdir()
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    if os.geteuid() == 0:
        for path in [repo, *repo.rglob("*")]:
            os.lchown(path, AGENT_UID, AGENT_UID)
    return repo


def _events(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def test_the_agent_runs_the_projects_own_tests_offline(project: Path, tmp_path: Path) -> None:
    env = {"CUBICLE_DATA_DIR": str(tmp_path / "data")}
    done = cubicle(
        "run",
        str(project),
        "fix dasherize",
        "--json",
        "--no-apply",
        "--scenario",
        scenario_file(tmp_path, SCENARIO),
        env=env,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    events = _events(done.stdout)
    setup = "".join(e["text"] for e in events if e["type"] == "setup_output" and e["phase"] == "setup")
    assert "pytest 7." in setup  # Debian's pytest, seen from the virtualenv setup made
    notes = "".join(e["text"] for e in events if e["type"] == "setup_output" and e["phase"] == "environment")
    assert "'forwardPorts' ignored" in notes
    runs = [e for e in events if e["type"] == "tool_result" and e["name"] == "run_command"]
    broken, fixed, lookup = (e["output"] for e in runs)
    assert re.search(r"\b2 failed, 45\d passed in ", broken) and "FAILED test_inflection.py::test_dasherize" in broken
    assert re.search(r"\b45\d passed in ", fixed) and "failed" not in fixed
    assert "gaierror" in lookup or "Temporary failure in name resolution" in lookup  # network none
    finished = next(e for e in events if e["type"] == "session_finished")
    assert finished["reason"] == "end_turn"
    changes = next(e for e in events if e["type"] == "changes")
    assert changes["summary"]["files"] == 0  # the fix undid the break; the virtualenv is never a change
    assert not (project / ".venv").exists()

    again = cubicle(
        "run",
        str(project),
        "again",
        "--json",
        "--no-apply",
        "--scenario",
        scenario_file(tmp_path, SCENARIO),
        env=env,
        timeout=900,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    reused = "".join(e["text"] for e in _events(again.stdout) if e["type"] == "setup_output")
    assert "reusing the setup made before" in reused
    assert "Step 1/" not in reused  # the image was not built again


VENV_PATH_SCENARIO = {
    "name": "venv-on-path",
    "turns": [
        {
            "content": [
                _tool(
                    "run_command",
                    timeout_s=120,
                    command="python -m pytest -q -p no:cacheprovider test_inflection.py 2>&1 | tail -n 2; "
                    'echo "PATH=$PATH"; command -v python',
                )
            ]
        },
        {"content": [{"type": "text", "text": "The suite ran with the virtualenv's python."}]},
    ],
}


def test_the_definitions_path_reaches_the_agents_commands_whatever_the_login_profile_does(
    project: Path, tmp_path: Path
) -> None:
    """remoteEnv puts the workspace's virtualenv first on PATH, over the image's own (``${containerEnv:PATH}``); a
    login shell's /etc/profile (Debian's sets PATH outright) must not take it away: bare ``python`` (which Debian
    does not have) is the virtualenv's."""
    definition = project / ".devcontainer" / "devcontainer.json"
    text = definition.read_text().replace(
        '"containerEnv":', '"remoteEnv": {"PATH": "/workspace/.venv/bin:${containerEnv:PATH}"},\n  "containerEnv":'
    )
    definition.write_text(text)
    env = {"CUBICLE_DATA_DIR": str(tmp_path / "data")}
    shown = cubicle("env", "show", str(project), env=env, timeout=120)
    assert "/workspace/.venv/bin:${containerEnv:PATH}" in shown.stdout, shown.stdout + shown.stderr
    done = cubicle(
        "run",
        str(project),
        "run the suite",
        "--json",
        "--no-apply",
        "--scenario",
        scenario_file(tmp_path, VENV_PATH_SCENARIO),
        env=env,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (result,) = [e for e in _events(done.stdout) if e["type"] == "tool_result"]
    assert re.search(r"\b45\d passed in ", result["output"]), result["output"]
    path = next(line for line in result["output"].splitlines() if line.startswith("PATH="))
    # The venv, then the image's own PATH (its ENV), not the one Debian's /etc/profile sets for a login shell.
    assert path == "PATH=/workspace/.venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", path
    assert "/workspace/.venv/bin/python" in result["output"].splitlines()
