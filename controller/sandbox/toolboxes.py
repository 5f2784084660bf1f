"""The sandbox that speaks to a toolbox, on whatever backend starts it.

A sandbox is one isolated place per session whose ``/workspace`` is the session's
copy-on-write layer over the repository (``workspace``): the checkout itself is never
written from inside. The toolbox inside it answers requests over its stdio (see
``channel``), which the backend's ``Launcher`` starts and hands over as a byte stream
framed its own way. The controller keeps its own deadline on every call: when the
toolbox does not answer in time or its stream ends, the call returns a Failure, the
sandbox is removed, and the next call starts a fresh one on the same workspace. No call
waits forever and no tool problem raises.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Protocol

from pydantic import ValidationError

from .. import workspace
from ..errors import SandboxError, SetupError, ToolboxGoneError, TooManyEntriesError, WorkspaceError
from ..wire.limits import Limits
from ..wire.protocol import Call, Failure, Outcome, OutputFeed, Ping
from ..workspace import Layer, names
from .channel import ToolboxChannel, ToolboxStream
from .sandboxes import Deployment, LayerHolder, Prepared, Preparer

log = logging.getLogger(__name__)

IN_PROCESS_NAMES = 20_000
"""A layer that held fewer names at the last count is counted in a thread here (milliseconds); a larger one
in a walk's child process, so that a tree of a million names costs the controller no CPU after each command."""
READY_TIMEOUT_S = 30.0


class Launcher(Protocol):
    """One backend's way of running a session's toolbox: what a ``ToolboxSandbox`` asks of its engine.

    A launcher starts one sandbox at a time. ``discard`` removes it and keeps what a replacement reuses (a proxy);
    ``abandon`` then removes that too. Neither raises: what they cannot remove is logged and swept later.
    """

    errors: tuple[type[Exception], ...]
    """The engine's own exceptions: a launch that fails with one of them is a SandboxError that says so."""

    async def prepare(self, preparer: Preparer) -> Prepared:
        """Run ``preparer`` with what this backend's environment builds take; raises SetupError."""
        ...

    def adopt(self, ready: Prepared) -> None:
        """The preparation succeeded: later launches run ``ready``'s image."""
        ...

    async def unprepare(self) -> None:
        """A preparation failed: release what it kept for a sandbox that will not run now."""
        ...

    async def launch(self, image: str, env: dict[str, str]) -> ToolboxStream:
        """Make and start a fresh sandbox running ``image`` with ``env`` and return its toolbox's stream.

        Everything it made stays for ``discard`` and ``abandon`` to remove, also when it raises.
        """
        ...

    async def ready(self) -> None:
        """The toolbox answered: what was kept for the sandbox until it ran (an image's hold) may go."""
        ...

    def refusal(self, err: Exception) -> SandboxError | None:
        """What a failed launch's ``err`` means when it names something the backend lacks (a runtime); else None."""
        ...

    async def discard(self) -> None: ...

    async def abandon(self) -> None: ...


