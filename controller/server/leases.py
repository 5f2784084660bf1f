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
"""

from __future__ import annotations

import time

from ..wire.events import Status
from .store import SELECTED, Row, Store, row_from


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
        """Running sessions whose controller's lease has run out."""
        rows = self.store.run(
            f"SELECT {SELECTED} FROM sessions WHERE status = 'running' AND lease_expires < {self.store.NOW}"
        ).fetchall()
        return [row_from(r) for r in rows]

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
