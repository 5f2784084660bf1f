"""Cubicle's images: find one on the engine, build it from the context shipped in this package.

Two images are built from files this installation carries: the sandbox (``sandbox-image/`` and
``Dockerfile.sandbox`` at the top of a checkout; ``controller/sandbox_image/`` in a wheel) and
the egress proxy of ``allow`` network policies (``controller/proxy_image``). Each is a ``Context``; every function here
takes one and defaults to the sandbox's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from docker.errors import APIError, BuildError, ImageNotFound

from ..errors import ImageMissingError, SandboxError

BUILD_COMMAND = "cubicle image build"
DOCKERFILE = "Dockerfile"
PACKAGE = Path(__file__).resolve().parents[1]
"""The ``controller`` package's directory, which carries the proxy's build context as package data."""
CHECKOUT = PACKAGE.parent
"""The repository, when this package runs from a checkout (an editable install)."""
TOOLBOX = "toolbox"
"""The toolbox's directory in the context; the image runs it as a directory (see its ``__main__``)."""


@dataclass(frozen=True)
class Context:
    """One image's build context: what it is called in messages, where it is, its Dockerfile, what it needs."""

    what: str
    path: Path
    dockerfile: Path
    needs: tuple[str, ...] = ()

    def present(self) -> Path | None:
        files = [self.dockerfile, *(self.path / name for name in self.needs)]
        return self.path if all(path.is_file() for path in files) else None


def _sandbox() -> Context:
    """The sandbox image's context: the top-level ``sandbox-image/`` with ``Dockerfile.sandbox`` in a checkout (their
    one source), or the copy a wheel carries as ``controller/sandbox_image/`` (made by setup.py at build time)."""
    needs = (f"{TOOLBOX}/__main__.py", "statx.c", "profile.sh")
    packaged = PACKAGE / "sandbox_image"
    if (packaged / DOCKERFILE).is_file():
        return Context("sandbox", packaged, packaged / DOCKERFILE, needs)
    return Context("sandbox", CHECKOUT / "sandbox-image", CHECKOUT / "Dockerfile.sandbox", needs)


SANDBOX = _sandbox()
CONTEXT = SANDBOX.path
"""The sandbox image's build context, where this installation has it."""
PROXY = Context("egress proxy", PACKAGE / "proxy_image", PACKAGE / "proxy_image" / DOCKERFILE, ("entrypoint.sh",))


def build_context(context: Context = SANDBOX) -> Path | None:
    """The directory holding the image's files, or None if this installation lacks it."""
    return context.present()


def build(
    client: Any,
    tag: str,
    base: str | None = None,
    on_line: Callable[[str], None] | None = None,
    context: Context = SANDBOX,
) -> str:
    """Build the image from its packaged context, streaming build output to ``on_line``; returns its id."""
    path = context.present()
    if path is None:
        raise ImageMissingError(
            f"Cannot build {tag}: this installation of Cubicle lacks its {context.what} image files ({context.path}).",
            hint="Reinstall Cubicle (`pip install --force-reinstall cubicle`, or `pip install -e .` in a checkout).",
        )
    buildargs = {"BASE": base} if base else {}
    image_id = ""
    try:
        stream = client.api.build(
            path=str(path), dockerfile=str(context.dockerfile), tag=tag, buildargs=buildargs, rm=True, decode=True
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


def ensure(
    client: Any,
    tag: str,
    auto_build: bool,
    on_line: Callable[[str], None] | None = None,
    context: Context = SANDBOX,
) -> Any:
    """Make sure ``tag`` exists: build it when allowed and possible, else say exactly what to run. Returns the
    image (the SDK's ``Image``: its ``attrs`` are the engine's inspect)."""
    try:
        return client.images.get(tag)
    except ImageNotFound:
        pass
    if auto_build and context.present() is not None:
        build(client, tag, on_line=on_line, context=context)
        return client.images.get(tag)
    raise ImageMissingError(
        f"The {context.what} image {tag} is not present; Cubicle builds it from its own files and never pulls it.",
        hint=f"Build it with `{BUILD_COMMAND}`.",
    )


# --------------------------------------------------------------------------- holds

HOLD = "org.cubicle.hold"
"""Label of a hold: a container created (never started) from an image a session is about to run."""
HOLD_ATTEMPTS = 3


def hold(client: Any, tag: str, labels: dict[str, str]) -> None:
    """Pin ``tag``'s image for a session until its own container runs it; blocking.

    Between an environment image's build (or cache hit) and the session's container, ``cubicle gc`` or the
    server's retention sweep could see the image unused and remove it. A container made from it is what
    both the engine and the sweep respect: the engine refuses to remove an image a container was made from.
    The hold carries the session's labels, so it goes with the session's containers, and a crash leaves
    nothing the orphan sweep does not find. Raises ``ImageNotFound`` when the image went first.
    """
    volumes = client.images.get(tag).attrs.get("Config", {}).get("Volumes") or {}
    client.containers.create(
        tag,
        ["/cubicle-hold"],
        entrypoint=[],
        labels={**labels, HOLD: "true"},
        network_disabled=True,
        tmpfs={path: "size=4k" for path in volumes},  # the image's VOLUMEs: no anonymous volume is made for a hold
    )


def release(client: Any, session_label: str) -> None:
    """Remove the holds labelled ``session_label`` (``key=value``): the session's container runs the image now."""
    for container in client.containers.list(all=True, sparse=True, filters={"label": [session_label, HOLD]}):
        with contextlib.suppress(APIError):  # gone already, or being removed by the session's own clean-up
            container.remove(force=True, v=True)
