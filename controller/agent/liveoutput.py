"""A command's output while it runs, as ``command_output`` events: coalesced, capped, before its result.

The sandbox hands over what the command printed as it comes (``OutputFeed``, called on the event
loop). Here it is gathered for at most ``EVERY_S`` (or until ``BATCH_CHARS`` wait) and emitted as
one event, so a chatty command costs the store (on PostgreSQL, each insert is a NOTIFY to every
follower) ten events a second at most, whatever it prints, and one a second after its first
``BRISK_EVENTS``. Past the session's cap
(``Limits.live_output_bytes``) one last event says so and nothing more is emitted; the model's
result is unchanged. Every event is emitted before the call's ``tool_result``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ..wire.events import CommandOutput, EventSink

log = logging.getLogger(__name__)

EVERY_S = 0.1
"""Longest output waits before it is emitted (the first piece after a quiet spell goes at once)..."""
BRISK_EVENTS = 300
SLOW_EVERY_S = 1.0
"""...for a command's first BRISK_EVENTS events; after them, once a second, so a command that trickles a byte at a
time for an hour costs a few thousand stored events, not tens of thousands."""
BATCH_CHARS = 8192
"""Output gathered that is emitted at once, whatever the time."""

Watch = Callable[[CommandOutput], Awaitable[None]]
"""Told of each command_output event once it is emitted (an MCP client's progress notifications)."""


@dataclass(frozen=True)
class LiveView:
    """How a call's output is shown while it runs: up to ``cap`` characters (0: not at all), who else is told, and
    how many events go out at the brisk pace before the slow one."""

    cap: int = 0
    watch: Watch | None = None
    brisk: int = BRISK_EVENTS


class LiveOutput:
    """One call's live output: ``feed`` takes pieces from the sandbox, ``close`` emits the rest and ends."""

    def __init__(self, sink: EventSink, session_id: str, tool_use_id: str, view: LiveView) -> None:
        self._sink, self._session_id, self._tool_use_id, self._watch = sink, session_id, tool_use_id, view.watch
        self._left, self._brisk = view.cap, view.brisk
        self._parts: list[str] = []
        self._size = 0
        self._truncated = self._closing = False  # truncated: the cap was met, nothing more is taken
        self._last = 0.0
        self._events = 0
        self._fed = asyncio.Event()
        self._urgent = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def feed(self, text: str, truncated: bool) -> None:
        """Take a piece (an ``OutputFeed``); past the cap it is cut, and the cut is the last thing emitted."""
        if self._truncated or self._closing:
            return
        if len(text) >= self._left:
            text, truncated = text[: self._left], truncated or len(text) > self._left
        self._left -= len(text)
        if not text and not truncated:
            return
        self._parts.append(text)
        self._size += len(text)
        self._truncated = truncated
        self._fed.set()
        if truncated or self._size >= BATCH_CHARS:
            self._urgent.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"live-output-{self._tool_use_id}")

    async def close(self) -> None:
        """Emit what is left; returns when every event of this call is emitted."""
        self._closing = True
        if self._task is not None:
            self._fed.set()
            self._urgent.set()
            await self._task

    def abandon(self) -> None:
        """The call ended without a result (its caller was cancelled): stop, emitting nothing more."""
        self._closing = True
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        while True:
            await self._fed.wait()
            delay = self._last + (EVERY_S if self._events < self._brisk else SLOW_EVERY_S) - time.monotonic()
            if delay > 0 and not self._urgent.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await self._urgent.wait()
            self._fed.clear()
            self._urgent.clear()
            await self._emit()
            if self._closing and not self._parts:
                return

    async def _emit(self) -> None:
        if not self._parts:
            return
        text, self._parts, self._size = "".join(self._parts), [], 0
        event = CommandOutput(
            session_id=self._session_id, tool_use_id=self._tool_use_id, text=text, truncated=self._truncated
        )
        self._last = time.monotonic()
        self._events += 1
        await self._sink.emit(event)
        if self._watch is not None:
            try:
                await self._watch(event)
            except Exception:
                log.debug("a watcher of %s's live output failed", self._tool_use_id, exc_info=True)
