"""The viewer's guards with TestClient: sign-in cookie, Origin, Host, security headers, the page and its assets."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import Request
from fastapi.testclient import TestClient
from pydantic import SecretStr

from controller.agent.scripted import Block, Scenario, ScriptedServer, Turn, serve_in_thread
from controller.config import Settings
from controller.server import webauth, webui
from controller.server.api import create_app
from controller.testing import LOOPBACK, NoSandbox
from controller.workspace import repos
from tests.sandbox_defaults import owned_dir

TOKEN = "viewer-unit-test-token"
HERE = "http://127.0.0.1"


def _settings(tmp_path: Path, token: str | None) -> Settings:
    return Settings(
        api_key="unused",
        base_url="http://127.0.0.1:9",
        model_retries=0,
        api_token=token,
        repo_roots=[tmp_path / "roots"],
        data_dir=tmp_path / "data",
    )


@pytest.fixture
def roots(tmp_path: Path) -> Path:
    owned_dir(tmp_path / "roots" / "app" / ".git")
    owned_dir(tmp_path / "roots" / "group" / "lib" / ".git")
    owned_dir(tmp_path / "roots" / "notes")
    owned_dir(tmp_path / "roots" / ".hidden" / "x" / ".git")
    return tmp_path / "roots"


@pytest.fixture
def client(tmp_path: Path, roots: Path) -> Iterator[TestClient]:
    app = create_app(_settings(tmp_path, TOKEN), sandbox_factory=lambda *_: NoSandbox())
    with TestClient(app, base_url=HERE) as c:
        yield c


@pytest.fixture
def open_client(tmp_path: Path, roots: Path) -> Iterator[TestClient]:
    with TestClient(
        create_app(_settings(tmp_path, None), sandbox_factory=lambda *_: NoSandbox()), base_url=LOOPBACK
    ) as c:
        yield c


def _sign_in(client: TestClient) -> str:
    """Sign in as the page does: the cookie lands in the client's jar, the key goes on every request."""
    response = client.post("/ui/login", json={"token": TOKEN}, headers={"Origin": HERE})
    assert response.status_code == 200, response.text
    key = str(response.json()["key"])
    client.headers["X-Cubicle-Key"] = key
    return key


