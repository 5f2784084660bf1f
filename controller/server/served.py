"""A served turn: the tool calls of an MCP client, run as the model's are, in a session's ``LiveSession``.

``cubicle mcp`` starts one (``LiveSession.serve``): its calls come from the client (``call``),
side by side, rather than from the model, and go through the same recorded call, the same
live output, warm start, idle timer, fencing and finish record as a model's turn. The layer is
checkpointed every ``CHECKPOINT_EVERY`` calls and when the client goes.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol, TypeVar

import anyio

from ..agent import tools
from ..agent.liveoutput import LiveView, Watch
from ..agent.loop import TurnOutcome, run_call
from ..errors import SandboxError, TooManyEntriesError
from ..sandbox.sandboxes import Sandbox
from ..wire.events import EventSink, FinishReason, StatusEvent
from ..wire.protocol import OutputFeed
from ..wire.sessionrecord import SessionRecord
from ..workspace.manager import record_changes
from .runtime import Runtime

log = logging.getLogger(__name__)
T = TypeVar("T")

CHECKPOINT_EVERY = 50
"""Tool calls of a served turn between checkpoints of the layer (it has no steps to end)."""


class Host(Protocol):
    """What a served turn needs of the session it runs in (``LiveSession``)."""

    record: SessionRecord
    sink: EventSink
    sandbox: Sandbox
    runtime: Runtime
    warming: asyncio.Task[None] | None

    @property
    def session_id(self) -> str: ...

    @property
    def running(self) -> bool: ...

    def rest(self) -> None: ...

    def cancel_idle_timer(self) -> None: ...

    async def settle(self, outcome: TurnOutcome) -> None: ...

    async def finish(self, reason: FinishReason, detail: str) -> None: ...


Serve = Callable[["ServedTurn"], Awaitable[str]]
"""Makes a served turn's tool calls (through ``ServedTurn.call``) until its client goes; returns what ended it."""


class Gate:
    """A served turn's calls run side by side; a checkpoint (or the idle stop) waits for the running ones to end
    and holds new ones back."""

    def __init__(self) -> None:
        self._running = 0
        self._drained = asyncio.Event()
        self._drained.set()
        self._open = asyncio.Event()
        self._open.set()

    @contextlib.asynccontextmanager
    async def call(self) -> AsyncIterator[None]:
        while not self._open.is_set():
            await self._open.wait()
        self._running += 1
        self._drained.clear()
        try:
            yield
        finally:
            self._running -= 1
            if self._running == 0:
                self._drained.set()

    @contextlib.asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        while not self._open.is_set():
            await self._open.wait()
        self._open.clear()
        try:
            await self._drained.wait()
            yield
        finally:
            self._open.set()


async def _finished(task: asyncio.Task[T], cancel: bool) -> T:
    """``task``'s result, even when the caller is cancelled meanwhile: then ``task`` is cancelled once (if ``cancel``)
    and waited for before the cancellation goes on. anyio (under which the MCP SDK runs its handlers) cancels again
    at every await (its cancellation is level-triggered), so the wait is in a shielded scope."""
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        if cancel:
            task.cancel()
        with anyio.CancelScope(shield=True):
            await asyncio.wait([task])
        raise


