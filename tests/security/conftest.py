"""The red-team battery: the model is an attacker that controls every tool argument.

Every test gets a random sentinel planted on the host next to (outside) its repository;
``assert_clean`` checks that nothing the sandbox returned contains it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from controller.sandbox.docker import DockerSandbox
from tests.sandbox_defaults import SECURE_LIMITS, drop_other_runtimes, each_runtime  # noqa: F401 - sandboxes here run under each runtime


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/security" in str(item.path) and "test_api_input" not in str(item.path):
            item.add_marker(pytest.mark.integration)
    drop_other_runtimes(config, items)


@pytest.fixture(autouse=True)
def planted(sentinel: str) -> str:
    return sentinel


@pytest.fixture
async def box(make_repo: Callable[..., Path], sandbox_factory: Callable[..., DockerSandbox]) -> DockerSandbox:
    sandbox = sandbox_factory(make_repo(), SECURE_LIMITS)
    await sandbox.start()
    return sandbox


@pytest.fixture
def assert_clean(sentinel: str) -> Callable[..., None]:
    def check(*things: Any) -> None:
        for thing in things:
            text = thing.model_dump_json() if hasattr(thing, "model_dump_json") else str(thing)
            assert sentinel not in text, "the host sentinel leaked into a result"

    return check
