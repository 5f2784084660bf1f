"""The sandbox image: find it on the engine, build it from the context shipped in this package."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from docker.errors import APIError, BuildError, ImageNotFound

from .errors import ImageMissingError, SandboxError

BUILD_COMMAND = "cubicle image build"
DOCKERFILE = "Dockerfile"
CONTEXT = Path(__file__).resolve().parent / "sandbox_image"
"""The image's build context: package data, so a wheel install can build the image as well as a checkout."""
TOOLBOX = "toolbox"
"""The toolbox's directory in the context; the image runs it as a directory (see its ``__main__``)."""


def build_context() -> Path | None:
    """The directory holding the sandbox's Dockerfile and toolbox, or None if this installation lacks it."""
    return CONTEXT if (CONTEXT / DOCKERFILE).is_file() and (CONTEXT / TOOLBOX / "__main__.py").is_file() else None


def build(client: Any, tag: str, base: str | None = None, on_line: Callable[[str], None] | None = None) -> str:
    """Build the sandbox image from the packaged context, streaming build output to ``on_line``; returns its id."""
    context = build_context()
    if context is None:
        raise ImageMissingError(
            f"Cannot build {tag}: this installation of Cubicle lacks its image files ({CONTEXT}).",
            hint="Reinstall Cubicle (`pip install --force-reinstall cubicle`, or `pip install -e .` in a checkout).",
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
