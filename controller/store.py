"""Persistence: sessions, transcripts and events in SQLite (WAL).

Everything is written before it is acknowledged or streamed, so a controller that
dies loses nothing it has reported. Calls are short and run on the event loop's
thread; WAL with ``synchronous=NORMAL`` keeps each commit well under a millisecond
and survives a killed process (not a power cut).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from .config import Limits
from .context import ContextPolicy, Edit
from .environment import Environment
from .errors import StoreError
from .events import EVENT_ADAPTER, Event, FinishReason, Status, Usage

F = TypeVar("F", bound=Callable[..., Any])


def _writes(method: F) -> F:
    """A failed write (disk full, I/O error) becomes a StoreError that says what to do."""

    @functools.wraps(method)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except sqlite3.Error as err:
            raise StoreError(f"The session database could not be written: {err}.") from None

    return guarded  # type: ignore[return-value]


SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    repo TEXT NOT NULL,
    task TEXT NOT NULL,
    model TEXT NOT NULL,
    status TEXT NOT NULL,
    finish_reason TEXT,
    detail TEXT NOT NULL DEFAULT '',
    usage TEXT NOT NULL,
    steps INTEGER NOT NULL DEFAULT 0,
    limits TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    session_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    message TEXT NOT NULL,
    PRIMARY KEY (session_id, idx)
);
CREATE TABLE IF NOT EXISTS events (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE TABLE IF NOT EXISTS context_edits (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    edit TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE INDEX IF NOT EXISTS sessions_created ON sessions (created_at DESC);
"""
COLUMNS = (
    "id", "repo", "task", "model", "status", "finish_reason", "detail", "usage", "steps", "limits", "created_at",
    "updated_at", "context", "owner", "apply", "environment",
)  # fmt: skip
"""The sessions table's columns in the order _record reads them (the last three were added later, by _migrate)."""
ADDED_COLUMNS = {
    "context": "TEXT",
    "owner": "TEXT NOT NULL DEFAULT ''",
    "apply": "TEXT NOT NULL DEFAULT 'never'",
    "environment": "TEXT",
}
ApplyPolicy = Literal["never", "on_finish"]
SELECTED = ", ".join(COLUMNS)


class SessionRecord(BaseModel):
    """A session as the API reports it."""

    model_config = ConfigDict(extra="forbid")

    id: str
    repo: str
    task: str = Field(description="The first task of the session.")
    model: str
    status: Status
    finish_reason: FinishReason | None = Field(None, description="Why the last turn ended.")
    detail: str = Field("", description="More about the finish reason or failure.")
    usage: Usage
    steps: int = Field(description="Model requests made, over all turns.")
    limits: Limits
    context: ContextPolicy | None = Field(None, description="This session's context policy; none: the server's.")
    owner: str = Field("", description="The controller process running it (`cubicle serve` or a `cubicle run`).")
    apply: ApplyPolicy = Field(
        "never", description="on_finish: apply the changes after a turn that ended with end_turn; never: keep them."
    )
    environment: Environment | None = Field(
        None, description="Where its sandbox runs: the repository's definition with the request's fields over it."
    )
    created_at: float
    updated_at: float


EVENTS_READ_BYTES = 8 << 20
"""One read of a session's events stops past this much stored JSON: a replay of outputs of up to a MiB each
goes out in bounded pieces instead of 500 at once."""


