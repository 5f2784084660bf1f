"""Everything under tests/integration talks to a real Docker engine; some tests run the controller's own image."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controller.testing import DEFAULT_IMAGE
from tests.integration.layer_api import LayerApi

ROOT = Path(__file__).resolve().parents[2]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration" in str(item.path):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def controller_image(docker_client: Any) -> str:
    """The controller's own image, built from this repository when the engine does not have it."""
    try:
        docker_client.images.get(DEFAULT_IMAGE)
    except Exception:  # noqa: BLE001 - any lookup failure means: build it
        subprocess.run(
            [str(ROOT / ".ci" / "controller-image")], check=True, cwd=ROOT, env={**os.environ, "PYTHON": sys.executable}
        )
    return DEFAULT_IMAGE


@pytest.fixture(scope="module")
def layer_base() -> Iterator[Path]:
    """A directory the repository owner (uid 1000) can walk into, for the layer tests' hosts and data."""
    base = Path(tempfile.mkdtemp(prefix="cubicle-layer-it-"))
    os.chmod(base, 0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def layer_api(layer_base: Path, model_server: Any) -> Iterator[LayerApi]:
    """One `cubicle serve` app (in this process, on a real port) for a whole module of layer tests."""
    with LayerApi.serve(layer_base, model_server) as api:
        yield api
