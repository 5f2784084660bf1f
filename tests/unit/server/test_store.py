"""The store's schema and the PostgreSQL store's own behaviour (the API suite runs on both stores elsewhere)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path

import psycopg
import pytest

from controller.config import Settings
from controller.errors import ConfigError, StoreError
from controller.server.leases import Leases
from controller.server.store import EVENTS, SCHEMA_VERSION, PostgresStore, Row, Store, channel, open_store
from controller.wire.events import StatusEvent, Usage
from controller.wire.limits import Limits
from controller.wire.sessionrecord import Source
from tests.databases import postgres_schema

RELEASED_SCHEMA = """
CREATE TABLE sessions (
    id TEXT PRIMARY KEY, repo TEXT NOT NULL, task TEXT NOT NULL, model TEXT NOT NULL, status TEXT NOT NULL,
    finish_reason TEXT, detail TEXT NOT NULL DEFAULT '', usage TEXT NOT NULL, steps INTEGER NOT NULL DEFAULT 0,
    limits TEXT NOT NULL, created_at REAL NOT NULL, updated_at REAL NOT NULL
);
CREATE TABLE messages (session_id TEXT NOT NULL, idx INTEGER NOT NULL, message TEXT NOT NULL,
                       PRIMARY KEY (session_id, idx));
CREATE TABLE events (session_id TEXT NOT NULL, seq INTEGER NOT NULL, type TEXT NOT NULL, data TEXT NOT NULL,
                     PRIMARY KEY (session_id, seq));
CREATE INDEX sessions_created ON sessions (created_at DESC);
"""
"""The tables as the first release made them: no schema version, none of the columns added since."""


def record(sid: str, task: str = "t", status: str = "idle") -> Row:
    now = time.time()
    return Row(
        id=sid,
        repo="/r",
        task=task,
        model="m",
        status=status,
        usage=Usage(),
        steps=0,
        limits=Limits(),  # type: ignore[arg-type]
        created_at=now,
        updated_at=now,
    )


def version(store: Store) -> list[int]:
    return [row[0] for row in store.run("SELECT version FROM schema_version").fetchall()]


@pytest.mark.parametrize(
    "added", [(), ("context TEXT", "owner TEXT NOT NULL DEFAULT ''")], ids=["first-release", "half-migrated"]
)
def test_a_database_of_an_earlier_release_upgrades_in_place(tmp_path: Path, added: tuple[str, ...]) -> None:
    path = tmp_path / "cubicle.db"
    old = sqlite3.connect(path)
    old.executescript(RELEASED_SCHEMA)
    for column in added:  # a later release's _migrate had added these already
        old.execute(f"ALTER TABLE sessions ADD COLUMN {column}")
    old.execute(
        "INSERT INTO sessions (id, repo, task, model, status, finish_reason, detail, usage, steps, limits, "
        "created_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
        (
            "s_old",
            "/r",
            "the task",
            "m",
            "idle",
            "end_turn",
            "",
            Usage().model_dump_json(),
            3,
            Limits().model_dump_json(),
            1.0,
            2.0,
        ),
    )
    old.execute('INSERT INTO messages VALUES (\'s_old\', 0, \'{"role": "user", "content": "the task"}\')')
    old.execute(
        "INSERT INTO events VALUES ('s_old', 1, 'status', ?)",
        (StatusEvent(session_id="s_old", seq=1, status="idle").model_dump_json(),),
    )
    old.commit()
    old.close()

    store = Store(path)
    try:
        upgraded = store.get("s_old")
        assert upgraded is not None and (upgraded.task, upgraded.steps, upgraded.context) == ("the task", 3, None)
        assert upgraded.apply == "never" and upgraded.owner == ""
        assert store.messages("s_old") == [{"role": "user", "content": "the task"}]
        assert [e.seq for e in store.events_after("s_old", 0)] == [1]
        assert version(store) == [SCHEMA_VERSION]
        store.append_event(StatusEvent(session_id="s_old", status="running"))
        assert [e.seq for e in store.events_after("s_old", 0)] == [1, 2]
    finally:
        store.close()
    again = Store(path)  # a second start finds nothing to do
    assert version(again) == [SCHEMA_VERSION] and again.get("s_old") is not None
    again.close()


def test_a_database_newer_than_this_release_is_refused(tmp_path: Path) -> None:
    Store(tmp_path / "cubicle.db").close()
    db = sqlite3.connect(tmp_path / "cubicle.db")
    db.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    db.commit()
    db.close()
    with pytest.raises(StoreError, match=r"newer than this Cubicle knows.*upgrade Cubicle"):
        Store(tmp_path / "cubicle.db")


def test_controllers_starting_together_on_a_new_postgres_database_migrate_it_once() -> None:
    with postgres_schema() as url:
        stores: list[Store] = []
        failures: list[BaseException] = []

        def start() -> None:
            try:
                stores.append(PostgresStore(url))
            except BaseException as err:  # noqa: BLE001 - reported below
                failures.append(err)

        threads = [threading.Thread(target=start) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert failures == [] and len(stores) == 4
        assert version(stores[0]) == [SCHEMA_VERSION]
        stores[0].insert(record("s_1"))
        assert all(store.get("s_1") is not None for store in stores)
        for store in stores:
            store.close()


def test_every_stored_event_notifies_the_listeners_of_its_session() -> None:
    with postgres_schema() as url, psycopg.connect(url, autocommit=True) as listener:
        store = PostgresStore(url)
        schema = listener.execute("SELECT current_schema()").fetchone()
        assert schema is not None
        listener.execute(f"LISTEN {channel(EVENTS, schema[0])}")
        store.append_event(StatusEvent(session_id="s_a", status="running"))
        store.append_event(StatusEvent(session_id="s_b", status="running"))
        got = [n.payload for n in listener.notifies(timeout=5, stop_after=2)]
        assert got == ["s_a", "s_b"]
        store.close()


async def test_two_deployments_on_two_schemas_of_one_database_hear_only_their_own_notifications() -> None:
    """NOTIFY channels are database-wide: with one fixed name, each deployment woke the other's followers."""
    with postgres_schema() as first_url, postgres_schema() as second_url:
        stores = {"first": PostgresStore(first_url), "second": PostgresStore(second_url)}
        heard: dict[str, list[tuple[str, str]]] = {"first": [], "second": []}
        connected = {name: asyncio.Event() for name in stores}

        async def listen(name: str) -> None:
            async for kind, session_id in stores[name].notifications():
                if kind == "":
                    connected[name].set()
                else:
                    heard[name].append((kind, session_id))

        listeners = [asyncio.create_task(listen(name)) for name in stores]
        try:
            await asyncio.wait_for(asyncio.gather(*(e.wait() for e in connected.values())), timeout=10)
            for name, store in stores.items():
                store.insert(record(f"s_{name}"))
                store.append_event(StatusEvent(session_id=f"s_{name}", status="running"))
                Leases(store, "owner", 30).send(f"s_{name}", "cancel")
            async with asyncio.timeout(10):
                while len(heard["first"]) < 2 or len(heard["second"]) < 2:
                    await asyncio.sleep(0.02)
            await asyncio.sleep(0.2)  # time for a stray notification of the other deployment to arrive
        finally:
            for task in listeners:
                task.cancel()
            await asyncio.gather(*listeners, return_exceptions=True)
            for store in stores.values():
                store.close()
        assert heard == {
            "first": [("events", "s_first"), ("commands", "s_first")],
            "second": [("events", "s_second"), ("commands", "s_second")],
        }


