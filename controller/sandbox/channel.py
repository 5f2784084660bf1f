"""The toolbox channel: JSON lines over the toolbox's stdio, whatever backend carries it.

A backend's launcher hands the channel a ``ToolboxStream``: the toolbox's stdout and
stderr, each piece marked with the stream it came from, and its stdin. How the backend
frames them (Docker's multiplexed attach stream: ``sandbox.attach``) is the stream's
business, not the channel's. Stdout carries the toolbox's responses, one JSON object
per line; stderr carries its diagnostics. The channel runs on the event loop with no
thread per call, which keeps a round trip to a couple of milliseconds; ids let many
calls share it.

Only the toolbox may write to its stdout. Anything else found there (a line that
does not start like a response, is not one, or never ends) means the sandbox reached
the stream: the channel closes at once, every pending call fails, and the sandbox is
replaced. Receiving costs time linear in the bytes received, whatever arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Iterator
from typing import Protocol

from ..errors import ToolboxGoneError
from ..wire.protocol import Call, Cancel, CancelArgs, OutputFeed, Progress, Response

log = logging.getLogger(__name__)

_STDERR_KEEP = 8192
_LINE_START = b'{"id":'
_PROGRESS_KEY = b',"output":'
_PROGRESS_KEY_WITHIN = 32
"""A progress line has its second key just after the id (at most 20 digits): the toolbox writes keys in order."""
CANCEL_WAIT_S = 1.0
MAX_LINE = 64 << 20  # far above any real response (two 1 MiB streams, JSON-escaped); anything longer is an attack


class ToolboxStream(Protocol):
    """The toolbox's stdio as a backend carries it: what it wrote, by stream, and its stdin.

    ``receive`` and ``drain`` raise EOFError when the toolbox's side has ended (its sandbox stopped), and
    ConnectionError or OSError when the stream broke; ``close`` hangs up, after which ``receive`` ends.
    """

    async def receive(self) -> tuple[bool, bytes]:
        """The next piece the toolbox wrote, with True for its stdout and False for its stderr."""
        ...

    def write(self, data: bytes) -> None:
        """Queue ``data`` for the toolbox's stdin."""
        ...

    async def drain(self) -> None:
        """Wait until what was written has been handed on (backpressure)."""
        ...

    def close(self) -> None: ...


class _Garbage(Exception):
    """The stream holds something the toolbox never writes: the sandbox is writing into it."""


class _Lines:
    """Cuts the stdout stream into lines, looking at each received byte a bounded number of times.

    Every toolbox line starts with ``{"id":``; a line that starts otherwise, or grows past
    ``max_line``, is garbage, found as soon as its first bytes (or the limit) arrive.
    """

    def __init__(self, max_line: int) -> None:
        self._max_line = max_line
        self._partial = bytearray()

    def feed(self, data: bytes) -> Iterator[bytes]:
        """The lines ``data`` completes, in order; raises _Garbage at the first sign of a foreign writer."""
        start = 0
        while (end := data.find(b"\n", start)) != -1:
            self._partial += data[start:end]
            line = bytes(self._partial)
            self._partial.clear()
            start = end + 1
            if not line.startswith(_LINE_START):
                raise _Garbage(f"a line that is not a toolbox response ({line[:40]!r})")
            yield line
        self._partial += data[start:]
        head = bytes(self._partial[: len(_LINE_START)])
        if not _LINE_START.startswith(head):
            raise _Garbage(f"a line that is not a toolbox response ({bytes(self._partial[:40])!r})")
        if len(self._partial) > self._max_line:
            raise _Garbage(f"more than {self._max_line} bytes without a line break")


