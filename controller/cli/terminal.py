"""The one place where untrusted text becomes safe for the user's terminal.

Everything the model or the sandbox produces (model text, tool names and arguments, command
output, file names, error messages that quote them) is hostile to the terminal that shows it:
escape sequences can write the clipboard (OSC 52), set the window title (OSC 0), plant links
(OSC 8), restyle or hide text (SGR), move the cursor, or answer a prompt through a terminal
query; ``\\r``, backspace and the bidi overrides rearrange what a line appears to say.

So such text reaches a ``Console`` only as a ``rich.text.Text`` built here: never parsed as
markup, with every character of the shared table ``ui/static/invisible.json`` (which the viewer
reads too) shown as a visible, highlighted escape such as ``\\x1b``, ``\\u009b``, ``\\u202e`` or
``\\ufe0f``: C0/C1 controls (but newline and tab), DEL, format and bidi controls, line and
paragraph separators, lone surrogates, variation selectors, tags and every other default-ignorable
code point, letters drawn blank (U+3164, U+2800, ...). ``visible`` goes further for what a person approves: runs of
spaces, tabs, leading and trailing spaces and look-alike spaces become visible too.
"""

from __future__ import annotations

import functools
import io
import logging
import os
import re
import sys
import unicodedata
from typing import IO, cast

from rich.console import Console
from rich.text import Text

from ..wire.inert import CANDIDATE, escape, hidden, safe

__all__ = ["ESCAPE_STYLE", "console", "escape", "safe", "safe_text", "visible"]

ESCAPE_STYLE = "reverse"
"""How a made-visible character looks, so a real ``\\x1b`` is told apart from those four characters typed."""

_INDENT = re.compile(r"[ \t]+(?=\S)")


def safe_text(text: str, style: str = "") -> Text:
    """Untrusted ``text`` as a Rich ``Text`` (never markup): newline and tab kept, hidden characters highlighted escapes."""
    text = text.replace("\r\n", "\n")
    out = Text(style=style)
    last = 0
    for match in CANDIDATE.finditer(text):
        if hidden(match[0]):
            out.append(text[last : match.start()])
            out.append(escape(match[0]), ESCAPE_STYLE)
            last = match.end()
    out.append(text[last:])
    return out


def visible(line: str, *, indent: bool = False, run: int = 2) -> Text:
    """One line of something a person approves, showing every character that matters.

    Besides what :func:`safe_text` shows: a run of ``run`` or more spaces is ``⟨N spaces⟩``, spaces
    that start (unless ``indent`` keeps indentation as it is) or end the line are counted the same
    way, a tab is ``\\t`` and a space other than U+0020 (no-break, em, ideographic...) is an escape,
    so nothing can push part of a command out of sight or pass for a different one. Line breaks
    are the caller's to show (one row per line).
    """
    out = Text()
    start = 0
    if indent and (lead := _INDENT.match(line)):
        out.append(lead[0])
        start = lead.end()
    last = start
    for match in _visible_pattern(run).finditer(line, start):
        found = match[0]
        if found.startswith(" ") and (len(found) >= run or match.start() == 0 or match.end() == len(line)):
            shown = f"⟨{len(found)} space{'s' if len(found) > 1 else ''}⟩"
        elif found == "\t" or hidden(found) or unicodedata.category(found) == "Zs":
            shown = escape(found)
        else:
            continue
        out.append(line[last : match.start()])
        out.append(shown, ESCAPE_STYLE)
        last = match.end()
    out.append(line[last:])
    return out


@functools.cache
def _visible_pattern(run: int) -> re.Pattern[str]:
    """A run of ``run`` spaces or more, spaces at either end, or any character that is not printable ASCII."""
    return re.compile(f" {{{run},}}|^ +| +$|[^\\x21-\\x7e ]")


class TolerantStream(io.TextIOBase):
    """A terminal stream whose writes are dropped once the terminal is gone (hang-up: EIO; closed pipe: EPIPE).

    The session must still clean up and record its end after the terminal closes; a failed write
    would instead end it with a traceback and leave the container behind.
    """

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self._gone = False

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._stream, "encoding", None) or "utf-8"

    def isatty(self) -> bool:
        return self._stream.isatty()

    def fileno(self) -> int:
        return self._stream.fileno()

    def write(self, text: str) -> int:
        if not self._gone:
            try:
                self._stream.write(text)
            except OSError:
                self._gone = True
        return len(text)

    def flush(self) -> None:
        if not self._gone:
            try:
                self._stream.flush()
            except OSError:
                self._gone = True


PIPED_WIDTH = 1 << 16
"""Columns a console writing to a pipe or a file lays out in: no line of ours is that long, so none is cut."""


def console(*, stderr: bool = False) -> Console:
    """A Rich console on stdout or stderr that outlives its terminal (see ``TolerantStream``).

    Written to a pipe or a file, or with ``NO_COLOR`` set, it never wraps or crops a line (soft wrap, and a width
    no line reaches): ``cubicle changes ID --diff | git apply`` gets the diff's lines whole. The escaping of
    control and invisible characters is the same either way."""
    stream = sys.stderr if stderr else sys.stdout
    plain = not _isatty(stream) or bool(os.environ.get("NO_COLOR"))
    return Console(
        file=cast(IO[str], TolerantStream(stream)), stderr=stderr, soft_wrap=plain, width=PIPED_WIDTH if plain else None
    )


def _isatty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (OSError, ValueError):  # a closed or detached stream
        return False


class SafeFormatter(logging.Formatter):
    """Log records (messages, arguments, tracebacks quoting model or sandbox text) made terminal-safe."""

    def format(self, record: logging.LogRecord) -> str:
        return safe(super().format(record))
