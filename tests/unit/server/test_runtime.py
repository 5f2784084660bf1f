"""Only code can choose a test double: Settings, variables, flags and request bodies always get Docker.

The doubles in ``controller.testing`` (and any added there later) are found by reading that
module, so these tests keep covering them without being edited.
"""

from __future__ import annotations

import ast
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, SecretStr

from controller.agent.model import SYSTEM_PROMPT
from controller.agent.scripted import ScriptedServer, serve_in_thread
from controller.config import Settings
from controller.environment.inputs import definition_files
from controller.errors import DockerUnavailableError
from controller.sandbox.docker import DockerSandbox
from controller.server.api import create_app
from controller.server.runtime import Runtime
from controller.testing import NoSandbox
from controller.wire.events import ListSink
from controller.wire.limits import Limits
from controller.wire.network import parse
from tests.agent_harness import register, tool
from tests.integration.api_helpers import Api
from tests.sandbox_defaults import owned_dir
from tests.unit.imports import modules, reachable, tree

ENTRY_POINTS = ("cli", "__main__", "server.api")
"""What runs Cubicle: the console script and ``python -m controller`` (cli), and create_app (api)."""
DATA_TYPES: set[Any] = {str, int, float, bool, Path, SecretStr, type(None)}


def test_doubles_is_what_this_test_reads() -> None:
    assert {"NoSandbox", "MemorySandbox", "CubicleContainer"} <= _doubles()


def _doubles() -> set[str]:
    """The classes ``controller.testing`` defines: NoSandbox, MemorySandbox and whatever double comes next."""
    return {
        node.name for m in ("testing", "testing.container") for node in tree(m).body if isinstance(node, ast.ClassDef)
    }


def test_no_entry_point_reaches_the_test_doubles() -> None:
    for entry in ENTRY_POINTS:
        doubles = {m for m in reachable(entry) if m == "testing" or m.startswith("testing.")}
        assert doubles == set(), f"controller.{entry} imports controller.testing"


@pytest.mark.parametrize("module", [m for m in modules() if m != "testing" and not m.startswith("testing.")])
def test_no_module_names_a_test_double(module: str) -> None:
    """Not by import, not by attribute, not as a string to import later."""
    names = _doubles() | {"testing", "controller.testing"}
    for node in ast.walk(tree(module)):
        found = {
            ast.Name: lambda n: n.id,
            ast.Attribute: lambda n: n.attr,
            ast.alias: lambda n: n.name,
            ast.Constant: lambda n: n.value if isinstance(n.value, str) else None,
        }.get(type(node), lambda n: None)(node)
        assert found not in names, f"controller/{module}.py line {getattr(node, 'lineno', '?')} names {found!r}"


def _plain_data(annotation: Any, where: str) -> None:
    """Fail unless ``annotation`` can only ever hold data: no class, callable, import path or Any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        for name, field in annotation.model_fields.items():
            _plain_data(field.annotation, f"{where}.{name}")
    elif typing.get_origin(annotation) is typing.Literal:
        assert all(isinstance(arg, str | int | bool) for arg in typing.get_args(annotation)), where
    elif typing.get_origin(annotation) in (list, tuple, typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            if arg is not Ellipsis:
                _plain_data(arg, where)
    else:
        assert annotation in DATA_TYPES, f"Settings field {where} is {annotation!r}, which could select code"


def test_settings_hold_only_data() -> None:
    """So no variable, and no flag (flags only override Settings), can name a class to construct."""
    _plain_data(Settings, "Settings")
    assert set(Limits.model_fields) <= set(Settings.model_fields["limits"].annotation.model_fields)  # type: ignore[union-attr]


async def test_settings_build_a_docker_sandbox_on_the_configured_engine(tmp_path: Path) -> None:
    host = f"unix://{tmp_path}/engine.sock"
    runtime = Runtime(Settings(docker_host=host, api_key="unused", data_dir=tmp_path / "data"))
    repo = owned_dir(tmp_path / "repo")
    runtime.workspaces.create("s_runtime", repo, definition=definition_files(repo))
    sandbox = runtime.sandbox(tmp_path / "repo", "s_runtime", Limits())
    assert isinstance(sandbox, DockerSandbox)
    with pytest.raises(DockerUnavailableError, match=f"not reachable at {host}"):
        await sandbox.start()
    await runtime.close()


@pytest.fixture
def served(tmp_path: Path, model_server: ScriptedServer) -> Iterator[Any]:
    """An API from Settings alone (no sandbox passed in), with a Docker engine that is not there."""

    def serve(**code: Any) -> Any:
        owned_dir(tmp_path / "roots" / "repo")
        settings = Settings(
            api_key="test",
            base_url=model_server.url,
            api_token="t",
            repo_roots=[tmp_path / "roots"],  # type: ignore[attr-defined]
            data_dir=tmp_path / "data",
            docker_host=f"unix://{tmp_path}/engine.sock",
            sse_heartbeat_s=1,
        )
        return serve_in_thread(create_app(settings, **code))

    yield serve


def _tool_outcome(url: str, tmp_path: Path, model_server: ScriptedServer) -> list[dict[str, Any]]:
    """The tool result (or error) of a session whose model lists the files once."""
    api = Api(url, "t")
    model = register(model_server, [{"content": [tool("list_files")]}])
    sid = api.create(str(tmp_path / "roots" / "repo"), model, limits={"max_steps": 2})["id"]
    outcome = [e for e in api.events(sid) if e["type"] in ("tool_result", "error")]
    api.http.close()
    return outcome


def test_the_api_runs_tools_in_docker_unless_code_passes_a_sandbox(
    served: Any, tmp_path: Path, model_server: ScriptedServer
) -> None:
    with served() as url:  # the layer's disk quota is made through the engine: the session is refused at once
        api = Api(url, "t")
        model = register(model_server, [{"content": [tool("list_files")]}])
        response = api.http.post(
            "/v1/sessions", json={"repo": str(tmp_path / "roots" / "repo"), "task": "t", "model": model}
        )
        api.http.close()
    assert response.status_code == 503 and "Docker is not reachable" in response.text, response.text
    with served(sandbox_factory=lambda *_: NoSandbox()) as url:
        double = _tool_outcome(url, tmp_path, model_server)
    assert "without a sandbox" in str(double) and "Docker" not in str(double), double


async def test_the_agent_and_its_compactor_are_told_what_the_network_allows(tmp_path: Path) -> None:
    runtime = Runtime(Settings(api_key="unused", data_dir=tmp_path / "data"), sandbox_factory=lambda *_: NoSandbox())
    shown: dict[str, str] = {}
    for level in ("none", "allow=pypi.org,*.example.com:8443", "open"):
        limits = Limits(network=parse(level))
        agent = runtime.agent(session_id="s", model="m", sandbox=NoSandbox(), sink=ListSink(), limits=limits)
        compactor = runtime.compactor("s", "m", ListSink(), limits, None)
        assert agent.system == compactor.system, "a summary request reads the agent's cached prefix"
        shown[level] = agent.system
    assert all(prompt.startswith(SYSTEM_PROMPT + "\n") for prompt in shown.values())
    assert "no network" in shown["none"] and "nothing can be downloaded" in shown["none"]
    allow = shown["allow=pypi.org,*.example.com:8443"]
    assert "only the 2 hosts its allow-list names" in allow
    assert "pypi.org" not in allow, "a host name may come from the repository: none reaches the system prompt"
    assert shown["open"].endswith("The container has network access.")
    await runtime.close()
