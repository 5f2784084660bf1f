"""The client bounds what a server sends (issue 44, item 5): a real HTTP server on 127.0.0.1 that answers with a
256 MiB body, or an event stream whose one line never ends, makes the CLI and the client fail clearly, naming
the server, while their memory stays flat; a real listing of 50,000 changes still arrives."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import subprocess
import sys
from collections.abc import Awaitable, Iterator
from pathlib import Path

import pytest

from controller.answers import MAX_ANSWER_BYTES, MAX_DEPTH, Deadlines, Events, loads
from controller.client import AsyncClient, Client
from controller.errors import AnswerTooLargeError, AnswerTooSlowError, MalformedAnswerError, NotFoundError
from controller.wire.changeset import Change, FileType, Kind
from tests.hostile_server import FakeServer, head, send, send_json

MiB = 1 << 20
FLAT = 100 * MiB
"""How much more memory than its ordinary run the client may take while it refuses: the answer it stops at
(64 MiB) and the interpreter's own slack, never the 256 MiB it was sent."""
CLI = Path(sys.executable).parent / "cubicle"


async def huge_body(writer: asyncio.StreamWriter) -> None:
    """256 MiB of a JSON string, chunked: no length announced, so only counting while reading can stop it."""
    writer.write(head("200 OK", "application/json", "Transfer-Encoding: chunked\r\n"))
    chunk = b"a" * MiB
    writer.write(b'%x\r\n{"items": ["\r\n' % len(b'{"items": ["'))
    for _ in range(256):
        writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        await writer.drain()
    writer.write(b"0\r\n\r\n")


async def endless_line(writer: asyncio.StreamWriter) -> None:
    """An event stream whose first line never ends."""
    writer.write(head("200 OK", "text/event-stream"))
    writer.write(b"data: ")
    chunk = b"x" * MiB
    for _ in range(1024):
        writer.write(chunk)
        await writer.drain()


async def announced_gib(writer: asyncio.StreamWriter) -> None:
    """A length of 1 GiB announced, and a few bytes of it sent."""
    writer.write(head("200 OK", "application/json", f"Content-Length: {1 << 30}\r\n") + b'{"items": [')
    await writer.drain()


async def gzipped(writer: asyncio.StreamWriter) -> None:
    """A gzip answer the client did not ask for: 20 KiB that inflate to 20 MiB."""
    body = gzip.compress(b" " * (20 * MiB))
    writer.write(head("200 OK", "application/json", f"Content-Encoding: gzip\r\nContent-Length: {len(body)}\r\n"))
    writer.write(body)
    await writer.drain()


def page(writer: asyncio.StreamWriter) -> Awaitable[None]:
    return send_json(writer, {"items": [], "total": 0, "limit": 50, "offset": 0})


def listing() -> list[object]:
    """50,000 changes as the server sends them (each with a long path, a reason and a short diff)."""
    return [
        Change(
            path=f"src/module_{n // 100:04d}/deeply/nested/package/file_{n:06d}.py",
            kind=Kind.MODIFIED,
            type=FileType.FILE,
            previous=FileType.FILE,
            mode=0o644,
            previous_mode=0o644,
            size=1200,
            diff=f"@@ -1 +1 @@\n-old {n}\n+new {n}\n" if n < 1000 else None,
        ).model_dump(mode="json")
        for n in range(50_000)
    ]


@pytest.fixture
def server() -> Iterator[str]:
    routes = {
        "/v1/sessions": page,
        "/huge/v1/sessions": huge_body,
        "/announced/v1/sessions": announced_gib,
        "/gzip/v1/sessions": gzipped,
        "/v1/sessions/s1/events": endless_line,
        "/v1/sessions/s1/changes": lambda writer: send_json(writer, listing()),
    }
    with FakeServer(routes) as url:
        yield url


def _peak_rss(command: list[str]) -> tuple[int, str, int]:
    """Exit status, stderr and the peak resident memory (bytes) of ``command`` run as a child."""
    process = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "CUBICLE_API_TOKEN": "t", "COLUMNS": "200"},
    )
    assert process.stderr is not None
    with process.stderr:
        stderr = process.stderr.read().decode()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return process.returncode, stderr, usage.ru_maxrss * 1024


def test_the_cli_refuses_a_256_mib_answer_with_flat_memory(server: str) -> None:
    ordinary = _peak_rss([str(CLI), "sessions", "--server", server])
    assert ordinary[0] == 0, ordinary[1]
    code, stderr, peak = _peak_rss([str(CLI), "sessions", "--server", server + "/huge"])
    assert code != 0
    assert f"The server at {server}/huge sent an answer of more than 64 MiB" in " ".join(stderr.split()), stderr
    assert peak - ordinary[2] < FLAT, f"the CLI took {(peak - ordinary[2]) / MiB:.0f} MiB more to refuse it"


