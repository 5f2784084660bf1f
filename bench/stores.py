"""Stores: the event write path on SQLite and on PostgreSQL, and SSE delivery from one controller to another.

Two tables, each measured in one run beside its baseline:

- **Event writes.** 20 sessions stream text deltas (24 characters each, as the scripted model
  streams them) into one store, each session a real ``Recorder`` whose writes are fenced by the
  epoch ``Store.claim`` gave it (as a follow-up turn's are), each an asyncio task on one event
  loop, as in one controller. Every task emits, then yields to the others, as fast as the loop
  lets it. The SQLite store (a file in a directory of the bench, WAL) is the baseline; the
  PostgreSQL store gets a schema of its own and, like ``cubicle serve`` on PostgreSQL, a LISTEN
  connection on the same loop that receives the notification of every event stored. The stores
  run in turns of a few seconds, alternating. Reported: events/s, each ``Recorder.emit``'s
  latency (the write and its commit), and the share of the wall time the loop spent inside the
  store's methods.
- **SSE delivery across controllers.** Two ``cubicle serve`` processes (instances of their own)
  share one PostgreSQL schema and one data directory. A session started on A streams one long
  text (deltas of 24 characters, as fast as the scripted model server, a process of its own,
  sends them; no tool call, but its sandbox container starts); one client follows it on A (the
  baseline: woken in-process) and one on B (woken by PostgreSQL's NOTIFY). For each event a
  client receives live: its arrival time (when the read that completed its frame returned) minus
  the event's ``ts``, which A stamps as the event is made, just before it is written and
  committed. Both streams are checked to hold every event once, in order.

Without a PostgreSQL server (``CUBICLE_BENCH_DATABASE_URL``, default the local test database;
``.ci/postgres-up`` starts one) the PostgreSQL rows say they were skipped and why.
``python -m bench.stores`` prints these tables alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import re
import secrets
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from bench.flood import Controller
from bench.measure import Report, Row, Sample, ms, smoke
from bench.rows import INSTANCE, make_repo, section_main
from bench.viewer import ModelServer, frames
from controller.agent.conversation import Conversation
from controller.agent.scripted import Scenario, free_port
from controller.config import Settings
from controller.sandbox import owners
from controller.server.feed import Feed
from controller.server.leases import Leases
from controller.server.recorder import Recorder
from controller.server.store import PostgresStore, Store, _redacted
from controller.server.store import Row as StoredRow
from controller.wire.events import TextDelta

SERVER_URL = os.environ.get("CUBICLE_BENCH_DATABASE_URL", "postgresql:///cubicle_test?host=/var/run/postgresql")
"""A PostgreSQL database the bench may create (and drop) a schema in."""
SESSIONS = 20
DELTA_CHARS = 24
"""The scripted model server's text deltas are this long (``controller/scripted.py``)."""
PROSE = (
    "The function total() sums the items it is given; the tests cover an empty list, one item and many. "
    "Next I will read the readme, then run the tests in the sandbox and report what changed and why. "
)
DELIVERY_TARGET_S = 0.1
"""SSE delivery from the owner's commit to a client on another controller: p99 at most this."""
RUN_TIMEOUT_S = 120
MODEL_DELAY_S = 0.5
"""The scripted model answers this long after the request: both clients are following by then."""


class Unavailable(Exception):
    """No PostgreSQL to measure on: the reason, for the table."""


def _say(err: BaseException) -> str:
    return " ".join(str(err).split())[:200]