def test_the_page_is_served_with_a_strict_policy(client: TestClient) -> None:
    assert client.get("/", follow_redirects=False).headers["location"] == "/ui/"
    page = client.get("/ui/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert "default-src 'self'" in policy and "frame-ancestors 'none'" in policy and "unsafe-inline" not in policy
    assert page.headers["x-content-type-options"] == "nosniff" and page.headers["x-frame-options"] == "DENY"
    for missing in ("nothing.js", "..%2Fapi.py", "index"):
        assert client.get(f"/ui/assets/{missing}").status_code == 404
    # API answers carry the policy too; only Swagger UI's page (inline script) gets the framing part alone.
    assert client.get("/v1/sessions").headers["content-security-policy"] == webui.CSP
    assert (
        client.get("/docs", headers={"Authorization": f"Bearer {TOKEN}"}).headers["content-security-policy"]
        == webui.DOCS_CSP
    )


def test_sign_in_gives_an_httponly_strict_cookie_that_the_api_accepts(client: TestClient) -> None:
    assert client.get("/ui/auth").json() == {"mode": "token", "signed_in": False}
    assert client.get("/v1/sessions").status_code == 401
    wrong = client.post("/ui/login", json={"token": "not-it"}, headers={"Origin": HERE})
    assert wrong.status_code == 401 and "cubicle_session" not in wrong.headers.get("set-cookie", "")
    key = _sign_in(client)
    cookie = client.cookies.get("cubicle_session") or ""
    assert key and TOKEN not in key and TOKEN not in cookie
    assert client.get("/ui/auth").json() == {"mode": "token", "signed_in": True}
    assert client.get("/v1/sessions").status_code == 200
    assert client.get("/v1/repos").status_code == 200


def test_a_cookie_request_that_changes_something_needs_this_origin(client: TestClient, roots: Path) -> None:
    _sign_in(client)
    body = {"repo": str(roots / "app"), "task": "t", "model": "scripted"}
    for origin in (None, "http://127.0.0.1:3000", "http://evil.example", "null", "https://127.0.0.1"):
        headers = {"Origin": origin} if origin else {}
        refused = client.post("/v1/sessions", json=body, headers=headers)
        assert refused.status_code == 403 and "cross-origin" in refused.json()["detail"], origin
        assert client.post("/v1/sessions/x/cancel", headers=headers).status_code == 403
        assert client.delete("/v1/sessions/x", headers=headers).status_code == 403
    # From the page's own origin the request reaches the route (which then says the session does not exist).
    assert client.post("/v1/sessions/x/cancel", headers={"Origin": HERE}).status_code == 404
    # The bearer token needs no Origin: a browser cannot send it cross-site without a preflight.
    bearer = {"Authorization": f"Bearer {TOKEN}", "Origin": "http://evil.example"}
    assert client.post("/v1/sessions/x/cancel", headers=bearer).status_code == 404


def test_cookies_expire_are_bound_to_the_token_and_can_be_revoked(client: TestClient) -> None:
    now = time.time()
    revoked: webauth.Revocations = client.app.state.revoked  # type: ignore[attr-defined]
    token = SecretStr(TOKEN)
    good = webauth.issue(token, 60, now)
    assert webauth.verify(token, good, now, revoked)
    assert not webauth.verify(token, good, now + 61, revoked)  # expired
    assert not webauth.verify(SecretStr("another-token-of-this-server"), good, now, revoked)
    expires, nonce, mac = good.split(".")
    for forged in (
        f"{int(expires) + 999}.{nonce}.{mac}",
        f"{expires}.{nonce}x.{mac}",
        f"{expires}.{nonce}.",
        "",
        "a.b.c",
    ):
        assert not webauth.verify(token, forged, now, revoked), forged
    webauth.revoke(good, now, revoked)
    assert not webauth.verify(token, good, now, revoked)

    _sign_in(client)
    assert client.get("/v1/sessions").status_code == 200
    stolen = client.cookies.get("cubicle_session")
    assert client.post("/ui/logout", headers={"Origin": HERE}).status_code == 204
    client.cookies.set("cubicle_session", stolen or "")
    assert client.get("/v1/sessions").status_code == 401  # a copy kept from before the sign-out is dead too


def test_loopback_mode_answers_only_loopback_hosts_and_refuses_foreign_origins(
    open_client: TestClient, roots: Path
) -> None:
    assert open_client.get("/ui/auth").json() == {"mode": "loopback", "signed_in": True}
    for host in ("localhost:8750", "127.0.0.1", "127.0.0.2:1", "[::1]:8750", "LOCALHOST"):
        assert open_client.get("/v1/sessions", headers={"Host": host}).status_code == 200, host
    for host in ("rebind.evil.example:8750", "evil.localhost.example", "0.0.0.0:8750", "192.168.1.10", "", "[::1"):
        refused = open_client.get("/v1/sessions", headers={"Host": host})
        assert refused.status_code == 421 and "loopback" in refused.json()["detail"], host
        assert open_client.get("/healthz", headers={"Host": host}).status_code == 421
    cross = open_client.post("/v1/sessions/x/cancel", headers={"Origin": "http://127.0.0.1:5173"})
    assert cross.status_code == 403
    assert open_client.post("/v1/sessions/x/cancel", headers={"Origin": LOOPBACK}).status_code == 404
    assert open_client.post("/v1/sessions/x/cancel").status_code == 404  # the CLI and curl send no Origin


def test_repos_lists_checkouts_under_the_roots(open_client: TestClient, roots: Path) -> None:
    listed = open_client.get("/v1/repos").json()
    assert listed["roots"] == [str(roots)]
    assert listed["repos"] == [str(roots / "app"), str(roots / "group" / "lib")]
    assert listed["branch_prefix"] == "cubicle/"  # the push form's start (CUBICLE_GIT_BRANCH_PREFIX)


def test_the_cookie_is_worth_nothing_without_its_page_key(client: TestClient) -> None:
    """A server on another port of the host receives the cookie (browsers send it to every port), never the key."""
    response = client.post("/ui/login", json={"token": TOKEN}, headers={"Origin": HERE})
    cookie = response.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie and "Max-Age=43200" in cookie
    key = response.json()["key"]
    assert client.get("/v1/sessions").status_code == 401  # the cookie alone
    assert client.get("/ui/auth").json() == {"mode": "token", "signed_in": False}
    other = client.post("/ui/login", json={"token": TOKEN}, headers={"Origin": HERE}).json()["key"]
    assert other != key  # each sign-in has its own key, bound to its own cookie (the jar now holds the second)
    assert client.get("/v1/sessions", headers={"X-Cubicle-Key": key}).status_code == 401
    assert client.get("/v1/sessions", headers={"X-Cubicle-Key": other}).status_code == 200
    assert client.get("/v1/sessions", params={"key": other}).status_code == 200  # EventSource cannot send headers
    assert client.get("/v1/sessions", headers={"X-Cubicle-Key": ""}).status_code == 401
    client.cookies.clear()
    assert client.get("/v1/sessions", headers={"X-Cubicle-Key": other}).status_code == 401  # the key alone


def test_a_sign_out_holds_on_every_controller_of_the_database_and_after_a_restart(
    tmp_path: Path, roots: Path, each_store: str
) -> None:
    def app() -> TestClient:
        return TestClient(create_app(_settings(tmp_path, TOKEN), sandbox_factory=lambda *_: NoSandbox()), base_url=HERE)

    with app() as first, app() as second:
        key = _sign_in(first)
        cookie = {"Cookie": f"{webauth.COOKIE}={first.cookies[webauth.COOKIE]}", "X-Cubicle-Key": key}
        first.cookies.clear()
        assert second.get("/v1/sessions", headers=cookie).status_code == 200
        assert first.post("/ui/logout", headers={**cookie, "Origin": HERE}).status_code == 204
        assert second.get("/v1/sessions", headers=cookie).status_code == 401, "the other controller honours it"
    with app() as restarted:
        assert restarted.get("/v1/sessions", headers=cookie).status_code == 401, "a restart forgets no sign-out"


def test_a_stream_opened_with_a_cookie_ends_once_it_is_signed_out(tmp_path: Path, roots: Path) -> None:
    """Authentication runs when a request starts; an event stream outlives that, so it asks again per write."""
    slow = Scenario(name="slow", turns=[Turn(content=[Block(type="text", text="after the sign-out")], delay_s=2)])
    model = ScriptedServer([slow])
    with serve_in_thread(model.app) as model_url:
        settings = _settings(tmp_path, TOKEN).model_copy(update={"base_url": model_url})
        app = create_app(settings, sandbox_factory=lambda *_: NoSandbox())
        with serve_in_thread(app) as url, httpx.Client(base_url=url) as page, httpx.Client(base_url=url) as api:
            key = page.post("/ui/login", json={"token": TOKEN}, headers={"Origin": url}).json()["key"]
            page.headers["X-Cubicle-Key"] = key
            bearer = {"Authorization": f"Bearer {TOKEN}"}
            repo = str(owned_dir(roots / "mine"))
            made = api.post("/v1/sessions", json={"repo": repo, "task": "t", "model": "slow"}, headers=bearer)
            assert made.status_code == 201, made.text
            sid = made.json()["id"]
            with page.stream("GET", f"/v1/sessions/{sid}/events") as stream:
                lines = stream.iter_lines()
                assert next(line for line in lines if line.startswith("event:")) == "event: session_started"
                assert page.post("/ui/logout", headers={"Origin": url}).status_code == 204
                rest = list(lines)
            whole = api.get(f"/v1/sessions/{sid}/events", headers=bearer).text
    assert "after the sign-out" in whole, "the bearer token's stream had it"
    assert not any("after the sign-out" in line for line in rest), rest


def test_a_long_response_asks_the_store_at_most_every_second_and_a_store_gone_ends_it(client: TestClient) -> None:
    key = _sign_in(client)
    cookie = f"{webauth.COOKIE}={client.cookies[webauth.COOKIE]}"
    app = client.app
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/v1/sessions/x/events",
        "query_string": b"",
        "app": app,
        "headers": [(b"cookie", cookie.encode()), (b"x-cubicle-key", key.encode())],
    }
    check = webauth.still_let_in(Request(scope), SecretStr(TOKEN))
    assert check(), "just let in"
    app.state.sessions.store.close()  # type: ignore[attr-defined]  # the database goes away mid-stream
    assert check(), "within a second of the last look the store is not asked again"
    time.sleep(webauth.RECHECK_S + 0.05)
    assert not check(), "a store that cannot answer counts as a sign-out"


