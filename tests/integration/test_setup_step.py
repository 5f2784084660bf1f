"""The setup step as a user meets it through `cubicle run`: its own network, its output, its failures.

Setup runs before the agent's first model request, in a container of its own with its own
network policy (here ``allow`` to one test host, through a proxy of its own); the agent then
runs with the session's policy (none) over what setup left in the workspace, which is never a
change to apply. A setup that fails or hangs ends the session with exit 4 and its last lines,
before any model request, and leaves no container behind.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.egress import Hosts, hosts
from controller.config import DEFAULT_IMAGE, Settings
from tests.integration.cli_helpers import cubicle
from tests.integration.pty_helpers import owned_by, scenario_file
from tests.sandbox_defaults import TEST_INSTANCE, TEST_RUNTIMES

pytestmark = pytest.mark.integration
INSTANCE = f"{TEST_INSTANCE}-setup"  # the test hosts are TEST_INSTANCE's: this run's containers are told apart

FETCH = (
    "import sys, urllib.request as u; print(sys.argv[1], u.urlopen(sys.argv[1], timeout=10).read().decode().strip())"
)
SETUP = (
    f"python3 -c '{FETCH}' http://allowed.test:8080/ > fetched.txt; "
    f"python3 -c '{FETCH}' http://denied.test:8080/ || echo 'denied refused'; cat fetched.txt"
)
SCENARIO = {
    "name": "after-setup",
    "turns": [
        {
            "content": [
                {
                    "type": "tool_use",
                    "name": "run_command",
                    "input": {
                        "command": f"cat fetched.txt; python3 -c '{FETCH}' http://allowed.test:8080/ || echo agent offline"
                    },
                }
            ]
        },
        {"content": [{"type": "text", "text": "done"}]},
    ],
}


@pytest.fixture(scope="module")
def test_hosts(docker_client: Any) -> Iterator[Hosts]:
    with hosts(docker_client, DEFAULT_IMAGE, {"allowed.test": (8080,), "denied.test": (8080,)}, TEST_INSTANCE) as made:
        yield made


def _events(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def _repo(make_repo: Callable[..., Path], toml: str, files: dict[str, str] | None = None) -> Path:
    return make_repo("repo", files={"README.md": "# demo\n", ".cubicle/environment.toml": toml, **(files or {})})


def _run(repo: Path, tmp_path: Path, env: dict[str, str] | None = None) -> tuple[int, list[dict[str, Any]], str]:
    settings = {"CUBICLE_DATA_DIR": str(tmp_path / "data"), "CUBICLE_INSTANCE": INSTANCE, **(env or {})}
    done = cubicle(
        "run",
        str(repo),
        "go",
        "--json",
        "--no-apply",
        "--scenario",
        scenario_file(tmp_path, SCENARIO),
        env=settings,
        timeout=300,
    )
    return done.returncode, _events(done.stdout), done.stderr


@pytest.mark.parametrize("runtime", TEST_RUNTIMES)  # under runsc the setup still runs under runc: it needs a network
def test_setup_reaches_its_allowed_host_and_the_agent_runs_offline_on_what_it_left(
    make_repo: Callable[..., Path], tmp_path: Path, test_hosts: Hosts, proxy_image: str, runtime: str
) -> None:
    toml = f'setup = """{SETUP}"""\nsetup_network = "allow=allowed.test:8080"\n'
    egress = {
        "CUBICLE_EGRESS_NETWORK": test_hosts.network,
        "CUBICLE_PROXY_IMAGE": proxy_image,
        "CUBICLE_LIMITS__RUNTIME": runtime,
    }
    code, events, stderr = _run(_repo(make_repo, toml), tmp_path, egress)
    assert code == 0, stderr[-2000:]
    setup = "".join(e["text"] for e in events if e["type"] == "setup_output")
    assert "http://allowed.test:8080/ allowed.test:8080" in setup
    assert "HTTP Error 403: Forbidden" in setup and "denied refused" in setup  # the proxy refused it
    agent = next(e for e in events if e["type"] == "tool_result")["output"]
    assert "http://allowed.test:8080/ allowed.test:8080" in agent  # what setup left in the workspace
    assert "agent offline" in agent  # the session's own policy: none
    changes = next(e for e in events if e["type"] == "changes")
    assert changes["summary"]["files"] == 0 and changes["summary"]["held_back"] == 0


BROKEN_BUILD = {"Dockerfile": f"FROM {DEFAULT_IMAGE}\nRUN echo step-before-the-break && exit 7\n"}


@pytest.mark.parametrize(
    ("toml", "files", "said"),
    [
        ('setup = "echo preparing; echo boom >&2; exit 3"\n', {}, ["exit code 3", "boom", "preparing"]),
        ('setup = "echo started; sleep 600"\nsetup_timeout_s = 2\n', {}, ["ran longer than 2s", "started"]),
        ('dockerfile = "Dockerfile"\nsetup = "true"\n', BROKEN_BUILD, ["step-before-the-break", "7"]),
    ],
    ids=["fails", "hangs", "build-fails"],
)
def test_a_setup_or_build_that_fails_or_hangs_ends_the_session_before_the_model_is_asked(
    make_repo: Callable[..., Path],
    tmp_path: Path,
    docker_client: Any,
    toml: str,
    files: dict[str, str],
    said: list[str],
) -> None:
    code, events, stderr = _run(_repo(make_repo, toml, files), tmp_path)
    assert code == 4, stderr[-2000:]
    error = next(e for e in events if e["type"] == "error")
    assert error["kind"] == "setup" and all(text in error["message"] for text in said), error
    finished = next(e for e in events if e["type"] == "session_finished")
    assert finished["reason"] == "error" and finished["usage"]["input_tokens"] == 0
    assert not [e for e in events if e["type"] in ("tool_call", "usage")]
    assert owned_by(docker_client, INSTANCE) == []


# A tiny Python project whose build backend is its own (PEP 517 and 660, standard library only) and that depends on
# nothing: `pip install -e .` then needs nothing from a package index, so the guide's setup runs here with no network.
TINY_BACKEND = """\
import base64, hashlib, os, zipfile

