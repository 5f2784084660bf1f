"""Bounded unified diffs, computed in-process with difflib.

Never ``git diff``: git with its cwd or GIT_DIR in the layer would read configuration the
agent wrote. Inputs and output are capped so a hostile file (huge, one endless line,
millions of lines) costs the reviewer a fixed amount of time and screen.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterable

MAX_INPUT = 256 * 1024  # bytes per side; larger files are summarised, not diffed
MAX_LINES = 5000  # lines per side; difflib is quadratic in the worst case
MAX_OUTPUT = 64 * 1024  # characters of diff text
SNIFF = 8000  # like git: a NUL in the first 8000 bytes means binary


def read_head(fd: int, limit: int = MAX_INPUT + 1) -> bytes:
    """Up to ``limit`` bytes from the start of ``fd``."""
    chunks: list[bytes] = []
    got = 0
    while got < limit:
        data = os.pread(fd, limit - got, got)
        if not data:
            break
        chunks.append(data)
        got += len(data)
    return b"".join(chunks)


def is_binary(data: bytes) -> bool:
    """Binary as git judges it (a NUL in the first 8000 bytes), or mostly not text: more than one byte in eight
    that UTF-8 cannot read. A few such bytes leave a text file text: its diff shows them as ``\\xNN``, so an
    invalid byte cannot hide a script's new line behind "binary"."""
    if b"\0" in data[:SNIFF]:
        return True
    sample = data[:MAX_INPUT]
    undecodable = sum(1 for char in sample.decode("utf-8", "surrogateescape") if "\udc80" <= char <= "\udcff")
    return undecodable * 8 > len(sample)


_LINES = re.compile(r"[^\n]*\n|[^\n]+")
"""Lines end at ``\n`` only: ``str.splitlines`` also breaks at \f, \v, \x1c-\x1e, \x85 and U+2028, which
would show one line of code (``x = 1\f-os.system(...)``) as two."""
_HEADER_ESCAPES = str.maketrans({"\n": "\\n", "\r": "\\r", "\t": "\\t"})


def unified(path: str, old: bytes | None, new: bytes | None) -> str | None:
    """The diff from ``old`` to ``new`` (None = absent), or None when either side is too big to diff."""
    sides = [b"" if data is None else data for data in (old, new)]
    if any(len(data) > MAX_INPUT for data in sides):
        return None
    # Undecodable bytes stay themselves (as surrogates): every display spells them ``\xNN``.
    texts = [_LINES.findall(data.decode("utf-8", "surrogateescape")) for data in sides]
    if any(len(lines) > MAX_LINES for lines in texts):
        return None
    name = path.translate(_HEADER_ESCAPES)  # a newline in a name must not start a forged line of the diff
    before = "/dev/null" if old is None else f"a/{name}"
    after = "/dev/null" if new is None else f"b/{name}"
    return _capped(difflib.unified_diff(texts[0], texts[1], before, after))


def encoded_size(text: str) -> int:
    """About how many bytes ``text`` takes in a JSON answer: a control character is six (``\\u0001``)."""
    return len(text.encode(errors="surrogatepass")) + 5 * sum(1 for char in text if char < " " and char not in "\n\t")


def _capped(lines: Iterable[str]) -> str:
    out: list[str] = []
    size = 0
    for line in lines:
        text = line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
        size += len(text)
        if size > MAX_OUTPUT:
            out.append("[diff truncated]\n")
            break
        out.append(text)
    return "".join(out)
