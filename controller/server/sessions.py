"""Sessions served by the API: the commands on them, each turn a task, nothing lost on restart.

``Sessions`` answers the commands of the API and the CLI (create, follow up, cancel,
delete, get, compact); ``open_sessions`` puts it together from ``Settings`` for every entry
point. Beneath it, each job has its own module: the commands on a session's workspace layer
(``layercommands``: changes, apply, revert, rewind, discard, checkpoints; ``Sessions.layers``),
the sessions loaded in this process (``table.Loaded``, each a ``live.LiveSession`` that drives
its turns), whether a turn may start (``admission``), and the leases and the command queue
between controllers, with their SQL and their tending (``leases``). Each session row names its
owner, the process running it; on startup, sessions left ``running`` by an owner that is gone
become ``interrupted`` (their containers are swept) and can be continued with a follow-up
message. A ``cubicle run`` in another process is alive and is left alone.

Several controllers may share one database (PostgreSQL) and one data directory. A turn
runs under a lease its controller renews (``Leases.claim``, ``Leases.renew``); every write of
the turn is fenced by the claim's epoch. Each controller, every tick (``leases.Tending``), renews
its leases, stops the turns whose claim another took, carries out the commands sent to its turns
(a cancel that reached another controller), and takes over the running sessions whose lease
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
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..agent.conversation import Conversation
from ..config import Settings
from ..errors import ConflictError, CubicleError, NotFoundError
from ..sandbox import owners
from ..wire.bodies import RemoteRepo
from ..wire.envspec import Environment, EnvironmentRequest
from ..wire.events import (
    ErrorEvent,
    Event,
    EventSink,
    FinishReason,
    SessionFinished,
    SessionStarted,
    SetupOutput,
    Usage,
    UserMessage,
)
from ..wire.gitremote import Admitted
from ..wire.limits import Limits
from ..wire.policies import ContextPolicy, Edit
from ..wire.sessionrecord import ApplyPolicy, Source
from ..workspace import repos
from ..workspace.layer import DiskQuota
from ..workspace.manager import pin, refuse_low_space, refuse_overlap
from .admission import Admission
from .feed import Batch, Feed
from .hostpids import HostPids
from .layercommands import LayerCommands
from .leases import CANCEL_WAIT_S, TICK_S, Leases, Tending
from .origins import Fetched, Origins, noting_submodules, refuse_remote_build
from .pidledger import Ledger, default_directory
from .recorder import Recorder, Tee
from .runtime import Runtime, SandboxFactory
from .store import Row, Store, open_store
from .table import Loaded

if TYPE_CHECKING:  # what runs a turn is imported by the first turn: a command that only reads never loads it
    from ..agent.tools import Approver
    from .live import LiveSession
    from .served import Serve

log = logging.getLogger(__name__)

CLOSE_WAIT_S = 10.0


@dataclass(frozen=True)
class NewSession:
    """What a new session is asked for: the API's body, ``cubicle run``'s and ``cubicle mcp``'s arguments."""

    repo: Path | RemoteRepo
    """A local checkout, or a git remote the controller fetches (``server.origins``)."""
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
    typed: bool = False
    """A remote ``repo`` is the CLI user's own typing: any remote is admitted, not only ``CUBICLE_GIT_REMOTES``'s."""


