"""Persistence: sessions, transcripts and events in SQLite (WAL), or in PostgreSQL for several controllers.

Everything is written before it is acknowledged or streamed, so a controller that
dies loses nothing it has reported. Calls are short and run on the event loop's
thread; WAL with ``synchronous=NORMAL`` keeps each commit well under a millisecond
and survives a killed process (not a power cut).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import logging
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, Field

from ..config import Settings
from ..errors import ConfigError, DatabaseUnavailableError, LeaseLostError, StoreError
from ..wire.envspec import Environment
from ..wire.events import EVENT_ADAPTER, Event, Usage
from ..wire.limits import Limits
from ..wire.policies import ContextPolicy, Edit
from ..wire.sessionrecord import SessionRecord, Source

F = TypeVar("F", bound=Callable[..., Any])
log = logging.getLogger(__name__)


def _writes(method: F) -> F:
    """A failed write (disk full, I/O error, the database server gone) becomes a StoreError that says what to do."""

    @functools.wraps(method)
    def guarded(self: Store, *args: Any, **kwargs: Any) -> Any:
        with self.writing():
            return method(self, *args, **kwargs)

    return guarded  # type: ignore[return-value]


# ---------------------------------------------------------------------- schema
#
# One definition for both databases: numbered migrations, each a list of steps written in the SQL both SQLite and
# PostgreSQL accept (a step may be for one of them only). Every step is idempotent, so a database made before the
# schema was versioned (SQLite files of earlier releases) is brought up to date by running them all; after that the
# ``schema_version`` row skips what is done. Alembic would do the same with SQLAlchemy under it, a second database
# layer this store does not otherwise need for four tables that only ever grow.


class Row(SessionRecord):
    """A session as the store keeps it: the public record and the lease of the controller running its turn."""

    epoch: int = Field(
        0, description="Counts the claims on the session: each turn, and each takeover by another controller."
    )
    lease_expires: float = Field(
        0, description="While a turn runs: when its controller's lease ends unless renewed (the database's clock)."
    )

    @classmethod
    def fresh(cls, id: str, repo: str, task: str, model: str, **fields: Any) -> Row:
        """A new session's row: running, nothing used, no step taken, the default limits, made and updated now;
        ``fields`` sets any other (or overrides these)."""
        now = time.time()
        made = {"status": "running", "usage": Usage(), "steps": 0, "limits": Limits(), "created_at": now}
        return cls(id=id, repo=repo, task=task, model=model, **{**made, "updated_at": now, **fields})


@dataclass(frozen=True)
class Column:
    """Add a column to a table unless it is there (neither database has ``ADD COLUMN IF NOT EXISTS`` in common)."""

    table: str
    name: str
    kind: str


@dataclass(frozen=True)
class Only:
    """A statement for one of the two databases."""

    dialect: Literal["sqlite", "postgres"]
    sql: str


Step = str | Column | Only


def _notify_on_insert(table: str, function: str, channel: str, per_schema: bool = False) -> tuple[Only, Only]:
    """PostgreSQL's trigger that NOTIFYs ``channel`` with the session id of each row inserted into ``table``; per
    schema, the channel is ``channel()``'s name for the table's own schema."""
    name = f"'{channel}_' || left(md5(TG_TABLE_SCHEMA), 12)" if per_schema else f"'{channel}'"
    return (
        Only(
            "postgres",
            f"""CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN PERFORM pg_notify({name}, NEW.session_id); RETURN NULL; END $$""",
        ),
        Only(
            "postgres",
            f"""CREATE OR REPLACE TRIGGER {function} AFTER INSERT ON {table}
            FOR EACH ROW EXECUTE FUNCTION {function}()""",
        ),
    )


MIGRATIONS: tuple[tuple[Step, ...], ...] = (
    (  # 1: the tables of the first release
        """CREATE TABLE IF NOT EXISTS sessions (
            id TEXT PRIMARY KEY, repo TEXT NOT NULL, task TEXT NOT NULL, model TEXT NOT NULL, status TEXT NOT NULL,
            finish_reason TEXT, detail TEXT NOT NULL DEFAULT '', usage TEXT NOT NULL,
            steps INTEGER NOT NULL DEFAULT 0, limits TEXT NOT NULL,
            created_at DOUBLE PRECISION NOT NULL, updated_at DOUBLE PRECISION NOT NULL)""",
        """CREATE TABLE IF NOT EXISTS messages (
            session_id TEXT NOT NULL, idx INTEGER NOT NULL, message TEXT NOT NULL, PRIMARY KEY (session_id, idx))""",
        """CREATE TABLE IF NOT EXISTS events (
            session_id TEXT NOT NULL, seq INTEGER NOT NULL, type TEXT NOT NULL, data TEXT NOT NULL,
            PRIMARY KEY (session_id, seq))""",
        "CREATE INDEX IF NOT EXISTS sessions_created ON sessions (created_at DESC)",
    ),
    (  # 2: context policies and edits, owners, apply policies, environments
        """CREATE TABLE IF NOT EXISTS context_edits (
            session_id TEXT NOT NULL, seq INTEGER NOT NULL, edit TEXT NOT NULL, PRIMARY KEY (session_id, seq))""",
        Column("sessions", "context", "TEXT"),
        Column("sessions", "owner", "TEXT NOT NULL DEFAULT ''"),
        Column("sessions", "apply", "TEXT NOT NULL DEFAULT 'never'"),
        Column("sessions", "environment", "TEXT"),
    ),
    (  # 3: leases (several controllers on one database) and the status index recovery reads by
        Column("sessions", "epoch", "INTEGER NOT NULL DEFAULT 0"),
        Column("sessions", "lease_expires", "DOUBLE PRECISION NOT NULL DEFAULT 0"),
        "CREATE INDEX IF NOT EXISTS sessions_status ON sessions (status)",
        # Every stored event wakes the controllers that LISTEN: a wake-up only, they read the events from the table.
        *_notify_on_insert("events", "cubicle_event_stored", "cubicle_events"),
        # Commands for the controller running a session's turn (a cancel sent to another one), one of a kind each.
        """CREATE TABLE IF NOT EXISTS commands (
            session_id TEXT NOT NULL, kind TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (session_id, kind))""",
        *_notify_on_insert("commands", "cubicle_command_sent", "cubicle_commands"),
    ),
    (  # 4: the viewer's sign-outs, so every controller on the database honours one and a restart forgets none
        "CREATE TABLE IF NOT EXISTS revoked_cookies (nonce TEXT PRIMARY KEY, expires DOUBLE PRECISION NOT NULL)",
    ),
    (  # 5: a channel per schema: NOTIFY is database-wide, so deployments on two schemas of one database woke
        # each other's followers. Controllers of releases before and after this one miss each other's wake-ups.
        *_notify_on_insert("events", "cubicle_event_stored", "cubicle_events", per_schema=True),
        *_notify_on_insert("commands", "cubicle_command_sent", "cubicle_commands", per_schema=True),
    ),
    (  # 6: what each session still holds unapplied, counted as its turns end and its changes are applied
        Column("sessions", "unapplied", "INTEGER"),
    ),
    (  # 7: sessions on a git remote: the URL, ref and commit their files came from
        Column("sessions", "source", "TEXT"),
    ),
)
SCHEMA_VERSION = len(MIGRATIONS)
EVENTS = "cubicle_events"
"""The prefix of the channel PostgreSQL's trigger notifies with the session id of each event stored."""
COMMANDS = "cubicle_commands"
"""The prefix of the channel notified with the session id of each command sent to the controller running it."""