@contextlib.contextmanager
def postgres_schema() -> Iterator[tuple[str, str]]:
    """The URL of a new, empty schema on SERVER_URL (the only one on its search path) and the server's version;
    dropped after. Unavailable when there is no driver or no server."""
    try:
        import psycopg
    except ImportError:
        raise Unavailable("psycopg is not installed (pip install 'cubicle[postgres]')") from None
    try:
        admin = psycopg.connect(SERVER_URL, autocommit=True, connect_timeout=5)
    except psycopg.Error as err:
        raise Unavailable(
            f"no PostgreSQL server answers at {_redacted(SERVER_URL)} (.ci/postgres-up starts one): {_say(err)}"
        ) from None
    name = f"bench_{secrets.token_hex(6)}"
    with admin:
        version = str(admin.execute("SHOW server_version").fetchone()[0]).split()[0]  # type: ignore[index]
        admin.execute(f"CREATE SCHEMA {name}")
        separator = "&" if "?" in SERVER_URL else "?"
        try:
            yield f"{SERVER_URL}{separator}options=-csearch_path%3D{name}", version
        finally:
            admin.execute(f"DROP SCHEMA {name} CASCADE")


def _where(url: str) -> str:
    """Where the server is, for a table: its Unix socket or its host."""
    parts = urlsplit(url)
    query = dict(p.split("=", 1) for p in parts.query.split("&") if "=" in p)
    host = parts.hostname or query.get("host", "")
    return "Unix socket" if not host or host.startswith("/") else f"TCP to {host}"


# ---------------------------------------------------------------------- event writes


@dataclass
class Writes:
    latencies: list[float] = field(default_factory=list)
    """Each ``Recorder.emit``, seconds."""
    wall: float = 0.0
    in_store: float = 0.0
    """Seconds the loop spent inside the store's methods."""

    def add(self, other: Writes) -> None:
        self.latencies += other.latencies
        self.wall += other.wall
        self.in_store += other.in_store