DIST = "tiny-0.1"
META = {
    f"{DIST}.dist-info/METADATA": "Metadata-Version: 2.1\\nName: tiny\\nVersion: 0.1\\n",
    f"{DIST}.dist-info/WHEEL": "Wheel-Version: 1.0\\nGenerator: backend\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n",
    f"{DIST}.dist-info/entry_points.txt": "[console_scripts]\\ntiny-hello = tiny:main\\n",
}


def _wheel(directory, files):
    name, record = f"{DIST}-py3-none-any.whl", []
    with zipfile.ZipFile(os.path.join(directory, name), "w") as wheel:
        for path, text in {**files, **META}.items():
            data = text.encode()
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{path},sha256={digest},{len(data)}")
            wheel.writestr(path, data)
        wheel.writestr(f"{DIST}.dist-info/RECORD", "\\n".join([*record, f"{DIST}.dist-info/RECORD,,"]) + "\\n")
    return name


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, {"tiny.pth": os.path.abspath("src") + "\\n"})


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    with open("src/tiny/__init__.py") as source:
        return _wheel(wheel_directory, {"tiny/__init__.py": source.read()})
"""
TINY_PROJECT = {
    "pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n',
    "backend.py": TINY_BACKEND,
    "src/tiny/__init__.py": 'def main():\n    print("tiny says hello")\n',
}
GUIDE_SETUP = "python3 -m venv .venv && .venv/bin/pip install -e ."
"""The Python setup docs/guides/environments.md recommends, word for word."""


def test_the_guides_python_setup_works_in_the_default_image_as_written(
    make_repo: Callable[..., Path], tmp_path: Path
) -> None:
    toml = f'setup = "{GUIDE_SETUP}"\nsetup_network = "none"\n'
    guide = (Path(__file__).parents[2] / "docs" / "guides" / "environments.md").read_text()
    assert f"`{GUIDE_SETUP}`" in guide
    agent = {"command": ".venv/bin/tiny-hello && .venv/bin/python -c 'import tiny; print(tiny.__file__)'"}
    scenario = {
        "name": "after-python-setup",
        "turns": [
            {"content": [{"type": "tool_use", "name": "run_command", "input": agent}]},
            {"content": [{"type": "text", "text": "done"}]},
        ],
    }
    settings = {
        "CUBICLE_DATA_DIR": str(tmp_path / "data"),
        "CUBICLE_INSTANCE": INSTANCE,
        "CUBICLE_IMAGE": Settings().image,
    }
    done = cubicle(
        "run",
        str(_repo(make_repo, toml, TINY_PROJECT)),
        "go",
        "--json",
        "--no-apply",
        "--scenario",
        scenario_file(tmp_path, scenario),
        env=settings,
        timeout=300,
    )
    events = _events(done.stdout)
    setup = "".join(e["text"] for e in events if e["type"] == "setup_output")
    assert done.returncode == 0, (setup[-3000:], done.stderr[-2000:])
    assert "Successfully installed tiny-0.1" in setup
    result = next(e for e in events if e["type"] == "tool_result")
    assert result["exit_code"] == 0 and "tiny says hello" in result["output"], result
    assert "/workspace/src/tiny/__init__.py" in result["output"]  # installed editable: the checkout's own source
    changes = next(e for e in events if e["type"] == "changes")
    assert changes["summary"]["files"] == 0  # the virtualenv is the setup's, never a change to apply


def test_the_setup_runs_what_it_writes_to_tmp_and_home(make_repo: Callable[..., Path], tmp_path: Path) -> None:
    """The setup's /tmp and HOME are executable, as the agent's are (tests/security/test_privilege.py)."""
    script = "printf '#!/bin/sh\\\\necho ran in %s\\\\n' $d > $d/tool && chmod +x $d/tool && $d/tool"
    setup = f"mkdir -p ~/.local/bin && for d in /tmp ~/.local/bin; do {script} || exit 9; done"
    code, events, stderr = _run(_repo(make_repo, f'setup = """{setup}"""\nsetup_network = "none"\n'), tmp_path)
    shown = "".join(e["text"] for e in events if e["type"] == "setup_output")
    assert code == 0, (shown[-2000:], stderr[-2000:])
    assert "ran in /tmp" in shown and "ran in /home/agent/.local/bin" in shown
