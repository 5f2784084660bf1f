"""API validation and auth with TestClient(create_app(...)): no Docker, no model."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from controller.config import Settings
from controller.server.api import create_app
from controller.testing import NoSandbox
from controller.wire.limits import Limits
from controller.wire.sessionrecord import SessionRecord
from tests.eventually import eventually
from tests.sandbox_defaults import owned_dir

pytestmark = pytest.mark.usefixtures("each_store")  # the API suite runs on SQLite and on PostgreSQL

TOKEN = "unit-test-token"


@pytest.fixture
def roots(tmp_path: Path) -> Path:
    root = tmp_path / "roots"
    owned_dir(root / "project")
    (root / "sockdir").mkdir()
    (root / "sockdir" / "docker.sock").touch()
    (root / "afile").write_text("x")
    (root / "escape").symlink_to("/etc")
    (root / "inner-link").symlink_to(root / "project")
    return root


@pytest.fixture
def client(tmp_path: Path, roots: Path) -> Iterator[TestClient]:
    settings = Settings(
        api_key="unused",
        base_url="http://127.0.0.1:9",
        model_retries=0,
        api_token=TOKEN,
        repo_roots=[roots],
        data_dir=roots / "data",
        docker_host=f"unix://{roots}/sockdir/docker.sock",
        max_body_bytes=64 * 1024,
        max_limits=Limits(memory_mb=4096, max_steps=40, network="none"),
    )
    with TestClient(
        create_app(settings, sandbox_factory=lambda *_: NoSandbox()), headers={"Authorization": f"Bearer {TOKEN}"}
    ) as c:
        yield c


def create(client: TestClient, **body: Any) -> Any:
    return client.post("/v1/sessions", json={"task": "t", **body})


def test_healthz_needs_no_token(client: TestClient) -> None:
    response = client.get("/healthz", headers={"Authorization": ""})
    assert response.status_code == 200 and response.json()["status"] == "ok"


@pytest.mark.parametrize("header", [None, "Bearer wrong", "Basic dXNlcjpwYXNz", f"Bearer {TOKEN}x"])
def test_every_route_needs_the_token(client: TestClient, header: str | None) -> None:
    headers = {"Authorization": header or ""}
    for method, path in [
        ("get", "/v1/sessions"),
        ("post", "/v1/sessions"),
        ("get", "/v1/sessions/x"),
        ("get", "/v1/sessions/x/events"),
        ("get", "/v1/sessions/x/messages"),
        ("post", "/v1/sessions/x/messages"),
        ("post", "/v1/sessions/x/cancel"),
        ("post", "/v1/sessions/x/compact"),
        ("delete", "/v1/sessions/x"),
    ]:
        response = client.request(method, path, headers=headers, json={})
        assert response.status_code == 401, (method, path)
        assert (
            response.json()["detail"]
            == "A valid bearer token (or the viewer's sign-in cookie with its key) is required."
        )


def test_good_repo_is_accepted(client: TestClient, roots: Path) -> None:
    response = create(client, repo=str(roots / "project"))
    assert response.status_code == 201, response.text
    assert response.json()["repo"] == str(roots / "project")
    sid = response.json()["id"]
    eventually(
        lambda: client.get(f"/v1/sessions/{sid}").json()["status"],
        until=lambda s: s != "running",
        what="the first session's turn ends (one repository, one running session)",
    )
    via_link = create(client, repo=str(roots / "inner-link"))
    assert via_link.status_code == 201 and via_link.json()["repo"] == str(roots / "project")


@pytest.mark.parametrize(
    ("repo", "code"),
    [
        ("/", 403),
        ("/etc", 403),
        ("/usr/lib", 403),
        ("/proc/self/root", 403),
        ("/var/run", 403),
        ("ROOTS/sockdir", 403),  # holds the Docker socket
        ("ROOTS", 403),  # contains the socket and the data directory
        ("ROOTS/data", 403),  # the controller's own data
        ("ROOTS/data/../data", 403),
        ("ROOTS/escape", 403),  # a symlink that leads out
        ("ROOTS/../outside", 400),
        ("TMP", 403),  # exists, outside the roots
        ("ROOTS/missing", 400),
        ("ROOTS/afile", 400),
        ("relative/path", 400),
        ("ROOTS/pro\x00ject", 400),
        ("ROOTS/project\n", 400),
        ("", 400),
    ],
)
def test_bad_repos_are_refused(client: TestClient, roots: Path, tmp_path: Path, repo: str, code: int) -> None:
    path = repo.replace("ROOTS", str(roots)).replace("TMP", str(tmp_path))
    response = create(client, repo=path)
    assert response.status_code == code, response.text
    assert isinstance(response.json()["detail"], str) and response.json()["detail"]


@pytest.mark.parametrize(
    "extra",
    [
        {"image": "alpine"},
        {"privileged": True},
        {"mounts": ["/:/host"]},
        {"env": {"A": "1"}},
        {"workdir": "/"},
        {"limits": {"privileged": True}},
        {"limits": {"devices": ["/dev/sda"]}},
    ],
)
def test_unknown_fields_are_422(client: TestClient, roots: Path, extra: dict[str, Any]) -> None:
    response = create(client, repo=str(roots / "project"), **extra)
    assert response.status_code == 422


@pytest.mark.parametrize(
    "limits",
    [
        {"memory_mb": 0},
        {"memory_mb": -5},
        {"max_steps": 0},
        {"pids": 10**12},
        {"cpus": 0},
        {"token_budget": -1},
        {"memory_mb": "lots"},
    ],
)
def test_zero_negative_and_absurd_limits_are_422(client: TestClient, roots: Path, limits: dict[str, Any]) -> None:
    assert create(client, repo=str(roots / "inner-link"), limits=limits).status_code == 422


def test_limits_are_clamped_to_server_maximums(client: TestClient, roots: Path) -> None:
    response = create(
        client, repo=str(roots / "inner-link"), limits={"memory_mb": 60000, "max_steps": 30, "network": "open"}
    )
    assert response.status_code == 201
    limits = response.json()["limits"]
    assert limits["memory_mb"] == 4096 and limits["max_steps"] == 30 and limits["network"] == "none"


def test_body_size_limit(client: TestClient, roots: Path) -> None:
    big = create(client, repo=str(roots / "inner-link"), task="x" * 100_000)
    assert big.status_code == 413 and "larger than" in big.json()["detail"]
    chunked = client.post(
        "/v1/sessions",
        content=iter([json.dumps({"repo": str(roots), "task": "y" * 70_000}).encode()]),
        headers={"Content-Type": "application/json"},
    )
    assert chunked.status_code == 413


def test_unknown_session_is_404(client: TestClient) -> None:
    for method, path in [
        ("get", "/v1/sessions/nope"),
        ("get", "/v1/sessions/nope/messages"),
        ("post", "/v1/sessions/nope/cancel"),
        ("delete", "/v1/sessions/nope"),
        ("get", "/v1/sessions/nope/events"),
    ]:
        assert client.request(method, path).status_code == 404


def test_follow_up_rejects_unknown_fields_and_empty_text(client: TestClient, roots: Path) -> None:
    sid = create(client, repo=str(roots / "inner-link")).json()["id"]
    assert client.post(f"/v1/sessions/{sid}/messages", json={"text": ""}).status_code == 422
    assert client.post(f"/v1/sessions/{sid}/messages", json={"text": "x", "role": "system"}).status_code == 422


def test_list_is_paginated(client: TestClient, roots: Path) -> None:
    for n in range(3):  # three repositories: a repository has one running session at a time
        assert create(client, repo=str(owned_dir(roots / f"p{n}"))).status_code == 201
    page = client.get("/v1/sessions", params={"limit": 2}).json()
    assert page["total"] == 3 and len(page["items"]) == 2
    one = client.get(f"/v1/sessions/{page['items'][0]['id']}").json()
    for shown in (one, *page["items"]):  # the public record: the lease is the controllers' business
        assert set(shown) <= set(SessionRecord.model_fields) and "epoch" not in shown and "lease_expires" not in shown
    assert client.get("/v1/sessions", params={"limit": 0}).status_code == 422


def test_openapi_documents_models_and_errors(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    assert {"CreateSession", "SessionRecord", "LimitsRequest", "ErrorBody"} <= set(spec["components"]["schemas"])
    post = spec["paths"]["/v1/sessions"]["post"]
    assert {"201", "401", "403", "409", "422", "429"} <= set(post["responses"])


def test_no_session_starts_below_the_free_space_floor(tmp_path: Path, roots: Path) -> None:
    """A data directory whose filesystem has less free space than the floor: 507 and nothing made; 0 turns it off."""
    beyond = 1 << 24  # 16 TiB: more than this machine has free
    for floor, code in ((beyond, 507), (0, 201)):
        settings = Settings(
            api_key="unused",
            base_url="http://127.0.0.1:9",
            model_retries=0,
            api_token=TOKEN,
            repo_roots=[roots],
            data_dir=roots / f"data-{floor}",
            min_free_mb=floor,
            docker_host=f"unix://{roots}/sockdir/docker.sock",
        )
        app = create_app(settings, sandbox_factory=lambda *_: NoSandbox())
        with TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"}) as client:
            response = create(client, repo=str(roots / "project"))
            assert response.status_code == code, response.text
            if code == 507:
                detail = response.json()["detail"]
                assert f"below the floor of {beyond} MiB and 1000 inodes (CUBICLE_MIN_FREE_MB)" in detail
                assert client.get("/v1/sessions").json()["total"] == 0
                assert not (settings.data_dir / "workspaces").exists() or not any(
                    (settings.data_dir / "workspaces").iterdir()
                )


def test_retention_removes_old_ended_sessions_when_the_server_starts(
    roots: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CUBICLE_RETENTION: an ended session whose last event is older goes at start; an unknown form is refused."""
    monkeypatch.setenv("CUBICLE_RETENTION", "30d")
    assert Settings().retention_s == 30 * 86400
    monkeypatch.setenv("CUBICLE_RETENTION", "soon")
    with pytest.raises(ValueError, match="'soon' is not a duration; use a number and a unit"):
        Settings()
    monkeypatch.delenv("CUBICLE_RETENTION")

    def settings(retention_s: float | None) -> Settings:
        return Settings(
            api_key="unused",
            base_url="http://127.0.0.1:9",
            model_retries=0,
            api_token=TOKEN,
            repo_roots=[roots],
            data_dir=roots / "data",
            retention_s=retention_s,
            docker_host=f"unix://{roots}/sockdir/docker.sock",
        )

    headers = {"Authorization": f"Bearer {TOKEN}"}
    with TestClient(create_app(settings(None), sandbox_factory=lambda *_: NoSandbox()), headers=headers) as client:
        sid = create(client, repo=str(roots / "project")).json()["id"]
        eventually(
            lambda: client.get(f"/v1/sessions/{sid}").json()["status"],
            until=lambda s: s != "running",
            what="the turn ends (no model answers)",
        )
    with TestClient(create_app(settings(3600), sandbox_factory=lambda *_: NoSandbox()), headers=headers) as client:
        assert client.get(f"/v1/sessions/{sid}").status_code == 200  # younger than the retention
    time.sleep(1.1)
    with TestClient(create_app(settings(1), sandbox_factory=lambda *_: NoSandbox()), headers=headers) as client:
        eventually(
            lambda: client.get(f"/v1/sessions/{sid}").status_code,
            until=lambda code: code == 404,
            what="the retention sweep at start removes the session",
        )
    assert not (roots / "data" / "workspaces" / sid).exists()
