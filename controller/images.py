"""The sandbox image: connect to the engine, find the image, build it from this checkout."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
from docker.errors import APIError, BuildError, DockerException, ImageNotFound

from .errors import DockerUnavailableError, ImageMissingError, SandboxError

BUILD_COMMAND = "cubicle image build"
DOCKERFILE = "Dockerfile.sandbox"


def connect(timeout: float = 120) -> Any:
    """A docker client for the engine named by DOCKER_HOST (or the local socket), checked with a ping."""
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except DockerException as err:
        raise DockerUnavailableError(f"Docker is not reachable: {err}.") from None
    return client


def build_context() -> Path | None:
    """The source checkout that holds Dockerfile.sandbox, if Cubicle runs from one."""
    root = Path(__file__).resolve().parent.parent
    return root if (root / DOCKERFILE).is_file() and (root / "sandbox-image").is_dir() else None


def build(client: Any, tag: str, base: str | None = None, on_line: Callable[[str], None] | None = None) -> str:
    """Build the sandbox image from the checkout, streaming build output to ``on_line``; returns its id."""
    context = build_context()
    if context is None:
        raise ImageMissingError(
            f"Cannot build {tag}: {DOCKERFILE} is not next to this installation.",
            hint="Run `cubicle image build` from a Cubicle source checkout (pip install -e .).",
        )
    buildargs = {"BASE": base} if base else {}
    image_id = ""
    try:
        stream = client.api.build(
            path=str(context), dockerfile=DOCKERFILE, tag=tag, buildargs=buildargs, rm=True, decode=True
        )
        for chunk in stream:
            if "error" in chunk:
                raise SandboxError(f"Building {tag} failed: {chunk['error'].strip()}")
            line = chunk.get("stream", "").rstrip()
            if line and on_line:
                on_line(line)
            image_id = chunk.get("aux", {}).get("ID", image_id)
    except (BuildError, APIError) as err:
        raise SandboxError(f"Building {tag} failed: {err}") from None
    return image_id


def ensure(client: Any, tag: str, auto_build: bool, on_line: Callable[[str], None] | None = None) -> None:
    """Make sure ``tag`` exists: build it when allowed and possible, else say exactly what to run."""
    try:
        client.images.get(tag)
        return
    except ImageNotFound:
        pass
    if auto_build and build_context() is not None:
        build(client, tag, on_line=on_line)
        return
    raise ImageMissingError(f"The sandbox image {tag} is not present.", hint=f"Build it with `{BUILD_COMMAND}`.")
