"""Real projects, the first time: each one's own suite runs inside a session and gives the counts it gives on the
host, once with the environments guide's recommended definition and once with no definition at all (detected).

The fixtures are small public projects with their licences (tests/fixtures/*/FIXTURE.md): inflection (Python,
pytest) and flat (Node, ``node --test``). The setups reach the real package registries through the setup's
network (pip's and npm's defaults, Debian's archive for the Node image's packages), as a new user's would.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cli_helpers import cubicle
from tests.integration.pty_helpers import scenario_file
from tests.sandbox_defaults import AGENT_UID

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@dataclass(frozen=True)
class Project:
    fixture: str
    command: str
    """What a user types to run the project's suite (run by the agent in the session, and on the host)."""
    counts: str
    """What finds the pass and fail counts in its output."""
    recommended: str
    """The guide's recommended ``.cubicle/environment.toml`` for such a project."""
    detected: str


PYTHON = Project(
    fixture="inflection",
    command="python3 -m pytest -p no:cacheprovider test_inflection.py",
    counts=r"(?m)^=+ (?:(?P<fail>\d+) failed, )?(?P<pass>\d+) passed",
    recommended=(
        'setup = "python3 -m venv .venv && .venv/bin/pip install -e . -r requirements.txt"\n'
        'env = { PATH = "/workspace/.venv/bin:${containerEnv:PATH}" }\n'
    ),
    detected="Python (pyproject.toml, setup.py, setup.cfg, requirements.txt)",
)
NODE = Project(
    fixture="flat",
    command="npm test",
    counts=r"(?m)^# pass (?P<pass>\d+)\n# fail (?P<fail>\d+)$",
    recommended='packages = ["nodejs", "npm"]\nsetup = "npm ci"\n',
    detected="Node (package.json, package-lock.json)",
)


def _counts(project: Project, output: str) -> tuple[int, int]:
    found = re.search(project.counts, output)
    assert found, output[-3000:]
    return int(found.group("pass")), int(found.group("fail") or 0)


def _copy(project: Project, where: Path) -> Path:
    """The fixture as a user's checkout: a git repository (setuptools_scm reads its version from git)."""
    repo = where / project.fixture
    shutil.copytree(FIXTURES / project.fixture, repo, ignore=shutil.ignore_patterns(".devcontainer"))
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "commit.gpgsign=false"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "fixture"]):
        subprocess.run([*git, *args], cwd=repo, check=True, timeout=60)
    return repo


def _on_the_host(project: Project, tmp_path: Path) -> tuple[int, int]:
    """The suite's counts on this machine: the Python one with this interpreter's pytest, the Node one after
    ``npm ci`` with the machine's Node."""
    repo = _copy(project, tmp_path / "host")
    if project is PYTHON:
        args = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "test_inflection.py"]
    else:
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=repo, check=True, timeout=600, capture_output=True)
        args = ["npm", "test"]
    done = subprocess.run(args, cwd=repo, capture_output=True, text=True, timeout=600, env={**os.environ, "CI": "1"})
    return _counts(project, done.stdout + done.stderr)


SCENARIO_TEXT = {"content": [{"type": "text", "text": "The suite ran."}]}


def _session(project: Project, repo: Path, tmp_path: Path) -> list[dict[str, Any]]:
    if os.geteuid() == 0:  # the checkout is the agent's, as a user's own checkout is theirs
        for path in [repo, *repo.rglob("*")]:
            os.lchown(path, AGENT_UID, AGENT_UID)
    tool = {
        "type": "tool_use",
        "name": "run_command",
        "input": {"command": f"{project.command} 2>&1", "timeout_s": 300},
    }
    scenario = {"name": "run-the-suite", "turns": [{"content": [tool]}, SCENARIO_TEXT]}
    done = cubicle(
        "run",
        str(repo),
        "run the tests",
        "--json",
        "--no-apply",
        "--scenario",
        scenario_file(tmp_path, scenario),
        env={"CUBICLE_DATA_DIR": str(tmp_path / "data")},
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


@pytest.mark.parametrize("project", [PYTHON, NODE], ids=["python", "node"])
def test_the_projects_suite_gives_the_hosts_counts_with_the_guides_definition_and_with_none(
    project: Project, tmp_path: Path
) -> None:
    expected = _on_the_host(project, tmp_path)
    assert expected[0] > 10 and expected[1] == 0

    defined = _copy(project, tmp_path / "defined")
    (defined / ".cubicle").mkdir()
    (defined / ".cubicle" / "environment.toml").write_text(project.recommended)
    events = _session(project, defined, tmp_path)
    (result,) = [e for e in events if e["type"] == "tool_result"]
    assert _counts(project, result["output"]) == expected

    detected = _copy(project, tmp_path / "detected")
    shown = cubicle("env", "show", str(detected), timeout=120)
    assert shown.returncode == 0 and f"detected: {project.detected}" in shown.stderr, shown.stderr
    assert json.loads(shown.stdout)["source"] == "detected"
    events = _session(project, detected, tmp_path)
    notes = "".join(e["text"] for e in events if e["type"] == "setup_output" and e["phase"] == "environment")
    assert f"detected: {project.detected}" in notes
    (result,) = [e for e in events if e["type"] == "tool_result"]
    assert _counts(project, result["output"]) == expected
    changes = next(e for e in events if e["type"] == "changes")
    assert changes["summary"]["files"] == 0  # what the setup made (a virtualenv, node_modules) is never a change