class ServedTurn:
    """One served turn of ``host``: ``calls`` makes its tool calls through ``call`` until its client goes."""

    def __init__(self, host: Host, calls: Serve) -> None:
        self.host = host
        self._serve = calls
        self.gate = Gate()
        self.calls = 0
        """Tool calls the turn has run."""
        self.ended = False
        """The client's calls are over: a call that comes now is answered that the session has ended."""
        self.setup_failure: str | None = None
        """Why the environment could not be prepared: each call fails with it (the setup is not run again)."""
        self.connection_failed = False
        """The turn ended because its client's connection failed (not because the client went)."""
        self._checkpoints = 0
        """Checkpoints of the calls taken or being taken: one is owed for every ``CHECKPOINT_EVERY`` calls run."""
        self._ids = itertools.count(1)

    async def run(self) -> TurnOutcome:
        """The turn: its calls, then (however they ended) its end recorded and its container removed."""
        host = self.host
        try:
            await host.sink.emit(StatusEvent(session_id=host.session_id, status="running"))
            outcome = await self._serving()
            return await self._end(outcome)
        finally:
            self.ended = True
            await host.sandbox.stop()

    async def _serving(self) -> TurnOutcome:
        """How the client's calls ended: it went (``end_turn``), a cancel, or its connection failed (``error``)."""
        try:
            ended = await self._serve(self)
            return TurnOutcome("end_turn", f"{ended} after {self.calls} tool calls")
        except asyncio.CancelledError:
            return TurnOutcome("cancelled", f"the session was cancelled after {self.calls} tool calls")
        except BaseExceptionGroup as group:  # the SDK's task group: a cancel of it, or what failed in it
            rest = group.subgroup(lambda err: not isinstance(err, asyncio.CancelledError))
            if rest is None:
                return TurnOutcome("cancelled", f"the session was cancelled after {self.calls} tool calls")
            return self._broken(rest)
        except Exception as err:  # noqa: BLE001 - logged in _broken; the connection's failure ends the turn
            return self._broken(err)

    def _broken(self, err: BaseException) -> TurnOutcome:
        log.error("the MCP connection of %s failed", self.host.session_id, exc_info=err)
        self.connection_failed = True
        return TurnOutcome("error", f"the client's connection failed after {self.calls} tool calls: {err!r}")

    async def _end(self, outcome: TurnOutcome) -> TurnOutcome:
        host = self.host
        self.ended = True  # a call that comes now is answered that the session has ended
        host.cancel_idle_timer()
        if host.warming is not None and not host.warming.done():
            host.warming.cancel()
            await asyncio.wait([host.warming])
        async with self.gate.exclusive():  # the calls still running end first
            await host.settle(outcome)
        if self.setup_failure is not None:
            outcome = TurnOutcome("error", self.setup_failure)
        await host.finish(outcome.reason, outcome.detail)
        return outcome

    async def call(self, name: str, arguments: dict[str, Any] | None, watch: Watch | None = None) -> tools.ToolOutcome:
        """One tool call, run and recorded as the model's are (the same checks, limits and result text, the same
        live output, of which ``watch`` is told too); every ``CHECKPOINT_EVERY`` calls the layer is checkpointed.
        Calls may run side by side."""
        host = self.host
        if self.ended or not host.running:
            return _failed("This session has ended.")
        if host.warming is not None:
            await asyncio.shield(host.warming)
        call_id = f"mcp_{next(self._ids)}"
        async with self.gate.call():
            # The caller may be cancelled (an MCP client cancels its request, or goes away). The call is then
            # cancelled once, so the sandbox kills the command and gives back its output, which is recorded.
            recorded = self._recorded(call_id, name, arguments or {}, watch)
            outcome = await _finished(asyncio.create_task(recorded), cancel=True)
        # Calls that end together (a busy loop runs all their ends before any of them gets here) may bring the count
        # past more than one multiple: each owed checkpoint is taken, by the first call to see it owed.
        while self._checkpoints < self.calls // CHECKPOINT_EVERY:
            self._checkpoints += 1
            await _finished(asyncio.create_task(self.checkpoint()), cancel=False)  # a checkpoint is never cut short
        host.rest()
        return outcome

    async def _recorded(
        self, call_id: str, name: str, arguments: dict[str, Any], watch: Watch | None
    ) -> tools.ToolOutcome:
        def execute(on_output: OutputFeed) -> Awaitable[tools.ToolOutcome]:
            return self._execute(name, arguments, on_output)

        host = self.host
        live = LiveView(host.record.limits.live_output_bytes, watch)
        try:
            return await run_call(host.sink, host.session_id, call_id, name, arguments, execute, live)
        finally:
            self.calls += 1

    async def _execute(self, name: str, arguments: dict[str, Any], on_output: OutputFeed) -> tools.ToolOutcome:
        if self.setup_failure is not None:
            return _failed(f"The sandbox's environment could not be prepared, so no tool can run: {self.setup_failure}")
        sandbox = self.host.sandbox
        try:
            outcome = await tools.execute(name, arguments, sandbox, self.host.record.limits, on_output=on_output)
            if name == "run_command":
                await sandbox.check_names()
            return outcome
        except TooManyEntriesError as err:  # the call ran; what it made is past the session's limit
            text = f"{outcome.text}\n\n[Cubicle] {err} Delete what is not needed before going on."
            model_text = f"{outcome.model_text}\n\n[Cubicle] {err}"
            return tools.ToolOutcome(text, model_text, True, outcome.duration_s, outcome.exit_code)
        except SandboxError as err:
            return _failed(f"The sandbox could not start, so the call did not run: {err}")

    async def checkpoint(self) -> None:
        """Keep the layer as a checkpoint and record its changes, between the turn's calls."""
        async with self.gate.exclusive():
            host = self.host
            await record_changes(host.runtime.workspaces, host.session_id, host.sink)


def _failed(text: str) -> tools.ToolOutcome:
    return tools.ToolOutcome(text, text, True, 0.0)
