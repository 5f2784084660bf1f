"""Cubicle's sandbox as an MCP server: the agent's six tools, called by another agent, in one session's container.

``ToolSession`` is the part that is ours: one recorded session (started like a ``cubicle
run``, so ``cubicle changes``/``apply`` and the viewer work on it) whose tool calls come from
outside instead of from Cubicle's own model. Each call goes through ``tools.execute``, so its
validation, limits, truncation and result text are exactly the agent's, and is recorded as a
``tool_call``/``tool_result`` pair. MCP sessions have no turns: the workspace layer is
checkpointed every ``CHECKPOINT_EVERY`` calls and when the client goes, and the changes stay
for review; the container is removed then.

``server`` wraps it in the official ``mcp`` SDK's low-level server (the tool list is
``tools.definitions()``, unchanged; a failed call is a result with ``isError``), and
``serve_stdio`` runs that over stdin/stdout. Nothing else may write to stdout while it runs:
it is the protocol's channel.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import re
from collections.abc import AsyncIterator
from typing import Any, TypeVar

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from ..agent import tools
from ..errors import EntryLimitError, SandboxError, SetupError
from ..sandbox.docker import Sandbox
from ..wire.events import ErrorEvent, EventSink, SessionFinished, ToolCall, ToolResult
from ..wire.sessions import SessionRecord
from ..workspace.manager import Workspaces, record_changes

log = logging.getLogger(__name__)
T = TypeVar("T")

CHECKPOINT_EVERY = 50
"""Tool calls between checkpoints of the layer (there are no turns to end)."""
SERVER_NAME = "cubicle"
INSTRUCTIONS = (
    "Every tool runs inside an isolated Linux container that sees the repository at /workspace. "
    "Writes go to the session's own layer, never to the user's checkout: the user reviews them "
    "(cubicle changes ID --diff) and applies them (cubicle apply ID) after you are done."
)


class _Gate:
    """Tool calls run side by side; a checkpoint waits for the running ones to end and holds new ones back."""

    def __init__(self) -> None:
        self._running = 0
        self._drained = asyncio.Event()
        self._drained.set()
        self._open = asyncio.Event()
        self._open.set()

    @contextlib.asynccontextmanager
    async def call(self) -> AsyncIterator[None]:
        while not self._open.is_set():
            await self._open.wait()
        self._running += 1
        self._drained.clear()
        try:
            yield
        finally:
            self._running -= 1
            if self._running == 0:
                self._drained.set()

    @contextlib.asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        while not self._open.is_set():
            await self._open.wait()
        self._open.clear()
        try:
            await self._drained.wait()
            yield
        finally:
            self._open.set()


async def _finished(task: asyncio.Task[T], cancel: bool) -> T:
    """``task``'s result, even when the caller is cancelled meanwhile: then ``task`` is cancelled once (if ``cancel``)
    and waited for before the cancellation goes on. anyio, under which the SDK runs handlers, cancels again at
    every await (its cancellation is level-triggered), so the wait is in a shielded scope."""
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        if cancel:
            task.cancel()
        with anyio.CancelScope(shield=True):
            await asyncio.wait([task])
        raise


class ToolSession:
    """One recorded session whose tool calls come from an MCP client; ``close`` ends it and keeps its changes."""

    def __init__(
        self, record: SessionRecord, sink: EventSink, sandbox: Sandbox, workspaces: Workspaces, idle_s: float
    ) -> None:
        """``sink`` is the session's recorder: every call is committed before the client gets its result. After
        ``idle_s`` without a call the container is removed (as the API does between turns); the next call starts
        a fresh one on the same layer."""
        self.record = record
        self.idle_s = idle_s
        self._idle: asyncio.Task[None] | None = None
        self._rested_at = 0.0
        self.sandbox = sandbox
        self.workspaces = workspaces
        self.sink = sink
        self.calls = 0
        self._next_checkpoint = CHECKPOINT_EVERY
        self._ids = itertools.count(1)
        self._gate = _Gate()
        self._warm: asyncio.Task[None] | None = None
        self._setup_failure: str | None = None
        self._closed = False

    @property
    def id(self) -> str:
        return self.record.id

    def warm(self) -> None:
        """Start preparing the environment and the container now; the first call waits for it."""
        if self._warm is None:
            self._warm = asyncio.create_task(self._start())

    async def _start(self) -> None:
        try:
            await self.sandbox.start()
            self._rest()
        except SetupError as err:  # a setup that failed fails every call the same way; it is not run again
            self._setup_failure = str(err)
            await self.sink.emit(ErrorEvent(session_id=self.id, kind="setup", message=str(err)))
        except SandboxError as err:  # the next call tries to start a container again
            await self.sink.emit(ErrorEvent(session_id=self.id, kind="sandbox", message=str(err)))

    async def call(self, name: str, arguments: dict[str, Any] | None) -> tools.ToolOutcome:
        """Run one tool call as the agent would (the same checks, limits and result text) and record it."""
        if self._closed:
            return tools.ToolOutcome("This session has ended.", "This session has ended.", True, 0.0)
        self.warm()
        assert self._warm is not None
        await asyncio.shield(self._warm)
        call_id = f"mcp_{next(self._ids)}"
        async with self._gate.call():
            # The client may cancel the request (or go away). The call is then cancelled once, so the sandbox
            # kills the command and returns its output, which is recorded.
            outcome = await _finished(asyncio.create_task(self._recorded(call_id, name, arguments or {})), cancel=True)
        if self.calls >= self._next_checkpoint:
            self._next_checkpoint = (self.calls // CHECKPOINT_EVERY + 1) * CHECKPOINT_EVERY  # after 50, 100, ...
            await _finished(asyncio.create_task(self.checkpoint()), cancel=False)  # a checkpoint is never cut short
        self._rest()
        return outcome

    def _rest(self) -> None:
        """Remove the container once no call has come for ``idle_s``: the clock restarts with every call (one
        timer task for the session, not one per call: a call only notes its time)."""
        self._rested_at = asyncio.get_running_loop().time()
        if self._idle is None or self._idle.done():
            self._idle = asyncio.create_task(self._stop_when_idle())

    async def _stop_when_idle(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._closed:
            left = self._rested_at + self.idle_s - loop.time()
            if left > 0:
                await asyncio.sleep(left)
                continue
            async with self._gate.exclusive():  # no call runs meanwhile; the next one starts a container again
                if loop.time() - self._rested_at >= self.idle_s:  # no call ended while the running ones drained
                    await self.sandbox.stop()
                    return

    async def _recorded(self, call_id: str, name: str, arguments: dict[str, Any]) -> tools.ToolOutcome:
        await self.sink.emit(ToolCall(session_id=self.id, id=call_id, name=name, input=arguments))
        try:
            outcome = await self._execute(name, arguments)
        finally:
            self.calls += 1
        await self.sink.emit(
            ToolResult(
                session_id=self.id, id=call_id, name=name, is_error=outcome.is_error, output=outcome.text,
                model_chars=len(outcome.model_text), duration_s=round(outcome.duration_s, 4),
                exit_code=outcome.exit_code,
            )
        )  # fmt: skip
        return outcome

    async def _execute(self, name: str, arguments: dict[str, Any]) -> tools.ToolOutcome:
        if self._setup_failure is not None:
            text = f"The sandbox's environment could not be prepared, so no tool can run: {self._setup_failure}"
            return tools.ToolOutcome(text, text, True, 0.0)
        try:
            outcome = await tools.execute(name, arguments, self.sandbox, self.record.limits)
            if name == "run_command":
                await self.sandbox.check_names()
            return outcome
        except EntryLimitError as err:  # the call ran; what it made is past the session's limit
            text = f"{outcome.text}\n\n[Cubicle] {err} Delete what is not needed before going on."
            model_text = f"{outcome.model_text}\n\n[Cubicle] {err}"
            return tools.ToolOutcome(text, model_text, True, outcome.duration_s, outcome.exit_code)
        except SandboxError as err:
            text = f"The sandbox could not start, so the call did not run: {err}"
            return tools.ToolOutcome(text, text, True, 0.0)

    async def checkpoint(self) -> None:
        """Keep the layer as a checkpoint and record its changes, between calls."""
        async with self._gate.exclusive():
            await record_changes(self.workspaces, self.id, self.sink)

    async def close(self, detail: str) -> None:
        """The client is gone: checkpoint, record the end (the session becomes idle), remove the container."""
        if self._closed:
            return
        self._closed = True
        if self._idle is not None:
            self._idle.cancel()
        try:
            if self._warm is not None and not self._warm.done():
                self._warm.cancel()
                with contextlib.suppress(BaseException):
                    await self._warm
            await self.checkpoint()
            reason = "error" if self._setup_failure is not None else "end_turn"
            shown = self._setup_failure or detail
            await self.sink.emit(
                SessionFinished(session_id=self.id, reason=reason, steps=0, usage=self.record.usage, detail=shown)
            )
        finally:
            await self.sandbox.stop()


def tool_list() -> list[types.Tool]:
    """The agent's tools as MCP tools: the same names, descriptions and argument schemas."""
    return [
        types.Tool(
            name=definition["name"],
            description=definition["description"],
            input_schema=definition["input_schema"],
            annotations=types.ToolAnnotations(
                read_only_hint=tools.is_read_only(definition["name"]),
                destructive_hint=False,  # writes go to the session's layer, never the checkout
                open_world_hint=False,
            ),
        )
        for definition in tools.definitions()
    ]


