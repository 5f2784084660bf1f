"""Sessions served by the API: the commands on them, each turn a task, nothing lost on restart.

``Sessions`` answers the commands of the API and the CLI (create, follow up, cancel,
delete, get, and the workspace's changes, apply, revert, rewind, discard). Beneath it, each
job has its own module: the sessions loaded in this process (``table.Loaded``, each a
``live.LiveSession`` that drives its turns), whether a turn may start (``admission``), and the
leases and the command queue between controllers, with their SQL (``leases``). Each session row names its owner,
the process running it; on startup, sessions left ``running`` by an owner that is gone
become ``interrupted`` (their containers are swept) and can be continued with a follow-up
message. A ``cubicle run`` in another process is alive and is left alone.

Several controllers may share one database (PostgreSQL) and one data directory. A turn
runs under a lease its controller renews (``Leases.claim``, ``Leases.renew``); every write of
the turn is fenced by the claim's epoch. Each controller, every tick, renews its leases,
stops the turns whose claim another took, carries out the commands sent to its turns (a
cancel that reached another controller), and takes over the running sessions whose lease
has run out: they become ``interrupted``, their containers are removed, and a follow-up on
any controller continues them. Reads and event streams are served by any controller from
the database; PostgreSQL's NOTIFY wakes the followers on the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..agent.conversation import Conversation
from ..agent.tools import Approver
from ..config import Settings
from ..environment.buildinputs import definition_files
from ..errors import ConflictError, CubicleError, NotFoundError
from ..sandbox import owners
from ..wire.changes import ApplyResult, Changes, Checkpoint, RevertResult
from ..wire.environment import Environment, EnvironmentRequest
from ..wire.events import (
    MAX_LISTED_PATHS,
    DiscardedEvent,
    Event,
    EventSink,
    RevertedEvent,
    RewoundEvent,
    SessionStarted,
    StatusEvent,
    Usage,
    UserMessage,
)
from ..wire.limits import Limits
from ..wire.policies import ContextPolicy, Edit
from ..wire.sessions import ApplyPolicy
from ..workspace import repos
from ..workspace.layer import DiskQuota
from ..workspace.manager import apply_and_report, pin, refuse_low_space, refuse_overlap, shown, summarize
from .admission import Admission
from .feed import Batch, Feed
from .hostpids import HostPids
from .leases import Leases
from .live import LiveSession, Serve
from .recorder import Recorder
from .runtime import Runtime
from .store import Row, Store
from .table import Loaded

log = logging.getLogger(__name__)

CANCEL_WAIT_S = 2.0
CLOSE_WAIT_S = 10.0
TICK_S = 1.0
"""How often a controller renews its leases and looks for commands and for sessions to take over (at most)."""
COMMAND_TTL_S = 30.0
"""A command older than this (its sender has long answered) is dropped, not carried out."""


@dataclass(frozen=True)
class NewSession:
    """What a new session is asked for: the API's body, ``cubicle run``'s and ``cubicle mcp``'s arguments."""

    repo: Path
    task: str
    model: str | None = None
    """The model's name; the server's (``CUBICLE_MODEL``) when None."""
    limits: Limits = field(default_factory=Limits)
    context: ContextPolicy | None = None
    apply: ApplyPolicy = "never"
    prefix: str = "s_"
    """Starts the session's id: ``s_`` for the API's, ``cli-`` and ``mcp-`` for the CLI's."""
    environment: EnvironmentRequest | None = None
    """What the request lays over the repository's own environment definition."""
    network_asked: bool = False
    """The request named a network, so the one the definition asks for does not apply."""


@dataclass
class Expiry:
    """What ``Sessions.expire`` did: the sessions removed (with their last activity) and those kept, with how many
    changes each still holds (-1: its layer could not be read)."""

    removed: list[tuple[str, float]] = field(default_factory=list)
    kept: list[tuple[str, int]] = field(default_factory=list)