@dataclass(frozen=True)
class Begin:
    """How a new session's first turn begins: the terminal's ``view`` and ``approver``, or a served turn's calls."""

    view: EventSink | None = None
    approver: Approver | None = None
    serve: Serve | None = None


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
        pids = HostPids.of_host(settings.host_pids_budget, runtime.host_pids)
        ledger = Ledger(settings.host_pids_ledger or default_directory())
        self.admission = Admission(settings, self.workspaces, self._live, pids, ledger)
        self._settling: asyncio.Task[None] | None = None
        self.tending = Tending(
            self.leases, self._live, runtime, self.feed, self.recorder, self._in_use_here_too, self._stop_preparing
        )
        self.origins = Origins(settings)
        self._preparing: dict[str, asyncio.Task[Exception | None]] = {}
        """The remote sessions whose files are being fetched here, before their first turn (``_prepare``)."""
        self._closing = False
        self.layers = LayerCommands(self.workspaces, store, self.get, self._quiesced, self.origins)
        """The commands on a session's workspace layer: changes, checkpoints, apply, revert, rewind, discard."""

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Mark what a controller that is gone left running as interrupted, and sweep its containers; then tend
        this process's leases (and, on PostgreSQL, listen for other controllers' events) until ``close``."""
        for record in self.store.with_status("running"):
            if not self._owner_alive(record):
                await self.tending.take_over(record, expired_only=False)
        with contextlib.suppress(Exception):
            swept = await self.runtime.sweep()
            if swept.removed:
                log.info("swept %d orphaned sandboxes", len(swept.removed))
        unmounted = await asyncio.to_thread(self.workspaces.unmount_unused, self._in_use)
        if unmounted:
            log.info("unmounted the layer filesystems of %d sessions no process runs", len(unmounted))
        self.tending.start()
        self._settling = asyncio.create_task(self._settle(), name="pids-ledger")

    async def _settle(self) -> None:
        """Every tick: this process's charge in the host's pids ledger, anew (released containers leave it)."""
        while True:
            await asyncio.sleep(TICK_S)
            try:
                await self.admission.settle(self._unloaded())
            except (OSError, CubicleError) as err:  # the next admission writes it again, or is refused
                log.warning("could not write this process's charge in the host's pids ledger: %r", err)

    async def close(self) -> None:
        """Stop every turn (recorded as interrupted, to be continued) and every container; a remote session whose
        files are still being fetched ends as failed (it has nothing to continue on)."""
        self._closing = True
        fetches = list(self._preparing.values())
        for fetch in fetches:
            fetch.cancel()
        if fetches:
            await asyncio.wait(fetches, timeout=CLOSE_WAIT_S)
        await self.tending.stop()
        if self._settling is not None:
            self._settling.cancel()
            await asyncio.gather(self._settling, return_exceptions=True)
        tasks = [task for live in self._live.all() if (task := live.interrupt()) is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=CLOSE_WAIT_S)
        lives = self._live.all()
        outcomes = await asyncio.gather(*(live.discard() for live in lives), return_exceptions=True)
        for live, outcome in zip(lives, outcomes, strict=True):
            if isinstance(outcome, BaseException):  # what it left (a container, a mount) is the next start's to sweep
                log.warning("could not remove the container of %s: %r", live.record.id, outcome)
        with contextlib.suppress(Exception):  # a process gone is no holder either
            await self.admission.settle([])

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
        self,
        new: NewSession,
        view: EventSink | None = None,
        approver: Approver | None = None,
        serve: Serve | None = None,
    ) -> Row:
        """A new session, its first turn started in the background (see ``register``; ``loaded`` holds it).

        The API's sessions, ``cubicle run`` and ``cubicle mcp`` all start here: ``view`` and ``approver`` are the
        terminal's; with ``serve`` the turn is served (its tool calls come from an MCP client, and no model is
        needed) instead of run by the model on the task.

        A session on a git remote is recorded at once, its URL admitted first (a refused one raises here); its
        files are fetched in the background before its first turn (``preparing``, ``prepared``), each step a
        ``setup_output`` event of phase ``fetch``, so no start waits on another's fetch."""
        self.admission.check_capacity(len(self._preparing))
        if serve is None:
            self.runtime.check_model()  # a missing key fails here, before any container exists
        if isinstance(new.repo, RemoteRepo):
            return await self._create_remote(new, new.repo, view, approver, serve)
        record = await self.register(new)
        await self._begin(record, new.task, Begin(view, approver, serve), started=True)
        return record

    async def _begin(self, record: Row, task: str, begin: Begin, started: bool = False) -> None:
        """Load the registered session and begin its first turn (the model's on ``task``, or a served one); with
        ``started``, its ``session_started`` event first."""
        live = await self._load(record, view=begin.view, approver=begin.approver)
        if started:
            await live.sink.emit(SessionStarted(session_id=record.id, repo=record.repo, task=task, model=record.model))
        if begin.serve is None:
            await live.begin(task)
        else:
            await live.serve(begin.serve)

    def loaded(self, session_id: str) -> LiveSession | None:
        """The session as this process holds it (None when it holds none): its running turn is ``task``, and
        cancelling that stops the turn, which records its end."""
        return self._live.get(session_id)

    async def register(self, new: NewSession) -> Row:
        """The record of a new session on a local checkout (running, owned by this process) and its workspace
        layer; no turn starts.

        Its repository is pinned (its real path, never root-owned) and must not overlap a session
        that a live process is running. Its environment is the repository's definition with the
        requested one over it; the network the definition asks for applies unless the request
        named one (``network_asked``), under the server's maximum.
        """
        assert not isinstance(new.repo, RemoteRepo)  # create records a remote's session at once, then prepares it
        repo = pin(new.repo)
        repos.refuse_protected(repo, self.settings.protected_paths)
        refuse_overlap(repo, ((r.id, r.repo) for r in self.store.with_status("running") if r.repo and self._active(r)))
        refuse_low_space(self.settings.data_dir, self.settings.min_free_mb)
        limits, resolved = await self._environment(new, repo)
        session_id = new.prefix + secrets.token_hex(8)
        async with self.admission.one_at_a_time():  # the checks and the row they count on, one start at a time
            await self._make_layer(session_id, repo, limits, self._unloaded())
            # Made once the layer is: its lease runs from the row's insert. Making a layer (its filesystem, the
            # checkout's baseline walked in a child process) can take longer than a lease on a busy host; a row
            # written with its lease already run out is taken over as interrupted by another controller before its
            # turn begins.
            record = self._fresh(new, session_id, str(repo), limits, resolved, None)
            self.store.insert(record)
        self.leases.registered(record.id, record.epoch)
        return record

    async def _environment(
        self, new: NewSession, repo: Path, fetched: Fetched | None = None
    ) -> tuple[Limits, Environment]:
        """The session's environment (the repository's definition under the request's) and its limits (the
        network the definition asks for, unless the request named one), checked against the backend and the
        host's pids budget. A remote's Dockerfile is refused unless the server allows builds of remotes."""
        environment, limits = new.environment, new.limits
        resolved = await asyncio.to_thread(self.runtime.environments.resolve, repo, environment)
        if fetched is not None:
            if not new.typed:
                refuse_remote_build(resolved, fetched.source, self.settings.git_allow_builds)
            resolved = noting_submodules(resolved, fetched.gitlinks)
        by_request = environment is not None and environment.network is not None
        if resolved.network is not None and not new.network_asked:
            limits, resolved = self.runtime.environments.agent_network(resolved, limits, by_request)
        self.runtime.backend.check(limits)
        self.admission.pids.refuse_alone(limits)
        return limits, resolved

    async def _make_layer(self, session_id: str, repo: Path, limits: Limits, others: list[Limits]) -> None:
        """Admit the session beside the others (its disk quota, the host's pids) and make its workspace layer;
        under ``Admission.one_at_a_time``."""
        quota = DiskQuota(mb=limits.disk_mb, inodes=limits.inodes)
        await self.admission.refuse_overcommit(quota, self._running_ids())
        await self.admission.make_room(limits, others)
        from ..environment.inputs import definition_files

        await asyncio.to_thread(
            lambda: self.workspaces.create(session_id, repo, quota, limits.names, definition=definition_files(repo))
        )

    def _fresh(
        self,
        new: NewSession,
        session_id: str,
        repo: str,
        limits: Limits,
        resolved: Environment | None,
        source: Source | None,
    ) -> Row:
        return Row.fresh(
            session_id,
            repo,
            new.task,
            new.model or self.settings.model,
            limits=limits,
            context=new.context,
            owner=self.owner,
            apply=new.apply,
            environment=resolved,
            epoch=1,
            lease_expires=self.store.now() + self.lease_s,
            source=source,
        )

    # ------------------------------------------------------------------ a session on a git remote

    async def _create_remote(
        self,
        new: NewSession,
        asked: RemoteRepo,
        view: EventSink | None,
        approver: Approver | None,
        serve: Serve | None,
    ) -> Row:
        """Record the session at once (no ``repo`` yet; its ``source`` without a commit), then prepare it in the
        background: fetch, environment, layer, first turn (``_prepare``)."""
        admitted = await self.origins.admit(asked, new.typed)
        refuse_low_space(self.settings.data_dir, self.settings.min_free_mb)
        self.runtime.backend.check(new.limits)
        self.admission.pids.refuse_alone(new.limits)
        self.admission.check_capacity(len(self._preparing))  # again: others may have begun during the lookup
        session_id = new.prefix + secrets.token_hex(8)
        source = Source(url=admitted.remote.url, ref=asked.ref, commit="")
        record = self._fresh(new, session_id, "", new.limits, None, source)
        self.store.insert(record)
        self.leases.registered(record.id, record.epoch)
        recorder = self._recorder_of(record, Conversation())
        sink: EventSink = recorder if view is None else Tee(recorder, view)
        work = self._prepare(record, new, admitted, sink, Begin(view, approver, serve))
        self._preparing[session_id] = task = asyncio.create_task(work, name=f"prepare-{session_id}")
        task.add_done_callback(lambda _: self._preparing.pop(session_id, None))
        return record

    async def prepared(self, session_id: str) -> LiveSession | None:
        """Wait until the session's files are fetched and its first turn has begun: its live session here (None
        when the session was cancelled before its first turn). A preparation that failed raises its error (it is
        also the session's recorded end)."""
        preparing = self._preparing.get(session_id)
        if preparing is not None:
            try:
                failure = await asyncio.shield(preparing)
            except asyncio.CancelledError:
                if not preparing.cancelled():  # the caller was cancelled, not the preparation
                    raise
                return None
            if failure is not None:
                raise failure
        return self._live.get(session_id)

    def _stop_preparing(self, session_id: str) -> bool:
        """Cancel the session's preparation if it runs here (its end is recorded as cancelled); whether it did."""
        preparing = self._preparing.get(session_id)
        if preparing is None:
            return False
        preparing.cancel()
        return True

    async def _prepare(
        self, record: Row, new: NewSession, admitted: Admitted, sink: EventSink, begin: Begin
    ) -> Exception | None:
        """A remote session's preparation: its commit fetched (outside the lock that serialises starts), its
        environment resolved, its layer made, its first turn begun. A failure ends the session as failed (an
        ``error`` event of kind ``fetch`` and its ``session_finished``) and is returned; a cancel ends it as
        cancelled, a controller's close as failed (it has no files to continue on). Nothing it made is left."""
        made: list[Fetched] = []  # the layer and the pin made, once they are
        try:
            await self._fetched(record, new, admitted, sink, made)
        except (CubicleError, OSError) as err:
            await self._unprepared(record, sink, f"fetching its files failed: {err}", made)
            return err
        except asyncio.CancelledError:
            if self._closing:
                detail = "the controller stopped before the session's files were fetched; start a new session"
                await asyncio.shield(self._unprepared(record, sink, detail, made))
            else:
                await asyncio.shield(
                    self._unprepared(record, sink, "cancelled before its first turn", made, "cancelled")
                )
            raise
        try:
            await self._begin(self.get(record.id), new.task, begin)
        except Exception as err:
            log.exception("the first turn of %s could not begin", record.id)
            await self._unprepared(record, sink, f"its first turn could not begin: {err}", [])
            return err
        return None

    async def _fetched(
        self, record: Row, new: NewSession, admitted: Admitted, sink: EventSink, made: list[Fetched]
    ) -> None:
        """``_prepare``'s work: the fetch (each step told as a ``setup_output`` of phase ``fetch``), the environment,
        then, one start at a time, the layer, the pin and the record's repo, source, limits and environment."""
        session_id, source = record.id, record.source
        assert isinstance(new.repo, RemoteRepo) and source is not None

        async def say(line: str) -> None:
            await sink.emit(SetupOutput(session_id=session_id, phase="fetch", text=line))

        await sink.emit(SessionStarted(session_id=session_id, repo=source.url, task=new.task, model=record.model))
        fetched = await self.origins.fetch(new.repo, new.typed, admitted=admitted, say=say)
        limits, resolved = await self._environment(new, fetched.repo, fetched)
        async with self.admission.one_at_a_time():
            await self._make_layer(session_id, fetched.repo, limits, self._unloaded(session_id))
            made.append(fetched)
            await asyncio.to_thread(self.origins.pin, fetched, session_id)
            fields = {"repo": str(fetched.repo), "source": fetched.source, "limits": limits, "environment": resolved}
            self.store.update(session_id, record.epoch, **fields)

    async def _unprepared(
        self, record: Row, sink: EventSink, detail: str, made: list[Fetched], reason: FinishReason = "error"
    ) -> None:
        """End a session whose preparation failed or was stopped (failed, or cancelled): an ``error`` event of kind
        ``fetch`` when it failed, its ``session_finished``; its layer and its pin gone."""
        with contextlib.suppress(CubicleError, OSError):
            if reason == "error":
                await sink.emit(ErrorEvent(session_id=record.id, kind="fetch", message=detail))
            await sink.emit(SessionFinished(session_id=record.id, reason=reason, steps=0, usage=Usage(), detail=detail))
        for fetched in made:
            with contextlib.suppress(CubicleError, OSError):
                await asyncio.to_thread(self.workspaces.discard, record.id)
            with contextlib.suppress(CubicleError, OSError):
                await asyncio.to_thread(self.origins.unpin, self.settings.data_dir, fetched.source, record.id)

    async def follow_up(
        self, session_id: str, text: str, view: EventSink | None = None, approver: Approver | None = None
    ) -> Row:
        """Begin the session's next turn on ``text`` (here, whichever controller ran the last one). ``view`` and
        ``approver`` are a terminal's (``cubicle continue``), for a session this process has not loaded."""
        record = self.get(session_id)
        live = self._live.get(session_id)
        self._refuse_to_continue(record, live)
        self.admission.check_capacity(len(self._preparing))
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
                        session_id,
                        epoch,
                        status=record.status,
                        finish_reason=record.finish_reason,
                        detail=record.detail,
                        lease_expires=0,
                    )
                raise
        await live.begin(text)
        return self.get(session_id)

    async def cancel(self, session_id: str) -> Row:
        """Cancel the running turn: here, or (a command through the database) on the controller running it."""
        record = self.get(session_id)
        live = self._live.get(session_id)
        preparing = self._preparing.get(session_id)
        if self._stop_preparing(session_id):  # its files were being fetched here: the fetch stops, it ends cancelled
            assert preparing is not None
            await asyncio.wait([preparing], timeout=CANCEL_WAIT_S)
        elif live is not None:
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
            record = self.get(session_id)
            if record.source is not None:  # its patch and push need its commit no more
                with contextlib.suppress(CubicleError, OSError):
                    await asyncio.to_thread(self.origins.unpin, self.settings.data_dir, record.source, session_id)
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

    @classmethod
    def _refuse_to_continue(cls, record: Row, live: LiveSession | None) -> None:
        """A turn runs, or the session never had its files (a remote's fetch failed or was stopped)."""
        cls._refuse_while_running(record, live, "wait for it to finish or cancel it")
        if not record.repo:
            raise ConflictError(
                f"Session {record.id} never had its files (its fetch failed or was stopped); start a new session."
            )

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

    def _in_use_here_too(self, session_id: str) -> bool:
        """``_in_use``, or a session of this process: the tick's sweep runs beside this process's own sessions."""
        record = self.store.get(session_id)
        return record is None or record.owner == self.owner or self._owner_alive(record)

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
            yield recorder

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
            messages=self.store.messages(record.id),
            usage=record.usage.model_copy(),
            steps=record.steps,
            edits=self.store.edits(record.id),
        )
        recorder = self._recorder_of(record, convo, epoch)
        if convo.answer_dangling("the controller stopped before this call finished"):
            await recorder.save_transcript(convo)
        return recorder

    def _recorder_of(self, record: Row, convo: Conversation, epoch: int | None = None) -> Recorder:
        recorder = Recorder(self.store, self.feed, record.id, convo, self.settings.session_events_mb << 20)
        recorder.epoch = record.epoch if epoch is None else epoch
        return recorder

    async def _load(
        self, record: Row, epoch: int | None = None, view: EventSink | None = None, approver: Approver | None = None
    ) -> LiveSession:
        from .live import LiveSession

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


