"""The toolbox channel over a socket pair standing in for Docker's multiplexed attach stream (``sandbox.attach``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
from collections.abc import AsyncIterator

import pytest

from controller.errors import ToolboxGoneError
from controller.sandbox.attach import AttachStream
from controller.sandbox.channel import ToolboxChannel
from controller.wire import protocol


def frame(kind: int, payload: bytes) -> bytes:
    return struct.pack(">BxxxI", kind, len(payload)) + payload


class FakeEngine:
    """The far side: reads requests, writes framed stdout/stderr."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    async def requests(self, count: int) -> list[dict[str, object]]:
        loop = asyncio.get_running_loop()
        data = b""
        while data.count(b"\n") < count:
            data += await loop.sock_recv(self.sock, 65536)
        return [json.loads(line) for line in data.splitlines()]

    async def send(self, kind: int, payload: bytes) -> None:
        await asyncio.get_running_loop().sock_sendall(self.sock, frame(kind, payload))


@pytest.fixture
async def pair() -> AsyncIterator[tuple[ToolboxChannel, FakeEngine]]:
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    channel = ToolboxChannel(await AttachStream.open(ours), max_line=1 << 20)
    yield channel, FakeEngine(theirs)
    await channel.close()
    theirs.close()


async def test_answers_are_matched_by_id_in_any_order(pair: tuple[ToolboxChannel, FakeEngine]) -> None:
    channel, engine = pair
    first = asyncio.create_task(channel.request(protocol.call("read_file", path="a"), 5))
    second = asyncio.create_task(channel.request(protocol.call("read_file", path="b"), 5))
    sent = await engine.requests(2)
    by_path = {r["args"]["path"]: r["id"] for r in sent}  # type: ignore[index]
    answer_b = json.dumps({"id": by_path["b"], "ok": True, "result": {"x": "b"}}).encode()
    answer_a = json.dumps({"id": by_path["a"], "ok": True, "result": {"x": "a"}}).encode()
    await engine.send(1, answer_b + b"\n" + answer_a[:10])  # a line split across frames
    await engine.send(2, b"diagnostics on stderr")
    await engine.send(1, answer_a[10:] + b"\n")
    assert (await first).result == {"x": "a"} and (await second).result == {"x": "b"}
    assert "diagnostics" in channel.stderr_tail


async def test_end_of_stream_fails_every_pending_call(pair: tuple[ToolboxChannel, FakeEngine]) -> None:
    channel, engine = pair
    pending = asyncio.create_task(channel.request(protocol.call("run_command", command="x"), 5))
    await engine.requests(1)
    engine.sock.close()
    with pytest.raises(ToolboxGoneError, match="exited"):
        await pending
    assert not channel.alive
    with pytest.raises(ToolboxGoneError):
        await channel.request(protocol.call("ping"), 5)


async def test_silence_is_a_timeout(pair: tuple[ToolboxChannel, FakeEngine]) -> None:
    channel, _ = pair
    with pytest.raises(TimeoutError):
        await channel.request(protocol.call("ping"), 0.05)
    assert channel.alive


async def test_an_endless_line_closes_the_channel_instead_of_growing(pair: tuple[ToolboxChannel, FakeEngine]) -> None:
    channel, engine = pair  # the fixture's channel takes lines of at most 1 MiB
    pending = asyncio.create_task(channel.request(protocol.call("ping"), 5))
    await engine.requests(1)
    await engine.send(1, b'{"id":')  # looks like a response, then never ends
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the channel hangs up on us
        for _ in range(20):
            await engine.send(1, b"x" * 65536)
    with pytest.raises(ToolboxGoneError, match="without a line break"):
        await pending
    assert not channel.alive


@pytest.mark.parametrize("garbage", [b"not json\n", b"x", b'{"id":1,"ok":tru\n', b"\n", b'{"i{'])
async def test_anything_but_a_response_closes_the_channel_at_once(
    pair: tuple[ToolboxChannel, FakeEngine], garbage: bytes
) -> None:
    """A sandbox that reaches the toolbox's stream loses its own channel: pending calls fail now, not at their deadline."""
    channel, engine = pair
    pending = asyncio.create_task(channel.request(protocol.call("run_command", command="sleep 60"), 60))
    await engine.requests(1)
    await engine.send(1, garbage)
    with pytest.raises(ToolboxGoneError, match="not a toolbox response"):
        await asyncio.wait_for(pending, 2)
    assert not channel.alive


