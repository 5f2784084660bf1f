"""What a sandbox is to the layers above, whatever backend runs it.

The agent and the server see a session's sandbox only as a ``Sandbox``; a backend
(``backends``) makes them. ``Prepared``, ``Preparer``, ``LayerHolder`` and ``Deployment`` are
what a backend's sandboxes are given. Nothing here names an engine.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..config import DEFAULT_PROXY_IMAGE
from ..wire.network import DIRECT, Outside
from ..wire.protocol import Call, Outcome, OutputFeed
from ..workspace import Layer


class Sandbox(Protocol):
    """Where tool calls run. ``call`` never raises for a tool problem; it returns a Failure.

    A ``run_command`` whose caller is cancelled is stopped in the sandbox, and ``call`` returns its
    output so far (``cancelled`` set) instead of raising; the caller re-raises the cancellation.
    """

    async def prepare(self) -> None:
        """Make the session's environment ready (its image built, its setup run) before the first model request.

        Raises SetupError when it cannot be; a no-op once done, and for sandboxes with no environment.
        """
        ...

    def again(self) -> None:
        """A new turn begins: a preparation that failed runs again when next asked for (until then its error is
        raised to every caller, without running it again)."""
        ...

    async def start(self) -> None: ...

    async def call(self, request: Call, timeout: float, on_output: OutputFeed | None = None) -> Outcome:
        """The answer to ``request``; a command's output goes to ``on_output`` as it comes, if given."""
        ...

    async def check_names(self) -> None:
        """Raise TooManyEntriesError when the workspace holds more entries than the session's ``names`` limit
        (the agent asks after its commands ran: they are what can make names by the thousand)."""
        ...

    async def stop(self) -> None: ...


@dataclass(frozen=True)
class Prepared:
    """A session's environment, ready: the image its sandboxes run, their variables, the setup tree beneath its layer."""

    image: str
    env: dict[str, str] = field(default_factory=dict)
    setup: Path | None = None


class LayerHolder(Protocol):
    """Keeps a layer's files reachable (its quota filesystem mounted) between ``hold`` and ``release``; blocking."""

    def hold(self, layer: Layer) -> None: ...

    def release(self, layer: Layer) -> None: ...

    def count_names(self, layer: Layer, limit: int) -> int:
        """``names.count`` of the layer's upper directory, away from the controller's own process."""
        ...


@dataclass(frozen=True)
class Deployment:
    """What every sandbox of one controller shares (its ``Settings``): the sandbox image, the instance its sandboxes
    are labelled with (``owners``), whether a missing image is built (the sandbox's and the proxy's), and for ``allow``
    policies the proxy's image and where the proxies reach out."""

    image: str
    instance: str
    auto_build: bool = True
    proxy_image: str = DEFAULT_PROXY_IMAGE
    outside: Outside = DIRECT


Preparer = Callable[[Any], Awaitable[Prepared]]
"""Makes the environment ready (builds, runs setup, emits progress) with what the backend's launcher hands it (the
Docker engine's client); raises SetupError."""
