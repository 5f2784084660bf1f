"""A server's answers, read within bounds: what the client takes from a server it was pointed at.

A server may be hostile, or anything on the path of a plain ``http://`` URL may answer for it: an answer of
hundreds of megabytes, or an event stream whose one line never ends, would otherwise be read whole into the
user's memory. So a body is read by streaming, at most ``MAX_ANSWER_BYTES`` (a length announced past it is
refused before a byte is read), and an event stream's lines are split here with each event, its lines
together, at most ``MAX_EVENT_BYTES``. Past either the client raises ``AnswerTooLargeError`` naming the server.
Compressed answers are not asked for (``Accept-Encoding: identity``) and are refused: a few kilobytes of gzip
may inflate to gigabytes before any count could see them.

Time is bounded too (``Deadlines``): httpx's timeout bounds each wait for the next bytes, not the whole read, so a
server dripping a byte every few seconds would hold the client for ever. An answer's body must be whole within
``ANSWER_S`` of its first byte, and an event of a stream within ``EVENT_S`` of its own (the quiet between events is
the read timeout's, which the server's heartbeats keep from expiring). Each is checked as the bytes arrive, so a
server that stops sending is caught by the read timeout instead: past either bound, ``AnswerTooSlowError`` naming
the server.

Bytes are not the only measure: 64 MiB of ``[{},{},…]`` are twenty million objects, gigabytes once built. So
the values of an answer's JSON are counted before one is built (``loads``), at most ``MAX_VALUES``, and so is how
deep its arrays and objects nest, at most ``MAX_DEPTH`` (200 KB of ``[[[…]]]`` would take the parser past Python's
recursion limit: a RecursionError, a traceback). An answer nested deeper, not JSON, or not the API's model of it
(``model``), is ``MalformedAnswerError`` naming the server, never a parser's or pydantic's own exception.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
from httpx_sse import ServerSentEvent, SSEError
from httpx_sse._decoders import SSEDecoder

from .errors import AnswerTooLargeError, AnswerTooSlowError, MalformedAnswerError

MAX_ANSWER_BYTES = 64 << 20
"""The largest answer body the client reads. A real answer is far smaller: a listing of changes carries at most
50,000 of them by default and 16 MiB of their JSON plus 2 MiB of diffs (the server's ``MAX_LISTED_BYTES`` and
``MAX_DIFFS_TOTAL``, ``workspace/changes.py``), a page of sessions 200 records; 64 MiB leaves a server that
lists more room, and keeps the user's memory bounded whatever a server sends."""
MAX_EVENT_BYTES = 64 << 20
"""The largest Server-Sent Event the client reads, its lines together: an event carries at most a tool output of
``event_output_chars`` (1 MiB by default), each character at most a six-byte JSON escape."""
MAX_VALUES = 1_500_000
"""The most JSON values (objects, arrays, strings, numbers...) the client builds from one answer or event: a
listing of 50,000 changes holds 750,000 (15 a change); 1.5 million empty objects take about 100 MiB."""
MAX_DEPTH = 100
"""How deep the arrays and objects of one answer or event may nest: a tool's input nests at most 64 levels
(``agent.model.MAX_INPUT_DEPTH``) inside an event's few. The parser, pydantic and the CLI's printing each recurse
once a level, and Python's recursion limit (1,000) is far off."""
ANSWER_S = 120.0
"""Seconds an answer's body may take, from its first byte to its last: twice the client's default timeout. The
largest real ones (a patch of at most 32 MiB, a listing of about 18 MiB at worst) arrive within it over a link of
2.5 megabits per second or more; a slower link passes a longer one (``Deadlines``)."""
EVENT_S = 120.0
"""Seconds one event of a stream may take, from its first byte to the blank line that ends it: a server writes each
event whole, so a real one takes the time its bytes take on the wire; eight times the server's default heartbeat
interval (``sse_heartbeat_s``, 15 s), which is not an event's but the quiet between them."""
IDENTITY = {"Accept-Encoding": "identity"}
T = TypeVar("T")
_STRING_REST = re.compile(r'[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
"""The rest of a JSON string after its opening quote, through its closing one."""
_BRACKET = re.compile(r"[\[\]{}]")


def loads(data: bytes | str, url: str) -> Any:
    """``data`` as JSON, its values counted and its nesting measured before one is built: past ``MAX_VALUES``,
    AnswerTooLargeError; past ``MAX_DEPTH``, or not JSON (or not UTF-8), MalformedAnswerError. Both name the
    server."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError as err:  # its message names the byte's position, never the answer's text
        raise MalformedAnswerError(f"The server at {url} sent an answer that is not UTF-8 ({err}).") from None
    excess = _excess(text, MAX_VALUES, MAX_DEPTH)
    if excess == "values":
        raise AnswerTooLargeError(
            f"The server at {url} sent an answer of more than {MAX_VALUES:,} JSON values; the client builds no more, "
            "and nothing of it was used."
        )
    if excess == "depth":
        raise MalformedAnswerError(
            f"The server at {url} sent an answer nested more than {MAX_DEPTH} levels deep, which the API never "
            "sends; nothing of it was used."
        )
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as err:  # a JSONDecodeError names a position, never the answer's text
        raise MalformedAnswerError(f"The server at {url} sent an answer that is not JSON ({err}).") from None


def model(read: Callable[[Any], T], value: Any, url: str) -> T:
    """``read(value)`` (the API's model of an answer), a value that is not one a MalformedAnswerError naming the
    server and the first problem (pydantic's message is not shown: it quotes the answer)."""
    from pydantic import ValidationError

    try:
        return read(value)
    except ValidationError as err:
        few = 0 < err.error_count() <= 100  # describing a million problems would take what was refused
        first: dict[str, Any] = dict(err.errors(include_url=False, include_input=False)[0]) if few else {}
        where = ".".join(str(part) for part in first.get("loc", ()))[:200]
        said = f", the first at {where or 'the top'!r}: {str(first['msg'])[:200]}" if first else ""
        raise MalformedAnswerError(
            f"The server at {url} sent an answer that is not the API's ({err.title}: {err.error_count():,} "
            f"problem(s){said})."
        ) from None


def _excess(data: str, limit: int, deepest: int) -> str:
    """What ``data`` holds past the bounds, measured without building a value: ``"values"`` past ``limit`` JSON
    values, ``"depth"`` nested past ``deepest``, else empty. Each value but the outermost follows a ``[``, ``{`` or
    ``,`` outside a string (an object's member its ``{`` or ``,``), so their count bounds the values; the brackets
    outside strings give the nesting, counted a stretch between strings at a time (walked only where it could go
    past: ``_walked``). Linear: every string is skipped once, from its opening quote to its closing one."""
    count, strings, depth, at = 1, 0, 0, 0
    while True:
        quote = data.find('"', at)
        end = len(data) if quote < 0 else quote
        opens = data.count("[", at, end) + data.count("{", at, end)
        count += data.count(",", at, end) + opens
        strings += 1
        if count > limit or strings > 2 * limit + 2:  # a key and a value per member at most, in JSON
            return "values"
        if depth + opens <= deepest:  # it cannot go past here: counted, not walked
            depth = max(0, depth + opens - data.count("]", at, end) - data.count("}", at, end))
        else:
            depth = _walked(data, at, end, depth, deepest)
            if depth > deepest:
                return "depth"
        closed = _STRING_REST.match(data, quote + 1) if quote >= 0 else None
        if closed is None:  # the end, or a string never closed (not JSON: the parser says so)
            return ""
        at = closed.end()


def _walked(data: str, at: int, end: int, depth: int, deepest: int) -> int:
    """The nesting after ``data[at:end]`` (no string in it) entered at ``depth``, walked bracket by bracket (at most
    ``limit`` openers: ``_excess`` counted them), or the first past ``deepest``. A closer below the top stops the
    walk: a parser's value ends before it, and it refuses the rest unread."""
    for bracket in _BRACKET.finditer(data, at, end):
        depth += 1 if bracket.group() in "[{" else -1
        if depth > deepest or depth < 0:
            break
    return max(0, depth)


@dataclass(frozen=True)
class Deadlines:
    """How long the client reads one answer's body, and one event of a stream, before it gives up on the server."""

    answer_s: float = ANSWER_S
    event_s: float = EVENT_S


DEADLINES = Deadlines()


class Clock:
    """A deadline for something a server sends, checked as its bytes arrive (``AnswerTooSlowError`` past it)."""

    def __init__(self, url: str, seconds: float, what: str) -> None:
        self.url = url
        self.seconds = seconds
        self.what = what
        self.end = time.monotonic() + seconds

    def check(self) -> None:
        if time.monotonic() > self.end:
            raise AnswerTooSlowError(
                f"The server at {self.url} took more than {self.seconds:g} s to send {self.what}, which the client "
                "waits for no longer; the connection was closed and nothing of it was used."
            )


def announced(response: httpx.Response, url: str) -> None:
    """Refuse an answer whose announced length or encoding the client will not read (before reading it)."""
    plain(response, url)
    length = response.headers.get("content-length", "")
    if length.isascii() and length.isdigit() and int(length) > MAX_ANSWER_BYTES:
        raise _too_large(url, int(length))


def plain(response: httpx.Response, url: str) -> None:
    """Refuse a compressed answer: its inflated size could not be bounded while it is read."""
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise AnswerTooLargeError(
            f"The server at {url} sent a compressed answer ({encoding}), which the client did not ask for and "
            "does not inflate: its size could not be bounded."
        )


def _too_large(url: str, size: int | None = None) -> AnswerTooLargeError:
    what = f"{size:,} bytes" if size is not None else f"more than {MAX_ANSWER_BYTES >> 20} MiB"
    return AnswerTooLargeError(
        f"The server at {url} sent an answer of {what}; the client reads at most {MAX_ANSWER_BYTES >> 20} MiB, and "
        "nothing of it was used."
    )


class Body:
    """An answer's body, gathered chunk by chunk up to ``MAX_ANSWER_BYTES``."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.data = bytearray()

    def add(self, chunk: bytes) -> None:
        if len(self.data) + len(chunk) > MAX_ANSWER_BYTES:
            raise _too_large(self.url)
        self.data += chunk

    def response(self, streamed: httpx.Response) -> httpx.Response:
        """The answer, read: its status, headers and request, with the body gathered."""
        headers = [(k, v) for k, v in streamed.headers.multi_items() if k.lower() != "content-encoding"]
        return httpx.Response(streamed.status_code, headers=headers, content=bytes(self.data), request=streamed.request)


def read(response: httpx.Response, url: str, seconds: float = ANSWER_S) -> httpx.Response:
    """A streamed answer, read within the bounds: its size, and ``seconds`` for its body."""
    announced(response, url)
    body, clock = Body(url), Clock(url, seconds, "its answer")
    for chunk in response.iter_raw():
        body.add(chunk)
        clock.check()
    return body.response(response)


async def aread(response: httpx.Response, url: str, seconds: float = ANSWER_S) -> httpx.Response:
    """A streamed answer, read within the bounds (asyncio)."""
    announced(response, url)
    body, clock = Body(url), Clock(url, seconds, "its answer")
    async for chunk in response.aiter_raw():
        body.add(chunk)
        clock.check()
    return body.response(response)


class Events:
    """Server-Sent Events from raw chunks: lines split on CR, LF or CRLF, no event longer than the bound, nor slower
    than ``seconds`` from its first byte to its end."""

    def __init__(self, url: str, seconds: float = EVENT_S) -> None:
        self.url = url
        self.seconds = seconds
        self._clock: Clock | None = None
        """The deadline of the event begun and not ended yet."""
        self._parts: list[bytes] = []
        """The line begun and not ended yet, in pieces (joined once, when it ends)."""
        self._pending = 0
        self._event = 0
        """Bytes of the event's lines so far."""
        self._cr = False
        self._decoder = SSEDecoder()

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """The events that ``chunk`` completes."""
        if self._cr and chunk.startswith(b"\n"):  # the LF of a CRLF split across chunks
            chunk = chunk[1:]
        if not chunk:
            return []
        self._cr = chunk.endswith(b"\r")
        *ended, rest = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
        found = []
        if ended:
            ended[0] = b"".join((*self._parts, ended[0]))
            self._parts, self._pending = [], 0
            ended.reverse()
            while ended:  # each line let go of as it is read: an event's text is held as few times as can be
                event = self._line(ended.pop())
                if event is not None:
                    found.append(event)
        self._begin(rest)
        self._timed()
        return found

    def _timed(self) -> None:
        """Start the deadline of an event just begun, or check the one of an event still unfinished."""
        if not (self._pending or self._event):
            self._clock = None
        elif self._clock is None:
            self._clock = Clock(self.url, self.seconds, "one event of its event stream")
        else:
            self._clock.check()

    def _begin(self, piece: bytes) -> None:
        self._check(self._pending + len(piece))
        self._parts.append(piece)
        self._pending += len(piece)

    def _check(self, size: int) -> None:
        if self._event + size > MAX_EVENT_BYTES:
            raise AnswerTooLargeError(
                f"The server at {self.url} sent an event longer than the client reads ({MAX_EVENT_BYTES >> 20} MiB) "
                "in its event stream; the stream was closed."
            )

    def _line(self, line: bytes) -> ServerSentEvent | None:
        self._check(len(line))
        self._event = 0 if not line else self._event + len(line) + 1
        if not line:  # the event ends: the next one's deadline starts with its first byte
            self._clock = None
        text = line.decode("utf-8", errors="replace")
        del line
        return self._decoder.decode(text)


def check_stream(response: httpx.Response, url: str) -> None:
    """Refuse an answer that is not an event stream (httpx_sse's error), or is compressed."""
    kind = response.headers.get("content-type", "").partition(";")[0]
    if "text/event-stream" not in kind:
        raise SSEError(f"Expected response header Content-Type to contain 'text/event-stream', got {kind!r}")
    plain(response, url)


def events(response: httpx.Response, url: str, seconds: float = EVENT_S) -> Iterator[ServerSentEvent]:
    """The stream's events, within the bounds."""
    check_stream(response, url)
    source = Events(url, seconds)
    for chunk in response.iter_raw():
        yield from source.feed(chunk)


async def aevents(response: httpx.Response, url: str, seconds: float = EVENT_S) -> AsyncIterator[ServerSentEvent]:
    """The stream's events, within the bounds (asyncio)."""
    check_stream(response, url)
    source = Events(url, seconds)
    async for chunk in response.aiter_raw():
        for event in source.feed(chunk):
            yield event