class Streams:
    """SESSIONS sessions of one store, each with its recorder holding a claimed epoch, and a clock on the store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.in_store = 0.0
        self.written = 0
        """Events written, warm-up included."""
        self.notifications = 0
        """Notifications the LISTEN connection received for these sessions (PostgreSQL)."""
        self.others = 0
        """Notifications for sessions that are not these: other users of the same database (channels are per
        database, not per schema)."""
        for name in ("append_event", "event_bytes", "update"):  # the store methods Recorder.emit calls
            setattr(store, name, self._timed(getattr(store, name)))
        settings = Settings(instance=INSTANCE)
        feed = Feed(store, lambda _: True, settings.sse_heartbeat_s)
        leases = Leases(store, owners.owner_token(INSTANCE), settings.lease_s)
        self.recorders: list[Recorder] = []
        for _ in range(SESSIONS):
            record = StoredRow.fresh(f"s_{secrets.token_hex(8)}", "/bench/stores", "stream", "bench", status="idle")
            store.insert(record)
            epoch = leases.claim(record.id, record.epoch)  # as a turn begins
            assert epoch is not None
            recorder = Recorder(store, feed, record.id, Conversation(), settings.session_events_mb << 20)
            recorder.epoch = epoch
            self.recorders.append(recorder)
        self.ids = {r.session_id for r in self.recorders}

    def _timed(self, method: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.in_store += time.perf_counter() - start

        return timed

    async def listen(self, ready: asyncio.Event) -> None:
        """What ``Sessions._listen`` does on PostgreSQL, for sessions running here: receive, look, do nothing."""
        async for _, session_id in self.store.notifications():
            if not session_id:
                ready.set()
            elif session_id in self.ids:
                self.notifications += 1
            else:
                self.others += 1

    async def run(self, seconds: float) -> Writes:
        """Every session emits text deltas, yielding to the others after each, for ``seconds``."""
        latencies: list[float] = []
        in_store = self.in_store
        stop = time.perf_counter() + seconds

        async def stream(recorder: Recorder, offset: int) -> None:
            at = offset
            while time.perf_counter() < stop:
                text = (PROSE * 2)[at : at + DELTA_CHARS]
                at = (at + DELTA_CHARS) % len(PROSE)
                event = TextDelta(session_id=recorder.session_id, text=text)
                start = time.perf_counter()
                await recorder.emit(event)
                latencies.append(time.perf_counter() - start)
                self.written += 1
                await asyncio.sleep(0)

        began = time.perf_counter()
        await asyncio.gather(*(stream(r, 7 * i) for i, r in enumerate(self.recorders)))
        return Writes(latencies, time.perf_counter() - began, self.in_store - in_store)


def _file_system(path: Path) -> str:
    """The type of the file system holding ``path`` (the mount that is its longest prefix)."""
    best, kind = "", "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mounts").read_text().splitlines():
            _, point, fs, *_ = line.split()
            if str(path).startswith(point) and len(point) > len(best):
                best, kind = point, fs
    return kind


async def event_writes(report: Report, root: Path, quick: bool) -> None:
    rounds, seconds = (1, 0.3) if smoke() else (2, 1.0) if quick else (3, 2.0)
    title = (
        f"Event writes: {SESSIONS} sessions streaming {DELTA_CHARS}-character text deltas through their Recorder "
        f"(fenced by a claimed epoch), asyncio tasks on one event loop, each yielding after every event; "
        f"{rounds} turns of {seconds:.0f} s per store, alternating"
    )
    header = [
        "store",
        "setup",
        "events",
        "events/s",
        "write p50",
        "write mean",
        "write p99",
        "write max",
        "loop share in the store",
    ]
    sqlite_path = root / "stores-data" / "cubicle.db"
    sqlite_store = Store(sqlite_path)
    setups = {
        "SQLite (baseline)": f"file on {_file_system(sqlite_path)}, WAL, synchronous=NORMAL; one connection",
    }
    results: dict[str, Writes] = {}
    skipped = ""
    with contextlib.ExitStack() as stack:
        stores: dict[str, Streams] = {"SQLite (baseline)": Streams(sqlite_store)}
        stack.callback(sqlite_store.close)
        try:
            url, version = stack.enter_context(postgres_schema())
            pg = PostgresStore(url)
            stack.callback(pg.close)
            stores["PostgreSQL"] = Streams(pg)
            setups["PostgreSQL"] = (
                f"PostgreSQL {version} over its {_where(url)}, synchronous_commit=off; one connection, and a LISTEN "
                "connection on the same loop receiving each event's notification"
            )
        except Unavailable as err:
            skipped = str(err)
        listening: list[asyncio.Task[None]] = []
        try:
            if "PostgreSQL" in stores:
                ready = asyncio.Event()
                listening.append(asyncio.create_task(stores["PostgreSQL"].listen(ready)))
                async with asyncio.timeout(10):
                    await ready.wait()
            for streams in stores.values():  # warm-up: caches, the first read of each session's next seq
                await streams.run(0.3)
            for _ in range(rounds):
                for name, streams in stores.items():
                    results.setdefault(name, Writes()).add(await streams.run(seconds))
            await asyncio.sleep(0.2)  # the last notifications in flight
        finally:
            for task in listening:
                task.cancel()
            await asyncio.gather(*listening, return_exceptions=True)
        rows = []
        for name, writes in results.items():
            sample = Sample(writes.latencies)
            rows.append(
                [
                    name,
                    setups[name],
                    f"{len(writes.latencies):,}",
                    f"{len(writes.latencies) / writes.wall:,.0f}",
                    ms(sample.p50),
                    ms(sum(sample.values) / len(sample.values)),
                    ms(sample.pct(0.99)),
                    ms(max(sample.values)),
                    f"{100 * writes.in_store / writes.wall:.0f} %",
                ]
            )
        if "PostgreSQL" in stores:
            pg_streams = stores["PostgreSQL"]
            rows.append(
                [
                    "  PostgreSQL: notifications received",
                    "on the LISTEN connection, same loop",
                    f"{pg_streams.notifications:,} of its {pg_streams.written:,} events (warm-up included)",
                    f"{pg_streams.others:,} of other schemas' sessions",
                    "",
                    "",
                    "",
                    "",
                    "",
                ]
            )
        else:
            rows.append(["PostgreSQL", f"skipped: {skipped}", "", "", "", "", "", "", ""])
    report.extra.append((title, header, rows))
    if "PostgreSQL" in results:
        report.rows.append(
            Row(
                f"event write, {SESSIONS} sessions streaming text (PostgreSQL)",
                Sample(results["PostgreSQL"].latencies),
                "the same on SQLite",
                Sample(results["SQLite (baseline)"].latencies),
            )
        )


# ---------------------------------------------------------------------- SSE delivery across controllers


@dataclass
class Received:
    """One follower's stream: each event with the time (time.time) its frame had arrived whole."""

    connected: float = 0.0
    """When the response's head arrived: events stamped before it were replayed, not delivered live."""
    events: list[tuple[dict[str, Any], float]] = field(default_factory=list)

    def live_lags(self) -> list[float]:
        return [at - event["ts"] for event, at in self.events if event["ts"] >= self.connected]


