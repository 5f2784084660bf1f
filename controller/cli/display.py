"""How the CLI shows a session: a live rich display, or one JSON event per line.

Every string that came from the model or the sandbox goes through ``controller.cli.terminal``
before it reaches the console; nothing here prints such a string as markup or raw.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import json
import os
import sys
import termios
import time
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from ..wire.events import (
    CommandOutput,
    ContextEdited,
    Event,
    SessionFinished,
    SessionStarted,
    SetupOutput,
    TextDelta,
    ToolCall,
    ToolResult,
    UsageEvent,
    UserMessage,
)
from . import terminal

PREVIEW_CHARS = 160
TAGS = {"<stdout>", "</stdout>", "<stderr>", "</stderr>"}
APPROVAL_ROWS = 40
"""At most this many lines of a file's content or an edit's diff are shown for approval..."""
APPROVAL_CHARS = 4000
"""...and at most this many characters of them; what is left out is counted."""
LONG_SPACE_RUN = 8
"""In file content shown for approval, an inner run of this many spaces or more is shown as a count."""
TAIL_LINES = 5
"""Lines of a running command's output shown under the spinner (its result then shows its last RESULT_LINES)."""
RESULT_LINES = 3
"""A finished command's last lines, kept under its result mark: where a test run or a build says how it went."""
TAIL_CHARS = 4096
"""What is kept of a running command's output for those lines."""


REWRITTEN = "⟲ "
"""Marks a line of the tail that a carriage return rewrote: only its last state is shown, so it must not pass for
the whole line (``make\rall tests passed`` shows as ``⟲ all tests passed``)."""


def tail_lines(text: str, count: int = TAIL_LINES) -> list[str]:
    """The last ``count`` non-empty lines of ``text``, each as a terminal would leave it after a carriage return (a
    progress bar's last state, marked as rewritten), for display under the spinner."""
    lines = []
    for line in text.split("\n"):
        line = line.rstrip("\r")
        lines.append(REWRITTEN + line.rsplit("\r", 1)[-1] if "\r" in line else line)
    return [line for line in lines if line.strip()][-count:]


def summarize_args(name: str, args: Any) -> str:
    """A one-line summary of a tool call's arguments (untrusted: show it with ``terminal.visible``)."""
    if not isinstance(args, dict):
        return cut(repr(args))
    main = args.get("command") or args.get("path") or args.get("pattern") or ""
    extra = {
        k: v for k, v in args.items() if k not in ("command", "path", "pattern", "content", "old_string", "new_string")
    }
    text = str(main).replace("\n", " ⏎ ")
    if "content" in args:
        text += f" ({len(str(args['content']))} chars)"
    if extra:
        text += " " + " ".join(f"{k}={v}" for k, v in extra.items())
    return cut(text)


def cut(text: str, limit: int = PREVIEW_CHARS) -> str:
    """``text`` up to ``limit`` characters, saying how many more there are."""
    return text if len(text) <= limit else f"{text[:limit]}… (+{len(text) - limit:,} characters)"


def preview(output: str) -> str:
    """The first line of a result and how many follow; a command's exit status line is left to the result mark."""
    lines = [line for line in output.strip().splitlines() if line.strip() and line not in TAGS]
    if lines and lines[0].startswith("exit code "):
        lines = lines[1:]
    if not lines:
        return ""
    shown = 2 if lines[0].startswith("timed out") and len(lines) > 1 else 1
    first = cut(" · ".join(lines[:shown]))
    return first + (f"  (+{len(lines) - shown} lines)" if len(lines) > shown else "")


def command_tail(output: str, count: int = RESULT_LINES) -> tuple[str, list[str], int]:
    """A finished command's result as the live view keeps it: its note (the timeout's or the cancel's line; '' after
    a plain exit), the last ``count`` lines of its output as ``tail_lines`` leaves them, and how many came before."""
    head, _, body = output.partition("\n")
    note = "" if head.startswith("exit code ") else head
    lines = tail_lines("\n".join(line for line in body.split("\n") if line.rstrip("\r") not in TAGS), len(body) + 1)
    return note, lines[-count:], max(0, len(lines) - count)


