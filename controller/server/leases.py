"""Leases on sessions and the command queue between controllers: their SQL, and the claims this process holds.

A turn runs under a lease: its controller claims the session (epoch + 1, owner, lease) and
renews the lease while it runs. Every write of the turn names the epoch it claimed, and fails
once another controller has claimed the session since (fencing: ``Store`` checks it), so a
controller that was paused past its lease writes nothing more. A change between turns (apply,
revert, rewind, discard, compact) *holds* the session instead: the next epoch, and a lease no
turn can begin under. A controller that is asked to stop a turn it does not run (a cancel)
leaves a command in the queue for the one that runs it, which takes it at its next tick.

The statements are written in the SQL both SQLite and PostgreSQL accept, on the store's
connection and schema (the ``sessions`` and ``commands`` tables); ``Store.NOW`` is the
database's clock, so controllers on several hosts agree on when a lease runs out.

``Tending`` is the loop beside them: each controller, every tick, renews its leases, stops
the turns whose claim another took, carries out the commands sent to its turns, takes over
the running sessions whose lease has run out (interrupted, their containers removed), and
now and then sweeps the containers its instance's dead controllers left (a session idle
between turns keeps its container, which no takeover removes).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from ..errors import CubicleError
from ..wire.events import Status, StatusEvent
from .feed import Feed
from .recorder import Recorder
from .store import SELECTED, Row, Store, row_from
from .table import Loaded

if TYPE_CHECKING:
    from .live import LiveSession
    from .runtime import Runtime

log = logging.getLogger(__name__)

CANCEL_WAIT_S = 2.0
TICK_S = 1.0
"""How often a controller renews its leases and looks for commands and for sessions to take over (at most)."""
COMMAND_TTL_S = 30.0
"""A command older than this (its sender has long answered) is dropped, not carried out."""
SWEEP_EVERY_S = 10.0
"""How often (at least; once a lease when leases are longer) a controller sweeps what its host's gone ones left."""


class Leases:
    """The leases of one controller process (``owner``), each ``lease_s`` long, and the commands sent to it."""

    def __init__(self, store: Store, owner: str, lease_s: float) -> None:
        self.store = store
        self.owner = owner
        self.lease_s = lease_s
        self.claims: dict[str, int] = {}
        """The epoch of each turn this process claimed and may still run (its lease is renewed)."""
        self.holds: dict[str, int] = {}
        """The sessions this process holds for a change between turns, with their epoch (renewed too)."""

    def claim(self, session_id: str, epoch: int, status: Status = "running", expired_only: bool = False) -> int | None:
        """Take the session at ``epoch``: the next epoch and ``status``; None if it is no longer at that epoch or
        someone holds it (claimed it first). ``status`` running (a turn begins, under a lease, noted in ``claims``)
        needs a session that is neither running nor held between turns (``hold``); otherwise (a takeover, which
        holds no lease) one that is running, with ``expired_only`` its lease run out. Commands left for an earlier
        holder are dropped."""
        now = self.store.NOW
        if status == "running":
            condition = f"status != 'running' AND lease_expires < {now}"
        else:
            condition = "status = 'running'" + (f" AND lease_expires < {now}" if expired_only else "")
        with self.store.writing(), self.store.transaction(immediate=True):
            row = self.store.run(
                f"UPDATE sessions SET owner = ?, epoch = epoch + 1, lease_expires = {now} + ?, status = ?, "
                f"finish_reason = NULL, detail = '', updated_at = ? WHERE id = ? AND epoch = ? AND {condition} "
                "RETURNING epoch",
                (self.owner, self.lease_s if status == "running" else -1.0, status, time.time(), session_id, epoch),
            ).fetchone()
            if row is not None:
                self.store.run("DELETE FROM commands WHERE session_id = ?", (session_id,))
        if row is None:
            return None
        if status == "running":
            self.claims[session_id] = int(row[0])
        return int(row[0])

    def registered(self, session_id: str, epoch: int) -> None:
        """A session this process has just inserted, running at ``epoch`` under its lease."""
        self.claims[session_id] = epoch

    def hold(self, session_id: str, epoch: int, stale: bool = False) -> int | None:
        """Hold the session between turns for a change to it: the next epoch, so a controller holding an older copy
        reloads it, and a lease no turn can begin under (renewed with the turns' until ``release``). None if it is
        no longer at ``epoch``, runs a turn or is held. ``stale``: it is left running by a controller that is gone,
        which the epoch alone fences."""
        now = self.store.NOW
        condition = "" if stale else f" AND status != 'running' AND lease_expires < {now}"
        with self.store.writing():
            row = self.store.run(
                f"UPDATE sessions SET owner = ?, epoch = epoch + 1, lease_expires = {now} + ? "
                f"WHERE id = ? AND epoch = ?{condition} RETURNING epoch",
                (self.owner, self.lease_s, session_id, epoch),
            ).fetchone()
        if row is None:
            return None
        self.holds[session_id] = int(row[0])
        return int(row[0])

    def release(self, session_id: str, epoch: int) -> None:
        """End a hold (or a lease this process no longer wants): a turn may begin at once."""
        self.holds.pop(session_id, None)
        with self.store.writing():
            self.store.run("UPDATE sessions SET lease_expires = 0 WHERE id = ? AND epoch = ?", (session_id, epoch))

    def renew(self) -> dict[str, int]:
        """Extend the lease of every running session this process owns, and of those it holds between turns; each
        with the epoch it is at."""
        held = list(self.holds)
        extra = f" OR id IN ({', '.join('?' * len(held))})" if held else ""
        with self.store.writing():
            rows = self.store.run(
                f"UPDATE sessions SET lease_expires = {self.store.NOW} + ? WHERE owner = ? "
                f"AND (status = 'running'{extra}) RETURNING id, epoch",
                (self.lease_s, self.owner, *held),
            ).fetchall()
        return {row[0]: int(row[1]) for row in rows}

    def expired(self) -> list[Row]:
        """Running sessions whose controller's lease has run out, but the turns this process claimed and runs: a
        lease of its own that ran out means this process was slow to renew it (starved of the CPU between the
        renewal and this look, or waiting on the database), not gone; it renews it at its next tick. Taking it over
        would stop its own turn as if another controller had."""
        rows = self.store.run(
            f"SELECT {SELECTED} FROM sessions WHERE status = 'running' AND lease_expires < {self.store.NOW}"
        ).fetchall()
        found = [row_from(r) for r in rows]
        return [row for row in found if not (row.owner == self.owner and self.claims.get(row.id) == row.epoch)]

    def send(self, session_id: str, kind: str) -> None:
        """Leave ``kind`` (cancel) for the controller running the session; it takes it at its next tick."""
        with self.store.writing():
            self.store.run(
                "INSERT INTO commands VALUES (?,?,?) ON CONFLICT (session_id, kind) DO UPDATE SET created_at = "
                "excluded.created_at",
                (session_id, kind, time.time()),
            )

    def take(self) -> list[tuple[str, str, float]]:
        """The commands sent to this process's running sessions (session id, kind, sent at), removed as read."""
        with self.store.writing():
            rows = self.store.run(
                "DELETE FROM commands WHERE session_id IN (SELECT id FROM sessions WHERE owner = ? AND "
                "status = 'running') RETURNING session_id, kind, created_at",
                (self.owner,),
            ).fetchall()
        return [(row[0], row[1], float(row[2])) for row in rows]


