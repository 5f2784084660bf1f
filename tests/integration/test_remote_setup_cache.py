"""A remote repository's environment is kept per URL, not per commit: sessions on four commits of a URL of the
suite's own git server (``bench.gitserver``), through the real CLI. The second commit changes a file the setup does
not key on, and its session reuses the first one's setup tree and image; the third changes a file the setup reads,
and its setup runs again; the fourth adds a file where that setup made one, which the older setup would hide, so
its own setup runs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.gitserver import GitServer
from controller.config import DEFAULT_IMAGE
from controller.environment import build
from tests.integration.cli_helpers import cubicle
from tests.integration.conftest import GIT_PASSWORD
from tests.integration.pty_helpers import scenario_file

pytestmark = pytest.mark.integration

NAME = "cached"
SETUP_SCRIPT = '#!/bin/bash\nset -e\necho "setup ran on $(cat NOTE.txt)"\ncp NOTE.txt made-by-setup.txt\n'
FILES = {
    ".cubicle/environment.toml": f'image = "{DEFAULT_IMAGE}"\nsetup = "./tools/setup.sh"\nsetup_network = "none"\n',
    "tools/setup.sh": SETUP_SCRIPT,
    "requirements.txt": "pytest\n",  # one of the default setup inputs
    "NOTE.txt": "commit one\n",  # no input: the setup reads it, but its key does not
}
LOOK = {"content": [{"type": "tool_use", "name": "run_command", "input": {"command": "cat made-by-setup.txt"}}]}


@pytest.fixture
def served(git_server: GitServer, tmp_path: Path, docker_client: Any) -> Iterator[GitServer]:
    """The repository on the server; the environment images made for its URL are removed after."""
    source = tmp_path / "source"
    for rel, text in FILES.items():
        (source / rel).parent.mkdir(parents=True, exist_ok=True)
        (source / rel).write_text(text)
    (source / "tools" / "setup.sh").chmod(0o755)
    git_server.create(NAME, source)
    try:
        yield git_server
    finally:
        for image in docker_client.images.list(filters={"label": f"{build.REPO}={git_server.url(NAME)}"}):
            for tag in image.tags:
                docker_client.images.remove(tag, force=True)


def _session(server: GitServer, tmp_path: Path, n: int, commit: str) -> tuple[list[dict[str, Any]], str]:
    """A `cubicle run` on ``commit`` of the URL (by its id: a session within seconds of the last fetch would not
    fetch a branch again): its setup output events, and what the agent's command printed."""
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    credentials = data / "credentials"
    credentials.write_text(f"http://tester:{GIT_PASSWORD}@127.0.0.1:{server.port}\n")
    credentials.chmod(0o600)
    settings = {
        "CUBICLE_DATA_DIR": str(data),
        "CUBICLE_GIT_CREDENTIALS": str(credentials),
        "CUBICLE_GIT_REMOTES": json.dumps([f"http://127.0.0.1:{server.port}/private/*"]),
    }
    turns = [LOOK, {"content": [{"type": "text", "text": "Done."}]}]
    scenario = scenario_file(tmp_path, {"name": f"cached-{n}", "turns": turns})
    url = server.url(NAME)
    ran = cubicle("run", url, "look", "--ref", commit, "--json", "--scenario", scenario, env=settings, timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    events = [json.loads(line) for line in ran.stdout.splitlines() if line.startswith("{")]
    output = "".join(e["output"] for e in events if e["type"] == "tool_result")
    setup = [e for e in events if e["type"] == "setup_output"]
    assert f"trees/{commit}" in _said(setup, "fetch"), setup  # the session is on the commit asked for
    return setup, output


def _said(setup: list[dict[str, Any]], phase: str) -> str:
    return "".join(e["text"] for e in setup if e["phase"] == phase)


def test_commits_with_the_same_definition_inputs_share_one_setup_and_image_and_a_changed_input_runs_again(
    served: GitServer, tmp_path: Path
) -> None:
    head = served.git("rev-parse", "HEAD", cwd=served.work(NAME))
    first, seen = _session(served, tmp_path, 1, head)
    assert _said(first, "setup").count("setup ran on") == 1, first
    assert "adding the toolbox" in _said(first, "build"), first  # the image is made for the URL
    assert "commit one" in seen, seen

    commit = served.commit(NAME, {"NOTE.txt": b"commit two\n"}, "A file no setup input")
    second, seen = _session(served, tmp_path, 2, commit)
    assert "setup ran on" not in _said(second, "setup"), second
    assert "reusing the setup made before" in _said(second, "environment"), second
    assert _said(second, "build") == "", second  # the image of the first commit's session
    assert "commit one" in seen and "commit two" not in seen, seen  # what the first commit's setup made

    commit = served.commit(NAME, {"requirements.txt": b"pytest\nrequests\n", "NOTE.txt": b"commit three\n"}, "An input")
    third, seen = _session(served, tmp_path, 3, commit)
    assert _said(third, "setup").count("setup ran on commit three") == 1, third
    assert _said(third, "build") == "", third  # the image's inputs did not change
    assert "commit three" in seen, seen

    commit = served.commit(NAME, {"made-by-setup.txt": b"committed in four\n"}, "A file where the setup makes one")
    fourth, seen = _session(served, tmp_path, 4, commit)
    assert "would hide files of this commit (made-by-setup.txt)" in _said(fourth, "environment"), fourth
    assert _said(fourth, "setup").count("setup ran on commit three") == 1, fourth  # its own setup, on its files
    assert "committed in four" in seen, seen  # the commit's file, not what an older commit's setup made
