"""A session's environment through the API: read from the repository, overridden by the request,
with images a request names limited to the server's list, and the repository's network ask clamped."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from controller.config import Settings
from controller.server.api import create_app
from controller.testing import NoSandbox
from controller.wire.limits import Limits
from tests.eventually import eventually
from tests.sandbox_defaults import owned_dir

pytestmark = pytest.mark.usefixtures("each_store")  # the API suite runs on SQLite and on PostgreSQL

TOKEN = "unit-test-token"


def _client(root: Path, **settings: Any) -> TestClient:
    config = Settings(
        api_key="unused",
        base_url="http://127.0.0.1:9",
        model_retries=0,
        api_token=TOKEN,
        repo_roots=[root],
        data_dir=root / "data",
        docker_host=f"unix://{root}/nowhere.sock",
        **settings,
    )
    app = create_app(config, sandbox_factory=lambda *_: NoSandbox())
    return TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"})


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return owned_dir(tmp_path / "roots")


@pytest.fixture
def client(root: Path) -> Iterator[TestClient]:
    with _client(root, allowed_images=["team/python:3.12"], max_limits=Limits(network="allow=*.example.org")) as c:
        yield c


def _repo(root: Path, name: str, files: dict[str, str]) -> Path:
    repo = owned_dir(root / name)
    for rel, text in files.items():
        owned_dir((repo / rel).parent)
        (repo / rel).write_text(text)
    return repo


def _settled(client: TestClient, sid: str) -> dict[str, Any]:
    found: dict[str, Any] = eventually(
        lambda: client.get(f"/v1/sessions/{sid}").json(), until=lambda s: s["status"] != "running", what="turn ends"
    )
    return found


def test_the_repositorys_definition_is_read_and_its_network_clamped(client: TestClient, root: Path) -> None:
    repo = _repo(
        root, "p1", {".cubicle/environment.toml": 'setup = "make deps"\nnetwork = "allow=a.example.org,b.other.org"\n'}
    )
    made = client.post("/v1/sessions", json={"task": "t", "repo": str(repo)})
    assert made.status_code == 201, made.text
    body = _settled(client, made.json()["id"])
    assert body["environment"]["source"] == ".cubicle/environment.toml"
    assert body["environment"]["setup"] == "make deps"
    assert body["limits"]["network"] == "allow=a.example.org"  # the server's ceiling keeps only what it covers


def test_a_request_naming_the_network_wins_over_the_repository(client: TestClient, root: Path) -> None:
    repo = _repo(root, "p2", {".cubicle/environment.toml": 'network = "allow=a.example.org"\n'})
    made = client.post("/v1/sessions", json={"task": "t", "repo": str(repo), "limits": {"network": "none"}})
    assert made.status_code == 201, made.text
    assert _settled(client, made.json()["id"])["limits"]["network"] == "none"


def test_a_request_may_name_only_allowed_images(client: TestClient, root: Path) -> None:
    repo = _repo(root, "p3", {"README.md": "x\n"})
    refused = client.post(
        "/v1/sessions", json={"task": "t", "repo": str(repo), "environment": {"image": "evil:latest"}}
    )
    assert refused.status_code == 403 and "evil:latest" in refused.json()["detail"]
    allowed = client.post(
        "/v1/sessions",
        json={"task": "t", "repo": str(repo), "environment": {"image": "team/python:3.12", "setup": "true"}},
    )
    assert allowed.status_code == 201, allowed.text
    environment = _settled(client, allowed.json()["id"])["environment"]
    assert (environment["source"], environment["image"], environment["setup"]) == (
        "request",
        "team/python:3.12",
        "true",
    )


def test_an_invalid_definition_is_a_400_naming_the_file_and_key(client: TestClient, root: Path) -> None:
    repo = _repo(root, "p4", {".cubicle/environment.toml": "setup_timeout_s = 'soon'\n"})
    refused = client.post("/v1/sessions", json={"task": "t", "repo": str(repo)})
    assert refused.status_code == 400
    assert ".cubicle/environment.toml" in refused.json()["detail"] and "setup_timeout_s" in refused.json()["detail"]


def test_unknown_environment_fields_are_refused(client: TestClient, root: Path) -> None:
    repo = _repo(root, "p5", {"README.md": "x\n"})
    refused = client.post("/v1/sessions", json={"task": "t", "repo": str(repo), "environment": {"privileged": True}})
    assert refused.status_code == 422
