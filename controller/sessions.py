"""Sessions served by the API: each turn a task, everything persisted first, nothing lost on restart.

A session's container stays up between turns and is removed after an idle timeout;
the next turn starts a fresh one on the same workspace and history. On startup,
sessions the previous controller left ``running`` become ``interrupted`` (their
containers are swept) and can be continued with a follow-up message.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic

from . import engine, owners
from .agent import Agent, Conversation, TurnOutcome
from .config import Limits, Settings
from .errors import CapacityError, ConflictError, NotFoundError
from .events import Event, FinishReason, SessionFinished, SessionStarted, Status, StatusEvent, Usage, UsageEvent
from .model import SYSTEM_PROMPT, AnthropicModel, Model, make_client
from .sandbox import DockerSandbox, Sandbox
from .store import SessionRecord, Store

log = logging.getLogger(__name__)

SandboxFactory = Callable[[Path, str, Limits], Sandbox]
CANCEL_WAIT_S = 2.0
STATUS_AFTER: dict[FinishReason, Status] = {
    "end_turn": "idle", "max_steps": "idle", "token_budget": "idle", "timeout": "idle", "cancelled": "cancelled", "error": "failed",
}  # fmt: skip


@dataclass
class Live:
    """A session loaded in this controller."""

    record_id: str
    convo: Conversation
    sandbox: Sandbox
    limits: Limits
    model: str
    task: asyncio.Task[TurnOutcome | None] | None = None
    failure: str | None = None
    saved: int = 0
    idle_timer: asyncio.TimerHandle | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def running(self) -> bool:
        return self.task is not None and not self.task.done()

    def notify(self) -> None:
        """Wake every stream waiting on this session, then arm a fresh event for the next change."""
        self.changed.set()
        self.changed = asyncio.Event()


class Manager:
    """Owns the live sessions of one controller process."""

    def __init__(self, settings: Settings, store: Store, sandbox_factory: SandboxFactory | None = None) -> None:
        self.settings = settings
        self.store = store
        self._sandbox_factory = sandbox_factory or self._docker_sandbox
        self._live: dict[str, Live] = {}
        self._client: anthropic.AsyncAnthropic | None = None
        self._docker: Any = None
        self._closing = False

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Mark what a previous controller left running as interrupted, and sweep its containers."""
        for record in self.store.with_status("running"):
            self._repair(record.id, Conversation(messages=self.store.messages(record.id)))
            self.store.update(record.id, status="interrupted", detail="the controller restarted during this turn")
            await self.record_event(
                StatusEvent(session_id=record.id, status="interrupted", detail="controller restarted")
            )
        with contextlib.suppress(Exception):
            docker = await asyncio.to_thread(self._docker_client)
            swept = await asyncio.to_thread(owners.sweep, docker, self.settings.instance)
            if swept.removed:
                log.info("swept %d orphaned sandboxes", len(swept.removed))

    async def close(self) -> None:
        """Stop every turn (recorded as interrupted, to be continued) and every container."""
        self._closing = True
        for live in list(self._live.values()):
            if live.task is not None:
                live.task.cancel()
        tasks = [live.task for live in self._live.values() if live.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=10)
        await asyncio.gather(*(live.sandbox.stop() for live in self._live.values()), return_exceptions=True)
        if self._client is not None:
            await self._client.close()

    @property
    def running_count(self) -> int:
        return sum(1 for live in self._live.values() if live.running)

    # ------------------------------------------------------------------ operations

    def get(self, session_id: str) -> SessionRecord:
        record = self.store.get(session_id)
        if record is None:
            raise NotFoundError(f"No session {session_id!r}.")
        live = self._live.get(session_id)
        if live is not None and live.failure and record.status == "running" and not live.running:
            return record.model_copy(update={"status": "failed", "finish_reason": "error", "detail": live.failure})
        return record

    async def create(self, repo: Path, task: str, model: str | None, limits: Limits) -> SessionRecord:
        self._check_capacity()
        self._model_client()  # a missing key fails here, before any container exists
        now = time.time()
        record = SessionRecord(
            id="s_" + secrets.token_hex(8), repo=str(repo), task=task, model=model or self.settings.model, status="running",
            usage=Usage(), steps=0, limits=limits, created_at=now, updated_at=now,
        )  # fmt: skip
        self.store.insert(record)
        await self.record_event(SessionStarted(session_id=record.id, repo=record.repo, task=task, model=record.model))
        live = self._load(record)
        self._begin_turn(live, task)
        return record

    async def follow_up(self, session_id: str, text: str) -> SessionRecord:
        record = self.get(session_id)
        live = self._live.get(session_id)
        if (live is not None and live.running) or (live is None and record.status == "running"):
            raise ConflictError(f"Session {session_id} is running a turn; wait for it to finish or cancel it.")
        self._check_capacity()
        if live is None:
            live = self._load(record)
        self.store.update(session_id, status="running", finish_reason=None, detail="")
        self._begin_turn(live, text)
        return self.get(session_id)

    async def cancel(self, session_id: str) -> SessionRecord:
        self.get(session_id)
        live = self._live.get(session_id)
        if live is not None and live.task is not None and live.running:
            live.task.cancel()
            await asyncio.wait([live.task], timeout=CANCEL_WAIT_S)
        return self.get(session_id)

    async def delete(self, session_id: str, purge: bool) -> SessionRecord | None:
        self.get(session_id)
        await self.cancel(session_id)
        live = self._live.pop(session_id, None)
        if live is not None:
            if live.idle_timer is not None:
                live.idle_timer.cancel()
            await live.sandbox.stop()
            live.notify()
        if purge:
            self.store.delete(session_id)
            return None
        return self.get(session_id)

    async def join(self, session_id: str) -> None:
        """Wait until the session's running turn (if any) has ended."""
        live = self._live.get(session_id)
        if live is not None and live.task is not None:
            await asyncio.wait([live.task])

    def is_live(self, session_id: str) -> bool:
        live = self._live.get(session_id)
        return live is not None and live.running

    def waiter(self, session_id: str) -> asyncio.Event | None:
        """The event set on the session's next change; take it before reading, then ``wait`` on it."""
        live = self._live.get(session_id)
        return live.changed if live is not None else None

    async def wait(self, waiter: asyncio.Event | None, timeout: float) -> None:
        if waiter is None:
            await asyncio.sleep(timeout)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(waiter.wait(), timeout)

    # ------------------------------------------------------------------ internals

    def _check_capacity(self) -> None:
        cap = self.settings.max_concurrent_sessions
        if self.running_count >= cap:
            raise CapacityError(
                f"{cap} sessions are running, the most this controller allows. Retry when one finishes."
            )

    def _load(self, record: SessionRecord) -> Live:
        convo = Conversation(
            messages=self.store.messages(record.id), usage=record.usage.model_copy(), steps=record.steps
        )
        self._repair(record.id, convo)
        live = Live(
            record.id,
            convo,
            self._sandbox_factory(Path(record.repo), record.id, record.limits),
            record.limits,
            record.model,
        )
        live.saved = len(convo.messages)
        self._live[record.id] = live
        return live

    def _repair(self, session_id: str, convo: Conversation) -> None:
        """A transcript cut between a tool_use and its result gets an error result, so it can be sent again."""
        if convo.answer_dangling("the controller stopped before this call finished"):
            self.store.save_messages(session_id, convo.messages, len(convo.messages) - 1)

    def _begin_turn(self, live: Live, text: str) -> None:
        if live.idle_timer is not None:
            live.idle_timer.cancel()
            live.idle_timer = None
        live.convo.add_user_text(text)
        self._save_transcript_now(live)
        agent = Agent(
            session_id=live.record_id,
            model=self._model(live.model),
            sandbox=live.sandbox,
            sink=_StoreSink(self, live),
            limits=live.limits,
            system=self.settings.system_prompt or SYSTEM_PROMPT,
            save_transcript=lambda convo: self._save_transcript(live),
        )
        live.failure = None
        live.task = asyncio.create_task(self._run_turn(live, agent), name=f"turn-{live.record_id}")
        live.task.add_done_callback(lambda _: self._after_turn(live))
        warm = asyncio.create_task(live.sandbox.start())  # start the container while the model thinks
        warm.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _run_turn(self, live: Live, agent: Agent) -> TurnOutcome | None:
        """The turn, with a last line of defence: if even its end cannot be recorded, say so in memory."""
        try:
            return await agent.run_turn(live.convo)
        except Exception as err:
            log.exception("turn of %s could not be recorded", live.record_id)
            live.failure = f"the turn failed and could not be fully recorded: {err}"
            with contextlib.suppress(Exception):
                self.store.update(live.record_id, status="failed", finish_reason="error", detail=live.failure)
            live.notify()
            return None

    async def _save_transcript(self, live: Live) -> None:
        self._save_transcript_now(live)

    def _save_transcript_now(self, live: Live) -> None:
        self.store.save_messages(live.record_id, live.convo.messages, max(0, live.saved - 1))
        live.saved = len(live.convo.messages)

    def _after_turn(self, live: Live) -> None:
        if self._closing or live.record_id not in self._live:
            return
        loop = asyncio.get_running_loop()
        live.idle_timer = loop.call_later(self.settings.idle_timeout_s, lambda: self._idle_stop(live))

    def _idle_stop(self, live: Live) -> None:
        """Remove an idle session's container and forget it; a follow-up reloads it from the store."""
        if live.running or self._live.get(live.record_id) is not live:
            return
        del self._live[live.record_id]
        live.notify()
        task = asyncio.create_task(live.sandbox.stop())
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def record_event(self, event: Event) -> None:
        """Persist the event (it gets its sequence number), then wake the session's streams."""
        self.store.append_event(event)
        live = self._live.get(event.session_id)
        if live is not None:
            live.notify()

    def finished_status(self, reason: FinishReason) -> Status:
        return "interrupted" if self._closing and reason == "cancelled" else STATUS_AFTER[reason]

    # ------------------------------------------------------------------ dependencies

    def _docker_client(self) -> Any:
        if self._docker is None:
            self._docker = engine.connect(self.settings.docker_host)
        return self._docker

    def _docker_sandbox(self, repo: Path, session_id: str, limits: Limits) -> Sandbox:
        settings = self.settings
        return DockerSandbox(
            self._docker_client, repo=repo, session_id=session_id, limits=limits, image=settings.image,
            instance=settings.instance, auto_build=settings.auto_build_image,
        )  # fmt: skip

    def _model_client(self) -> anthropic.AsyncAnthropic:
        if self._client is None:
            self._client = make_client(self.settings)
        return self._client

    def _model(self, name: str) -> Model:
        return AnthropicModel(self._model_client(), name, self.settings.max_tokens)


class _StoreSink:
    """Persists each event (and the session's counters) before anyone can see it, then wakes the streams."""

    def __init__(self, manager: Manager, live: Live) -> None:
        self._manager = manager
        self._live = live

    async def emit(self, event: Event) -> None:
        store = self._manager.store
        if isinstance(event, UsageEvent):
            store.update(event.session_id, usage=event.session, steps=self._live.convo.steps)
        elif isinstance(event, SessionFinished):
            status = self._manager.finished_status(event.reason)
            store.update(
                event.session_id,
                status=status,
                finish_reason=event.reason,
                detail=event.detail,
                usage=event.usage,
                steps=event.steps,
            )
        await self._manager.record_event(event)
