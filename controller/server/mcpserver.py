"""Cubicle's sandbox as an MCP server: the agent's six tools, called by another agent, in one session's container.

The session is one ``LiveSession`` running a *served* turn (``served.ServedTurn``): recorded
like a ``cubicle run`` (so ``cubicle changes``/``apply`` and the viewer work on it), its tool
calls made by the MCP client instead of Cubicle's own model, each through the agent's own
recorded call (validation, limits, truncation and result text exactly the agent's). The layer
is checkpointed every ``served.CHECKPOINT_EVERY`` calls and when the client goes, and the
changes stay for review; the container is removed then.

``server`` wraps it in the official ``mcp`` SDK's low-level server (the tool list is
``tools.definitions()``, unchanged; a failed call is a result with ``isError``), and
``serve_stdio`` runs that over stdin/stdout. Nothing else may write to stdout while it runs:
it is the protocol's channel.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
from collections.abc import AsyncIterator
from typing import Any

import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from ..agent import tools
from ..agent.liveoutput import Watch
from ..wire.events import CommandOutput
from ..wire.inert import safe
from .served import ServedTurn

SERVER_NAME = "cubicle"
INSTRUCTIONS = (
    "Every tool runs inside an isolated Linux container that sees the repository at /workspace. "
    "Writes go to the session's own layer, never to the user's checkout: the user reviews them "
    "(cubicle changes ID --diff) and applies them (cubicle apply ID) after you are done."
)


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


PROGRESS_LINE = 200
"""Characters of a command's last line that a progress notification carries as its message."""


def progress_of(ctx: Any) -> Watch | None:
    """A command's live output as the client's progress notifications, when its request carried a progress token:
    the characters printed so far, and the last line printed, every character a display acts on or draws as nothing
    spelled out (the table every display of Cubicle shares)."""
    meta = ctx.meta or {}
    token = meta.get("progress_token", meta.get("progressToken"))
    if not isinstance(token, str | int):
        return None
    printed = 0

    async def report(event: CommandOutput) -> None:
        nonlocal printed
        printed += len(event.text)
        lines = [line for line in event.text.splitlines() if line.strip()]
        message = safe(lines[-1][-PROGRESS_LINE:]) if lines else ""  # a client shows it to its user as it is
        if event.truncated:
            message = f"{message} [output truncated for display]".lstrip()
        await ctx.session.send_progress_notification(
            token, printed, None, message or None, related_request_id=ctx.request_id
        )

    return report


def server(session: ServedTurn, version: str) -> Server[Any]:
    """The MCP server of ``session``: ``tools/list`` and ``tools/call``, nothing else."""
    listed = types.ListToolsResult(tools=tool_list())

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return listed

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        outcome = await session.call(params.name, params.arguments, progress_of(ctx))
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=outcome.model_text)], is_error=outcome.is_error
        )

    return Server(
        SERVER_NAME, version=version, instructions=INSTRUCTIONS, on_list_tools=list_tools, on_call_tool=call_tool
    )


async def serve_stdio(session: ServedTurn, version: str) -> None:
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