class ToolboxChannel:
    """Sends requests to one toolbox and matches its responses by id."""

    def __init__(self, stream: ToolboxStream, max_line: int = MAX_LINE) -> None:
        self._stream = stream
        self._max_line = max_line
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Response]] = {}
        self._feeds: dict[int, OutputFeed] = {}
        self._stderr = bytearray()
        self._closed_reason: str | None = None
        self._task = asyncio.create_task(self._read_loop(), name="toolbox-channel")

    @property
    def alive(self) -> bool:
        return self._closed_reason is None

    @property
    def stderr_tail(self) -> str:
        """The last few KiB the toolbox wrote to stderr, for error messages."""
        return self._stderr.decode("utf-8", "replace")

    async def request(self, call: Call, timeout: float, on_output: OutputFeed | None = None) -> Response:
        """Send one request and wait for its response; raises ToolboxGoneError or TimeoutError. Output the command
        sends while it runs goes to ``on_output`` (called on the event loop, so it must not block).

        For an ``interruptible`` call (a command), cancelling the caller asks the toolbox to stop it and
        returns what it answered (the output so far) instead of raising, if that answer comes within
        CANCEL_WAIT_S; the caller then sees ``current_task().cancelling()`` and must re-raise.
        """
        if self._closed_reason is not None:
            raise ToolboxGoneError(self._closed_reason)
        rid = next(self._ids)
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._pending[rid] = future
        if on_output is not None:
            self._feeds[rid] = on_output
        try:
            self._send(call.model_copy(update={"id": rid}))
            try:
                async with asyncio.timeout(timeout):
                    await self._stream.drain()
                    return await asyncio.shield(future)
            except asyncio.CancelledError:
                if not call.interruptible or future.done() or self._closed_reason is not None:
                    raise
                return await self._interrupt(rid, future)
        except TimeoutError:
            raise  # a subclass of OSError, but a deadline, not a broken stream
        except (ConnectionError, OSError) as err:
            raise ToolboxGoneError(f"the toolbox stream broke: {err}") from None
        finally:
            self._pending.pop(rid, None)
            self._feeds.pop(rid, None)

    def _send(self, call: Call) -> None:
        self._stream.write(call.model_dump_json().encode() + b"\n")

    async def _interrupt(self, rid: int, future: asyncio.Future[Response]) -> Response:
        """Ask the toolbox to stop request ``rid`` and wait briefly for its (partial) answer."""
        self._send(Cancel(id=next(self._ids), args=CancelArgs(id=rid)))
        try:
            async with asyncio.timeout(CANCEL_WAIT_S):
                return await asyncio.shield(future)
        except TimeoutError:
            raise asyncio.CancelledError from None

    async def close(self) -> None:
        self._fail_all("the sandbox was stopped")
        self._task.cancel()
        with contextlib.suppress(Exception):
            self._stream.close()
        with contextlib.suppress(BaseException):
            await self._task

    async def _read_loop(self) -> None:
        lines = _Lines(self._max_line)
        try:
            while True:
                stdout, payload = await self._stream.receive()
                if not stdout:
                    self._keep_stderr(payload)
                    continue
                for line in lines.feed(payload):
                    self._resolve(line)
        except _Garbage as err:
            self._fail_all(f"the sandbox wrote {err} into the toolbox's stream")
            self._stream.close()
        except EOFError:
            self._fail_all("the toolbox exited (its container stopped, was killed, or ran out of memory)")
        except (ConnectionError, OSError) as err:
            self._fail_all(f"the toolbox stream broke: {err}")

    def _resolve(self, line: bytes) -> None:
        if line.find(_PROGRESS_KEY, len(_LINE_START), _PROGRESS_KEY_WITHIN) != -1:
            self._progress(line)
            return
        try:
            response = Response.model_validate_json(line)
        except ValueError:
            raise _Garbage(f"a line that is not a toolbox response ({line[:40]!r})") from None
        future = self._pending.get(response.id) if response.id is not None else None
        if future is not None and not future.done():
            future.set_result(response)
        elif response.error is not None:
            log.warning("toolbox: %s", response.error.message)

    def _progress(self, line: bytes) -> None:
        """A piece of a running command's output, to its request's feed; one nobody waits for is dropped."""
        try:
            progress = Progress.model_validate_json(line)
        except ValueError:
            raise _Garbage(f"a line that is not a toolbox response ({line[:40]!r})") from None
        feed = self._feeds.get(progress.id)
        if feed is not None:
            try:
                feed(progress.output.text, progress.output.truncated)
            except Exception:  # a display's bug must not take the channel down
                log.exception("the live output of toolbox request %d failed", progress.id)

    def _keep_stderr(self, payload: bytes) -> None:
        self._stderr += payload
        del self._stderr[:-_STDERR_KEEP]
        log.debug("toolbox stderr: %s", payload.decode("utf-8", "replace").rstrip())

    def _fail_all(self, reason: str) -> None:
        if self._closed_reason is None:
            self._closed_reason = reason
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ToolboxGoneError(reason))