def result_lines(event: ToolResult) -> list[Text]:
    """What a finished call leaves in the live view, inert: its mark and time, then a command's last lines (one short
    enough stays on the mark's line), or another tool's first line and how many follow."""
    mark = Text.assemble(result_mark(event), (f"{event.duration_s:.2f}s ", "dim"))
    if event.name != "run_command" or event.exit_code is None:
        return [mark.append_text(terminal.safe_text(preview(event.output), "dim"))]
    note, lines, before = command_tail(event.output)
    if not note and not before and len(lines) == 1:
        return [mark.append_text(terminal.safe_text(cut(lines[0]), "dim"))]
    said = " · ".join(part for part in (cut(note), f"({plural(before, 'earlier line')})" if before else "") if part)
    rows = [Text.assemble(("    │ ", "dim"), terminal.safe_text(cut(line), "dim")) for line in lines]
    return [mark.append_text(terminal.safe_text(said, "dim")), *rows]


CONTEXT_EDITS = {
    "mask": "old tool results cleared",
    "compact": "older turns summarized",
    "trim": "older turns dropped",
    "server": "old tool results cleared by the API",
}


def context_line(event: ContextEdited) -> Text:
    """One dim line when the model's view was edited: what was done and how much smaller the prompt became."""
    return Text(
        f"↺ context: {CONTEXT_EDITS[event.kind]} ({event.reason}), "
        f"~{event.tokens_before:,} → ~{event.tokens_after:,} tokens",
        "dim",
    )


def result_mark(event: ToolResult) -> Text:
    """✓ for a call that succeeded; ✗ with the exit code for a command that failed, ✗ for any other error."""
    if event.exit_code is not None and event.exit_code != 0:
        return Text(f"  ✗ exit {event.exit_code} ", style="red")
    if event.is_error:
        return Text("  ✗ ", style="red")
    return Text("  ✓ ", style="green")


RECAP_AFTER_ROWS = 10
RECAP_AFTER_CHARS = 1000
RECAP_FIRST_LINE_CHARS = 200


def plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


# --------------------------------------------------------------------------- the approval prompt


def _rows(lines: list[str]) -> tuple[list[str], str]:
    """The first lines within APPROVAL_ROWS and APPROVAL_CHARS, and a note saying how much is left out ('' if none)."""
    shown: list[str] = []
    budget = APPROVAL_CHARS
    for line in lines:
        if len(shown) == APPROVAL_ROWS or budget <= 0:
            break
        shown.append(line[:budget])
        budget -= len(line) + 1
    more_lines = len(lines) - len(shown)
    more_chars = len("\n".join(lines)) - len("\n".join(shown))
    if not more_chars:
        return shown, ""
    cut = len(shown[-1]) < len(lines[len(shown) - 1]) if shown else False
    parts = [plural(more_lines, "more line")] if more_lines else []
    if cut:
        parts.append(f"the rest of line {len(shown)}")
    return shown, f"… {' and '.join(parts)} not shown ({plural(more_chars, 'character')})"


def _recap(command: str) -> list[Text]:
    """For a long command, its size and first line again beside the question, where no flood can scroll them away."""
    lines = command.split("\n")
    if len(lines) <= RECAP_AFTER_ROWS and len(command) <= RECAP_AFTER_CHARS:
        return []
    first = lines[0][:RECAP_FIRST_LINE_CHARS]
    cut = f" … ({plural(len(lines[0]) - len(first), 'more character')})" if len(first) < len(lines[0]) else ""
    size = f"That is {plural(len(lines), 'line')} and {plural(len(command), 'character')}, starting: $ "
    return [Text.assemble((size, "yellow"), terminal.visible(first), cut)]


def _grid() -> Table:
    grid = Table.grid(padding=(0, 1))
    grid.add_column(justify="right", style="dim", no_wrap=True)
    grid.add_column(overflow="fold")
    return grid


def _lines(text: str) -> list[str]:
    """The lines of file content: split at newlines only (a lone \\r is a character to show), no empty last line."""
    lines = text.split("\n")
    return lines[:-1] if text.endswith("\n") else lines


def _content(text: str) -> RenderableType:
    if not text:
        return Text("(empty file)", style="yellow")
    lines, note = _rows(_lines(text))
    grid = _grid()
    for number, line in enumerate(lines, 1):
        grid.add_row(str(number), terminal.visible(line, indent=True, run=LONG_SPACE_RUN))
    return Group(grid, Text(note, style="yellow")) if note else grid