RecorderOf = Callable[[Row, int], Awaitable[Recorder]]
"""The recorder of a session (its stored transcript, repaired) whose writes name the given epoch."""


class Tending:
    """The tending of one controller's leases (``leases``) and of the sessions loaded here (``loaded``), from
    ``start`` until ``stop``."""

    def __init__(
        self,
        leases: Leases,
        loaded: Loaded,
        runtime: Runtime,
        feed: Feed,
        recorder: RecorderOf,
        in_use: Callable[[str], bool],
        stop_preparing: Callable[[str], bool],
    ) -> None:
        self.leases = leases
        self.store = leases.store
        self.loaded = loaded
        self.runtime = runtime
        self.feed = feed
        self.recorder = recorder
        self.in_use = in_use
        """Whether another live process may use the session's layer (its filesystem is then left mounted)."""
        self.stop_preparing = stop_preparing
        """Cancel a session's preparation running here (a remote's fetch before its first turn); whether one ran."""
        self._background: list[asyncio.Task[None]] = []
        self._left_behind: set[str] = set()
        """Sessions taken over whose containers the engine has not removed yet (``remove_left``)."""
        self._swept = time.monotonic()

    def start(self) -> None:
        """Tend the leases each tick and (on PostgreSQL) listen for other controllers' events, until ``stop``."""
        self._background.append(asyncio.create_task(self._tend(), name="leases"))
        if self.store.dialect == "postgres":
            self._background.append(asyncio.create_task(self._listen(), name="listen"))

    async def stop(self) -> None:
        for tending in self._background:
            tending.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)

    async def _tend(self) -> None:
        """Every tick: renew this process's leases and stop the turns it no longer holds, carry out the commands
        sent to its turns, and take over the sessions whose lease has run out. A database that cannot be reached
        for a whole lease stops this process's turns: another controller may have taken them over by then."""
        lease_s = self.leases.lease_s
        renewed = time.monotonic()
        tick = min(TICK_S, lease_s / 3)
        while True:
            await asyncio.sleep(tick)
            try:
                if time.monotonic() - renewed >= lease_s / 3 - tick / 2:
                    self._held(self.leases.renew())
                    renewed = time.monotonic()
                self._take_commands()
                for record in self.leases.expired():
                    await self.take_over(record, expired_only=True)
                for session_id in list(self._left_behind):
                    await self.remove_left(session_id)
                await self._sweep_dead()
            except CubicleError as err:  # StoreError among them
                log.warning("could not tend the leases: %s", err)
                if time.monotonic() - renewed > lease_s:
                    for live in self.loaded.running():
                        self._lose(live, "its lease could not be renewed")
            except Exception:
                log.exception("could not tend the leases")

    async def _sweep_dead(self) -> None:
        """Once a lease (at most every ``SWEEP_EVERY_S``): remove the containers this instance's gone controllers left, then unmount the layer
        filesystems they left mounted, as a controller's start does. A session idle between turns keeps its
        container, and no takeover removes it (no lease runs out): without this, a dead controller's idle
        containers would stay until some controller of the instance started."""
        if time.monotonic() - self._swept < max(self.leases.lease_s, SWEEP_EVERY_S):
            return
        self._swept = time.monotonic()
        try:
            swept = await self.runtime.sweep(dead_only=True)
        except Exception as err:  # noqa: BLE001 - the engine may be away for a while; tried again a lease later
            log.warning("could not sweep what gone controllers left: %s", err)
            return
        if swept.removed:
            log.info("swept %d sandboxes gone controllers left: %s", len(swept.removed), ", ".join(swept.removed))
        workspaces = self.runtime.workspaces
        unmounted = await asyncio.to_thread(workspaces.unmount_unused, self.in_use)
        if unmounted:
            log.info("unmounted the layer filesystems of %d sessions no process runs", len(unmounted))

    def _held(self, renewed: dict[str, int]) -> None:
        """After a renewal: stop each turn running here whose session has been claimed since this process claimed
        it, and give up the lease of a session left under this process's name at a claim it does not hold (so that
        it is taken over as interrupted rather than stuck running)."""
        for live in self.loaded.running():
            if self._epoch(live.session_id, renewed) != live.recorder.epoch:
                self._lose(live, "another controller took the session over")
        for session_id, epoch in renewed.items():
            if session_id not in self.leases.holds and self.leases.claims.get(session_id) != epoch:
                log.warning("gave up the lease of %s: this process does not hold its claim %d", session_id, epoch)
                self.leases.release(session_id, epoch)
        claims = self.leases.claims
        for session_id in [sid for sid in claims if sid not in renewed and not self.loaded.is_running(sid)]:
            del claims[session_id]

    def _epoch(self, session_id: str, renewed: dict[str, int]) -> int | None:
        """The session's claim now: as renewed, else as stored (ended: the same claim; taken over: another's)."""
        if session_id in renewed:
            return renewed[session_id]
        record = self.store.get(session_id)
        return None if record is None else record.epoch

    def _lose(self, live: LiveSession, why: str) -> None:
        log.warning("stopping the turn of %s: %s", live.session_id, why)
        self.loaded.forget(live)
        live.lose()

    def _take_commands(self) -> None:
        """Carry out what other controllers were asked to do to the turns running here (a cancel)."""
        for session_id, kind, sent in self.leases.take():
            if kind != "cancel" or time.time() - sent >= COMMAND_TTL_S or self.stop_preparing(session_id):
                continue
            live = self.loaded.get(session_id)
            if live is not None and live.running:
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
            elif not self.loaded.is_running(session_id):  # this process wakes its own turns' followers itself
                self.feed.notify(session_id)

    async def remove_left(self, session_id: str) -> None:
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

    async def take_over(self, record: Row, expired_only: bool) -> bool:
        """Claim a running session whose controller is gone (or whose lease ran out) as interrupted: its container
        is removed, a call it left unanswered gets an error result, and a follow-up continues it. False if
        someone else claimed it first (or its holder renewed the lease in between)."""
        epoch = self.leases.claim(record.id, record.epoch, "interrupted", expired_only)
        if epoch is None:
            return False
        log.warning("took over session %s from %s (interrupted)", record.id, record.owner)
        # Its end is recorded before the containers go (engine calls, seconds on a busy host): from the claim on no
        # turn of it runs, so its followers' streams end, and they end after this event only if it is stored by then.
        recorder = await self.recorder(record, epoch)
        self.store.update(
            record.id, epoch, detail="the process running this turn stopped (a controller restart, or a killed run)"
        )
        await recorder.emit(
            StatusEvent(session_id=record.id, status="interrupted", detail="the process running the turn stopped")
        )
        await self.remove_left(record.id)
        return True