class Store:
    """One SQLite database; one connection, used from the event loop's thread."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.path = path
        # Transcripts hold the repositories' contents: the owner's alone, a database made by an older version too.
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
        with contextlib.suppress(OSError):  # a database this process does not own keeps its mode
            os.chmod(path, 0o600)
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=5000")
        self._db.executescript(SCHEMA)
        self._migrate()

    def close(self) -> None:
        self._db.close()

    def _migrate(self) -> None:
        """Bring a database made by an earlier version up to this schema, in place."""
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(sessions)")}
        for name, kind in ADDED_COLUMNS.items():
            if name not in columns:
                self._db.execute(f"ALTER TABLE sessions ADD COLUMN {name} {kind}")

    # ------------------------------------------------------------------ sessions

    @_writes
    def insert(self, record: SessionRecord) -> None:
        self._db.execute(
            f"INSERT INTO sessions ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})",
            (record.id, record.repo, record.task, record.model, record.status, record.finish_reason, record.detail,
             record.usage.model_dump_json(), record.steps, record.limits.model_dump_json(), record.created_at, record.updated_at,
             record.context.model_dump_json() if record.context else None, record.owner, record.apply,
             record.environment.model_dump_json() if record.environment else None),
        )  # fmt: skip

    @_writes
    def update(self, session_id: str, **fields: Any) -> None:
        values = {k: (v.model_dump_json() if isinstance(v, BaseModel) else v) for k, v in fields.items()}
        values["updated_at"] = time.time()
        assignments = ", ".join(f"{name} = ?" for name in values)
        self._db.execute(f"UPDATE sessions SET {assignments} WHERE id = ?", (*values.values(), session_id))

    def get(self, session_id: str) -> SessionRecord | None:
        row = self._db.execute(f"SELECT {SELECTED} FROM sessions WHERE id = ?", (session_id,)).fetchone()
        return _record(row) if row else None

    def page(self, limit: int, offset: int) -> tuple[list[SessionRecord], int]:
        rows = self._db.execute(
            f"SELECT {SELECTED} FROM sessions ORDER BY created_at DESC LIMIT ? OFFSET ?", (limit, offset)
        ).fetchall()
        total = self._db.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]
        return [_record(r) for r in rows], total

    def with_status(self, status: str) -> list[SessionRecord]:
        rows = self._db.execute(f"SELECT {SELECTED} FROM sessions WHERE status = ?", (status,)).fetchall()
        return [_record(r) for r in rows]

    def ended_before(self, cutoff: float) -> list[tuple[SessionRecord, float]]:
        """Sessions not running whose last activity (their newest event, or the row's last update) is older than
        ``cutoff``, with that time: oldest first."""
        rows = self._db.execute(
            f"SELECT {SELECTED}, MAX(updated_at, COALESCE((SELECT json_extract(data, '$.ts') FROM events "
            "WHERE session_id = sessions.id ORDER BY seq DESC LIMIT 1), 0)) AS last "
            "FROM sessions WHERE status != 'running' AND last < ? ORDER BY last",
            (cutoff,),
        ).fetchall()
        return [(_record(r[:-1]), float(r[-1])) for r in rows]

    @_writes
    def delete(self, session_id: str) -> None:
        with self._db:
            self._db.execute("BEGIN")
            tables = (
                ("events", "session_id"),
                ("messages", "session_id"),
                ("context_edits", "session_id"),
                ("sessions", "id"),
            )
            for table, key in tables:
                self._db.execute(f"DELETE FROM {table} WHERE {key} = ?", (session_id,))

    # ------------------------------------------------------------------ transcript

    @_writes
    def save_messages(self, session_id: str, messages: list[dict[str, Any]], start: int) -> None:
        """Write messages[start:] (the last saved one may have changed: a user text merged into it)."""
        with self._db:
            self._db.execute("BEGIN")
            self._db.executemany(
                "INSERT OR REPLACE INTO messages VALUES (?,?,?)",
                [(session_id, i, json.dumps(messages[i])) for i in range(start, len(messages))],
            )
            self._db.execute("DELETE FROM messages WHERE session_id = ? AND idx >= ?", (session_id, len(messages)))

    @_writes
    def add_edits(self, session_id: str, edits: list[Edit], start: int) -> None:
        """Write edits[start:]: context edits are only ever appended."""
        with self._db:
            self._db.execute("BEGIN")
            self._db.executemany(
                "INSERT OR REPLACE INTO context_edits VALUES (?,?,?)",
                [(session_id, i, edits[i].model_dump_json()) for i in range(start, len(edits))],
            )

    def edits(self, session_id: str) -> list[Edit]:
        """The context edits of the session's view, oldest first (the transcript itself is never edited)."""
        rows = self._db.execute(
            "SELECT edit FROM context_edits WHERE session_id = ? ORDER BY seq", (session_id,)
        ).fetchall()
        return [Edit.model_validate_json(r[0]) for r in rows]

    def messages(self, session_id: str) -> list[dict[str, Any]]:
        rows = self._db.execute(
            "SELECT message FROM messages WHERE session_id = ? ORDER BY idx", (session_id,)
        ).fetchall()
        return [json.loads(r[0]) for r in rows]

    # ------------------------------------------------------------------ events

    def event_bytes(self, session_id: str) -> int:
        """How many bytes the session's stored events take."""
        row = self._db.execute(
            "SELECT COALESCE(SUM(length(CAST(data AS BLOB))), 0) FROM events WHERE session_id = ?", (session_id,)
        ).fetchone()
        return int(row[0])

    @_writes
    def append_event(self, event: Event) -> int:
        """Give the event the next sequence number of its session and write it; returns the bytes stored."""
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            row = self._db.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM events WHERE session_id = ?", (event.session_id,)
            ).fetchone()
            event.seq = row[0] + 1
            data = event.model_dump_json()
            self._db.execute("INSERT INTO events VALUES (?,?,?,?)", (event.session_id, event.seq, event.type, data))
        return len(data.encode("utf-8", "surrogatepass"))

    def events_after(
        self, session_id: str, after: int, limit: int = 500, max_bytes: int = EVENTS_READ_BYTES
    ) -> list[Event]:
        """The next events after ``after``, in order: at most ``limit`` of them, and no more than ``max_bytes``
        of stored JSON past the first (one event may carry a command's whole captured output)."""
        cursor = self._db.execute(
            "SELECT data FROM events WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?", (session_id, after, limit)
        )
        events: list[Event] = []
        size = 0
        for (data,) in cursor:
            size += len(data)
            if events and size > max_bytes:
                break
            events.append(EVENT_ADAPTER.validate_json(data))
        cursor.close()
        return events


def _record(row: tuple[Any, ...]) -> SessionRecord:
    (sid, repo, task, model, status, reason, detail, usage, steps, limits, created, updated, context, owner, apply,
     environment) = row  # fmt: skip
    return SessionRecord(
        id=sid, repo=repo, task=task, model=model, status=status, finish_reason=reason, detail=detail,
        usage=Usage.model_validate_json(usage), steps=steps, limits=Limits.model_validate_json(limits),
        context=ContextPolicy.model_validate_json(context) if context else None, owner=owner, apply=apply,
        environment=Environment.model_validate_json(environment) if environment else None,
        created_at=created, updated_at=updated,
    )  # fmt: skip
