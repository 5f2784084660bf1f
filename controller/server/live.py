"""A session loaded in this controller, and the life of its turns: the one driver of a session's turns.

A turn is begun (the user's text saved, the container warmed while the model thinks),
runs as an asyncio task, and when it ends arms an idle timer. The container stays up
between turns; when the timer fires it is removed and the session forgotten, and the
next turn reloads it from the store onto a fresh container.

The API's sessions, ``cubicle run`` and ``cubicle mcp`` all run their turns here. The
first two differ only in a ``view`` (the terminal's, which sees every event after the
recorder has committed it) and an ``approver`` (the terminal's y/n before each change). An
MCP session's turn is *served* instead (``serve``; ``served.ServedTurn``): its tool calls come
from an outside client rather than from the model, through the same recorded call, the same
warm start, idle timer, checkpoint, fencing and finish record.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from ..agent.conversation import Conversation
from ..agent.loop import Agent, Hooks, TurnOutcome
from ..agent.tools import Approver
from ..errors import CubicleError, LeaseLostError, SandboxError, SetupError
from ..wire.events import ErrorEvent, EventSink, FinishReason, SessionFinished
from ..wire.sessionrecord import SessionRecord
from ..workspace.manager import apply_and_report, record_changes
from .recorder import Recorder, Tee
from .runtime import Runtime
from .served import Serve, ServedTurn

log = logging.getLogger(__name__)
T = TypeVar("T")

Forget = Callable[["LiveSession"], bool]
"""Drops an idle session from its owner's table; False if it was no longer there."""
END_WAIT_S = 10
"""How long ``discard`` waits for the end of a turn cancelled before it began to be recorded."""


class LiveSession:
    """One loaded session: its conversation, its sandbox and the turn running on them."""

    def __init__(
        self,
        record: SessionRecord,
        recorder: Recorder,
        runtime: Runtime,
        idle_timeout_s: float,
        forget: Forget,
        view: EventSink | None = None,
        approver: Approver | None = None,
    ) -> None:
        self.record = record
        self.recorder = recorder
        self.sink: EventSink = recorder if view is None else Tee(recorder, view)
        """Where every event of the session goes: the recorder, and the view when there is one."""
        self.approver = approver
        self.runtime = runtime
        self.sandbox = runtime.sandbox(
            Path(record.repo), record.id, record.limits, record.environment, self.sink, record.source
        )
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
        self.warming: asyncio.Task[None] | None = None
        """The container's start (``warm``), which a served turn's first call waits for."""
        self.served: ServedTurn | None = None
        """The last turn, when its tool calls came from outside (``serve``), not from the model."""
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
        self.cancel_idle_timer()
        self.served = None
        self.convo.add_user_text(text)
        await self.recorder.save_transcript(self.convo)
        agent = self._agent()
        self._start_turn(lambda: agent.run_turn(self.convo))

    async def serve(self, calls: Serve) -> None:
        """Start a served turn: ``calls`` makes its tool calls through ``ServedTurn.call`` until its client goes,
        and the turn then records its end like the model's turns (the layer checkpointed, the session idle with its
        changes). The container is started at once, so the first call need not wait for the environment."""
        self.cancel_idle_timer()
        self.served = ServedTurn(self, calls)
        self._start_turn(self.served.run)

    def _start_turn(self, turn: Callable[[], Awaitable[TurnOutcome]]) -> None:
        """Run ``turn`` as the session's task (made in the task: one cancelled before it starts leaves nothing).
        The turn and the warm start then share one preparation: a new turn tries one that failed before, once."""
        self.failure = None
        self.sandbox.again()
        self.task = asyncio.create_task(self.run(turn), name=f"turn-{self.session_id}")
        self.task.add_done_callback(self._ended)
        self.warm()

    def warm(self) -> None:
        """Start the container now, so the turn's first call finds it ready. What fails is the turn's to report:
        a model's turn asks for the sandbox's preparation first thing (one that failed here is not run again: the
        turn gets its error); a served turn records it here (a setup that failed then fails each of its calls with
        its output)."""
        self.warming = asyncio.create_task(self._start())
        self.warming.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _start(self) -> None:
        served = self.served
        try:
            await self.sandbox.start()
            if self._discarded:  # lost or discarded as it came up: it goes too
                await self._remove()
                return
            if served is not None and served.ended:  # ended as it came up: it goes too
                await self.sandbox.stop()
                return
            if served is not None:
                self.rest()
        except SandboxError as err:
            if served is None:
                return
            kind = "setup" if isinstance(err, SetupError) else "sandbox"
            if isinstance(err, SetupError):
                served.setup_failure = str(err)
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

    async def settle(self, outcome: TurnOutcome) -> None:
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
        await self.finish("cancelled", "the turn was cancelled before it began")

    async def finish(self, reason: FinishReason, detail: str) -> None:
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
        if not self._discarded:
            self.rest()

    def rest(self) -> None:
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
            if self.served is None:  # a model's turn keeps its container; its end starts the clock again
                return
            async with self.served.gate.exclusive():  # between a served turn's calls; the next one starts a container
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
        self.cancel_idle_timer()
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
        self.cancel_idle_timer()
        if self.task is not None:
            self.task.cancel()
        _background(self._remove())

    async def discard(self) -> None:
        """Remove the container for good; this object runs no more turns. The end of a turn cancelled before it
        began is recorded first (within ``END_WAIT_S``)."""
        self._discarded = True
        self.cancel_idle_timer()
        if self._ending is not None:
            await asyncio.wait([self._ending], timeout=END_WAIT_S)
        await self._remove()
        self.recorder.wake()

    def _agent(self) -> Agent:
        record = self.record
        return self.runtime.agent(
            session_id=record.id,
            model=record.model,
            sandbox=self.sandbox,
            sink=self.sink,
            limits=record.limits,
            context=record.context,
            hooks=Hooks(approver=self.approver, save_transcript=self.recorder.save_transcript, on_turn_end=self.settle),
        )

    def cancel_idle_timer(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None


def _background(work: Coroutine[Any, Any, None]) -> None:
    """Run ``work`` without waiting for it; its failure is the next call's to report, not an unhandled error."""
    task = asyncio.create_task(work)
    task.add_done_callback(lambda t: t.cancelled() or t.exception())