def test_a_second_writer_of_a_session_gets_the_next_numbers_not_the_same_ones() -> None:
    """The PostgreSQL store remembers each session's next number; another process writing in between must not
    make it reuse one (e.g. `cubicle apply` recording an event while the server holds the session)."""
    with postgres_schema() as url:
        first, second = PostgresStore(url), PostgresStore(url)
        seqs = []
        for n in range(6):
            writer = first if n % 3 else second
            event = StatusEvent(session_id="s", status="running")
            writer.append_event(event)
            seqs.append(event.seq)
        assert seqs == [1, 2, 3, 4, 5, 6]
        assert [e.seq for e in first.events_after("s", 0)] == [1, 2, 3, 4, 5, 6]
        first.close()
        second.close()


@pytest.mark.usefixtures("each_store")
def test_a_task_with_nul_and_lone_surrogates_is_stored(tmp_path: Path) -> None:
    """A JSON body may carry both; the record keeps what each database can hold, and nothing fails."""
    store = open_store(Settings(api_key="k", data_dir=tmp_path / "data"))
    store.insert(record("s_1", task="a\x00b\ud800c"))
    stored = store.get("s_1")
    assert stored is not None and stored.task in ("a\x00b?c", "a\ufffdb?c")
    store.update("s_1", detail="x\x00y")
    assert store.get("s_1").detail in ("x\x00y", "x\ufffdy")  # type: ignore[union-attr]
    store.close()


@pytest.mark.usefixtures("each_store")
def test_a_remote_sessions_source_is_stored_and_a_local_one_has_none(tmp_path: Path) -> None:
    store = open_store(Settings(api_key="k", data_dir=tmp_path / "data"))
    source = Source(url="https://git.example.com/team/app.git", ref="main", commit="a" * 40)
    store.insert(record("s_remote").model_copy(update={"source": source}))
    store.insert(record("s_local"))
    assert store.get("s_remote").source == source  # type: ignore[union-attr]
    assert store.get("s_local").source is None  # type: ignore[union-attr]
    store.close()


def test_an_unreachable_postgres_server_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match=r"Cannot connect .*:\*\*\*@127\.0\.0\.1:9/x.*Start the server or fix"):
        PostgresStore("postgresql://cubicle:s3cret@127.0.0.1:9/x")