class Sessions:
    """The sessions of one controller process: the API's commands, and the ones loaded here."""

    def __init__(self, settings: Settings, store: Store, runtime: Runtime) -> None:
        self.settings = settings
        self.store = store
        self.runtime = runtime
        self.feed = Feed(store, self.turn_runs, settings.sse_heartbeat_s, settings.sse_interval_ms / 1000)
        self.workspaces = runtime.workspaces
        self.owner = owners.owner_token(settings.instance)
        self.lease_s = settings.lease_s
        self.leases = Leases(store, self.owner, settings.lease_s)
        self._live = Loaded()
        pids = HostPids.of_host(settings.host_pids_budget, runtime.backend.host_pids)
        self.admission = Admission(settings, self.workspaces, self._live, pids)
        self._background: list[asyncio.Task[None]] = []
        self._left_behind: set[str] = set()
        self._listings: dict[tuple[str, bool], asyncio.Future[Changes]] = {}
        """Sessions taken over whose containers the engine has not removed yet (``_remove_left``)."""

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Mark what a controller that is gone left running as interrupted, and sweep its containers; then tend
        this process's leases (and, on PostgreSQL, listen for other controllers' events) until ``close``."""
        for record in self.store.with_status("running"):
            if not self._owner_alive(record):
                await self._take_over(record, expired_only=False)
        with contextlib.suppress(Exception):
            swept = await self.runtime.sweep()
            if swept.removed:
                log.info("swept %d orphaned sandboxes", len(swept.removed))
        unmounted = await asyncio.to_thread(self.workspaces.unmount_unused, self._in_use)
        if unmounted:
            log.info("unmounted the layer filesystems of %d sessions no process runs", len(unmounted))
        self._background.append(asyncio.create_task(self._tend(), name="leases"))
        if self.store.dialect == "postgres":
            self._background.append(asyncio.create_task(self._listen(), name="listen"))

    async def close(self) -> None:
        """Stop every turn (recorded as interrupted, to be continued) and every container."""
        for tending in self._background:
            tending.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        tasks = [task for live in self._live.all() if (task := live.interrupt()) is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=CLOSE_WAIT_S)
        lives = self._live.all()
        outcomes = await asyncio.gather(*(live.discard() for live in lives), return_exceptions=True)
        for live, outcome in zip(lives, outcomes, strict=True):
            if isinstance(outcome, BaseException):  # what it left (a container, a mount) is the next start's to sweep
                log.warning("could not remove the container of %s: %r", live.record.id, outcome)

    @property
    def running_count(self) -> int:
        return len(self._live.running())

    def is_running(self, session_id: str) -> bool:
        return self._live.is_running(session_id)

    def turn_runs(self, session_id: str) -> bool:
        """A turn of the session runs, here or on another live controller (whose events reach the database)."""
        if self.is_running(session_id):
            return True
        record = self.store.get(session_id)
        return record is not None and record.status == "running" and self._owner_alive(record)

    # ------------------------------------------------------------------ leases

    async def _tend(self) -> None:
        """Every tick: renew this process's leases and stop the turns it no longer holds, carry out the commands
        sent to its turns, and take over the sessions whose lease has run out. A database that cannot be reached
        for a whole lease stops this process's turns: another controller may have taken them over by then."""
        renewed = time.monotonic()
        tick = min(TICK_S, self.lease_s / 3)
        while True:
            await asyncio.sleep(tick)
            try:
                if time.monotonic() - renewed >= self.lease_s / 3 - tick / 2:
                    self._held(self.leases.renew())
                    renewed = time.monotonic()
                self._take_commands()
                for record in self.leases.expired():
                    await self._take_over(record, expired_only=True)
                for session_id in list(self._left_behind):
                    await self._remove_left(session_id)
            except CubicleError as err:  # StoreError among them
                log.warning("could not tend the leases: %s", err)
                if time.monotonic() - renewed > self.lease_s:
                    for live in self._live.running():
                        self._lose(live, "its lease could not be renewed")
            except Exception:
                log.exception("could not tend the leases")

    def _held(self, renewed: dict[str, int]) -> None:
        """After a renewal: stop each turn running here whose session has been claimed since this process claimed
        it, and give up the lease of a session left under this process's name at a claim it does not hold (so that
        it is taken over as interrupted rather than stuck running)."""
        for live in self._live.running():
            epoch = renewed.get(live.session_id)
            if epoch is None:  # not renewed: ended (then the row is at the same claim) or claimed by another
                record = self.store.get(live.session_id)
                epoch = None if record is None else record.epoch
            if epoch != live.recorder.epoch:
                self._lose(live, "another controller took the session over")
        for session_id, epoch in renewed.items():
            if session_id not in self.leases.holds and self.leases.claims.get(session_id) != epoch:
                log.warning("gave up the lease of %s: this process does not hold its claim %d", session_id, epoch)
                self.leases.release(session_id, epoch)
        claims = self.leases.claims
        for session_id in [sid for sid in claims if sid not in renewed and not self.is_running(sid)]:
            del claims[session_id]

    def _lose(self, live: LiveSession, why: str) -> None:
        log.warning("stopping the turn of %s: %s", live.session_id, why)
        self._live.forget(live)
        live.lose()

    def _take_commands(self) -> None:
        """Carry out what other controllers were asked to do to the turns running here (a cancel)."""
        for session_id, kind, sent in self.leases.take():
            live = self._live.get(session_id)
            if kind == "cancel" and live is not None and live.running and time.time() - sent < COMMAND_TTL_S:
                task = asyncio.create_task(live.cancel(CANCEL_WAIT_S))
                task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _listen(self) -> None:
        """PostgreSQL: wake the followers of sessions that run elsewhere as their events are stored, and carry
        out commands at once. A wake-up only: the events are read from the table by sequence number."""
        async for channel, session_id in self.store.notifications():
            if channel == "commands":
                with contextlib.suppress(Exception):
                    self._take_commands()
            elif not session_id:  # (re)connected: whatever was stored meanwhile is read by every follower now
                self.feed.notify_all()
            elif not self.is_running(session_id):  # this process wakes its own turns' followers itself
                self.feed.notify(session_id)

    async def _remove_left(self, session_id: str) -> None:
        """Remove the containers a gone controller left for a session taken over; what the engine does not remove
        now is asked again at the next tick, so a takeover never leaves the dead controller's sandbox running."""
        try:
            await self.runtime.remove_containers(session_id)
        except Exception as err:  # noqa: BLE001 - logged, and tried again at the next tick
            if session_id not in self._left_behind:
                log.warning("could not remove the container of %s yet (tried again): %s", session_id, err)
            self._left_behind.add(session_id)
        else:
            self._left_behind.discard(session_id)

    async def _take_over(self, record: Row, expired_only: bool) -> bool:
        """Claim a running session whose controller is gone (or whose lease ran out) as interrupted: its container
        is removed, a call it left unanswered gets an error result, and a follow-up continues it. False if
        someone else claimed it first (or its holder renewed the lease in between)."""
        epoch = self.leases.claim(record.id, record.epoch, "interrupted", expired_only)
        if epoch is None:
            return False
        log.warning("took over session %s from %s (interrupted)", record.id, record.owner)
        await self._remove_left(record.id)
        recorder = await self.recorder(record, epoch)
        self.store.update(
            record.id, epoch, detail="the process running this turn stopped (a controller restart, or a killed run)"
        )
        await recorder.emit(
            StatusEvent(session_id=record.id, status="interrupted", detail="the process running the turn stopped")
        )
        return True

    # ------------------------------------------------------------------ commands

    def get(self, session_id: str) -> Row:
        record = self.store.get(session_id)
        if record is None:
            raise NotFoundError(f"No session {session_id!r}.")
        live = self._live.get(session_id)
        if live is not None and live.failure and record.status == "running" and not live.running:
            return record.model_copy(update={"status": "failed", "finish_reason": "error", "detail": live.failure})
        return record

    async def create(
        self, new: NewSession, view: EventSink | None = None, approver: Approver | None = None,
        serve: Serve | None = None,
    ) -> Row:  # fmt: skip
        """A new session, its first turn started in the background (see ``register``; ``loaded`` holds it).

        The API's sessions, ``cubicle run`` and ``cubicle mcp`` all start here: ``view`` and ``approver`` are the
        terminal's; with ``serve`` the turn is served (its tool calls come from an MCP client, and no model is
        needed) instead of run by the model on the task."""
        self.admission.check_capacity()
        if serve is None:
            self.runtime.check_model()  # a missing key fails here, before any container exists
        record = await self.register(new)
        live = await self._load(record, view=view, approver=approver)
        await live.sink.emit(SessionStarted(session_id=record.id, repo=record.repo, task=new.task, model=record.model))
        if serve is None:
            await live.begin(new.task)
        else:
            await live.serve(serve)
        return record

    def loaded(self, session_id: str) -> LiveSession | None:
        """The session as this process holds it (None when it holds none): its running turn is ``task``, and
        cancelling that stops the turn, which records its end."""
        return self._live.get(session_id)

    async def register(self, new: NewSession) -> Row:
        """The record of a new session (running, owned by this process) and its workspace layer; no turn starts.

        Its repository is pinned (its real path, never root-owned) and must not overlap a session
        that a live process is running. Its environment is the repository's definition with the
        requested one over it; the network the definition asks for applies unless the request
        named one (``network_asked``), under the server's maximum.
        """
        repo = pin(new.repo)
        repos.refuse_protected(repo, self.settings.protected_paths)
        refuse_overlap(repo, ((r.id, r.repo) for r in self.store.with_status("running") if self._active(r)))
        refuse_low_space(self.settings.data_dir, self.settings.min_free_mb)
        environment, limits = new.environment, new.limits
        resolved = await asyncio.to_thread(self.runtime.environments.resolve, repo, environment)
        by_request = environment is not None and environment.network is not None
        if resolved.network is not None and not new.network_asked:
            limits, resolved = self.runtime.environments.agent_network(resolved, limits, by_request)
        self.runtime.backend.check(limits)
        self.admission.pids.refuse_alone(limits)
        async with self.admission.one_at_a_time():  # the checks and the row they count on, one start at a time
            return await self._admit(new, repo, limits, resolved)

    async def _admit(self, new: NewSession, repo: Path, limits: Limits, resolved: Environment) -> Row:
        quota = DiskQuota(mb=limits.disk_mb, inodes=limits.inodes)
        await self.admission.refuse_overcommit(quota, self._running_ids())
        await self.admission.make_room(limits, self._unloaded())
        now = time.time()
        record = Row(
            id=new.prefix + secrets.token_hex(8), repo=str(repo), task=new.task, model=new.model or self.settings.model,
            status="running", usage=Usage(), steps=0, limits=limits, context=new.context, owner=self.owner,
            apply=new.apply, environment=resolved, epoch=1, lease_expires=self.store.now() + self.lease_s,
            created_at=now, updated_at=now,
        )  # fmt: skip
        await asyncio.to_thread(
            lambda: self.workspaces.create(record.id, repo, quota, limits.names, definition=definition_files(repo))
        )
        self.store.insert(record)
        self.leases.registered(record.id, record.epoch)
        return record

    async def follow_up(
        self, session_id: str, text: str, view: EventSink | None = None, approver: Approver | None = None
    ) -> Row:
        """Begin the session's next turn on ``text`` (here, whichever controller ran the last one). ``view`` and
        ``approver`` are a terminal's (``cubicle continue``), for a session this process has not loaded."""
        record = self.get(session_id)
        live = self._live.get(session_id)
        self._refuse_while_running(record, live, "wait for it to finish or cancel it")
        self.admission.check_capacity()
        quota = DiskQuota(mb=record.limits.disk_mb, inodes=record.limits.inodes)
        async with self.admission.one_at_a_time():
            await self.admission.refuse_overcommit(quota, self._running_ids(), session_id)
            live = await self._current(live, record)
            if live is None:
                await self.admission.make_room(record.limits, self._unloaded(session_id))
            epoch = self.leases.claim(session_id, record.epoch)
            if epoch is None:
                raise ConflictError(
                    f"Session {session_id} was just continued or changed by another request or controller; "
                    "retry when that is done."
                )
            try:
                if live is None:
                    await self.runtime.remove_containers(session_id)  # one another controller kept between turns
                    live = await self._load(record, epoch, view=view, approver=approver)
                live.recorder.epoch = epoch
                await live.recorder.emit(UserMessage(session_id=session_id, text=text))  # a full disk fails here
            except BaseException:
                with contextlib.suppress(Exception):  # the claim undone: the session is as it was
                    self.store.update(
                        session_id, epoch, status=record.status, finish_reason=record.finish_reason,
                        detail=record.detail, lease_expires=0,
                    )  # fmt: skip
                raise
        await live.begin(text)
        return self.get(session_id)

    async def cancel(self, session_id: str) -> Row:
        """Cancel the running turn: here, or (a command through the database) on the controller running it."""
        record = self.get(session_id)
        live = self._live.get(session_id)
        if live is not None:
            await live.cancel(CANCEL_WAIT_S)
        elif record.status == "running" and self._owner_alive(record):
            self.leases.send(session_id, "cancel")
            deadline = time.monotonic() + CANCEL_WAIT_S + TICK_S
            while time.monotonic() < deadline and self.get(session_id).status == "running":
                await asyncio.sleep(0.05)
        return self.get(session_id)

    async def delete(self, session_id: str, purge: bool) -> Row | None:
        """Cancel and unload the session; its layer goes too unless an apply of it may still be reverted
        (a purged session keeps nothing: without its record no revert could reach the layer)."""
        await self.cancel(session_id)
        live = self._live.pop(session_id)
        if live is not None:
            await live.discard()
        if purge or not await asyncio.to_thread(self.workspaces.has_applied, session_id):
            await self._stop_sandbox(session_id)
            await asyncio.to_thread(self.workspaces.discard, session_id)
        if purge:
            self.store.delete(session_id)
            return None
        return self.get(session_id)

    async def expire(self, age_s: float, include_unapplied: bool = False) -> Expiry:
        """Purge the sessions that ended (not running) more than ``age_s`` seconds ago: record, events, transcript,
        layer, checkpoints and any container. One whose layer still holds changes is kept (and listed) unless
        ``include_unapplied``: they are work nobody has applied or discarded yet."""
        expiry = Expiry()
        for record, last in self.store.ended_before(time.time() - age_s):
            if not include_unapplied:
                try:
                    pending = await self.workspaces.in_thread(self.workspaces.pending, record.id)
                except NotFoundError:  # no layer left (discarded, or never made)
                    pending = 0
                except (CubicleError, OSError, ValueError) as err:  # unreadable (its checkout moved, say): kept
                    log.warning("kept session %s: its layer could not be read: %s", record.id, err)
                    expiry.kept.append((record.id, -1))
                    continue
                if pending:
                    expiry.kept.append((record.id, pending))
                    continue
            if await self.purge_ended(record.id):
                expiry.removed.append((record.id, last))
        return expiry

    async def purge_ended(self, session_id: str) -> bool:
        """Purge the session unless a turn of it runs now (one may have begun since it was found ended)."""
        record = self.store.get(session_id)
        if record is None or record.status == "running" or self.is_running(session_id):
            return False
        await self.delete(session_id, purge=True)
        return True

    async def compact(self, session_id: str) -> Row:
        """Compact the session's context now (a summary of its older turns), between turns only."""
        async with self._held_between_turns(session_id, "compact it when the turn has ended") as (record, live, epoch):
            recorder = live.recorder if live is not None else await self.recorder(record)
            recorder.epoch = epoch
            convo = recorder.convo
            compactor = self.runtime.compactor(session_id, record.model, recorder, record.limits, record.context)
            if await compactor.fit(convo, convo.steps, "manual"):
                await recorder.save_transcript(convo)
        return self.get(session_id)

    @contextlib.asynccontextmanager
    async def _held_between_turns(
        self, session_id: str, advice: str
    ) -> AsyncIterator[tuple[Row, LiveSession | None, int]]:
        """Hold the session for a change between turns (``Leases.hold``): no turn begins, here or on another
        controller, until the change is done. The record, this process's live session if it is current, and the
        epoch every write of the change names."""
        record = self.get(session_id)
        live = self._live.get(session_id)
        stale = live is None and record.status == "running" and not self._owner_alive(record)
        if not stale:  # a stale "running" was left by a process that is gone: nothing runs on the layer any more
            self._refuse_while_running(record, live, advice)
        epoch = self.leases.hold(session_id, record.epoch, stale)
        if epoch is None:
            raise ConflictError(f"Session {session_id} began a turn or another change meanwhile; {advice}.")
        try:
            yield record, await self._current(live, record), epoch
        finally:
            with contextlib.suppress(CubicleError):
                self.leases.release(session_id, epoch)

    # ------------------------------------------------------------------ the workspace layer

    async def changes(self, session_id: str, diff: bool = False) -> Changes:
        self.get(session_id)
        key = (session_id, diff)
        listing = self._listings.get(key)
        if listing is None:  # requests for the same listing while one is read share it: one walk, not one each
            listing = asyncio.ensure_future(self.workspaces.in_thread(self.workspaces.changes, session_id, diff))
            self._listings[key] = listing
            listing.add_done_callback(
                lambda done: self._listings.pop(key, None) if self._listings.get(key) is done else None
            )
            listing.add_done_callback(lambda done: done.cancelled() or done.exception())  # retrieved, whoever waits
        return await asyncio.shield(listing)

    async def checkpoints(self, session_id: str) -> list[Checkpoint]:
        self.get(session_id)
        return await asyncio.to_thread(self.workspaces.checkpoints, session_id)

    async def apply(
        self, session_id: str, force: list[str] | None = None, include_ignored: bool = False,
        build_inputs: bool = False, paths: list[str] | None = None, ids: list[str] | None = None,
    ) -> ApplyResult:  # fmt: skip
        """Copy the layer's changes (only those ``paths`` and ``ids`` name, if given) into the checkout (sandbox
        stopped first); ApplyConflictError writes nothing."""
        async with self._quiesced(session_id, "apply when the turn has ended") as recorder:
            return await apply_and_report(
                self.workspaces, session_id, recorder, force or (), include_ignored, build_inputs, paths, ids
            )

    async def revert(self, session_id: str, force: list[str] | None = None) -> RevertResult:
        """Restore the checkout to its state before the newest apply not yet reverted."""
        async with self._quiesced(session_id, "revert when the turn has ended") as recorder:
            result = await self.workspaces.in_thread(self.workspaces.revert, session_id, force or ())
            await recorder.emit(
                RevertedEvent(
                    session_id=session_id,
                    apply=result.record,
                    paths=[shown(p) for p in result.reverted[:MAX_LISTED_PATHS]],
                    more=max(0, len(result.reverted) - MAX_LISTED_PATHS) + result.more_reverted,
                )
            )
        return result

    async def rewind(self, session_id: str, turn: int) -> Row:
        """Return the layer to checkpoint ``turn``; the transcript tells the model, the checkout is untouched."""
        async with self._quiesced(session_id, "rewind when the turn has ended") as recorder:
            await self.workspaces.in_thread(self.workspaces.rewind, session_id, turn)
            convo = recorder.convo
            convo.add_user_text(
                f"[cubicle] The files in /workspace were rewound to how they were at the end of turn {turn}; "
                "changes made after it are gone."
            )
            await recorder.save_transcript(convo)
            await recorder.emit(RewoundEvent(session_id=session_id, turn=turn))
            with contextlib.suppress(CubicleError, OSError):  # counted once here; a layer unread stays uncounted
                held = summarize(await self.workspaces.in_thread(self.workspaces.changes, session_id))
                self.store.update(session_id, recorder.epoch, unapplied=held.files + held.unlisted_applied)
        return self.get(session_id)

    async def discard(self, session_id: str) -> Row:
        """Drop the layer: the session's changes are gone; the checkout keeps what was applied."""
        async with self._quiesced(session_id, "cancel it first") as recorder:
            left = await asyncio.to_thread(self.workspaces.discard, session_id)
            if left:
                log.warning("discarding %s left %s (root-owned kernel files; root can remove them)", session_id, left)
            await recorder.emit(DiscardedEvent(session_id=session_id))
        return self.get(session_id)

    # ------------------------------------------------------------------ queries

    def model_view(self, session_id: str) -> tuple[list[dict[str, Any]], list[Edit], ContextPolicy]:
        """What the model would be sent next (the transcript with its context edits applied), the edits, the policy."""
        record = self.get(session_id)
        convo = Conversation(messages=self.store.messages(session_id), edits=self.store.edits(session_id))
        return convo.view(), convo.edits, record.context or self.settings.context

    def page(self, limit: int, offset: int) -> tuple[list[Row], int]:
        return self.store.page(limit, offset)

    def transcript(self, session_id: str) -> list[dict[str, Any]]:
        self.get(session_id)
        return self.store.messages(session_id)

    def follow(self, session_id: str, after: int) -> AsyncIterator[Event]:
        """The session's events after ``after``, then live until no turn runs; NotFoundError at once if unknown."""
        self.get(session_id)
        return self.feed.follow(session_id, after)

    def follow_batches(self, session_id: str, after: int) -> AsyncGenerator[Batch, None]:
        """``follow``'s events in the groups read from the store together (see ``Feed.batches``)."""
        self.get(session_id)
        return self.feed.batches(session_id, after)

    async def join(self, session_id: str) -> None:
        """Wait until the session's running turn (if any) has ended."""
        live = self._live.get(session_id)
        if live is not None and live.task is not None:
            await asyncio.wait([live.task])

    # ------------------------------------------------------------------ internals

    @staticmethod
    def _refuse_while_running(record: Row, live: LiveSession | None, advice: str) -> None:
        """A turn runs here, or in a controller that stopped without recording its end (restart will interrupt it)."""
        if (live is not None and live.running) or (live is None and record.status == "running"):
            raise ConflictError(f"Session {record.id} is running a turn; {advice}.")

    def _active(self, record: Row) -> bool:
        """A turn of it runs now, here or in another live process (its overlay is mounted over its checkout)."""
        return self.is_running(record.id) or self._owner_alive(record)

    def _running_ids(self) -> list[str]:
        """The sessions a turn of which runs now, or is about to (registered here), here or in another live process."""
        return [r.id for r in self.store.with_status("running") if r.owner == self.owner or self._active(r)]

    def _unloaded(self, but: str | None = None) -> list[Limits]:
        """The limits of the sessions this process registered whose turn is about to start (not loaded yet), but
        the session ``but``."""
        rows = self.store.with_status("running")
        return [r.limits for r in rows if r.owner == self.owner and r.id != but and self._live.get(r.id) is None]

    def _in_use(self, session_id: str) -> bool:
        """Whether another live process may use the session's layer (a turn, or a container kept between turns).
        A layer without a row may be one whose row is about to be written: ``Workspaces.sweep`` judges those."""
        record = self.store.get(session_id)
        return record is None or self._owner_alive(record)

    def _owner_alive(self, record: Row) -> bool:
        """Whether another process that is still alive holds this session (this process knows its own).

        A running turn's holder is alive while its lease lasts, unless it is a process of this instance (this
        host) that is gone. Between turns, a live process of this host may keep the session's container; one of
        another host's is not this host's concern.
        """
        if not record.owner or record.owner == self.owner:
            return False
        here = record.owner.startswith(self.settings.instance + ":")
        if here and not owners.owner_alive(record.owner):
            return False
        if record.status == "running":
            return record.lease_expires > self.store.now()
        return here

    @contextlib.asynccontextmanager
    async def _quiesced(self, session_id: str, advice: str) -> AsyncIterator[Recorder]:
        """Between turns only, held: stop the session's container (the overlay is then unmounted); its recorder."""
        async with self._held_between_turns(session_id, advice) as (record, live, epoch):
            await self._stop_sandbox(session_id)
            recorder = live.recorder if live is not None else await self.recorder(record, epoch)
            recorder.epoch = epoch
            try:
                yield recorder
            finally:  # the layer changes here: a listing read before is not one to share from now on
                self._listings.pop((session_id, False), None)
                self._listings.pop((session_id, True), None)

    async def _stop_sandbox(self, session_id: str) -> None:
        """Remove the session's container wherever it came from (this process, or another one's idle session)."""
        live = self._live.get(session_id)
        if live is not None:
            await live.sandbox.stop()
        await self.runtime.remove_containers(session_id)

    async def recorder(self, record: Row, epoch: int | None = None) -> Recorder:
        """The session's recorder over its stored transcript, repaired: a call cut off by a crash gets an error result.

        Its writes are fenced by ``epoch`` (the record's unless given): they fail once the session is claimed again.
        """
        convo = Conversation(
            messages=self.store.messages(record.id), usage=record.usage.model_copy(), steps=record.steps,
            edits=self.store.edits(record.id),
        )  # fmt: skip
        recorder = Recorder(self.store, self.feed, record.id, convo, self.settings.session_events_mb << 20)
        recorder.epoch = record.epoch if epoch is None else epoch
        if convo.answer_dangling("the controller stopped before this call finished"):
            await recorder.save_transcript(convo)
        return recorder

    async def _load(
        self, record: Row, epoch: int | None = None, view: EventSink | None = None, approver: Approver | None = None
    ) -> LiveSession:
        recorder = await self.recorder(record, epoch)
        live = LiveSession(
            record, recorder, self.runtime, self.settings.idle_timeout_s, self._forget, view=view, approver=approver
        )
        self._live.add(live)
        return live

    async def _current(self, live: LiveSession | None, record: Row) -> LiveSession | None:
        """``live`` if its copy of the session is the stored one; None (it is dropped) if the session was written
        elsewhere since this process loaded it."""
        if live is None or live.recorder.epoch == record.epoch:
            return live
        self._forget(live)
        await live.discard()
        return None

    def _forget(self, live: LiveSession) -> bool:
        return self._live.forget(live)
