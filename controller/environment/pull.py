"""Pulling the image an environment names when the engine lacks it.

Only an environment's own ``image`` (a definition's, or a request's among the server's allowed images) is
ever pulled, and only while ``CUBICLE_PULL_IMAGES`` allows it; Cubicle's own images (the sandbox, the egress
proxy) are built, never pulled. ``pull`` streams the engine's progress to ``on_line`` (one line per layer's
change of state, and a download's progress at most once a second), stops after ``timeout_s``, and for a
reference by digest (``name@sha256:...``) asks for that digest and checks the image it got carries it. A
failure is an ``ImagePullError`` naming the image and its registry, and leaves no image behind that was not
there before.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from docker.errors import APIError, DockerException, ImageNotFound

from ..errors import ImagePullError

PULL_TIMEOUT_S = 1800
DEFAULT_REGISTRY = "docker.io"
PROGRESS_EVERY_S = 1.0
"""A layer's download or extraction progress is relayed at most this often (the engine sends many a second)."""
MAX_LINE = 300
_PRINTABLE = re.compile(r"[^\x20-\x7e]")
"""What a registry says is shown only as printable ASCII: it comes from outside."""
_PROGRESSING = {"Downloading", "Extracting", "Verifying Checksum"}

OnLine = Callable[[str], None]


@dataclass(frozen=True)
class Reference:
    """An image reference split the way the engine's pull takes it: the repository and a tag or a digest."""

    text: str
    repository: str
    tag: str
    digest: str

    @property
    def pinned(self) -> str:
        """The reference the engine knows the pulled image by: ``repository@digest``, else ``repository:tag``."""
        return f"{self.repository}@{self.digest}" if self.digest else f"{self.repository}:{self.tag}"

    @property
    def registry(self) -> str:
        """The registry host: the first part when it looks like a host (a dot, a colon, or localhost)."""
        first, _, rest = self.repository.partition("/")
        if rest and ("." in first or ":" in first or first == "localhost"):
            return first
        return DEFAULT_REGISTRY


def parse(text: str) -> Reference:
    """``name[:tag][@digest]`` split; a digest wins over a tag (as ``docker pull`` does), no tag means latest."""
    name, _, digest = text.partition("@")
    slash = name.rfind("/")
    colon = name.rfind(":")
    tag = ""
    if colon > slash:
        name, tag = name[:colon], name[colon + 1 :]
    return Reference(text, name, "" if digest else tag or "latest", digest)


def pull(client: Any, text: str, timeout_s: float = PULL_TIMEOUT_S, on_line: OnLine | None = None) -> Any:
    """Pull ``text`` onto the engine and return the image (the SDK's ``Image``); blocking.

    Raises ``ImagePullError`` for an unknown image, an unreachable registry, refused credentials, a digest
    that does not match and a pull that took longer than ``timeout_s``.
    """
    ref = parse(text)
    say = on_line or (lambda line: None)
    say(f"pulling {text} from {ref.registry}")
    failure = _run(client, ref, timeout_s, say)
    if failure:
        _remove(client, ref)
        raise _error(ref, failure)
    try:
        image = client.images.get(ref.pinned)
    except ImageNotFound:
        raise _error(ref, "the engine reported the pull done, but has no such image") from None
    mismatch = _digest_mismatch(ref, image)
    if mismatch:
        _remove(client, ref)
        raise _error(ref, mismatch)
    say(f"pulled {text} ({str(image.id)[:19]})")
    return image


@dataclass
class _Relay:
    """What the pull's stream has said: each layer's last state (to relay changes only), and its first error."""

    say: OnLine
    states: dict[str, str] = field(default_factory=dict)
    last_progress: float = 0.0
    failure: str = ""

    def take(self, chunk: dict[str, Any]) -> None:
        if "error" in chunk:
            self.failure = self.failure or str(chunk.get("error") or "").strip()
            return
        status, layer = str(chunk.get("status") or ""), str(chunk.get("id") or "")
        if not status:
            return
        line = f"{layer}: {status}" if layer else status
        if status in _PROGRESSING:
            now = time.monotonic()
            if self.states.get(layer) == status and now - self.last_progress < PROGRESS_EVERY_S:
                return
            self.last_progress = now
            line += f" {chunk.get('progress') or ''}".rstrip()
        elif self.states.get(layer) == status:
            return
        self.states[layer] = status
        self.say(_PRINTABLE.sub("?", line[:MAX_LINE]))


def _run(client: Any, ref: Reference, timeout_s: float, say: OnLine) -> str:
    """Run the pull, relaying its progress; the failure it ended with, or empty."""
    relay = _Relay(say)
    deadline = time.monotonic() + timeout_s
    try:
        chunks = client.api.pull(ref.repository, tag=ref.digest or ref.tag, stream=True, decode=True)
        for chunk in chunks:
            relay.take(chunk)
            if time.monotonic() > deadline:
                chunks.close()  # the engine cancels a pull whose client has gone
                return f"the pull took longer than {timeout_s:.0f} s"
    except (APIError, DockerException, OSError) as err:  # OSError covers the read timeout
        return _engine_said(err)
    return relay.failure


def _engine_said(err: Exception) -> str:
    """The engine's own words from a failed request (its ``explanation``), else the error's text."""
    explanation = getattr(err, "explanation", None)
    if explanation:
        return str(explanation).strip()
    return str(err).strip() or type(err).__name__


def _digest_mismatch(ref: Reference, image: Any) -> str:
    """Why the pulled image is not the one asked for by digest; empty when it is (or none was asked for)."""
    if not ref.digest:
        return ""
    digests = [str(d).rpartition("@")[2] for d in image.attrs.get("RepoDigests") or ()]
    if ref.digest in digests:
        return ""
    return f"the engine's image has the digests {', '.join(digests) or 'none'}, not {ref.digest}"


def _remove(client: Any, ref: Reference) -> None:
    """Remove what a failed pull left under the reference (an image a container uses stays)."""
    with contextlib.suppress(ImageNotFound, APIError, DockerException):
        client.images.remove(ref.pinned, force=False, noprune=False)


def _error(ref: Reference, failure: str) -> ImagePullError:
    """The error a person reads: the image, its registry, what the engine said, and what to do."""
    lowered = failure.lower()
    if "unauthorized" in lowered or "denied" in lowered or "authentication" in lowered:
        hint = (
            f"Log the engine's user in (`docker login {ref.registry}`), or pull it yourself (`docker pull {ref.text}`)."
        )
    elif "not found" in lowered or "unknown" in lowered:
        hint = f"Check the image's name, tag and digest as {ref.registry} lists them."
    else:
        hint = f"Check that {ref.registry} is reachable from the Docker engine, or pull it yourself (`docker pull {ref.text}`)."
    said = _PRINTABLE.sub("?", failure[:2000]).rstrip(".")
    return ImagePullError(f"Pulling the image {ref.text!r} from {ref.registry} failed: {said}.", hint=hint)