def server(session: ToolSession, version: str) -> Server[Any]:
    """The MCP server of ``session``: ``tools/list`` and ``tools/call``, nothing else."""
    listed = types.ListToolsResult(tools=tool_list())

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return listed

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        outcome = await session.call(params.name, params.arguments)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=outcome.model_text)], is_error=outcome.is_error
        )

    return Server(
        SERVER_NAME, version=version, instructions=INSTRUCTIONS, on_list_tools=list_tools, on_call_tool=call_tool
    )


async def serve_stdio(session: ToolSession, version: str) -> None:
    """Serve ``session`` over stdin/stdout until the client closes stdin."""
    mcp = server(session, version)
    async with _stdio() as (read, write):
        await mcp.run(read, write, mcp.create_initialization_options())


MAX_MESSAGE = 128 * 1024 * 1024
"""The longest JSON-RPC line read: an edit_file's two 10 MiB strings, JSON-escaped, fit several times over."""


class _Lines:
    """The client's lines, read by the event loop itself (the SDK's own stdio reads and writes in worker threads)."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> str:
        try:
            line = await self._reader.readline()
        except ValueError:  # longer than MAX_MESSAGE: dropped, and answered as a line that is not JSON
            return "(a message longer than the server reads)\n"
        if not line:
            raise StopAsyncIteration
        text = line.decode("utf-8", "replace")
        return _without_lone_surrogates(text) if "\\u" in text else text


LONE_SURROGATE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _without_lone_surrogates(line: str) -> str:
    """The line with any lone UTF-16 surrogate escape (``"\\ud800"``, which is valid JSON but no character) made
    U+FFFD, so the SDK's parser takes the message and it is answered; without this the client waits forever."""
    if LONE_SURROGATE.search(line) is None:
        return line
    try:
        message = json.loads(line)
    except ValueError:
        return line  # not JSON at all: the SDK answers that as it does

    def clean(value: Any) -> Any:
        if isinstance(value, str):
            return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        if isinstance(value, list):
            return [clean(item) for item in value]
        if isinstance(value, dict):
            return {clean(key): clean(item) for key, item in value.items()}
        return value

    return json.dumps(clean(message), ensure_ascii=False) + "\n"


