"""Red-team findings against the viewer's server side (controller/server/webui.py and webauth.py), without Docker.

Each test states the property that should hold; a failing test is an open finding.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from controller.server import webauth
from controller.server.api import create_app
from controller.testing import NoSandbox
from tests.unit.server.test_webui import HERE, TOKEN, _settings


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    (tmp_path / "roots").mkdir()
    app = create_app(_settings(tmp_path, TOKEN), sandbox_factory=lambda *_: NoSandbox())
    with TestClient(app, base_url=HERE) as c:
        yield c


def _sign_in(client: TestClient) -> str:
    response = client.post("/ui/login", json={"token": TOKEN}, headers={"Origin": HERE})
    assert response.status_code == 200
    client.headers["X-Cubicle-Key"] = response.json()["key"]
    cookie = client.cookies.get(webauth.COOKIE)
    assert cookie
    return cookie


def test_finding_unauthenticated_logout_flushes_the_revocation_list(client: TestClient) -> None:
    """FINDING (medium): POST /ui/logout needs no credentials and revoked whatever cookie it was sent,
    signed or not. Anyone who can reach the server (curl sends no Origin) could post forged cookies
    with far-future expiry until the bounded list dropped its oldest entries, so a real sign-out was
    forgotten and a cookie stolen before it worked again ("replay after logout"). Only signed cookies
    are remembered now, in the store, with no count bound to flush."""
    stolen = _sign_in(client)
    assert client.post("/ui/logout", headers={"Origin": HERE}).status_code == 204
    client.cookies.clear()
    assert (
        client.get("/v1/sessions", headers={"Cookie": f"{webauth.COOKIE}={stolen}"}).status_code == 401
    )  # revoked: good

    for i in range(200):  # the attacker: no token, no cookie of its own, no Origin
        forged = f"999999999999.flood{i}.not-a-mac"
        assert client.post("/ui/logout", headers={"Cookie": f"{webauth.COOKIE}={forged}"}).status_code == 204

    replay = client.get("/v1/sessions", headers={"Cookie": f"{webauth.COOKIE}={stolen}"})
    assert replay.status_code == 401, "a cookie revoked by sign-out works again after a flood of forged sign-outs"


def test_finding_forged_logouts_fill_the_servers_memory(client: TestClient) -> None:
    """FINDING (medium, same root cause): the nonce of an unsigned cookie is stored as sent, up to the
    header size, and kept until its forged expiry (year 33658): 10,000 of them are hundreds of MB
    that no one signed in for. Only a cookie this server signed should be remembered."""
    client.cookies.clear()
    revoked: webauth.Revocations = client.app.state.revoked  # type: ignore[attr-defined]
    before = len(revoked)
    big = "n" * 60_000
    assert client.post("/ui/logout", headers={"Cookie": f"{webauth.COOKIE}=999999999999.{big}.x"}).status_code == 204
    grown = len(revoked) - before
    assert grown == 0, f"an unauthenticated sign-out stored {grown} sign-outs"