def _diff(old: str, new: str) -> RenderableType:
    diff = list(difflib.unified_diff(old.split("\n"), new.split("\n"), lineterm="", n=2))[2:]
    if not diff:
        return Text("(old_string and new_string are the same)", style="yellow")
    lines, note = _rows(diff)
    grid = _grid()
    styles = {"-": "red", "+": "green", "@": "cyan"}
    for line in lines:
        style = styles.get(line[:1], "")
        if line.startswith("@@"):
            grid.add_row("", Text(line, style="cyan dim"))
        else:
            body = terminal.visible(line[1:], indent=True, run=LONG_SPACE_RUN)
            body.stylize(style)
            grid.add_row(Text(line[:1] or " ", style=style), body)
    return Group(grid, Text(note, style="yellow")) if note else grid


def approval(name: str, args: dict[str, Any]) -> RenderableType:
    """What a tool call will do, whole: the command line by line, or the file's content or diff (bounded, counted)."""
    tool = Text(name, style="bold")
    if name == "run_command":
        head = Text.assemble(tool, " wants to run")
        if args.get("timeout_s") is not None:
            head.append(f" (timeout {args['timeout_s']}s)")
        command = str(args.get("command", ""))
        grid = _grid()
        for number, line in enumerate(command.split("\n")):
            grid.add_row("$" if number == 0 else ">", terminal.visible(line))
        return Group(head.append(":"), grid, *_recap(command))
    if name in ("write_file", "edit_file"):
        path = terminal.visible(str(args.get("path", "")))
        if name == "write_file":
            content = str(args.get("content", ""))
            size = f" ({plural(len(_lines(content)), 'line')}, {plural(len(content), 'character')}):"
            return Group(Text.assemble(tool, " wants to write ", path, size), _content(content))
        every = " (every occurrence)" if args.get("replace_all") else ""
        return Group(
            Text.assemble(tool, " wants to change ", path, every, ":"),
            _diff(str(args.get("old_string", "")), str(args.get("new_string", ""))),
        )
    return Group(Text.assemble(tool, " wants to run with:"), terminal.safe_text(json.dumps(args, indent=2)))


