"""Everything under tests/integration talks to a real Docker engine; some tests run the controller's own image."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docker.errors import ImageNotFound

from bench import gitserver
from bench.gitserver import GitServer
from controller.testing.container import DEFAULT_IMAGE
from tests.integration.layer_api import LayerApi

ROOT = Path(__file__).resolve().parents[2]
GIT_PASSWORD = "pw-7f3a9c1e5b"
INFLECTION = ROOT / "tests" / "fixtures" / "inflection"
"""What the git server's repositories are made of (``GitServer.create``)."""
"""The test git server's password: the tests grep the data directory and every error for it."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration" in str(item.path):
            item.add_marker(pytest.mark.integration)


def source_tag() -> str:
    """An image tag naming this checkout's controller sources, so a test never runs an image of other code."""
    digest = hashlib.sha256()
    sources = [*(ROOT / "controller").rglob("*"), *(ROOT / "sandbox-image").rglob("*")]
    built_by = [
        ROOT / name
        for name in ("pyproject.toml", "setup.py", "Dockerfile.controller", "Dockerfile.sandbox", ".ci/wheelhouse")
    ]
    for path in sorted([*sources, *built_by]):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return f"{DEFAULT_IMAGE.rsplit(':', 1)[0]}:src-{digest.hexdigest()[:12]}"


@pytest.fixture(scope="session")
def controller_image(docker_client: Any) -> str:
    """The controller's own image, built from this checkout unless the engine has that exact build.

    It is also tagged as the default image, which the README's example starts: an image
    left by another checkout (or an older commit) once let these tests pass on old code.
    """
    tag = source_tag()
    # The workers of a parallel run each ask; one builds (the script's wheelhouse is one folder), the rest wait.
    # .ci/run builds it in the background under this same lock, and starts the suite without waiting for it.
    with open(Path(tempfile.gettempdir()) / "cubicle-controller-image.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            image = docker_client.images.get(tag)
        except ImageNotFound:
            subprocess.run(
                [str(ROOT / ".ci" / "controller-image"), tag],
                check=True,
                cwd=ROOT,
                env={**os.environ, "PYTHON": sys.executable},
            )
            image = docker_client.images.get(tag)
    image.tag(DEFAULT_IMAGE)
    return tag


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


@pytest.fixture
def git_server() -> Iterator[GitServer]:
    """A real smart-HTTP git server on loopback (``bench.gitserver``), stopped and removed after the test.
    Without nginx or fcgiwrap: a failure on CI (the `CI` variable is set), a skip elsewhere."""
    if not gitserver.available():
        message = "the git server's tests need Debian's nginx and fcgiwrap (apt-get install nginx fcgiwrap)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    with gitserver.serving(GIT_PASSWORD) as server:
        yield server
