"""The API's docs: behind the token like every route, and complete without a network (no CDN)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from controller.config import Settings
from controller.server.api import create_app
from controller.testing import LOOPBACK, NoSandbox

pytestmark = pytest.mark.usefixtures("each_store")  # the API suite runs on SQLite and on PostgreSQL

TOKEN = "docs-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _client(tmp_path: Path, token: str | None) -> TestClient:
    settings = Settings(api_key="unused", api_token=token, repo_roots=[tmp_path], data_dir=tmp_path / "data")
    return TestClient(create_app(settings, sandbox_factory=lambda *_: NoSandbox()), base_url=LOOPBACK)


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with _client(tmp_path, TOKEN) as c:
        yield c


@pytest.mark.parametrize("path", ["/openapi.json", "/docs", "/docs/assets/swagger-ui-bundle.js"])
@pytest.mark.parametrize("header", [None, "Bearer wrong"])
def test_docs_and_schema_need_the_token(client: TestClient, path: str, header: str | None) -> None:
    response = client.get(path, headers={"Authorization": header or ""})
    assert response.status_code == 401, (path, response.status_code)
    assert response.headers["www-authenticate"] == "Bearer"


def test_redoc_is_gone(client: TestClient) -> None:
    assert client.get("/redoc", headers=AUTH).status_code == 404


def test_schema_with_the_token_hides_internal_docstrings(client: TestClient) -> None:
    response = client.get("/openapi.json", headers=AUTH)
    assert response.status_code == 200
    spec = response.json()
    assert "/v1/sessions" in spec["paths"] and "/docs" not in spec["paths"] and "/openapi.json" not in spec["paths"]
    description = spec["info"]["description"]
    assert "Bearer" in description
    for internal in ("sessions.Manager", "exception", "``", "handler"):
        assert internal not in description


def test_docs_page_loads_only_local_assets(client: TestClient) -> None:
    page = client.get("/docs", headers=AUTH)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    html = page.text
    assert "cdn" not in html.lower()
    assert not re.search(r"(https?:)?//", html), "the page names an external URL"
    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert len(assets) == 4 and all(a.startswith(("/docs/assets/", "/ui/assets/")) for a in assets), assets
    assert 'data-openapi="/openapi.json"' in html
    assert re.findall(r"<script\b[^>]*>", html) == [
        '<script src="/docs/assets/swagger-ui-bundle.js">',
        '<script src="/ui/assets/docs.js">',
    ], "no inline script"
    policy = page.headers["content-security-policy"]
    assert "script-src 'self';" in policy and "unsafe-eval" not in policy and "frame-ancestors 'none'" in policy
    for asset in assets:
        served = client.get(asset, headers=AUTH)
        assert served.status_code == 200 and len(served.content) > 1000, asset
    script = client.get("/docs/assets/swagger-ui-bundle.js", headers=AUTH)
    assert script.headers["content-type"].startswith("text/javascript")


@pytest.mark.parametrize("name", ["../__init__.py", "..%2f__init__.py", "redoc.standalone.js", "index.html", ""])
def test_only_the_named_assets_are_served(client: TestClient, name: str) -> None:
    assert client.get(f"/docs/assets/{name}", headers=AUTH).status_code == 404


def test_without_a_token_the_docs_are_open(tmp_path: Path) -> None:
    """Without a token `cubicle serve` binds only loopback, and every route is open there."""
    with _client(tmp_path, None) as open_client:
        assert open_client.get("/docs").status_code == 200
        assert open_client.get("/openapi.json").status_code == 200
        assert open_client.get("/docs/assets/swagger-ui.css").status_code == 200


def test_a_signed_in_cookie_opens_the_docs_and_the_schema_wants_its_key_too(client: TestClient) -> None:
    """A browser opening /docs sends the cookie but cannot send the page key: the page (no data) opens with the
    cookie; the schema and every /v1 route want the key as well, and a write the Origin too (docs.js sends the key)."""
    assert client.get("/docs").status_code == 401, "no cookie yet"
    signed = client.post("/ui/login", json={"token": TOKEN}, headers={"Origin": LOOPBACK})
    key = signed.json()["key"]
    assert client.get("/docs").status_code == 200
    assert client.get("/docs/assets/swagger-ui.css").status_code == 200
    assert client.get("/openapi.json").status_code == 401, "the cookie alone"
    assert client.get("/openapi.json", headers={"X-Cubicle-Key": key}).status_code == 200
    assert client.post("/v1/sessions/s_x/cancel", headers={"Origin": LOOPBACK}).status_code == 401, "cookie-only write"
    assert client.post("/v1/sessions/s_x/cancel", headers={"X-Cubicle-Key": key}).status_code == 403, "no Origin"
    found = client.post("/v1/sessions/s_x/cancel", headers={"X-Cubicle-Key": key, "Origin": LOOPBACK})
    assert found.status_code == 404, found.text  # let in: no such session
    client.cookies.clear()
    client.cookies.set("cubicle_session", "forged")
    assert client.get("/docs").status_code == 401
