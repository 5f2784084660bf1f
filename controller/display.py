"""How the CLI shows a session: a live rich display, or one JSON event per line.

Every string that came from the model or the sandbox goes through ``controller.terminal``
before it reaches the console; nothing here prints such a string as markup or raw.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.prompt import Confirm
from rich.spinner import Spinner
from rich.text import Text

from . import terminal
from .events import Event, SessionFinished, TextDelta, ToolCall, ToolResult, UsageEvent

PREVIEW_CHARS = 160
TAGS = {"<stdout>", "</stdout>", "<stderr>", "</stderr>"}


def summarize_args(name: str, args: Any) -> str:
    """A one-line summary of a tool call's arguments (untrusted: show it with ``terminal.safe_text``)."""
    if not isinstance(args, dict):
        return repr(args)[:PREVIEW_CHARS]
    main = args.get("command") or args.get("path") or args.get("pattern") or ""
    extra = {
        k: v for k, v in args.items() if k not in ("command", "path", "pattern", "content", "old_string", "new_string")
    }
    text = str(main).replace("\n", " ⏎ ")
    if "content" in args:
        text += f" ({len(str(args['content']))} chars)"
    if extra:
        text += " " + " ".join(f"{k}={v}" for k, v in extra.items())
    return text[:PREVIEW_CHARS]


def preview(output: str) -> str:
    """The first line of a result (for a command, its status and first line of output) and how many follow."""
    lines = [line for line in output.strip().splitlines() if line.strip() and line not in TAGS]
    if not lines:
        return ""
    shown = 2 if lines[0].startswith(("exit code", "timed out")) and len(lines) > 1 else 1
    first = " · ".join(lines[:shown])[:PREVIEW_CHARS]
    return first + (f"  (+{len(lines) - shown} lines)" if len(lines) > shown else "")


# --------------------------------------------------------------------------- sinks


class JsonSink:
    """``--json``: every event as one line on stdout, ASCII only (\\u escapes), so even a terminal can show it."""

    def __init__(self) -> None:
        self.finished: SessionFinished | None = None
        self._seq = 0

    async def emit(self, event: Event) -> None:
        self._seq += 1
        event.seq = self._seq
        if isinstance(event, SessionFinished):
            self.finished = event
        sys.stdout.write(json.dumps(event.model_dump(mode="json"), ensure_ascii=True) + "\n")
        sys.stdout.flush()


class LiveSink:
    """The terminal display: streamed text, each tool call with status and preview, tokens and elapsed time."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.finished: SessionFinished | None = None
        self._started = time.monotonic()
        self._partial = ""
        self._tokens = 0
        self._step = 0
        self._running: dict[str, str] = {}
        self._live = Live(console=console, refresh_per_second=8, transient=True, get_renderable=self._footer)

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
        elif isinstance(event, ToolCall):
            self._flush_text()
            summary = summarize_args(event.name, event.input)
            self._running[event.id] = f"{event.name} {summary}"
            self.console.print(
                Text.assemble(
                    ("▸ ", "cyan"), terminal.safe_text(event.name, "bold cyan"), " ", terminal.safe_text(summary)
                )
            )
        elif isinstance(event, ToolResult):
            self._running.pop(event.id, None)
            self.console.print(
                Text.assemble(
                    ("  ✗ ", "red") if event.is_error else ("  ✓ ", "green"),
                    (f"{event.duration_s:.2f}s ", "dim"),
                    terminal.safe_text(preview(event.output), "dim"),
                )
            )
        elif isinstance(event, UsageEvent):
            self._tokens, self._step = event.session.total, event.step
        elif isinstance(event, SessionFinished):
            self._flush_text()
            self.finished = event

    async def approve(self, name: str, args: dict[str, Any]) -> bool:
        """Ask y/n in the terminal, with the live footer paused."""
        self._live.stop()
        try:
            summary = terminal.safe_text(summarize_args(name, args))
            question = Text.assemble("Allow ", (name, "bold"), " ", summary, "?")
            return await asyncio.to_thread(Confirm.ask, question, console=self.console, default=False)
        finally:
            self._live.start()

    def _flush_text(self) -> None:
        if self._partial:
            self.console.print(terminal.safe_text(self._partial))
            self._partial = ""

    def _footer(self) -> Group:
        elapsed = time.monotonic() - self._started
        status = f"step {self._step} · {self._tokens:,} tokens · {elapsed:.1f}s"
        if self._running:
            status += " · " + "; ".join(self._running.values())[:100]
        parts: list[Any] = []
        if self._partial:
            parts.append(terminal.safe_text(self._partial[-400:]))
        parts.append(Spinner("dots", text=terminal.safe_text(status, "dim")))
        return Group(*parts)
