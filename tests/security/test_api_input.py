"""API input as an attacker sends it: every field fuzzed, plus schemathesis over our own OpenAPI spec.

No Docker: the sandbox seam is a stub that refuses calls, and the model endpoint is closed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from controller.agent.scripted import serve_in_thread
from controller.config import Settings
from controller.server.api import create_app
from controller.testing import NoSandbox
from tests.sandbox_defaults import owned_dir

TOKEN = "fuzz-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _settings(root: Path) -> Settings:
    owned_dir(root / "repo")  # a root-owned repository is refused
    return Settings(
        api_key="unused",
        base_url="http://127.0.0.1:9",
        model_retries=0,
        api_token=TOKEN,
        repo_roots=[root],
        data_dir=root.parent / f"{root.name}-data",
        max_body_bytes=64 * 1024,
    )


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(
        create_app(_settings(tmp_path / "roots"), sandbox_factory=lambda *_: NoSandbox()), headers=AUTH
    ) as c:
        yield c


@pytest.mark.parametrize(
    "body",
    [
        b"\xff\xfe\xfd",
        b"{",
        b"[]",
        b"null",
        b'"repo"',
        b'{"repo": 1, "task": 2}',
        b'{"repo": null, "task": "t"}',
        b'{"repo": ["/"], "task": "t"}',
        b'{"repo": "/tmp", "task": {"$gt": ""}}',
        b'{"repo": "\\ud800", "task": "t"}',
        json.dumps({"repo": "/x", "task": "t", "limits": []}).encode(),
        json.dumps({"repo": "/x", "task": "t", "limits": {"memory_mb": 1e308}}).encode(),
        json.dumps({"repo": "/x", "task": "t", "limits": {"cpus": "NaN"}}).encode(),
        json.dumps({"repo": "/x", "task": "t", "model": "../../etc"}).encode(),
        json.dumps({"repo": "/x" * 5000, "task": "t"}).encode(),
    ],
)
def test_malformed_bodies_are_4xx(client: TestClient, body: bytes) -> None:
    response = client.post("/v1/sessions", content=body, headers={"Content-Type": "application/json"})
    assert 400 <= response.status_code < 500, response.text
    assert "detail" in response.json()


@pytest.mark.parametrize(
    "sid", ["../../etc/passwd", "%2e%2e%2f", "s_" + "0" * 16, "x" * 5000, "'; DROP TABLE sessions; --", "\u202e"]
)
def test_other_or_forged_session_ids_are_404(client: TestClient, sid: str) -> None:
    for method, suffix in [("get", ""), ("get", "/messages"), ("post", "/cancel"), ("delete", ""), ("get", "/events")]:
        response = client.request(method, f"/v1/sessions/{sid}{suffix}")
        assert response.status_code in (404, 405), (method, sid, response.status_code)


def test_wrong_content_type_and_methods(client: TestClient, tmp_path: Path) -> None:
    assert (
        client.post(
            "/v1/sessions", content=b"repo=/x&task=t", headers={"Content-Type": "application/x-www-form-urlencoded"}
        ).status_code
        == 422
    )
    assert client.put("/v1/sessions").status_code == 405
    assert client.get("/v1/sessions", params={"limit": "ten"}).status_code == 422
    assert client.get("/v1/sessions", params={"offset": -1}).status_code == 422


def test_follow_up_and_events_query_fuzz(client: TestClient, tmp_path: Path) -> None:
    sid = client.post("/v1/sessions", json={"repo": str(tmp_path / "roots" / "repo"), "task": "t"}).json()["id"]
    for body in ({"text": 5}, {"text": None}, {}, {"text": "x", "extra": 1}, [1]):
        assert client.post(f"/v1/sessions/{sid}/messages", json=body).status_code == 422
    assert client.get(f"/v1/sessions/{sid}/events", params={"after": -5}).status_code == 422
    assert client.get(f"/v1/sessions/{sid}/events", headers={"Last-Event-ID": "not-a-number"}).status_code in (200, 404)


# --------------------------------------------------------------------------- schemathesis


@pytest.fixture(scope="module")
def live_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("schemathesis") / "roots"
    with serve_in_thread(create_app(_settings(root), sandbox_factory=lambda *_: NoSandbox())) as url:
        yield url


def test_openapi_conformance(live_api: str) -> None:
    """No 5xx, and every response matches the documented status codes and schemas, for every operation.

    The one check left out is "schema-valid data is accepted": a repo path can be valid by the
    schema and still not exist, or lie outside the roots, which only the filesystem can tell.
    """
    schema = schemathesis.openapi.from_url(f"{live_api}/openapi.json", headers=AUTH)  # the schema needs the token too
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 9
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None, derandomize=True
        )
        def check(case: Any) -> None:
            case.call_and_validate(headers=AUTH, timeout=10, excluded_checks=[positive_data_acceptance])

        check()


def test_huge_numbers_in_queries_and_headers(client: TestClient, tmp_path: Path) -> None:
    assert client.get("/v1/sessions", params={"offset": 10**30}).status_code == 422
    sid = client.post("/v1/sessions", json={"repo": str(tmp_path / "roots" / "repo"), "task": "t"}).json()["id"]
    assert client.get(f"/v1/sessions/{sid}/events", params={"after": 10**30}).status_code == 422
    assert client.get(f"/v1/sessions/{sid}/events", headers={"Last-Event-ID": "9" * 40}).status_code == 200
    superscript_two = "\u00b2".encode("latin-1")  # str.isdigit() says yes, int() says no
    assert client.get(f"/v1/sessions/{sid}/events", headers={"Last-Event-ID": superscript_two}).status_code == 200