async def read_line(fd: int) -> str | None:
    """One line typed at ``fd``, read on the event loop (so Ctrl-C cancels it at once); None at end of input.

    A byte at a time: a read of more could take the next line too, which the next question would then
    never see (two answers that arrived together, as a slow loop lets them)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[str | None] = loop.create_future()
    buffer = bytearray()

    def readable() -> None:
        if done.done():
            return
        try:
            chunk = os.read(fd, 1)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if chunk and chunk != b"\n":
            buffer.extend(chunk)
        elif chunk or buffer:
            done.set_result(buffer.decode("utf-8", "replace"))
        else:
            done.set_result(None)

    loop.add_reader(fd, readable)
    try:
        return await done
    finally:
        loop.remove_reader(fd)


# --------------------------------------------------------------------------- sinks


class JsonSink:
    """``--json``: every event as one line on stdout, ASCII only (\\u escapes), so even a terminal can show it."""

    def __init__(self) -> None:
        self.finished: SessionFinished | None = None
        self._seq = 0

    @property
    def seq(self) -> int:
        """The sequence number of the last event printed."""
        return self._seq

    async def emit(self, event: Event) -> None:
        self._seq += 1
        event.seq = self._seq
        if isinstance(event, SessionFinished):
            self.finished = event
        sys.stdout.write(json.dumps(event.model_dump(mode="json"), ensure_ascii=True) + "\n")
        sys.stdout.flush()


class LiveSink:
    """The terminal display: streamed text, each tool call with status and preview, tokens and elapsed time."""

    def __init__(self, console: Console, stdin: int | None = None) -> None:
        self.console = console
        self.finished: SessionFinished | None = None
        self._stdin = stdin
        self._started = time.monotonic()
        self._partial = ""
        self._tokens = 0
        self._step = 0
        self._running: dict[str, str] = {}
        self._output: dict[str, str] = {}  # the tail of each running command's live output
        self._spinner = Spinner("dots")
        self._live = Live(console=console, refresh_per_second=8, transient=True, get_renderable=self.footer)

    def __enter__(self) -> LiveSink:
        self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._flush_text()
        self._live.stop()

    async def emit(self, event: Event) -> None:
        if isinstance(event, TextDelta):
            self._partial += event.text
            *lines, self._partial = self._partial.split("\n")
            for line in lines:
                self.console.print(terminal.safe_text(line))
        elif isinstance(event, ToolCall | CommandOutput | ToolResult):
            self._tool_event(event)
        elif isinstance(event, UsageEvent):
            self._tokens, self._step = event.session.total, event.step
        elif isinstance(event, ContextEdited):
            self._flush_text()
            self.console.print(context_line(event))
        elif isinstance(event, SessionStarted | UserMessage):  # what the user asked, before what the agent did
            self._flush_text()
            said = event.task if isinstance(event, SessionStarted) else event.text
            self.console.print(Text.assemble(("you │ ", "green"), terminal.safe_text(said)))
        elif isinstance(event, SetupOutput):
            self._flush_text()
            for line in event.text.splitlines():
                self.console.print(Text.assemble((f"{event.phase} │ ", "magenta"), terminal.safe_text(line, "dim")))
        elif isinstance(event, SessionFinished):
            self._flush_text()
            self.finished = event

    def _tool_event(self, event: ToolCall | CommandOutput | ToolResult) -> None:
        """A call starts (its line), its command prints (the tail under the spinner), or it ends (its mark)."""
        if isinstance(event, ToolCall):
            self._flush_text()
            summary = summarize_args(event.name, event.input)
            self._running[event.id] = f"{event.name} {summary}"
            self.console.print(
                Text.assemble(
                    ("▸ ", "cyan"), terminal.safe_text(event.name, "bold cyan"), " ", terminal.visible(summary)
                )
            )
        elif isinstance(event, CommandOutput):
            if event.tool_use_id in self._running:
                kept = self._output.get(event.tool_use_id, "") + event.text
                self._output[event.tool_use_id] = kept[-TAIL_CHARS:]
        elif isinstance(event, ToolResult):
            self._running.pop(event.id, None)
            self._output.pop(event.id, None)
            for line in result_lines(event):
                self.console.print(line)

    async def approve(self, name: str, args: dict[str, Any]) -> bool:
        """Show the whole call, then ask y/n with the live footer paused; the answer is read on the event loop."""
        self._live.stop()
        try:
            self.console.print(approval(name, args))
            return await self._ask(Text.assemble("Allow ", (name, "bold"), "? [y/N] "))
        finally:
            self._live.start()

    async def _ask(self, question: Text) -> bool:
        stdin = sys.stdin.fileno() if self._stdin is None else self._stdin
        if os.isatty(stdin):
            # Whatever was typed before the question was shown must not answer it.
            with contextlib.suppress(termios.error):
                termios.tcflush(stdin, termios.TCIFLUSH)
        while True:
            self.console.print(question, end="")
            try:
                answer = await read_line(stdin)
            except asyncio.CancelledError:
                self.console.print()
                raise
            if answer is None:
                self.console.print()
                return False
            answer = answer.strip().lower()
            if answer in ("y", "yes"):
                return True
            if answer in ("", "n", "no"):
                return False
            self.console.print("Please answer y or n.", style="yellow")

    def _flush_text(self) -> None:
        if self._partial:
            self.console.print(terminal.safe_text(self._partial))
            self._partial = ""

    def footer(self) -> Group:
        """What the live view redraws: the line being streamed, and one spinner with step, tokens, time and running calls."""
        elapsed = time.monotonic() - self._started
        status = f"step {self._step} · {self._tokens:,} tokens · {elapsed:.1f}s"
        if self._running:
            status += " · " + "; ".join(self._running.values())[:100]
        parts: list[Any] = []
        if self._partial:
            parts.append(terminal.safe_text(self._partial[-400:]))
        for tail in self._output.values():  # the calls run one at a time: at most one command is running
            for text in tail_lines(tail):
                row = Text.assemble(("  │ ", "dim"), terminal.safe_text(text, "dim"))
                row.no_wrap, row.overflow = True, "ellipsis"
                parts.append(row)
        line = terminal.safe_text(status, "dim")
        line.no_wrap, line.overflow = True, "ellipsis"
        self._spinner.update(text=line)
        parts.append(self._spinner)
        return Group(*parts)
