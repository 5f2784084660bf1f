"""Bounded unified diffs, computed in-process with difflib.

Never ``git diff``: git with its cwd or GIT_DIR in the layer would read configuration the
agent wrote. Inputs and output are capped so a hostile file (huge, one endless line,
millions of lines) costs the reviewer a fixed amount of time and screen.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterable, Iterator

MAX_INPUT = 4 << 20  # bytes per side; larger files are summarised, not diffed (lines shared at both ends are not)
SAMPLE = 256 * 1024  # bytes judged for "binary"
MAX_LINES = 5000  # lines per side; difflib is quadratic in the worst case
MAX_OUTPUT = 64 * 1024  # characters of diff text
CONTEXT = 3  # lines around each change, as git shows
_HUNK = re.compile(r"@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@\n")


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
    """Mostly not text: more than one byte in eight is a NUL, another control character (but tab, newline,
    carriage return, form feed and escape) or a byte UTF-8 cannot read. A few such bytes leave a file text:
    its diff spells them out (``\\x00``, ``\\xff``), so one byte cannot hide a script's new line behind "binary"
    (see ``shown_as_binary`` for what else keeps a file text)."""
    sample = data[:SAMPLE]
    odd = len(_NOT_TEXT.findall(sample.decode("utf-8", "surrogateescape")))
    return odd * 8 > len(sample)


_NOT_TEXT = re.compile(r"[\x00-\x08\x0b\x0e-\x1a\x1c-\x1f\x7f\udc80-\udcff]")


def shown_as_binary(old: bytes | None, new: bytes | None, executable: bool) -> bool:
    """Whether a change is summarised as "binary" rather than diffed: only when every side is mostly not text
    and nothing says it will run as text. A script (``#!``, or executable) or a file that was text before is
    always diffed, its odd bytes spelled out, whatever it holds now."""
    sides = [data for data in (old, new) if data is not None]
    if executable or any(data.startswith(b"#!") for data in sides):
        return False
    return bool(sides) and all(is_binary(data) for data in sides)


_LINES = re.compile(r"[^\n]*\n|[^\n]+")
"""Lines end at ``\n`` only: ``str.splitlines`` also breaks at \f, \v, \x1c-\x1e, \x85 and U+2028, which
would show one line of code (``x = 1\f-os.system(...)``) as two."""
_HEADER_ESCAPES = str.maketrans({"\n": "\\n", "\r": "\\r", "\t": "\\t"})


def unified(path: str, old: bytes | None, new: bytes | None) -> str | None:
    """The diff from ``old`` to ``new`` (None = absent), or None when a side is too big to read whole.

    Lines the two sides share at their start and end are set aside first (a linear pass), so a small edit
    of a long file (a lock file, say) is diffed however many lines it has; only when what differs in
    between is over ``MAX_LINES`` lines a side is the diff all removals then all additions, which takes
    no quadratic time either. The output is capped at ``MAX_OUTPUT`` with a visible marker."""
    sides = [b"" if data is None else data for data in (old, new)]
    if any(len(data) > MAX_INPUT for data in sides):
        return None
    # Undecodable bytes stay themselves (as surrogates): every display spells them ``\\xNN``.
    texts = [_LINES.findall(data.decode("utf-8", "surrogateescape")) for data in sides]
    name = path.translate(_HEADER_ESCAPES)  # a newline in a name must not start a forged line of the diff
    before = "/dev/null" if old is None else f"a/{name}"
    after = "/dev/null" if new is None else f"b/{name}"
    head, tail = _shared_ends(texts[0], texts[1])
    if any(len(lines) - head - tail > MAX_LINES for lines in texts):
        return _capped(_replaced(texts, head, tail, before, after))
    start = max(0, head - CONTEXT)  # difflib sees what differs and its context; hunk numbers are moved back
    windows = [lines[start : len(lines) - max(0, tail - CONTEXT)] for lines in texts]
    return _capped(_moved(difflib.unified_diff(windows[0], windows[1], before, after, n=CONTEXT), start))


def _moved(lines: Iterable[str], offset: int) -> Iterator[str]:
    """A diff of windows ``offset`` lines into both files, its hunk headers numbered as in the files."""
    for line in lines:
        found = _HUNK.match(line) if offset else None
        if found is None:
            yield line
            continue
        a, a_count, b, b_count = found.groups()
        yield f"@@ -{int(a) + offset}{a_count or ''} +{int(b) + offset}{b_count or ''} @@\n"


def _shared_ends(a: list[str], b: list[str]) -> tuple[int, int]:
    """How many lines ``a`` and ``b`` share at their start, then at their end (not overlapping)."""
    head = 0
    while head < min(len(a), len(b)) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < min(len(a), len(b)) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    return head, tail


def _replaced(texts: list[list[str]], head: int, tail: int, before: str, after: str) -> Iterable[str]:
    """One hunk that removes the old middle and adds the new one, with up to ``CONTEXT`` lines around."""
    old, new = texts
    start = max(0, head - CONTEXT)
    old_end, new_end = len(old) - tail, len(new) - tail
    context_after = min(CONTEXT, tail)
    yield f"--- {before}\n"
    yield f"+++ {after}\n"
    old_count = old_end + context_after - start
    new_count = new_end + context_after - start
    yield f"@@ -{start + 1 if old_count else start},{old_count} +{start + 1 if new_count else start},{new_count} @@\n"
    yield from (" " + line for line in old[start:head])
    yield from ("-" + line for line in old[head:old_end])
    yield from ("+" + line for line in new[head:new_end])
    yield from (" " + line for line in old[old_end : old_end + context_after])


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