@contextlib.asynccontextmanager
async def open_sessions(
    settings: Settings,
    sandbox_factory: SandboxFactory | None = None,
    *,
    prepare: Callable[[Runtime], Awaitable[None]] | None = None,
    start: bool = False,
    one_shot: bool = False,
) -> AsyncIterator[Sessions]:
    """The sessions of ``settings``' database over one runtime: how every entry point (the CLI's commands, ``cubicle
    run`` and ``cubicle mcp``, the API) puts the store, the runtime and the sessions together.

    ``prepare`` runs on the runtime before the store is opened (the model's key checked, an image ensured);
    ``start`` recovers what a killed process left and tends the leases. On the way out, however it is left (a
    second signal during clean-up too), the turns and their containers are stopped, then the clients closed.
    ``one_shot`` (a CLI command that answers and exits) lists a small layer in this process, not in a walk's child."""
    runtime = Runtime(settings, sandbox_factory, inline_small_walks=one_shot)
    try:
        if start:  # a controller that runs turns refuses a backend it cannot run at once, not at the first turn
            _ = runtime.backend
        if prepare is not None:
            await prepare(runtime)
        store = open_store(settings)
        try:
            sessions = Sessions(settings, store, runtime)
            try:
                if start:
                    await sessions.start()
                yield sessions
            finally:
                await _unstoppable(sessions.close())  # the turns' leases are renewed until here
        finally:
            store.close()
    finally:
        await runtime.close()


async def _unstoppable(work: Awaitable[None]) -> None:
    """``work`` to its end even if the caller is cancelled meanwhile (a second signal during clean-up): the
    containers and the leases go first, then the cancel goes on."""
    task = asyncio.ensure_future(work)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        await task
        raise
