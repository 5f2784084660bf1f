"""The toolbox-speaking sandbox over a launcher that is not Docker's: its stream has no frames at all.

A second backend brings a ``Launcher`` and a ``ToolboxStream``; the calls, the deadlines and the
replacement after a failure are ``ToolboxSandbox``'s. Here the far side is a toolbox written in a
few lines, on queues in this process, that answers ``ping`` and can be told to fall silent or die.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from controller.errors import SandboxError
from controller.sandbox.sandboxes import Deployment, Prepared, Preparer
from controller.sandbox.toolboxes import ToolboxSandbox
from controller.wire import protocol
from controller.wire.limits import Limits
from controller.wire.protocol import Failure, PingResult
from controller.workspace.layer import Layer, LayerInfo


class QueueStream:
    """Stdout and stderr as queue items (no framing), stdin as lines a toolbox task reads."""

    def __init__(self) -> None:
        self.out: asyncio.Queue[tuple[bool, bytes] | None] = asyncio.Queue()
        self.requests: asyncio.Queue[dict[str, object]] = asyncio.Queue()
        self.closed = False
        self.received = 0
        self._pending = b""

    async def receive(self) -> tuple[bool, bytes]:
        piece = await self.out.get()
        if piece is None:
            raise EOFError("the toolbox's side ended")
        return piece

    def write(self, data: bytes) -> None:
        self._pending += data
        *lines, self._pending = self._pending.split(b"\n")
        for line in lines:
            self.received += 1
            self.requests.put_nowait(json.loads(line))

    async def drain(self) -> None:
        if self.closed:
            raise ConnectionResetError("hung up")

    def close(self) -> None:
        self.closed = True
        self.out.put_nowait(None)


class QueueLauncher:
    """Launches toolboxes that answer ``ping`` with their launch's number as pid, until told otherwise."""

    errors: tuple[type[Exception], ...] = ()

    def __init__(self) -> None:
        self.launched: list[QueueStream] = []
        self.images: list[str] = []
        self.discarded = self.abandoned = 0
        self.silent = False  # the next toolbox's answers after its first are never sent
        self._tasks: set[asyncio.Task[None]] = set()

    async def prepare(self, preparer: Preparer) -> Prepared:
        return await preparer(None)

    def adopt(self, ready: Prepared) -> None:
        pass

    async def unprepare(self) -> None:
        pass

    async def launch(self, image: str, env: dict[str, str]) -> QueueStream:
        stream = QueueStream()
        self.launched.append(stream)
        self.images.append(image)
        task = asyncio.create_task(self._toolbox(stream, len(self.launched), self.silent))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return stream

    async def _toolbox(self, stream: QueueStream, pid: int, silent: bool) -> None:
        answered = 0
        while True:
            request = await stream.requests.get()
            stream.out.put_nowait((False, b"toolbox: a request\n"))  # diagnostics on stderr, kept apart
            if silent and answered:
                continue
            answer = {"id": request["id"], "ok": True, "result": {"pid": pid, "uid": 1000}}
            stream.out.put_nowait((True, json.dumps(answer).encode() + b"\n"))
            answered += 1

    async def ready(self) -> None:
        pass

    def refusal(self, err: Exception) -> SandboxError | None:
        return None

    async def discard(self) -> None:
        self.discarded += 1

    async def abandon(self) -> None:
        self.abandoned += 1


def _sandbox(tmp_path: Path, launcher: QueueLauncher) -> ToolboxSandbox:
    layer = Layer(tmp_path, LayerInfo(repo=str(tmp_path / "repo"), uid=1000, gid=1000, dev=0, ino=0))
    deployment = Deployment("an-image", "test")
    return ToolboxSandbox(launcher, layer=layer, session_id="s1", limits=Limits(), deployment=deployment)


async def test_calls_are_answered_over_any_launchers_stream(tmp_path: Path) -> None:
    launcher = QueueLauncher()
    box = _sandbox(tmp_path, launcher)
    first = await box.call(protocol.call("ping"), 5)
    second = await box.call(protocol.call("ping"), 5)
    assert first == PingResult(pid=1, uid=1000) and second == PingResult(pid=1, uid=1000)
    assert len(launcher.launched) == 1 and launcher.images == ["an-image"], "one sandbox serves both calls"
    await box.stop()
    assert launcher.launched[0].closed and launcher.abandoned == 1


async def test_a_silent_toolbox_is_replaced_and_the_next_call_gets_a_fresh_one(tmp_path: Path) -> None:
    launcher = QueueLauncher()
    launcher.silent = True  # it answers the start's ping, then nothing
    box = _sandbox(tmp_path, launcher)
    outcome = await box.call(protocol.call("ping"), 0.2)
    assert isinstance(outcome, Failure) and outcome.kind == "deadline"
    assert box.restarts == 1 and launcher.discarded >= 1 and launcher.launched[0].closed
    launcher.silent = False
    assert await box.call(protocol.call("ping"), 5) == PingResult(pid=2, uid=1000)
    assert launcher.abandoned == 0, "a replacement keeps what the launcher keeps (a proxy)"
    await box.stop()


async def test_a_stream_that_ends_mid_call_is_a_dead_sandbox(tmp_path: Path) -> None:
    launcher = QueueLauncher()
    launcher.silent = True
    box = _sandbox(tmp_path, launcher)
    pending = asyncio.create_task(box.call(protocol.call("ping"), 60))
    async with asyncio.timeout(10):  # only to tell a hang from a pass
        while not launcher.launched or launcher.launched[0].received < 2:  # the start's ping, then the call's
            await asyncio.sleep(0.01)
    launcher.launched[0].out.put_nowait(None)  # the toolbox's side ends: its sandbox stopped or was killed
    outcome = await pending
    assert isinstance(outcome, Failure) and outcome.kind == "sandbox_died" and "exited" in outcome.message
    assert box.restarts == 1 and launcher.discarded >= 1
    await box.stop()
