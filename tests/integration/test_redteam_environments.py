"""Red-team findings (environments) on the real engine: the build's output and network, and a repository's network ask.

- A build's output reaches events line by line with no bound (the setup's stops at
  ``setups.MAX_EVENT_LINES``): a Dockerfile that prints forever fills the database and the terminal.
- A build reaches the bridge network although the server's ceiling is ``none``; an API caller
  picks which Dockerfile of the repository is built (``environment.dockerfile``), and an agent's
  edit of a Dockerfile outside ``.devcontainer``/``.cubicle`` is applied unforced.
- ``cubicle run`` says ``--network`` defaults to none, yet a repository's ``network = "open"``
  gives the agent the bridge (the default ceiling is open), with nothing shown to the user.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from docker.errors import APIError, NotFound

from controller import workspace
from controller.config import DEFAULT_IMAGE, Settings
from controller.environment import setups
from controller.environment.preparation import Environments
from controller.errors import ImageNotAllowedError
from controller.wire.envspec import EnvironmentRequest
from controller.wire.events import Event, SetupOutput
from controller.wire.limits import Limits
from controller.wire.network import NONE
from tests.integration.cli_helpers import cubicle
from tests.integration.pty_helpers import scenario_file
from tests.sandbox_defaults import SANDBOX_LIMITS, TEST_INSTANCE

pytestmark = pytest.mark.integration
RED = {"org.cubicle.redteam": "1"}


class ListSink:
    def __init__(self) -> None:
        self.events: list[Event] = []

    async def emit(self, event: Event) -> None:
        self.events.append(event)


async def _prepare(client: Any, settings: Settings, repo: Path, tmp_path: Path, request: EnvironmentRequest | None):
    environments = Environments(settings, lambda directory: None)
    environment = environments.resolve(repo, request)
    sid = "red-" + secrets.token_hex(4)
    layer = workspace.create(tmp_path / "data", sid, repo)
    sink = ListSink()
    prepare = environments.preparer(sid, layer, environment, SANDBOX_LIMITS, sink)
    assert prepare is not None
    return await prepare(client), sink


@pytest.fixture
def built(docker_client: Any) -> Iterator[list[str]]:
    tags: list[str] = []
    yield tags
    for tag in tags:
        with contextlib.suppress(NotFound, APIError):
            docker_client.images.remove(tag)


async def test_a_builds_output_reaches_events_bounded_like_the_setups(
    docker_client: Any, make_repo: Callable[..., Path], tmp_path: Path, built: list[str]
) -> None:
    lines = setups.MAX_EVENT_LINES * 3
    repo = make_repo(
        files={
            ".cubicle/environment.toml": 'dockerfile = "Dockerfile"\n',
            "Dockerfile": f"FROM {DEFAULT_IMAGE}\nRUN echo {secrets.token_hex(4)} && seq 1 {lines}\n",
        }
    )
    ready, sink = await _prepare(docker_client, Settings(), repo, tmp_path, None)
    built.append(ready.image)
    shown = sum(e.text.count("\n") for e in sink.events if isinstance(e, SetupOutput) and e.phase == "build")
    events = sum(1 for e in sink.events if isinstance(e, SetupOutput) and e.phase == "build")
    assert shown <= setups.MAX_EVENT_LINES + 100, (
        f"a build printing {lines} lines became {events} setup_output events carrying {shown} lines "
        f"(the setup's own output stops at {setups.MAX_EVENT_LINES})"
    )


@pytest.fixture
def bridge_listener(docker_client: Any) -> Iterator[str]:
    """An HTTP server on the engine's bridge (where a build's RUN steps are): its address."""
    container = docker_client.containers.run(
        DEFAULT_IMAGE,
        ["python3", "-m", "http.server", "8080", "--bind", "0.0.0.0"],
        entrypoint=[],
        detach=True,
        labels={**RED, "org.cubicle.instance": TEST_INSTANCE},
        network="bridge",
        user="1000:1000",
    )
    try:
        for _ in range(50):
            container.reload()
            address = container.attrs["NetworkSettings"]["Networks"]["bridge"]["IPAddress"]
            if address:
                break
            time.sleep(0.1)
        time.sleep(1)
        yield address
    finally:
        container.remove(force=True)


async def test_a_build_the_api_caller_names_gets_no_network_beyond_the_servers_ceiling(
    docker_client: Any, make_repo: Callable[..., Path], tmp_path: Path, built: list[str], bridge_listener: str
) -> None:
    fetch = (
        f"import urllib.request as u; print('REACHED', u.urlopen('http://{bridge_listener}:8080/', timeout=5).status)"
    )
    repo = make_repo(
        files={
            "README.md": "# demo\n",
            "tools/ci.Dockerfile": f"FROM {DEFAULT_IMAGE}\nRUN echo {secrets.token_hex(4)}; "
            f'python3 -c "{fetch}" || echo UNREACHED\n',
        }
    )
    settings = Settings(max_limits=Limits(network=NONE), limits=Limits(network=NONE))
    with pytest.raises(ImageNotAllowedError, match="may not choose what is built"):
        Environments(settings, lambda directory: None).resolve(
            repo, EnvironmentRequest(dockerfile="tools/ci.Dockerfile")
        )
    (repo / ".cubicle").mkdir()  # the repository's own definition builds it: still under the server's ceiling
    (repo / ".cubicle/environment.toml").write_text('dockerfile = "tools/ci.Dockerfile"\n')
    ready, sink = await _prepare(docker_client, settings, repo, tmp_path, None)
    built.append(ready.image)
    output = "".join(e.text for e in sink.events if isinstance(e, SetupOutput))
    assert "UNREACHED" in output and "REACHED 200" not in output.replace("print('REACHED'", ""), (
        "with the server's ceiling at network none, a build named by the request fetched from the bridge:\n"
        + "\n".join(line for line in output.splitlines() if "REACHED" in line)
    )


def test_a_repository_cannot_open_the_agents_network_unasked(make_repo: Callable[..., Path], tmp_path: Path) -> None:
    repo = make_repo(files={"README.md": "# demo\n", ".cubicle/environment.toml": 'network = "open"\n'})
    probe = "python3 -c 'import socket; print(\"IFACES\", sorted(n for _, n in socket.if_nameindex()))'"
    scenario = {
        "name": "probe",
        "turns": [
            {"content": [{"type": "tool_use", "name": "run_command", "input": {"command": probe}}]},
            {"content": [{"type": "text", "text": "done"}]},
        ],
    }
    env = {"CUBICLE_DATA_DIR": str(tmp_path / "data"), "CUBICLE_INSTANCE": f"{TEST_INSTANCE}-red"}
    done = cubicle(
        "run",
        str(repo),
        "go",
        "--json",
        "--no-apply",
        "--scenario",
        scenario_file(tmp_path, scenario),
        env=env,
        timeout=300,
    )
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    output = next(e for e in events if e["type"] == "tool_result")["output"]
    assert "IFACES ['lo']" in output, (
        f"`cubicle run` without --network (documented default: none) gave the agent {output.strip()!r} "
        'because the repository asked for network = "open"; nothing in the run\'s output says so'
    )
