"""Unit tests never reach a Docker engine, whichever run they are part of.

The README's test command runs them beside the integration tests, in the same workers; here each
one gets a ``DOCKER_HOST`` that points nowhere (so code that would talk to an engine fails at
once), and none may ask for a fixture that brings one (``ENGINE_FIXTURES``).
"""

from __future__ import annotations

import pytest

NO_ENGINE = "unix:///nonexistent/docker.sock"
ENGINE_FIXTURES = frozenset({"docker_client", "sandbox_factory", "sandbox", "proxy_image", "controller_image"})


@pytest.fixture(autouse=True)
def no_engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    used = ENGINE_FIXTURES & set(request.fixturenames)
    if used:
        pytest.fail(f"a unit test may not use a Docker engine (it asks for {', '.join(sorted(used))})")
    monkeypatch.setenv("DOCKER_HOST", NO_ENGINE)
    monkeypatch.delenv("CUBICLE_DOCKER_HOST", raising=False)
