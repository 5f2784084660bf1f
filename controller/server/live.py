"""A session loaded in this controller, and the life of its turns: the one driver of a session's turns.

A turn is begun (the user's text saved, the container warmed while the model thinks),
runs as an asyncio task, and when it ends arms an idle timer. The container stays up
between turns; when the timer fires it is removed and the session forgotten, and the
next turn reloads it from the store onto a fresh container.

The API's sessions, ``cubicle run`` and ``cubicle mcp`` all run their turns here. The
first two differ only in a ``view`` (the terminal's, which sees every event after the
recorder has committed it) and an ``approver`` (the terminal's y/n before each change). An
MCP session's turn is *served* instead: its tool calls come from an outside client
(``serve`` and ``call``) rather than from the model, through the same recorded call, the
same warm start, idle timer, checkpoint, fencing and finish record.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import anyio

from ..agent import tools
from ..agent.conversation import Conversation
from ..agent.liveoutput import LiveView, Watch
from ..agent.loop import Agent, Hooks, TurnOutcome, run_call
from ..agent.tools import Approver
from ..errors import CubicleError, EntryLimitError, LeaseLostError, SandboxError, SetupError
from ..wire.events import ErrorEvent, Event, EventSink, FinishReason, SessionFinished, StatusEvent
from ..wire.protocol import OutputFeed
from ..wire.sessions import SessionRecord
from ..workspace.manager import apply_and_report, record_changes
from .recorder import Recorder
from .runtime import Runtime

log = logging.getLogger(__name__)
T = TypeVar("T")

Forget = Callable[["LiveSession"], bool]
"""Drops an idle session from its owner's table; False if it was no longer there."""
END_WAIT_S = 10
"""How long ``discard`` waits for the end of a turn cancelled before it began to be recorded."""
CHECKPOINT_EVERY = 50
"""Tool calls of a served turn between checkpoints of the layer (it has no steps to end)."""
Serve = Callable[["LiveSession"], Awaitable[str]]
"""Makes a served turn's tool calls (through ``LiveSession.call``) until its client goes; returns what ended it."""


class Tee:
    """A session's events: committed by its recorder first (the API and ``cubicle sessions`` see them), then shown."""

    def __init__(self, recorder: Recorder, view: EventSink) -> None:
        self.recorder = recorder
        self.view = view
        self.view_failed: BaseException | None = None

    async def emit(self, event: Event) -> None:
        """The recorder's failure is the turn's; the view's (a closed pipe, a terminal gone) only ends the view:
        the turn goes on and records its end."""
        await self.recorder.emit(event)
        if self.view_failed is None:
            try:
                await self.view.emit(event)
            except (OSError, ValueError, SystemExit) as err:  # a closed pipe or file; rich turns EPIPE into SystemExit
                self.view_failed = err


class _Gate:
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