class _Writer:
    """Writes replies to the client through the event loop, waiting (without blocking it) when the pipe is full."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    async def write(self, text: str) -> None:
        self._writer.write(text.encode("utf-8"))
        await self._writer.drain()

    async def flush(self) -> None:
        return None


@contextlib.asynccontextmanager
async def _stdio() -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's stdio streams over the event loop's own pipe transports, which cut a tool call's round trip by
    the two thread hand-offs (and the GIL waits after them) of the SDK's reader and writer.

    As the SDK does, fd 0 reads the null device and fd 1 goes to stderr meanwhile, so a stray write cannot corrupt
    the protocol. A stdin or stdout that is not a pipe, socket or terminal (a regular file) gets the SDK's own.
    """
    loop = asyncio.get_running_loop()
    wire_in, wire_out = os.dup(0), os.dup(1)
    saved_in, saved_out = os.dup(0), os.dup(1)
    try:
        reader = asyncio.StreamReader(limit=MAX_MESSAGE)
        source = os.fdopen(wire_in, "rb", buffering=0)
        sink = os.fdopen(wire_out, "wb", buffering=0)
        try:
            await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), source)
            transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, sink)
        except ValueError:  # not a pipe, socket or character device
            source.close()
            sink.close()
            async with stdio_server() as streams:
                yield streams
            return
        writer = asyncio.StreamWriter(transport, protocol, None, loop)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.dup2(2, 1)
        try:
            async with stdio_server(_Lines(reader), _Writer(writer)) as streams:  # type: ignore[arg-type]
                yield streams
        finally:
            writer.close()
    finally:
        os.dup2(saved_in, 0)
        os.dup2(saved_out, 1)
        os.close(saved_in)
        os.close(saved_out)
