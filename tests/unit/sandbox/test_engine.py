"""One Docker endpoint: DOCKER_HOST names it, every client connects to it, and its socket is never a repository."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from controller.config import DEFAULT_DOCKER_HOST, Settings
from controller.errors import DockerUnavailableError
from controller.sandbox import engine
from controller.server.api import create_app
from controller.testing import LOOPBACK, NoSandbox
from tests.sandbox_defaults import owned_dir


def test_docker_host_is_read_from_its_usual_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("CUBICLE_DOCKER_HOST", raising=False)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/d.sock")
    assert Settings().docker_host == f"unix://{tmp_path}/d.sock"
    assert Settings().docker_socket == tmp_path / "d.sock"
    monkeypatch.setenv("DOCKER_HOST", "")  # blank, as compose passes an unset variable: the local socket
    assert Settings().docker_host == DEFAULT_DOCKER_HOST
    assert Settings().docker_socket == Path("/var/run/docker.sock")


def test_a_tcp_engine_has_no_socket_file_to_protect() -> None:
    assert Settings(docker_host="tcp://10.0.0.5:2375").docker_socket is None


def test_an_engine_that_is_not_there_says_where_and_what_to_do(tmp_path: Path) -> None:
    host = f"unix://{tmp_path}/missing.sock"
    with pytest.raises(DockerUnavailableError) as caught:
        engine.connect(host, timeout=5)
    assert f"Docker is not reachable at {host}" in str(caught.value)
    assert "Start the Docker engine" in str(caught.value)


def test_an_engine_client_is_made_on_first_use_only(tmp_path: Path) -> None:
    shared = engine.Engine(f"unix://{tmp_path}/missing.sock")
    shared.close()  # nothing to close yet, and no connection attempted
    with pytest.raises(DockerUnavailableError):
        shared.client()


@pytest.mark.parametrize(
    ("host", "refused"), [("unix://ROOTS/sockdir/docker.sock", True), ("tcp://127.0.0.1:9", False)]
)
def test_the_repository_holding_the_engines_socket_is_refused(tmp_path: Path, host: str, refused: bool) -> None:
    roots = tmp_path / "roots"
    owned_dir(roots / "sockdir")
    (roots / "sockdir" / "docker.sock").touch()
    settings = Settings(
        api_key="unused",
        base_url="http://127.0.0.1:9",
        model_retries=0,
        repo_roots=[roots],
        data_dir=tmp_path / "data",
        docker_host=host.replace("ROOTS", str(roots)),
    )
    with TestClient(create_app(settings, sandbox_factory=lambda *_: NoSandbox()), base_url=LOOPBACK) as client:
        response = client.post("/v1/sessions", json={"repo": str(roots / "sockdir"), "task": "t"})
    assert response.status_code == (403 if refused else 201), response.text
    if refused:
        assert "would expose" in response.json()["detail"]