def test_a_last_event_id_too_long_for_a_number_is_ignored_not_a_crash(client: TestClient) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}", "Last-Event-ID": "9" * 5000}
    assert client.get("/v1/sessions/s_nope/events", headers=headers).status_code == 404


def test_the_form_is_offered_the_first_repository_that_is_not_cubicles_own_checkout(
    tmp_path: Path, roots: Path
) -> None:
    own = repos.own_checkout()
    assert own is not None and (own / "controller" / "server" / "webui.py").is_file(), "the tests run from a checkout"
    for order, expected in (([own, roots], roots / "app"), ([roots, own], roots / "app"), ([own], None)):
        settings = _settings(tmp_path, None).model_copy(update={"repo_roots": order})
        with TestClient(create_app(settings, sandbox_factory=lambda *_: NoSandbox()), base_url=LOOPBACK) as client:
            listed = client.get("/v1/repos").json()
        assert str(own) in listed["repos"], "still offered, just not first"
        assert listed["default"] == (None if expected is None else str(expected)), order
    assert repos.preselected(["/r/b/x", "/r/a/y"], [Path("/r/b"), Path("/r/a")], None) == "/r/b/x"


@pytest.mark.parametrize(("name", "kind"), [("prism.js", "text/javascript"), ("prism.LICENSE.txt", "text/plain")])
def test_the_vendored_highlighter_and_its_licence_are_served(client: TestClient, name: str, kind: str) -> None:
    served = client.get(f"/ui/assets/{name}")
    assert served.status_code == 200 and served.headers["content-type"].startswith(kind)
    assert ("Prism 1.30.0" if name == "prism.js" else "MIT LICENSE") in served.text
