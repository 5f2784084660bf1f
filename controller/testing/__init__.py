"""Test doubles that ship with Cubicle, for its own tests and for yours.

``container.CubicleContainer`` (the ``testing`` extra: testcontainers) is the controller image with the Docker
socket and a ready API. ``MemorySandbox`` runs the agent loop with no container at all: files live in a
dict and commands are answered from a table (never executed: a scenario is model output,
and model output does not run on the host). ``NoSandbox`` refuses every call, for API tests
that never reach a tool. Nothing in Settings, the CLI or the API can select any of them;
code passes them in.
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass
from typing import Any

from ..errors import TooManyEntriesError
from ..wire.protocol import (
    Call,
    CommandResult,
    EditFileArgs,
    EditResult,
    Entry,
    Failure,
    ListFilesArgs,
    ListResult,
    Outcome,
    OutputFeed,
    PingResult,
    ReadFileArgs,
    ReadResult,
    RunCommandOptions,
    SearchOptions,
    SearchResult,
    Stream,
    WriteFileArgs,
    WriteResult,
)

LOOPBACK = "http://127.0.0.1"
"""Base URL for an in-process test client of a server without a token: it answers only to a loopback Host."""


class NoSandbox:
    """A sandbox that refuses every call: for tests that never reach a tool."""

    async def prepare(self) -> None:
        return None

    def again(self) -> None:
        return None

    async def start(self) -> None:
        return None

    async def call(self, request: Call, timeout: float, on_output: OutputFeed | None = None) -> Outcome:
        return Failure(kind="unavailable", message="This test runs without a sandbox.")

    async def check_names(self) -> None:
        return None

    async def stop(self) -> None:
        return None


@dataclass(frozen=True)
class Reply:
    """How ``MemorySandbox`` answers one command: what it prints, its exit code, how long it takes."""

    stdout: str = ""
    stderr: str = ""
    exit_code: int = 0
    seconds: float = 0.0


class MemorySandbox:
    """A sandbox in memory: ``files`` maps paths to text, ``commands`` maps a command line to its Reply.

    Results have the toolbox's shapes (numbered lines, ``path:line:text`` matches), so the loop and
    its renderers see what they would see from a container; the toolbox's own semantics (symlinks,
    binary files, process groups) are tested against the real one. A command not in the table
    exits 127. A command outlives its timeout when its Reply's ``seconds`` say so; cancelling the
    caller while it "runs" returns its result with ``cancelled`` set, as the real sandbox does.
    ``calls`` records every request in order. Its workspace's entries are its files, limited to ``names``.
    """

    def __init__(
        self, files: dict[str, str] | None = None, commands: dict[str, Reply] | None = None, names: int | None = None
    ) -> None:
        self.files = dict(files or {})
        self.commands = dict(commands or {})
        self.names = names
        self.calls: list[Call] = []
        self.starts = self.stops = 0

    async def prepare(self) -> None:
        return None

    def again(self) -> None:
        return None

    async def start(self) -> None:
        self.starts += 1

    async def stop(self) -> None:
        self.stops += 1

    async def check_names(self) -> None:
        if self.names is not None and len(self.files) > self.names:
            raise TooManyEntriesError(self.names, f"The workspace holds more than {self.names} entries.")

    async def call(self, request: Call, timeout: float, on_output: OutputFeed | None = None) -> Outcome:
        self.calls.append(request)
        if isinstance(request.args, RunCommandOptions):
            return await self._run(request.args, on_output)
        handler = getattr(self, f"_{request.op}", None)
        if handler is None:
            return Failure(kind="unknown_op", message=f"Unknown operation {request.op!r}.")
        try:
            result: Outcome = handler(request.args)
        except KeyError as err:
            return Failure(
                kind="not_found", message=f"{err.args[0]} does not exist. List the directory to see what is there."
            )
        return result

    def _ping(self, args: Any) -> PingResult:
        return PingResult(pid=1, uid=1000)

    def _read_file(self, args: ReadFileArgs) -> ReadResult:
        text = self.files[args.path]
        lines = text.splitlines()
        shown = lines[args.offset - 1 : args.offset - 1 + args.limit]
        content = "\n".join(f"{args.offset + i:6}\t{line}" for i, line in enumerate(shown))
        truncated = args.offset - 1 + len(shown) < len(lines)
        return ReadResult(
            content=content, first_line=args.offset, lines=len(shown), truncated=truncated, size=len(text.encode())
        )

    def _write_file(self, args: WriteFileArgs) -> WriteResult:
        self.files[args.path] = args.content
        return WriteResult(path=args.path, bytes_written=len(args.content.encode()))

    def _edit_file(self, args: EditFileArgs) -> Outcome:
        text = self.files[args.path]
        count = text.count(args.old_string)
        if count == 0 or (count > 1 and not args.replace_all):
            problem = "was not found" if count == 0 else f"occurs {count} times"
            return Failure(
                kind="not_found" if count == 0 else "not_unique", message=f"old_string {problem} in {args.path}."
            )
        self.files[args.path] = text.replace(args.old_string, args.new_string, -1 if args.replace_all else 1)
        return EditResult(path=args.path, replacements=count if args.replace_all else 1)

    def _list_files(self, args: ListFilesArgs) -> ListResult:
        base = "" if args.path in ("", ".") else args.path.strip("/") + "/"
        found: dict[str, Entry] = {}
        for path, text in self.files.items():
            if not path.startswith(base):
                continue
            parts = path[len(base) :].split("/")
            for level in range(1, min(len(parts), args.depth) + 1):
                name, is_file = base + "/".join(parts[:level]), level == len(parts)
                size = len(text.encode()) if is_file else 0
                found[name] = Entry(path=name, type="file" if is_file else "dir", size=size)
        return ListResult(entries=sorted(found.values(), key=lambda e: e.path), truncated=False)

    def _search(self, args: SearchOptions) -> SearchResult:
        pattern = re.compile(args.pattern)
        base = "" if args.path in ("", ".") else args.path.strip("/")
        hits = [
            f"{path}:{number}:{line}"
            for path, text in sorted(self.files.items())
            if path.startswith(base)
            for number, line in enumerate(text.splitlines(), 1)
            if pattern.search(line)
        ]
        matches = "".join(hit + "\n" for hit in hits)
        return SearchResult(matches=_stream(matches), exit_code=0 if hits else 1, timed_out=False)

    async def _run(self, args: RunCommandOptions, on_output: OutputFeed | None) -> CommandResult:
        reply = self.commands.get(args.command)
        if reply is None:
            name = (args.command.split() or [args.command])[0]
            reply = Reply(stderr=f"bash: line 1: {name}: command not found\n", exit_code=127)
        printed = reply.stdout + reply.stderr
        if on_output is not None and args.live_output and printed:  # all at once, as the toolbox's first piece
            on_output(printed[: args.live_output], len(printed) > args.live_output)
        timed_out = reply.seconds > args.timeout_s
        started = time.monotonic()
        try:
            await asyncio.sleep(min(reply.seconds, args.timeout_s))
        except asyncio.CancelledError:
            return _command(reply, 137, time.monotonic() - started, cancelled=True)
        return _command(reply, 143 if timed_out else reply.exit_code, time.monotonic() - started, timed_out=timed_out)


def _stream(text: str) -> Stream:
    return Stream(text=text, total_bytes=len(text.encode()), truncated=False)


def _command(
    reply: Reply, code: int, seconds: float, timed_out: bool = False, cancelled: bool = False
) -> CommandResult:
    return CommandResult(
        exit_code=code,
        stdout=_stream(reply.stdout),
        stderr=_stream(reply.stderr),
        timed_out=timed_out,
        duration_s=seconds,
        cancelled=cancelled,
    )