FRAME_END = re.compile(rb"(?:\r\n|\n|\r){2}")


class StreamReader:
    """An SSE response read as it arrives (HTTP/1.1, chunked or not): complete frames are parsed at once."""

    def __init__(self) -> None:
        self.raw = bytearray()
        self.body = bytearray()
        self.head: bool = False
        self.chunked = False
        self.received = Received()

    def feed(self, data: bytes, now: float) -> None:
        self.raw += data
        if not self.head:
            end = self.raw.find(b"\r\n\r\n")
            if end < 0:
                return
            status_line, *headers = bytes(self.raw[:end]).decode("latin-1").split("\r\n")
            if " 200 " not in f"{status_line} ":
                raise RuntimeError(f"the event stream answered {status_line!r}")
            self.chunked = any(h.lower().replace(" ", "") == "transfer-encoding:chunked" for h in headers)
            del self.raw[: end + 4]
            self.head = True
            self.received.connected = now
        if self.chunked:
            while (line := self.raw.find(b"\r\n")) >= 0:
                size = int(bytes(self.raw[:line]).split(b";")[0], 16)
                if len(self.raw) < line + 2 + size + 2:
                    break
                self.body += self.raw[line + 2 : line + 2 + size]
                del self.raw[: line + 2 + size + 2]
                if size == 0:
                    break
        else:
            self.body += self.raw
            del self.raw[:]
        ends = [m.end() for m in FRAME_END.finditer(self.body)]
        if ends:
            whole = bytes(self.body[: ends[-1]])
            del self.body[: ends[-1]]
            self.received.events += [(event, now) for event in frames(whole)]


async def follow(url: str, token: str, sid: str) -> Received:
    """Follow the session's events on its own socket until the stream closes, timing each frame's arrival."""
    where = httpx.URL(url)
    host, port = where.host, where.port or 80
    reader, writer = await asyncio.open_connection(host, port)
    parser = StreamReader()
    try:
        writer.write(
            f"GET /v1/sessions/{sid}/events HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {token}\r\n"
            "Accept: text/event-stream\r\nConnection: close\r\n\r\n".encode()
        )
        while data := await reader.read(1 << 16):
            parser.feed(data, time.time())
    finally:
        writer.close()
    return parser.received


def _gaps(seqs: list[int], n: int) -> str:
    """What is wrong with a stream's sequence numbers, against 1..n, briefly."""
    seen = set(seqs)
    missing = [i for i in range(1, n + 1) if i not in seen]
    ordered = all(a < b for a, b in itertools.pairwise(seqs))
    return (
        f"{len(seqs)} of {n} events, last seq {seqs[-1] if seqs else None}, {len(missing)} missing "
        f"{missing[:5]}, {len(seqs) - len(seen)} repeated, {'in order' if ordered else 'out of order'}"
    )