async def test_garbage_after_answers_keeps_the_answers(pair: tuple[ToolboxChannel, FakeEngine]) -> None:
    channel, engine = pair
    first = asyncio.create_task(channel.request(protocol.call("ping"), 5))
    second = asyncio.create_task(channel.request(protocol.call("ping"), 5))
    sent = await engine.requests(2)
    answer = json.dumps({"id": sent[0]["id"], "ok": True, "result": {"pid": 1, "uid": 2}}).encode()
    await engine.send(1, answer + b"\n" + json.dumps({"id": 12345, "ok": True, "result": {}}).encode() + b"\nrubbish")
    assert (await first).result == {"pid": 1, "uid": 2}  # an unknown id is ignored
    with pytest.raises(ToolboxGoneError):
        await second


async def test_receiving_is_linear_in_the_bytes_received() -> None:
    """A long unfinished line that grows by one byte per frame: each byte is looked at a bounded number of times."""
    from controller.sandbox.channel import _Lines

    lines = _Lines(64 << 20)
    assert list(lines.feed(b'{"id":' + b"x" * (8 << 20))) == []
    for _ in range(20_000):  # quadratic rescanning would touch 160 GB here; linear touches 20 kB
        assert list(lines.feed(b"x")) == []
    (line,) = lines.feed(b"\n")
    assert len(line) == 6 + (8 << 20) + 20_000


async def test_a_cancelled_command_returns_its_output_so_far(pair: tuple[ToolboxChannel, FakeEngine]) -> None:
    """Cancelling an interruptible call sends `cancel` for its id and hands back the toolbox's partial answer."""
    channel, engine = pair
    running = asyncio.create_task(channel.request(protocol.call("run_command", command="x"), 60))
    (sent,) = await engine.requests(1)
    running.cancel()
    cancel = (await engine.requests(1))[0]
    assert cancel["op"] == "cancel" and cancel["args"] == {"id": sent["id"]}
    partial = {"exit_code": 137, "cancelled": True}
    await engine.send(1, json.dumps({"id": sent["id"], "ok": True, "result": partial}).encode() + b"\n")
    assert (await running).result == partial
    assert channel.alive


async def test_a_cancel_the_toolbox_does_not_answer_still_cancels(pair: tuple[ToolboxChannel, FakeEngine]) -> None:
    channel, engine = pair
    running = asyncio.create_task(channel.request(protocol.call("run_command", command="x"), 60))
    await engine.requests(1)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    reads = asyncio.create_task(channel.request(protocol.call("ping"), 60))  # not interruptible: cancels plainly
    await engine.requests(2)
    reads.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reads


async def test_live_output_reaches_its_requests_feed_before_the_answer(pair: tuple[ToolboxChannel, FakeEngine]) -> None:
    channel, engine = pair
    pieces: list[tuple[str, bool]] = []
    command = protocol.call("run_command", command="make", live_output=100)
    running = asyncio.create_task(channel.request(command, 5, lambda text, cut: pieces.append((text, cut))))
    (sent,) = await engine.requests(1)
    rid = sent["id"]
    lines = [
        {"id": rid, "output": {"text": "one\n", "truncated": False}},
        {"id": 999, "output": {"text": "nobody's", "truncated": False}},  # no such request: dropped
        {"id": rid, "output": {"text": "two\n", "truncated": True}},
        {"id": rid, "ok": True, "result": {"x": 1}},
    ]
    compact = (json.dumps(line, separators=(",", ":")).encode() + b"\n" for line in lines)  # as the toolbox writes
    await engine.send(1, b"".join(compact))
    response = await running
    assert response.ok and response.result == {"x": 1}
    assert pieces == [("one\n", False), ("two\n", True)]
    assert channel.alive


async def test_a_malformed_piece_of_output_closes_the_channel(pair: tuple[ToolboxChannel, FakeEngine]) -> None:
    channel, engine = pair
    running = asyncio.create_task(channel.request(protocol.call("run_command", command="x"), 5, lambda *_: None))
    (sent,) = await engine.requests(1)
    await engine.send(1, json.dumps({"id": sent["id"], "output": {"text": 5}}, separators=(",", ":")).encode() + b"\n")
    with pytest.raises(ToolboxGoneError, match="not a toolbox response"):
        await running
    assert not channel.alive