def channel(prefix: str, schema: str) -> str:
    """The NOTIFY channel of ``prefix`` for the deployment in ``schema``: the trigger of migration 5 computes the
    same name (PostgreSQL's md5 of the table's schema), short enough for its 63-byte identifiers."""
    return f"{prefix}_{hashlib.md5(schema.encode(), usedforsecurity=False).hexdigest()[:12]}"


COLUMNS = (
    "id",
    "repo",
    "task",
    "model",
    "status",
    "finish_reason",
    "detail",
    "usage",
    "steps",
    "limits",
    "created_at",
    "updated_at",
    "context",
    "owner",
    "apply",
    "environment",
    "epoch",
    "lease_expires",
    "unapplied",
    "source",
)
"""The sessions table's columns in the order _record reads them."""
Notice = Literal["events", "commands", ""]
"""What a notification announces: events stored, a command sent, or ("") a new connection to the database."""
SELECTED = ", ".join(COLUMNS)


EVENTS_READ_BYTES = 8 << 20
"""One read of a session's events stops past this much stored JSON: a replay of outputs of up to a MiB each
goes out in bounded pieces instead of 500 at once."""


class Store:
    """The sessions, transcripts and events of every controller that shares the database.

    One connection, used from the event loop's thread. This class is the SQLite store (a file in the data dir:
    one machine); ``PostgresStore`` runs the same queries on a server several controllers share. Queries are
    written once, with ``?`` parameters; a few fragments differ by dialect (class attributes).
    """

    dialect: Literal["sqlite", "postgres"] = "sqlite"
    errors: tuple[type[Exception], ...] = (sqlite3.Error,)
    GREATEST = "MAX"
    EVENT_TS = "json_extract(data, '$.ts')"
    BYTES = "length(CAST(data AS BLOB))"
    NOW = "((julianday('now') - 2440587.5) * 86400.0)"
    """The database's clock in seconds since the epoch: leases are judged by one clock, whoever judges them."""
    LOCK_ROW = ""
    """What makes a fencing check wait for a takeover that updates the row (SQLite's writers take turns anyway)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.path: Path | None = path
        # Transcripts hold the repositories' contents: the owner's alone, a database made by an older version too.
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
        with contextlib.suppress(OSError):  # a database this process does not own keeps its mode
            os.chmod(path, 0o600)
        self._db: Any = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=5000")
        self._migrate()

    def close(self) -> None:
        self._db.close()

    # ------------------------------------------------------------------ the dialect

    def _sql(self, query: str) -> str:
        """``query`` in this database's parameter style."""
        return query

    def run(self, query: str, params: tuple[Any, ...] | list[Any] = ()) -> Any:
        """Run one statement (written with ``?`` placeholders, in the SQL both databases accept); its cursor."""
        return self._db.execute(self._sql(query), params)

    def _run_many(self, query: str, rows: list[tuple[Any, ...]]) -> None:
        self._db.executemany(self._sql(query), rows)

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """A failed write in here (disk full, I/O error, the database server gone) becomes a StoreError that says
        what to do. For the modules that keep their own SQL beside their job (``leases``, ``webauth``)."""
        try:
            yield
        except self.errors as err:
            raise StoreError(f"The session database could not be written: {err}.") from None

    @contextlib.contextmanager
    def transaction(self, immediate: bool = False) -> Iterator[None]:
        """One transaction; ``immediate`` takes SQLite's write lock at once (two writers must not both read first)."""
        with self._db:
            self._db.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
            yield

    def _columns(self, table: str) -> set[str]:
        return {row[1] for row in self._db.execute(f"PRAGMA table_info({table})")}

    def _text(self, value: str) -> str:
        """A plain text column's value as this database can hold it (SQLite holds any str it can encode)."""
        return value.encode("utf-8", "replace").decode("utf-8")

    def _lock_schema(self) -> None:
        """Hold off other processes' migrations until this transaction ends (SQLite: BEGIN IMMEDIATE did)."""

    async def notifications(self) -> AsyncIterator[tuple[Notice, str]]:
        """(kind, session id) as other processes store events or send commands; ("", "") on each (re)connect.
        SQLite has no such signal: its followers poll."""
        raise StoreError("Only a PostgreSQL store announces what other processes write.")
        yield ("", "")  # pragma: no cover - makes this an async generator

    # ------------------------------------------------------------------ schema

    def _version(self) -> int:
        self.run("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        row = self.run("SELECT MAX(version) FROM schema_version").fetchone()
        return int(row[0] or 0)

    @_writes
    def _migrate(self) -> None:
        """Bring the database up to ``SCHEMA_VERSION`` in place, in one transaction (another process starting at
        the same moment waits, then finds it done)."""
        with self.transaction(immediate=True):
            self._lock_schema()
            version = self._version()
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"The session database is at schema version {version}, newer than this Cubicle knows "
                    f"({SCHEMA_VERSION}): upgrade Cubicle, or point it at another database."
                )
            for number in range(version, SCHEMA_VERSION):
                for step in MIGRATIONS[number]:
                    if isinstance(step, Column):
                        if step.name not in self._columns(step.table):
                            self.run(f"ALTER TABLE {step.table} ADD COLUMN {step.name} {step.kind}")
                    elif isinstance(step, Only):
                        if step.dialect == self.dialect:
                            self.run(step.sql)
                    else:
                        self.run(step)
            if version < SCHEMA_VERSION:
                self.run("DELETE FROM schema_version")
                self.run("INSERT INTO schema_version VALUES (?)", (SCHEMA_VERSION,))

    # ------------------------------------------------------------------ sessions

    @_writes
    def insert(self, record: Row) -> None:
        self.run(
            f"INSERT INTO sessions ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})",
            (
                record.id,
                self._text(record.repo),
                self._text(record.task),
                record.model,
                record.status,
                record.finish_reason,
                self._text(record.detail),
                record.usage.model_dump_json(),
                record.steps,
                record.limits.model_dump_json(),
                record.created_at,
                record.updated_at,
                record.context.model_dump_json() if record.context else None,
                record.owner,
                record.apply,
                record.environment.model_dump_json() if record.environment else None,
                record.epoch,
                record.lease_expires,
                record.unapplied,
                record.source.model_dump_json() if record.source else None,
            ),
        )

    @_writes
    def update(self, session_id: str, epoch: int | None = None, **fields: Any) -> None:
        """Set ``fields`` of the session; with ``epoch``, only while the session is still at that epoch (fenced)."""
        self._set(session_id, epoch, fields)

    def _set(self, session_id: str, epoch: int | None, fields: dict[str, Any]) -> None:
        values = {
            k: (v.model_dump_json() if isinstance(v, BaseModel) else self._text(v) if isinstance(v, str) else v)
            for k, v in fields.items()
        }
        values["updated_at"] = time.time()
        assignments = ", ".join(f"{name} = ?" for name in values)
        if epoch is None:
            self.run(f"UPDATE sessions SET {assignments} WHERE id = ?", (*values.values(), session_id))
            return
        cursor = self.run(
            f"UPDATE sessions SET {assignments} WHERE id = ? AND epoch = ?", (*values.values(), session_id, epoch)
        )
        if cursor.rowcount == 0:
            raise _lost(session_id)

    # ------------------------------------------------------------------ the clock
    #
    # Leases and the command queue (``leases``) and sign-outs (``webauth.Revocations``) keep their own SQL on this
    # connection; every write below that names an epoch is fenced by it (``_set``, ``_fence``).

    def now(self) -> float:
        """The database's clock."""
        return float(self.run(f"SELECT {self.NOW}").fetchone()[0])

    @_writes
    def revoke_cookie(self, nonce: str, expires: float, now: float) -> None:
        """Remember a signed-out sign-in cookie's nonce until the cookie would have expired; forget expired ones."""
        self.run("DELETE FROM revoked_cookies WHERE expires <= ?", (now,))
        self.run("INSERT INTO revoked_cookies VALUES (?,?) ON CONFLICT (nonce) DO NOTHING", (nonce, expires))

    def cookie_revoked(self, nonce: str) -> bool:
        return self.run("SELECT 1 FROM revoked_cookies WHERE nonce = ?", (nonce,)).fetchone() is not None

    def revoked_cookies(self) -> int:
        """How many sign-outs are remembered."""
        return int(self.run("SELECT COUNT(*) FROM revoked_cookies").fetchone()[0])

    def get(self, session_id: str) -> Row | None:
        row = self.run(f"SELECT {SELECTED} FROM sessions WHERE id = ?", (session_id,)).fetchone()
        return row_from(row) if row else None

    def page(self, limit: int, offset: int) -> tuple[list[Row], int]:
        rows = self.run(
            f"SELECT {SELECTED} FROM sessions ORDER BY created_at DESC LIMIT ? OFFSET ?", (limit, offset)
        ).fetchall()
        total = self.run("SELECT COUNT(*) FROM sessions").fetchone()[0]
        return [row_from(r) for r in rows], total

    def repos(self) -> set[str]:
        """Every session's ``repo``, whatever its status: the trees ``cubicle gc`` must keep."""
        return {row[0] for row in self.run("SELECT DISTINCT repo FROM sessions").fetchall()}

    def with_status(self, status: str) -> list[Row]:
        rows = self.run(f"SELECT {SELECTED} FROM sessions WHERE status = ?", (status,)).fetchall()
        return [row_from(r) for r in rows]

    def ended_before(self, cutoff: float) -> list[tuple[Row, float]]:
        """Sessions not running whose last activity (their newest event, or the row's last update) is older than
        ``cutoff``, with that time: oldest first."""
        last = (
            f"{self.GREATEST}(updated_at, COALESCE((SELECT {self.EVENT_TS} FROM events "
            "WHERE session_id = sessions.id ORDER BY seq DESC LIMIT 1), 0))"
        )
        rows = self.run(
            f"SELECT {SELECTED}, {last} AS last FROM sessions WHERE status != 'running' AND {last} < ? ORDER BY last",
            (cutoff,),
        ).fetchall()
        return [(row_from(r[:-1]), float(r[-1])) for r in rows]

    @_writes
    def delete(self, session_id: str) -> None:
        with self.transaction():
            for table, key in (
                ("events", "session_id"),
                ("messages", "session_id"),
                ("context_edits", "session_id"),
                ("sessions", "id"),
            ):
                self.run(f"DELETE FROM {table} WHERE {key} = ?", (session_id,))

    # ------------------------------------------------------------------ transcript

    def _fence(self, session_id: str, epoch: int | None) -> None:
        """Inside a write's transaction: fail unless the session is still at ``epoch`` (None: not fenced)."""
        if epoch is None:
            return
        row = self.run(f"SELECT epoch FROM sessions WHERE id = ?{self.LOCK_ROW}", (session_id,)).fetchone()
        if row is None or row[0] != epoch:
            raise _lost(session_id)

    @_writes
    def save_messages(
        self, session_id: str, messages: list[dict[str, Any]], start: int, epoch: int | None = None
    ) -> None:
        """Write messages[start:] (the last saved one may have changed: a user text merged into it)."""
        with self.transaction(immediate=epoch is not None):
            self._fence(session_id, epoch)
            self._run_many(
                "INSERT INTO messages VALUES (?,?,?) ON CONFLICT (session_id, idx) DO UPDATE SET message = excluded.message",
                [(session_id, i, json.dumps(messages[i])) for i in range(start, len(messages))],
            )
            self.run("DELETE FROM messages WHERE session_id = ? AND idx >= ?", (session_id, len(messages)))

    @_writes
    def add_edits(self, session_id: str, edits: list[Edit], start: int, epoch: int | None = None) -> None:
        """Write edits[start:]: context edits are only ever appended."""
        with self.transaction(immediate=epoch is not None):
            self._fence(session_id, epoch)
            self._run_many(
                "INSERT INTO context_edits VALUES (?,?,?) ON CONFLICT (session_id, seq) DO UPDATE SET edit = excluded.edit",
                [(session_id, i, edits[i].model_dump_json()) for i in range(start, len(edits))],
            )

    def edits(self, session_id: str) -> list[Edit]:
        """The context edits of the session's view, oldest first (the transcript itself is never edited)."""
        rows = self.run("SELECT edit FROM context_edits WHERE session_id = ? ORDER BY seq", (session_id,)).fetchall()
        return [Edit.model_validate_json(r[0]) for r in rows]

    def messages(self, session_id: str) -> list[dict[str, Any]]:
        rows = self.run("SELECT message FROM messages WHERE session_id = ? ORDER BY idx", (session_id,)).fetchall()
        return [json.loads(r[0]) for r in rows]

    # ------------------------------------------------------------------ events

    def event_bytes(self, session_id: str) -> int:
        """How many bytes the session's stored events take."""
        row = self.run(f"SELECT COALESCE(SUM({self.BYTES}), 0) FROM events WHERE session_id = ?", (session_id,))
        return int(row.fetchone()[0])

    @_writes
    def append_event(self, event: Event, epoch: int | None = None, fields: dict[str, Any] | None = None) -> int:
        """Give the event the next sequence number of its session and write it; returns the bytes stored.
        With ``epoch``, only while the session is still at that epoch (fenced). ``fields`` of the session row are
        set in the same transaction: a reader that sees a turn's end in the row sees its ``session_finished`` too."""
        with self.transaction(immediate=True):
            if fields:
                self._set(event.session_id, epoch, fields)
            else:
                self._fence(event.session_id, epoch)
            row = self.run(
                "SELECT COALESCE(MAX(seq), 0) FROM events WHERE session_id = ?", (event.session_id,)
            ).fetchone()
            event.seq = row[0] + 1
            data = event.model_dump_json()
            self.run("INSERT INTO events VALUES (?,?,?,?)", (event.session_id, event.seq, event.type, data))
        return len(data.encode("utf-8", "surrogatepass"))

    def events_after(
        self, session_id: str, after: int, limit: int = 500, max_bytes: int = EVENTS_READ_BYTES
    ) -> list[Event]:
        """The next events after ``after``, in order: at most ``limit`` of them, and no more than ``max_bytes``
        of stored JSON past the first (one event may carry a command's whole captured output)."""
        cursor = self.run(
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


class PostgresStore(Store):
    """The same store on a PostgreSQL server (``CUBICLE_DATABASE_URL``), which several controllers can share.

    psycopg 3, one connection in autocommit (a statement is its own transaction unless ``_transaction`` opens one).
    Text columns cannot hold NUL there; JSON columns escape it, and a plain text column (repo, task, detail) gets
    U+FFFD in its place: the transcript keeps the task exactly.
    """

    dialect = "postgres"
    GREATEST = "GREATEST"
    EVENT_TS = "CAST(CAST(data AS jsonb) ->> 'ts' AS DOUBLE PRECISION)"
    BYTES = "octet_length(data)"
    NOW = "CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)"
    LOCK_ROW = " FOR SHARE"
    """A takeover's UPDATE of the row waits for a fenced write that holds it, and one that comes after sees the
    new epoch: in PostgreSQL's READ COMMITTED a plain read would see the epoch as of its statement's start."""

    def __init__(self, url: str) -> None:
        try:
            import psycopg
        except ImportError:
            raise ConfigError(
                "CUBICLE_DATABASE_URL names a PostgreSQL database, but its driver is not installed: "
                "pip install 'cubicle[postgres]'."
            ) from None
        self.errors = (psycopg.Error,)
        self.path = None
        self.url = url
        self._next_seq: dict[str, int] = {}
        self._in_transaction = False
        try:
            self._db = self._connect()
        except psycopg.Error as err:
            raise ConfigError(
                f"Cannot connect to the PostgreSQL database of CUBICLE_DATABASE_URL ({_redacted(url)}). "
                f"Start the server or fix the URL. ({' '.join(str(err).split())})"
            ) from None
        self._migrate()

    def _connect(self) -> Any:
        import psycopg

        named: dict[str, Any] = {} if "application_name" in self.url else {"application_name": "cubicle"}
        conn = psycopg.connect(self.url, autocommit=True, connect_timeout=10, **named)  # named in pg_stat_activity
        if "synchronous_commit" not in self.url:
            # As SQLite's WAL with synchronous=NORMAL: a killed controller loses nothing (the server has the
            # commit); a crash of the database server itself may lose its last fraction of a second. Each event
            # then costs ~0.1 ms instead of a WAL flush (~0.6 ms here); the URL's options can ask for on.
            conn.execute("SET synchronous_commit = off")
        return conn

    def _connected(self) -> Any:
        """The connection, made again if the server dropped it (a restart, a failover, a cut connection)."""
        import psycopg

        if self._db.closed or self._db.broken:
            try:
                self._db = self._connect()
            except psycopg.Error as err:
                raise _unavailable(self.url, err) from None
            self._next_seq.clear()  # other processes may have written meanwhile: read the numbers again
        return self._db

    def run(self, query: str, params: tuple[Any, ...] | list[Any] = ()) -> Any:
        """Run ``query``. A read outside a transaction whose connection was dropped is tried once more on a new
        one; a write is not (it may have committed before the connection went): its caller sees the error."""
        import psycopg

        for attempt in (0, 1):
            conn = self._connected()
            try:
                return conn.execute(self._sql(query), params)
            except (psycopg.OperationalError, psycopg.InterfaceError) as err:
                if not (conn.closed or conn.broken):
                    raise
                if attempt or self._in_transaction or not query.lstrip().upper().startswith("SELECT"):
                    raise _unavailable(self.url, err) from None
        raise AssertionError("unreachable")

    def _sql(self, query: str) -> str:
        return _placeholders(query)

    def _run_many(self, query: str, rows: list[tuple[Any, ...]]) -> None:
        with self._connected().cursor() as cursor:
            cursor.executemany(self._sql(query), rows)

    @contextlib.contextmanager
    def transaction(self, immediate: bool = False) -> Iterator[None]:
        import psycopg

        conn = self._connected()
        self._in_transaction = True
        try:
            with conn.transaction():
                yield
        except (psycopg.OperationalError, psycopg.InterfaceError) as err:
            if conn.closed or conn.broken:
                raise _unavailable(self.url, err) from None
            raise
        finally:
            self._in_transaction = False

    def _columns(self, table: str) -> set[str]:
        rows = self.run(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND table_name = ?",
            (table,),
        )
        return {row[0] for row in rows}

    def _text(self, value: str) -> str:
        return super()._text(value).replace("\x00", "\ufffd")

    def _lock_schema(self) -> None:
        self.run("SELECT pg_advisory_xact_lock(?)", (SCHEMA_LOCK,))

    @_writes
    def append_event(self, event: Event, epoch: int | None = None, fields: dict[str, Any] | None = None) -> int:
        """One INSERT per event: the next sequence number is remembered, and read again only when another
        process stored one in between (the primary key refuses the number twice). Fenced, the INSERT takes its
        row from the session's at that epoch, locked against a takeover until it commits. With ``fields``, the
        row's update and the INSERT are one transaction."""
        import psycopg.errors

        for _ in range(5):
            seq = self._next_seq.get(event.session_id)
            try:
                with self.transaction() if fields else contextlib.nullcontext():
                    if fields:
                        self._set(event.session_id, epoch, fields)
                    if seq is None:
                        row = self.run(
                            "SELECT COALESCE(MAX(seq), 0) FROM events WHERE session_id = ?", (event.session_id,)
                        )
                        seq = int(row.fetchone()[0]) + 1
                    event.seq = seq
                    data = event.model_dump_json()
                    self._insert_event(event, seq, data, None if fields else epoch)
            except psycopg.errors.UniqueViolation:
                self._next_seq.pop(event.session_id, None)
                continue
            if event.type == "session_finished":  # read again at the next turn: the map keeps only live sessions
                self._next_seq.pop(event.session_id, None)
            else:
                self._next_seq[event.session_id] = seq + 1
            return len(data.encode("utf-8", "surrogatepass"))
        raise StoreError(f"Session {event.session_id}'s events are being written by another process as well.")

    def _insert_event(self, event: Event, seq: int, data: str, epoch: int | None) -> None:
        """The INSERT; fenced by ``epoch`` unless None (unfenced, or fenced by the row's update before it)."""
        if epoch is None:
            self.run("INSERT INTO events VALUES (?,?,?,?)", (event.session_id, seq, event.type, data))
        else:
            inserted = self.run(
                "INSERT INTO events SELECT id, CAST(? AS INTEGER), CAST(? AS TEXT), CAST(? AS TEXT) "
                "FROM sessions WHERE id = ? AND epoch = ? FOR SHARE",
                (seq, event.type, data, event.session_id, epoch),
            )
            if inserted.rowcount == 0:
                raise _lost(event.session_id)

    @_writes
    def delete(self, session_id: str) -> None:
        self._next_seq.pop(session_id, None)
        super().delete(session_id)

    async def notifications(self) -> AsyncIterator[tuple[Notice, str]]:
        """LISTEN to this deployment's channels on a connection of its own, reconnecting after a second when the
        server goes away: ("events" or "commands", the session id), and ("", "") on each (re)connection."""
        import psycopg

        while True:
            try:
                async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
                    row = await (await conn.execute("SELECT current_schema()")).fetchone()
                    kinds: dict[str, Notice] = {
                        channel(EVENTS, row[0] if row else ""): "events",
                        channel(COMMANDS, row[0] if row else ""): "commands",
                    }
                    for name in kinds:
                        await conn.execute(f"LISTEN {name}")
                    yield ("", "")
                    async for note in conn.notifies():
                        if note.channel in kinds:
                            yield (kinds[note.channel], note.payload)
            except psycopg.Error as err:
                log.warning("lost the database's notifications, reconnecting: %s", err)
                await asyncio.sleep(1)


def _unavailable(url: str, err: Exception) -> DatabaseUnavailableError:
    return DatabaseUnavailableError(
        f"The PostgreSQL server of CUBICLE_DATABASE_URL ({_redacted(url)}) does not answer: "
        f"{' '.join(str(err).split())}."
    )


def _lost(session_id: str) -> LeaseLostError:
    return LeaseLostError(
        f"Another controller took session {session_id} over (this one's lease had expired): nothing more of its "
        "turn is written here."
    )


SCHEMA_LOCK = 0x637562696300  # "cubic": the advisory lock migrations of one database take in turn


@functools.lru_cache(maxsize=256)
def _placeholders(query: str) -> str:
    """``?`` parameters as psycopg's ``%s`` (our queries hold no literal ``?`` or ``%``)."""
    return query.replace("?", "%s")


def _redacted(url: str) -> str:
    """The URL without its password, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def open_store(settings: Settings) -> Store:
    """The store ``settings`` name: PostgreSQL when ``database_url`` is set, else SQLite in the data dir.

    The data dir is made either way (private): the workspace layers live there, and a repository that would
    hold it is refused by its path.
    """
    settings.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    if settings.database_url is not None:
        return PostgresStore(settings.database_url.get_secret_value())
    return Store(settings.data_dir / "cubicle.db")


def row_from(row: tuple[Any, ...]) -> Row:
    """The ``Row`` of the ``COLUMNS`` a SELECT read, its JSON columns parsed (context and environment may be empty)."""
    values = dict(zip(COLUMNS, row, strict=True))
    values["usage"] = Usage.model_validate_json(values["usage"])
    values["limits"] = Limits.model_validate_json(values["limits"])
    values["context"] = ContextPolicy.model_validate_json(values["context"]) if values["context"] else None
    values["environment"] = Environment.model_validate_json(values["environment"]) if values["environment"] else None
    values["source"] = Source.model_validate_json(values["source"]) if values["source"] else None
    return Row(**values)