class LiveSession:
    """One loaded session: its conversation, its sandbox and the turn running on them."""

    def __init__(
        self, record: SessionRecord, recorder: Recorder, runtime: Runtime, idle_timeout_s: float, forget: Forget,
        view: EventSink | None = None, approver: Approver | None = None,
    ) -> None:  # fmt: skip
        self.record = record
        self.recorder = recorder
        self.sink: EventSink = recorder if view is None else Tee(recorder, view)
        """Where every event of the session goes: the recorder, and the view when there is one."""
        self.approver = approver
        self.runtime = runtime
        self.sandbox = runtime.sandbox(Path(record.repo), record.id, record.limits, record.environment, self.sink)
        self.idle_timeout_s = idle_timeout_s
        self._forget = forget
        self.task: asyncio.Task[TurnOutcome | None] | None = None
        self.failure: str | None = None
        """Why the last turn ended without even its end recorded; reported instead of the stored status."""
        self._idle: asyncio.Task[None] | None = None
        self._rested_at = 0.0
        self._discarded = False
        self._ending: asyncio.Task[None] | None = None
        """The recording of the end of a turn cancelled before it began; ``discard`` waits for it."""
        self.lost = False
        """Another controller took the session over: this object writes nothing more of it (``lose``)."""
        self._warm: asyncio.Task[None] | None = None
        self.served = False
        """The running turn's tool calls come from outside (``serve``), not from the model."""
        self.calls = 0
        """Tool calls a served turn has run."""
        self._next_checkpoint = CHECKPOINT_EVERY
        self._ids = itertools.count(1)
        self._gate = _Gate()
        self._setup_failure: str | None = None
        self._serving_ended = False
        self.connection_failed = False
        """A served turn ended because its client's connection failed (not because the client went)."""
        self.removed = False
        """The container's last stop (idle, lost, discarded) has returned: it holds none of the host's pids."""

    @property
    def session_id(self) -> str:
        return self.record.id

    @property
    def convo(self) -> Conversation:
        return self.recorder.convo

    @property
    def running(self) -> bool:
        return self.task is not None and not self.task.done()

    async def begin(self, text: str) -> None:
        """Save the user's text, start the turn as a task, and warm the container while the model thinks."""
        self._cancel_idle_timer()
        self.convo.add_user_text(text)
        await self.recorder.save_transcript(self.convo)
        agent = self._agent()
        self._start_turn(lambda: agent.run_turn(self.convo))

    async def serve(self, calls: Serve) -> None:
        """Start a served turn: ``calls`` makes its tool calls through ``call`` until its client goes, and the turn
        then records its end like the model's turns (the layer checkpointed, the session idle with its changes).
        The container is started at once, so the first call need not wait for the environment to be prepared."""
        self._cancel_idle_timer()
        self.served, self._serving_ended = True, False
        self._start_turn(lambda: self._served(calls))

    def _start_turn(self, turn: Callable[[], Awaitable[TurnOutcome]]) -> None:
        """Run ``turn`` as the session's task (made in the task: one cancelled before it starts leaves nothing)."""
        self.failure = None
        self.task = asyncio.create_task(self.run(turn), name=f"turn-{self.session_id}")
        self.task.add_done_callback(self._ended)
        self.warm()

    def warm(self) -> None:
        """Start the container now, so the turn's first call finds it ready. What fails is the turn's to report:
        a model's turn prepares the sandbox again first thing; a served turn records it here (a setup that failed
        then fails each of its calls with its output: it is not run again)."""
        self._warm = asyncio.create_task(self._start())
        self._warm.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _start(self) -> None:
        try:
            await self.sandbox.start()
            if self._discarded:  # lost or discarded as it came up: it goes too
                await self._remove()
                return
            if self.served and self._serving_ended:  # ended as it came up: it goes too
                await self.sandbox.stop()
                return
            if self.served:
                self._rest()
        except SandboxError as err:
            if not self.served:
                return
            kind = "setup" if isinstance(err, SetupError) else "sandbox"
            if isinstance(err, SetupError):
                self._setup_failure = str(err)
            await self.sink.emit(ErrorEvent(session_id=self.session_id, kind=kind, message=str(err)))

    async def run(self, turn: Callable[[], Awaitable[TurnOutcome]]) -> TurnOutcome | None:
        """The turn, with a last line of defence: if even its end cannot be recorded, say so in memory."""
        try:
            return await turn()
        except LeaseLostError:  # taken over by another controller: the writes were fenced, nothing more is ours
            self.lost = True
            log.warning("turn of %s stopped: another controller took the session over", self.session_id)
            return None
        except Exception as err:
            log.exception("turn of %s could not be recorded", self.session_id)
            self.failure = f"the turn failed and could not be fully recorded: {err}"
            with contextlib.suppress(Exception):
                self.recorder.mark_failed(self.failure)
            return None

    async def _settle(self, outcome: TurnOutcome) -> None:
        """After the turn: checkpoint the layer and report its changes; apply them if the session asked to.

        ``on_finish`` applies only after a turn the agent ended itself (``end_turn``); a limit,
        a cancel or an error keeps the changes for review. A conflict is reported, never forced.
        """
        workspaces = self.runtime.workspaces
        summary = await record_changes(workspaces, self.session_id, self.sink)
        if self.record.apply != "on_finish" or outcome.reason != "end_turn" or summary is None or not summary.files:
            return
        await self.sandbox.stop()
        try:
            await apply_and_report(workspaces, self.session_id, self.sink)
        except (CubicleError, OSError) as err:  # a conflict, a layer that went away, a full disk: the turn still ends
            await self.sink.emit(
                ErrorEvent(
                    session_id=self.session_id, kind="apply", message=f"The changes were kept, not applied: {err}"
                )
            )

    # ------------------------------------------------------------------ a served turn

    async def _served(self, calls: Serve) -> TurnOutcome:
        """The served turn: its calls, then (however they ended) its end recorded and its container removed."""
        try:
            await self.sink.emit(StatusEvent(session_id=self.session_id, status="running"))
            outcome = await self._serving(calls)
            return await self._end_served(outcome)
        finally:
            self._serving_ended = True
            await self.sandbox.stop()

    async def _serving(self, calls: Serve) -> TurnOutcome:
        """How the client's calls ended: it went (``end_turn``), a cancel, or its connection failed (``error``)."""
        try:
            ended = await calls(self)
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
        log.error("the MCP connection of %s failed", self.session_id, exc_info=err)
        self.connection_failed = True
        return TurnOutcome("error", f"the client's connection failed after {self.calls} tool calls: {err!r}")

    async def _end_served(self, outcome: TurnOutcome) -> TurnOutcome:
        self._serving_ended = True  # a call that comes now is answered that the session has ended
        self._cancel_idle_timer()
        if self._warm is not None and not self._warm.done():
            self._warm.cancel()
            await asyncio.wait([self._warm])
        async with self._gate.exclusive():  # the calls still running end first
            await self._settle(outcome)
        if self._setup_failure is not None:
            outcome = TurnOutcome("error", self._setup_failure)
        await self._finish(outcome.reason, outcome.detail)
        return outcome

    async def call(self, name: str, arguments: dict[str, Any] | None, watch: Watch | None = None) -> tools.ToolOutcome:
        """One tool call of a served turn, run and recorded as the model's are (the same checks, limits and result
        text, the same live output, of which ``watch`` is told too); every ``CHECKPOINT_EVERY`` calls the layer is
        checkpointed. Calls may run side by side."""
        if self._serving_ended or not self.running:
            return _failed("This session has ended.")
        if self._warm is not None:
            await asyncio.shield(self._warm)
        call_id = f"mcp_{next(self._ids)}"
        async with self._gate.call():
            # The caller may be cancelled (an MCP client cancels its request, or goes away). The call is then
            # cancelled once, so the sandbox kills the command and gives back its output, which is recorded.
            recorded = self._recorded(call_id, name, arguments or {}, watch)
            outcome = await _finished(asyncio.create_task(recorded), cancel=True)
        if self.calls >= self._next_checkpoint:
            self._next_checkpoint = (self.calls // CHECKPOINT_EVERY + 1) * CHECKPOINT_EVERY  # after 50, 100, ...
            await _finished(asyncio.create_task(self.checkpoint()), cancel=False)  # a checkpoint is never cut short
        self._rest()
        return outcome

    async def _recorded(
        self, call_id: str, name: str, arguments: dict[str, Any], watch: Watch | None
    ) -> tools.ToolOutcome:
        def execute(on_output: OutputFeed) -> Awaitable[tools.ToolOutcome]:
            return self._execute(name, arguments, on_output)

        live = LiveView(self.record.limits.live_output_bytes, watch)
        try:
            return await run_call(self.sink, self.session_id, call_id, name, arguments, execute, live)
        finally:
            self.calls += 1

    async def _execute(self, name: str, arguments: dict[str, Any], on_output: OutputFeed) -> tools.ToolOutcome:
        if self._setup_failure is not None:
            return _failed(
                f"The sandbox's environment could not be prepared, so no tool can run: {self._setup_failure}"
            )
        try:
            outcome = await tools.execute(name, arguments, self.sandbox, self.record.limits, on_output=on_output)
            if name == "run_command":
                await self.sandbox.check_names()
            return outcome
        except EntryLimitError as err:  # the call ran; what it made is past the session's limit
            text = f"{outcome.text}\n\n[Cubicle] {err} Delete what is not needed before going on."
            model_text = f"{outcome.model_text}\n\n[Cubicle] {err}"
            return tools.ToolOutcome(text, model_text, True, outcome.duration_s, outcome.exit_code)
        except SandboxError as err:
            return _failed(f"The sandbox could not start, so the call did not run: {err}")

    async def checkpoint(self) -> None:
        """Keep the layer as a checkpoint and record its changes, between a served turn's calls."""
        async with self._gate.exclusive():
            await record_changes(self.runtime.workspaces, self.session_id, self.sink)

    # ------------------------------------------------------------------ the end of a turn, and of this object

    def _ended(self, task: asyncio.Task[TurnOutcome | None]) -> None:
        """The turn's task is done. A task cancelled before its first line never recorded an end: record it now."""
        if task.cancelled():
            self._ending = asyncio.create_task(self._record_unbegun_end())
            self._ending.add_done_callback(lambda t: t.cancelled() or t.exception())
        self.after()

    async def _record_unbegun_end(self) -> None:
        if self.convo.answer_dangling("the turn was cancelled"):
            await self.recorder.save_transcript(self.convo)
        await self._finish("cancelled", "the turn was cancelled before it began")

    async def _finish(self, reason: FinishReason, detail: str) -> None:
        """Record the end of a turn the model did not run to its end itself (the agent records its own)."""
        convo = self.convo
        await self.sink.emit(
            SessionFinished(
                session_id=self.session_id, reason=reason, steps=convo.steps, usage=convo.usage, detail=detail
            )
        )

    def after(self) -> None:
        """The turn has ended: wake its followers, and remove the container if no turn comes soon."""
        self.recorder.wake()
        self.served = False
        if not self._discarded:
            self._rest()

    def _rest(self) -> None:
        """Start the idle clock: when nothing has run for ``idle_timeout_s``, the container is removed. One timer
        task a session: a call or a turn's end only notes its time."""
        self._rested_at = asyncio.get_running_loop().time()
        if self._idle is None or self._idle.done():
            self._idle = asyncio.create_task(self._when_idle(), name=f"idle-{self.session_id}")

    async def _when_idle(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._discarded:
            left = self._rested_at + self.idle_timeout_s - loop.time()
            if left > 0:
                await asyncio.sleep(left)
                continue
            if not self.running:  # between turns: the container goes, and the session is forgotten
                self.idle_stop()
                return
            if not self.served:  # a model's turn keeps its container; its end starts the clock again
                return
            async with self._gate.exclusive():  # between a served turn's calls; the next one starts a container
                if loop.time() - self._rested_at >= self.idle_timeout_s:  # no call ended while the others drained
                    await self.sandbox.stop()
                    return

    def idle_stop(self) -> None:
        """Remove an idle session's container and forget it; a follow-up reloads it from the store."""
        if self.running or not self._forget(self):
            return
        self._discarded = True
        self.recorder.wake()
        _background(self._remove())

    async def stop_idle(self) -> bool:
        """Between turns, remove the container now and forget the session, to make room for another; False (and
        nothing done) while a turn runs."""
        if self.running or not self._forget(self):
            return False
        self._discarded = True
        self._cancel_idle_timer()
        self.recorder.wake()
        await self._remove()
        return True

    async def _remove(self) -> None:
        """The container's last stop; ``removed`` once it returns (however it ended)."""
        try:
            await self.sandbox.stop()
        finally:
            self.removed = True

    async def cancel(self, wait_s: float) -> None:
        """Cancel the running turn and give it ``wait_s`` to record its end (the agent kills the command)."""
        if self.task is not None and self.running:
            self.task.cancel()
            await asyncio.wait([self.task], timeout=wait_s)

    def interrupt(self) -> asyncio.Task[TurnOutcome | None] | None:
        """The controller is stopping: cancel a running turn, to be recorded as interrupted; returns it to wait on.
        A turn already over keeps the end it recorded (or is recording: a cancel before it began)."""
        self._discarded = True
        if self.task is not None and not self.task.done():
            self.recorder.interrupting = True
            self.task.cancel()
        return self.task

    def lose(self) -> None:
        """Another controller has claimed the session: stop the turn (its command is killed with it) and the
        container. Nothing more is written: every write of the turn names a claim that is no longer the session's."""
        self._discarded = True
        self.lost = True
        self._cancel_idle_timer()
        if self.task is not None:
            self.task.cancel()
        _background(self._remove())

    async def discard(self) -> None:
        """Remove the container for good; this object runs no more turns. The end of a turn cancelled before it
        began is recorded first (within ``END_WAIT_S``)."""
        self._discarded = True
        self._cancel_idle_timer()
        if self._ending is not None:
            await asyncio.wait([self._ending], timeout=END_WAIT_S)
        await self._remove()
        self.recorder.wake()

    def _agent(self) -> Agent:
        record = self.record
        return self.runtime.agent(
            session_id=record.id, model=record.model, sandbox=self.sandbox, sink=self.sink, limits=record.limits,
            context=record.context,
            hooks=Hooks(approver=self.approver, save_transcript=self.recorder.save_transcript, on_turn_end=self._settle),
        )  # fmt: skip

    def _cancel_idle_timer(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None


def _failed(text: str) -> tools.ToolOutcome:
    return tools.ToolOutcome(text, text, True, 0.0)


def _background(work: Coroutine[Any, Any, None]) -> None:
    """Run ``work`` without waiting for it; its failure is the next call's to report, not an unhandled error."""
    task = asyncio.create_task(work)
    task.add_done_callback(lambda t: t.cancelled() or t.exception())