GROWTH = """
import json, sys
from controller.client import Client
from controller.errors import AnswerTooLargeError, MalformedAnswerError

def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) * 1024

with Client(sys.argv[1], "t") as client:
    client.sessions()
    before = status("VmRSS")
    try:
        list(client.events("s1"))
        print(json.dumps({"error": None}))
    except AnswerTooLargeError as err:
        print(json.dumps({"error": str(err), "growth": status("VmHWM") - before}))
"""


def test_the_client_refuses_an_endless_event_line_with_flat_memory(server: str) -> None:
    done = subprocess.run([sys.executable, "-c", GROWTH, server], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["error"] is not None and f"The server at {server} sent an event longer than" in found["error"]
    assert found["growth"] < FLAT, f"the client took {found['growth'] / MiB:.0f} MiB more to refuse it"


def test_a_listing_of_50000_changes_still_arrives(server: str) -> None:
    with Client(server, "t") as client:
        changes = client.changes("s1", diff=True)
    assert len(changes) == 50_000 and changes[-1].path.endswith("file_049999.py") and changes[0].diff


def test_an_announced_length_past_the_bound_or_a_compressed_answer_is_refused_unread(server: str) -> None:
    with Client(server + "/announced", "t") as client, pytest.raises(AnswerTooLargeError, match="1,073,741,824 bytes"):
        client.sessions()
    with (
        Client(server + "/gzip", "t") as client,
        pytest.raises(AnswerTooLargeError, match=r"compressed answer \(gzip\)"),
    ):
        client.sessions()


def test_event_lines_split_anywhere_read_as_whole_events() -> None:
    """CR, LF and CRLF end a line, a CRLF may be split between chunks, and an event may span many chunks."""
    stream = b'data: {"a":\r\ndata: 1}\r\n\r\n: comment\nid: 7\ndata: two\r\rdata: three\n\n'
    for size in (1, 2, 3, 7, len(stream)):
        source = Events("http://x")
        found = [e for n in range(0, len(stream), size) for e in source.feed(stream[n : n + size])]
        assert [(e.data, e.id) for e in found] == [('{"a":\n1}', ""), ("two", "7"), ("three", "7")], size


def test_an_event_of_many_short_lines_is_bounded_too() -> None:
    source = Events("http://x")
    line = b"data: " + b"y" * (MiB - 7) + b"\n"
    with pytest.raises(AnswerTooLargeError, match="an event longer than the client reads"):
        for _ in range(MAX_ANSWER_BYTES // MiB + 2):
            source.feed(line)


OBJECTS = 64 * MiB // 3 - 2
"""Empty objects in a body just under the 64 MiB bound: twenty million, gigabytes once built."""


async def flat_objects(writer: asyncio.StreamWriter) -> None:
    """``[{},{},…]``, 64 MiB less a few bytes: within the bytes bound, so only counting its values can stop it."""
    writer.write(head("200 OK", "application/json", "Transfer-Encoding: chunked\r\n"))
    chunk = b"{}," * (MiB // 3)
    writer.write(b"1\r\n[\r\n")
    for _ in range(OBJECTS // (MiB // 3)):
        writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        await writer.drain()
    writer.write(b"3\r\n{}]\r\n0\r\n\r\n")


async def flat_event(writer: asyncio.StreamWriter) -> None:
    """One event of 40 MiB of ``[{},{},…]``: thirteen million objects (the client holds its text a few times over)."""
    writer.write(head("200 OK", "text/event-stream") + b"id: 1\ndata: [")
    chunk = b"{}," * (MiB // 3)
    for _ in range(40):
        writer.write(chunk)
        await writer.drain()
    writer.write(b"{}]\n\n")


async def wrong_event(writer: asyncio.StreamWriter) -> None:
    writer.write(head("200 OK", "text/event-stream") + b'id: 1\ndata: {"type": "nonsense", "seq": 1}\n\n')


def bad_page(writer: asyncio.StreamWriter) -> Awaitable[None]:
    """A page of 700,000 records that are not records: pydantic would describe each of them."""
    return send_json(writer, {"items": [{}] * 700_000, "total": 0, "limit": 50, "offset": 0})


@pytest.fixture
def hostile() -> Iterator[str]:
    routes = {
        "/v1/sessions": page,
        "/flat/v1/sessions": flat_objects,
        "/flat/v1/sessions/s1": lambda writer: send_json(writer, {"status": "done"}),
        "/v1/sessions/s1/events": flat_event,
        "/v1/sessions/s2/events": wrong_event,
        "/bad/v1/sessions": bad_page,
    }
    with FakeServer(routes) as url:
        yield url


ROOMY = 200 * MiB
"""What the client may take beyond its ordinary run to refuse a 64 MiB answer: the answer's bytes and text, never
the objects they would build."""

GROWS = """
import json, sys
from controller.client import Client
from controller.errors import CubicleError

def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) * 1024

with Client(sys.argv[1], "t") as ordinary, Client(sys.argv[1] + sys.argv[2], "t") as client:
    ordinary.sessions()
    before = status("VmRSS")
    try:
        list(client.events(sys.argv[3])) if sys.argv[3] else client.sessions()
        print(json.dumps({"error": None}))
    except CubicleError as err:
        print(json.dumps({"error": type(err).__name__ + ": " + str(err), "growth": status("VmHWM") - before}))
"""


def _grows(url: str, prefix: str = "", session: str = "") -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", GROWS, url, prefix, session], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    found: dict[str, object] = json.loads(done.stdout)
    assert isinstance(found["error"], str), found
    return found


def test_the_cli_refuses_64_mib_of_empty_objects_clearly_with_flat_memory(hostile: str) -> None:
    ordinary = _peak_rss([str(CLI), "sessions", "--server", hostile])
    assert ordinary[0] == 0, ordinary[1]
    code, stderr, peak = _peak_rss([str(CLI), "sessions", "--server", hostile + "/flat"])
    said = " ".join(stderr.split())
    assert code != 0 and "Traceback" not in stderr, stderr
    assert f"The server at {hostile}/flat sent an answer of more than 1,500,000 JSON values" in said, stderr
    assert peak - ordinary[2] < ROOMY, f"the CLI took {(peak - ordinary[2]) / MiB:.0f} MiB more to refuse it"


def test_the_client_refuses_an_event_of_empty_objects_and_a_page_of_bad_records_with_flat_memory(
    hostile: str,
) -> None:
    event = _grows(hostile, session="s1")
    assert str(event["error"]).startswith(f"AnswerTooLargeError: The server at {hostile} sent an answer of more")
    assert isinstance(event["growth"], int) and event["growth"] < ROOMY, event
    records = _grows(hostile, "/bad")
    assert str(records["error"]).startswith(f"MalformedAnswerError: The server at {hostile}/bad sent an answer")
    assert isinstance(records["growth"], int) and records["growth"] < ROOMY, records


def test_an_event_that_is_not_the_apis_is_a_clear_error_naming_the_server(hostile: str) -> None:
    with Client(hostile, "t") as client, pytest.raises(MalformedAnswerError, match=f"The server at {hostile} sent an"):
        list(client.events("s2"))


DEEP = b"[" * 100_000 + b"]" * 100_000
"""The red-team's 200 KB answer (issue 44): Python's parser recursed through it to a RecursionError, a traceback."""


async def deep_event(writer: asyncio.StreamWriter) -> None:
    writer.write(head("200 OK", "text/event-stream") + b"id: 1\ndata: " + DEEP + b"\n\n")
    await writer.drain()


async def deep_error(writer: asyncio.StreamWriter) -> None:
    writer.write(head("404 Not Found", "application/json", f"Content-Length: {len(DEEP)}\r\n") + DEEP)
    await writer.drain()


@pytest.fixture
def deep() -> Iterator[str]:
    routes = {
        "/v1/sessions/s1/changes": lambda writer: send(writer, "application/json", DEEP),
        "/v1/sessions/s1/events": deep_event,
        "/v1/sessions/gone": deep_error,
    }
    with FakeServer(routes) as url:
        yield url


def test_the_cli_refuses_a_deeply_nested_listing_clearly(deep: str) -> None:
    done = subprocess.run(
        [str(CLI), "changes", "s1", "--server", deep],
        capture_output=True,
        text=True,
        env={**os.environ, "CUBICLE_API_TOKEN": "t", "COLUMNS": "200"},
        timeout=120,
        check=False,
    )
    said = " ".join(done.stderr.split())
    assert done.returncode == 4 and "Traceback" not in done.stderr and "RecursionError" not in said, said
    assert f"The server at {deep} sent an answer nested more than {MAX_DEPTH} levels deep" in said, said


def test_the_client_refuses_a_deeply_nested_answer_or_event_naming_the_server(deep: str) -> None:
    nested = f"The server at {deep} sent an answer nested more than {MAX_DEPTH} levels deep"
    with Client(deep, "t") as client:
        with pytest.raises(MalformedAnswerError, match=nested):
            client.changes("s1")
        with pytest.raises(MalformedAnswerError, match=nested):
            list(client.events("s1"))
        with pytest.raises(NotFoundError):  # an error's body nested so deep is no detail: the status still says
            client.get("gone")

    async def asynchronously() -> None:
        async with AsyncClient(deep, "t") as client:
            with pytest.raises(MalformedAnswerError, match=nested):
                await client.changes("s1")

    asyncio.run(asynchronously())


def test_nesting_is_measured_outside_strings_up_to_the_bound() -> None:
    value = loads("[" * MAX_DEPTH + "]" * MAX_DEPTH, "http://x")
    for _ in range(MAX_DEPTH - 1):
        value = value[0]
    assert value == []
    assert loads('{"a": "' + "[" * 5000 + '"}', "http://x") == {"a": "[" * 5000}
    for past in (
        "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1),
        '{"a":' * (MAX_DEPTH + 1) + "1" + "}" * (MAX_DEPTH + 1),
    ):
        with pytest.raises(MalformedAnswerError, match="nested more than"):
            loads(past, "http://x")


DRIPS = 600
"""Bytes a dripping server sends, one every ``DRIP_S``, before it closes: a minute, so a client that does not give up
at its deadline fails this test (the answer ends short) instead of hanging it."""
DRIP_S = 0.1
BOUND_S = 1.0
"""The short deadline a test passes the client; the dripping server takes sixty times longer."""


async def drip(writer: asyncio.StreamWriter, start: bytes, piece: bytes) -> None:
    writer.write(start)
    for _ in range(DRIPS):
        await writer.drain()
        await asyncio.sleep(DRIP_S)
        writer.write(piece)


def dripped_answer(writer: asyncio.StreamWriter) -> Awaitable[None]:
    """The red-team's drip (issue 44): 200 with a length of 1,000,000, then a byte at a time."""
    return drip(writer, head("200 OK", "application/json", "Content-Length: 1000000\r\n") + b"[", b" ")


def dripped_line(writer: asyncio.StreamWriter) -> Awaitable[None]:
    """An event whose one line grows a byte at a time."""
    return drip(writer, head("200 OK", "text/event-stream") + b"id: 1\ndata: ", b"x")


def dripped_lines(writer: asyncio.StreamWriter) -> Awaitable[None]:
    """An event of short whole lines that never ends (no blank line)."""
    return drip(writer, head("200 OK", "text/event-stream") + b"id: 1\n", b"data: x\n")


EVENT = b'id: 1\ndata: {"type": "text", "session_id": "s4", "seq": 1, "ts": 0, "text": "hi"}\n\n'


async def heartbeats_then_an_event(writer: asyncio.StreamWriter) -> None:
    """A quiet stream kept alive by comments (the server's heartbeats) for three deadlines, then an event."""
    writer.write(head("200 OK", "text/event-stream"))
    for _ in range(int(3 * BOUND_S / DRIP_S)):
        writer.write(b": ping\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(DRIP_S)
    writer.write(EVENT)
    await writer.drain()
    await asyncio.sleep(3600)  # the stream stays open: the client leaves once it has its event


@pytest.fixture
def dripping() -> Iterator[str]:
    routes = {
        "/v1/sessions": dripped_answer,
        "/v1/sessions/s1/events": dripped_line,
        "/v1/sessions/s2/events": dripped_lines,
        "/v1/sessions/s4/events": heartbeats_then_an_event,
    }
    with FakeServer(routes) as url:
        yield url


SHORT = Deadlines(answer_s=BOUND_S, event_s=BOUND_S)


def test_an_answer_dripped_a_byte_at_a_time_is_given_up_at_the_deadline_naming_the_server(dripping: str) -> None:
    slow = f"The server at {dripping} took more than 1 s to send its answer"
    with Client(dripping, "t", deadlines=SHORT) as client, pytest.raises(AnswerTooSlowError, match=slow):
        client.sessions()

    async def asynchronously() -> None:
        async with AsyncClient(dripping, "t", deadlines=SHORT) as client:
            with pytest.raises(AnswerTooSlowError, match=slow):
                await client.sessions()

    asyncio.run(asynchronously())


def test_an_event_dripped_a_byte_or_a_line_at_a_time_is_given_up_at_the_deadline(dripping: str) -> None:
    slow = f"The server at {dripping} took more than 1 s to send one event of its event stream"
    with Client(dripping, "t", deadlines=SHORT) as client:
        for session in ("s1", "s2"):
            with pytest.raises(AnswerTooSlowError, match=slow):
                list(client.events(session))

    async def asynchronously() -> None:
        async with AsyncClient(dripping, "t", deadlines=SHORT) as client:
            with pytest.raises(AnswerTooSlowError, match=slow):
                async for _ in client.events("s1"):
                    pass

    asyncio.run(asynchronously())


def test_heartbeats_keep_a_quiet_stream_past_the_event_deadline(dripping: str) -> None:
    with Client(dripping, "t", deadlines=SHORT) as client:
        stream = client.events("s4")
        first = next(stream)
        stream.close()  # type: ignore[attr-defined]
    assert (first.type, first.seq) == ("text", 1)
