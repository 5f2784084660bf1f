"""The one table of characters a display acts on or draws as nothing, and their visible spelling.

Shared by every display of untrusted text: the terminal (``cli/terminal.py``), the viewer (which reads the same
``ui/static/invisible.json``) and the messages an MCP client shows its user (``server/mcpserver.py``).
"""

from __future__ import annotations

import bisect
import importlib.resources
import json
import re

_NAMED = {"\r": "\\r", "\t": "\\t", "\n": "\\n"}
# Candidates: everything that is not printable ASCII, newline or tab; each is then judged by its category.
CANDIDATE = re.compile(r"[^\t\n\x20-\x7e]")


def _invisible() -> tuple[list[int], list[int]]:
    """The table every display shares (``ui/static/invisible.json``, which the viewer reads too): the first and
    last code points of each range, sorted."""
    table = json.loads((importlib.resources.files("controller") / "ui" / "static" / "invisible.json").read_bytes())
    return [first for first, _ in table["ranges"]], [last for _, last in table["ranges"]]


_FIRSTS, _LASTS = _invisible()


def hidden(char: str) -> bool:
    """A character a display acts on or draws as nothing: controls, format and bidi characters, separators,
    variation selectors, tags and other default-ignorable code points, letters drawn blank (a run of Hangul
    fillers could push the rest of a line out of sight while looking empty)."""
    code = ord(char)
    at = bisect.bisect_right(_FIRSTS, code) - 1
    return at >= 0 and code <= _LASTS[at]


def escape(char: str) -> str:
    """The visible spelling of one character: ``\\r``, ``\\x1b``, ``\\u009b``, ``\\u202e``, ``\\U000e0001``.

    ``\\xNN`` is kept for ASCII and for a byte UTF-8 could not read (held as the surrogate ``surrogateescape``
    makes of it, ``\\xff``): a character from U+0080 on (the C1 control U+009B) is ``\\u009b``, never the
    byte 0x9B's ``\\x9b``, so no two names print alike."""
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:
        return f"\\x{code - 0xDC00:02x}"
    if code < 0x80:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def safe(text: str) -> str:
    """``text`` as plain characters a terminal only draws (for logs and other places that take a str).

    A ``\\r\\n`` line ending is a newline; every other hidden character is spelled out with :func:`escape`.
    """
    text = text.replace("\r\n", "\n")
    return CANDIDATE.sub(lambda m: escape(m[0]) if hidden(m[0]) else m[0], text)