class ToolboxSandbox:
    """One session's sandbox, started lazily by its ``launcher`` and replaced when its toolbox dies."""

    def __init__(
        self,
        launcher: Launcher,
        *,
        layer: Layer,
        session_id: str,
        limits: Limits,
        deployment: Deployment,
        preparer: Preparer | None = None,
        holder: LayerHolder | None = None,
    ) -> None:
        self._launcher = launcher
        self.layer = layer
        self.repo = layer.repo
        self.session_id = session_id
        self.limits = limits
        self.deployment = deployment
        self.image = deployment.image
        self.instance = deployment.instance
        self.env: dict[str, str] = {}
        self._preparer = preparer
        self._prepare_lock = asyncio.Lock()
        self._failed: SetupError | None = None  # the preparation's failure, raised again until ``again``
        self._channel: ToolboxChannel | None = None
        self._lock = asyncio.Lock()
        self.restarts = 0
        self._holder = holder
        self._names = 0  # the layer's names at the last count

    async def prepare(self) -> None:
        """Run the session's preparer once: its image and variables become the sandboxes', its setup tree
        goes beneath the layer. Nothing is half applied. A preparation that failed (SetupError) is not run again
        until ``again``: its error is raised to every later caller (a turn and its sandbox's warm start both ask,
        and a second run's output would come after the turn's end); one cut short (cancelled, no engine) runs anew."""
        async with self._prepare_lock:
            if self._failed is not None:  # the same error again, as a new exception: each caller has its own
                raise type(self._failed)(str(self._failed.args[0]), self._failed.hint) from None
            preparer, self._preparer = self._preparer, None
            if preparer is None:
                return
            try:
                ready = await self._launcher.prepare(preparer)
                await asyncio.to_thread(self._set_setup, ready.setup)
            except SetupError as err:
                self._preparer, self._failed = preparer, err
                await self._launcher.unprepare()  # what it kept was for a sandbox that will not run now
                raise
            except BaseException:
                self._preparer = preparer
                raise
            self._launcher.adopt(ready)
            self.image, self.env = ready.image, ready.env

    def again(self) -> None:
        """A new turn begins: a preparation that failed before runs again when next asked for."""
        self._failed = None

    async def start(self) -> None:
        """Start the sandbox and wait until the toolbox answers.

        Cancelled while the backend makes things (the caller stopped, a client went away), it
        lets that launch finish, then removes what it made: the engine's calls run on in worker
        threads whatever happens to the caller, and what they make after a removal would be left.
        """
        async with self._lock:
            if self._channel is None or not self._channel.alive:
                await self._discard()
                await self.prepare()  # the environment's build and setup stop when cancelled, on their own
                launching = asyncio.ensure_future(self._launch())
                try:
                    await asyncio.shield(launching)
                except asyncio.CancelledError:
                    while not launching.done():
                        with contextlib.suppress(asyncio.CancelledError):
                            await asyncio.wait([launching])
                    if not launching.cancelled():
                        launching.exception()  # retrieved: a failed launch has removed what it made already
                    await self._abandon()
                    raise

    async def call(self, request: Call, timeout: float, on_output: OutputFeed | None = None) -> Outcome:
        await self.start()
        channel = self._channel
        if channel is None:  # stopped by someone else between start() and here
            return Failure(kind="sandbox_died", message="The sandbox was stopped while this call waited; call again.")
        try:
            response = await channel.request(request, timeout, on_output)
        except TimeoutError:
            await self._replace_after_failure(channel)
            return Failure(
                kind="deadline",
                message=f"The sandbox did not answer within {timeout:.0f}s, so it was restarted. "
                "Files in the repository are kept; running processes and /tmp are gone.",
            )
        except ToolboxGoneError as err:
            await self._replace_after_failure(channel)
            return Failure(
                kind="sandbox_died",
                message=f"The call failed because {err}. A fresh sandbox on the same repository serves the next call; "
                "if a command used too much memory or killed every process, change the approach.",
            )
        if not response.ok or response.result is None:
            return response.error or Failure(
                kind="internal", message="The toolbox returned neither a result nor an error."
            )
        try:
            return request.result.model_validate(response.result)
        except ValidationError as err:
            return Failure(
                kind="protocol", message=f"The toolbox answered {request.op} with an unexpected shape: {err}"
            )

    async def check_names(self) -> None:
        limit = self.limits.names
        try:
            if self._holder is not None and self._names > IN_PROCESS_NAMES:
                self._names = await asyncio.to_thread(self._holder.count_names, self.layer, limit)
            else:
                self._names = await asyncio.to_thread(self._count_names, limit)
        except WorkspaceError as err:  # the walk's child failed: the turn's end reads the layer again and says so
            log.warning("could not count the names of the layer of %s: %s", self.session_id, err)
            return
        if self._names > limit:
            raise TooManyEntriesError(
                limit,
                f"The workspace holds more than {limit:,} entries (files, directories and links, each hard link "
                f"counted by its name), the session's limit (names), or a directory deeper than {names.MAX_DEPTH} "
                "levels. The turn was stopped; its files are kept, but a layer past the limit is never applied.",
            )

    def _count_names(self, limit: int) -> int:
        """The upper layer's names, counted to one past ``limit`` at most (its quota filesystem is mounted while
        the sandbox runs; a layer that cannot be read counts none: every walk of it fails the same way)."""
        try:
            return workspace.layer.count_names(self.layer, limit)
        except OSError:
            return 0

    async def stop(self) -> None:
        """Remove the sandbox at once (no stop grace), and everything the launcher kept for it (a proxy)."""
        async with self._lock:
            await self._abandon()

    async def _replace_after_failure(self, channel: ToolboxChannel) -> None:
        async with self._lock:
            if self._channel is channel:
                self.restarts += 1
                await self._discard()

    async def _launch(self) -> None:
        launcher = self._launcher
        failures: tuple[type[Exception], ...] = (ToolboxGoneError, OSError, *launcher.errors)
        try:
            self._channel = ToolboxChannel(await launcher.launch(self.image, self.env))
            await self._channel.request(Ping(), READY_TIMEOUT_S)
            await launcher.ready()
        except SandboxError:
            await self._abandon()
            raise
        except WorkspaceError as err:
            await self._abandon()
            raise SandboxError(str(err)) from None
        except failures as err:  # OSError covers sockets' and timeouts
            detail = self._channel.stderr_tail.strip() if self._channel else ""
            await self._abandon()
            refused = launcher.refusal(err)
            if refused is not None:
                raise refused from None
            raise SandboxError(f"The sandbox for {self.repo} did not start: {err}. {detail}".strip()) from None
        except BaseException:
            await self._abandon()
            raise

    async def _abandon(self) -> None:
        """Remove everything of this sandbox: what runs (``_discard``), then what the launcher kept (a proxy).

        A replaced sandbox keeps that (only ``_discard`` runs); a stop or a failed start leaves nothing.
        """
        await self._discard()
        await self._launcher.abandon()

    async def _discard(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None:
            await channel.close()
        await self._launcher.discard()

    def _set_setup(self, tree: Path | None) -> None:
        if self._holder is None:
            workspace.set_setup(self.layer, tree)
            return
        self._holder.hold(self.layer)
        try:
            workspace.set_setup(self.layer, tree)
        finally:
            self._holder.release(self.layer)