def long_text(deltas: int) -> str:
    return (PROSE * (deltas * DELTA_CHARS // len(PROSE) + 1))[: deltas * DELTA_CHARS]


@dataclass
class Delivery:
    on_owner: list[float] = field(default_factory=list)
    on_other: list[float] = field(default_factory=list)
    events: list[int] = field(default_factory=list)
    """Events of each session."""
    inexact: list[str] = field(default_factory=list)
    """What was wrong with each of B's streams that did not hold every event of the session once, in order."""


async def _unfinished(api: httpx.AsyncClient, sid: str, on_a: Received, controllers: tuple[Controller, ...]) -> str:
    """What became of a session whose stream on A closed without its end_turn: the stream's last event, the session's
    record now, and what the controllers logged (a takeover, say)."""
    last = on_a.events[-1][0] if on_a.events else None
    response = await api.get(f"/v1/sessions/{sid}")
    record = response.json() if response.is_success else {"status": f"unknown (HTTP {response.status_code})"}
    logged = "; ".join(f"{c.instance}: {line}" for c in controllers for line in c.said()) or "nothing above INFO"
    return (
        f"session {sid} did not end with end_turn: its stream on A closed after {len(on_a.events)} events, the last "
        f"{last}; the session is now {record.get('status')} ({record.get('finish_reason')}: {record.get('detail')!r}); "
        f"the controllers logged: {logged}"
    )


async def deliver(a: Controller, b: Controller, repo: Path, model: str, sessions: int) -> Delivery:
    """One warm-up session, then ``sessions`` sessions, one after another on A, each followed from its start on A
    and on B."""
    result = Delivery()
    headers = {"Authorization": f"Bearer {a.token}"}
    # A bound against a hang, not a measure: under stress-ng on both cores a session's creation took over 30 s.
    async with httpx.AsyncClient(base_url=a.url, headers=headers, timeout=RUN_TIMEOUT_S) as api:
        for run in range(sessions + 1):
            response = await api.post("/v1/sessions", json={"repo": str(repo), "task": "write it", "model": model})
            response.raise_for_status()
            sid = response.json()["id"]
            following = [asyncio.create_task(follow(c.url, c.token, sid)) for c in (a, b)]
            try:
                async with asyncio.timeout(RUN_TIMEOUT_S):
                    on_a, on_b = await asyncio.gather(*following)
            finally:
                for task in following:
                    task.cancel()
            got_a, got_b = ([event["seq"] for event, _ in r.events] for r in (on_a, on_b))
            expected = list(range(1, len(got_a) + 1))
            if got_a != expected:
                raise RuntimeError(f"session {sid}: the stream on A is not 1..n: {_gaps(got_a, len(expected))}")
            finished = on_a.events[-1][0] if on_a.events else {}
            if finished.get("type") != "session_finished" or finished.get("reason") != "end_turn":
                raise RuntimeError(await _unfinished(api, sid, on_a, (a, b)))
            if run == 0:  # the warm-up: first container, first connections
                (await api.delete(f"/v1/sessions/{sid}")).raise_for_status()
                continue
            if got_b != expected:  # measured all the same: what it received, it received when it did
                types = {event["seq"]: event["type"] for event, _ in on_a.events}
                missing = ", ".join(f"{n}: {types[n]}" for n in sorted(set(expected) - set(got_b))[:5])
                result.inexact.append(f"{_gaps(got_b, len(expected))} ({missing})")
            result.on_owner += on_a.live_lags()
            result.on_other += on_b.live_lags()
            result.events.append(len(expected))
            (await api.delete(f"/v1/sessions/{sid}")).raise_for_status()
    return result


async def sse_delivery(report: Report, client: Any, image: str, root: Path, quick: bool) -> None:
    sessions, deltas = (1, 50) if smoke() else (1, 1000) if quick else (3, 1000)
    title = (
        f"SSE delivery across controllers: the event's ts (stamped by the owner A as it makes the event, before it "
        f"commits it) to its arrival at a client; after a warm-up session, "
        f"{f'{sessions} sessions one after another, each' if sessions > 1 else 'one session'} streaming one text of {deltas:,} deltas of {DELTA_CHARS} characters as fast as the scripted model sends "
        f"them, {MODEL_DELAY_S:g} s after the request (no tool call; a sandbox starts per session)"
    )
    header = ["client on", "setup", "live events", "p50", "p99", "max", "streams exact", "target", "met"]
    try:
        with postgres_schema() as (url, version):
            name = f"stores-{secrets.token_hex(4)}"
            path = root / f"{name}.json"
            turns = [{"content": [{"type": "text", "text": long_text(deltas)}], "delay_s": MODEL_DELAY_S}]
            path.write_text(Scenario.model_validate({"name": name, "turns": turns}).model_dump_json())
            repo = make_repo(root, "stores")
            port = free_port()
            model_url = f"http://127.0.0.1:{port}"
            env = {"CUBICLE_DATABASE_URL": url}
            starting = [  # together: each spends seconds importing
                asyncio.to_thread(ModelServer, path, port),
                *(
                    asyncio.to_thread(Controller, model_url, root, f"{INSTANCE}-{which}", "stores-serve", image, env)
                    for which in ("a", "b")
                ),
            ]
            started = await asyncio.gather(*starting, return_exceptions=True)
            controllers = [c for c in started if isinstance(c, Controller)]
            try:
                for failed in started:
                    if isinstance(failed, BaseException):
                        raise failed
                delivery = await deliver(controllers[0], controllers[1], repo, name, sessions)
            finally:
                for process in started:
                    if isinstance(process, Controller | ModelServer):
                        process.close()
                for which in ("a", "b"):  # what a controller that failed to stop left behind
                    await asyncio.to_thread(owners.sweep, client, f"{INSTANCE}-{which}", everything=False)
    except Unavailable as err:
        report.extra.append(
            (title, header, [["B (another controller)", f"skipped: {err}", "", "", "", "", "", "", ""]])
        )
        return
    other, owner = Sample(delivery.on_other), Sample(delivery.on_owner)
    met = report.check(
        other.pct(0.99) <= DELIVERY_TARGET_S,
        f"SSE delivery to another controller p99 {ms(other.pct(0.99))} > {ms(DELIVERY_TARGET_S)}",
    )
    common = f"PostgreSQL {version} ({_where(url)}); 2 × cubicle serve, one data dir"
    streams = len(delivery.events)
    exact = streams - len(delivery.inexact)
    report.check(
        not delivery.inexact,
        f"SSE on another controller: {streams - exact} of {streams} streams did not hold every event once, in order "
        f"(first: {delivery.inexact[0] if delivery.inexact else ''})",
    )
    rows = [
        [
            "B: another controller (LISTEN/NOTIFY, then a read)",
            common,
            f"{len(other.values):,}",
            ms(other.p50),
            ms(other.pct(0.99)),
            ms(max(other.values)),
            f"{exact} of {streams}",
            f"p99 ≤ {ms(DELIVERY_TARGET_S)}",
            "yes" if met else "**no**",
        ],
        [
            "A: the owner itself (baseline: woken in-process)",
            common,
            f"{len(owner.values):,}",
            ms(owner.p50),
            ms(owner.pct(0.99)),
            ms(max(owner.values)),
            f"{streams} of {streams}",
            "",
            "",
        ],
    ]  # fmt: skip - a table
    rows += [
        [f"  B's stream {i + 1} not exact", what, "", "", "", "", "", "", ""] for i, what in enumerate(delivery.inexact)
    ]
    report.extra.append((title + f" ({'/'.join(str(n) for n in delivery.events)} events)", header, rows))
    report.rows.append(
        Row(
            "SSE delivery, owner's commit → client on another controller",
            other,
            "the same on the owner",
            owner,
            f"p99 ≤ {ms(DELIVERY_TARGET_S)}",
            met,
        )
    )


async def table(report: Report, client: Any, image: str, root: Path, quick: bool) -> None:
    """Add the event-write table and the SSE delivery table to ``report``."""
    await event_writes(report, root, quick)
    await sse_delivery(report, client, image, root, quick)


def main() -> int:
    return section_main("stores", __doc__, "shorter: 2 turns of 1 s per store, 1 session after the warm-up", table)


if __name__ == "__main__":
    sys.exit(main())
