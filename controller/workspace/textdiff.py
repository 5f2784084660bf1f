"""Bounded unified diffs, computed in-process with difflib.

Never ``git diff``: git with its cwd or GIT_DIR in the layer would read configuration the
agent wrote. Inputs and output are capped so a hostile file (huge, one endless line,
millions of lines) costs the reviewer a fixed amount of time and screen.
"""

from __future__ import annotations

import bisect
import difflib
import os
import re
from collections.abc import Iterable, Iterator
from typing import Literal

MAX_INPUT = 4 << 20  # bytes per side; larger files are summarised, not diffed (lines shared at both ends are not)
SAMPLE = 256 * 1024  # bytes judged for "binary"
MAX_LINES = 5000  # lines per side; difflib is quadratic in the worst case
MAX_OUTPUT = 64 * 1024  # characters of diff text
CONTEXT = 3  # lines around each change, as git shows


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
    """Really binary: a NUL among the first bytes, as git judges, and mostly not text, more than one byte in
    eight a NUL, another control character (but tab, newline, carriage return, form feed and escape) or a byte
    UTF-8 cannot read. Anything else is text: its diff spells the odd bytes out (``\\x00``, ``\\xff``), so a
    few bytes (or a comment of control characters) cannot hide a script's new line behind "binary"
    (``shown_as_binary`` keeps scripts and files that were text as text, whatever they hold)."""
    sample = data[:SAMPLE]
    if b"\0" not in sample:
        return False
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

    Lines the two sides share at their start and end are set aside first (a linear pass), and what
    differs in between is split at the lines each side holds once, in the order both hold them (as
    patience diff does), until the pieces are small enough for difflib's quadratic worst case: so two
    edits far apart in a long lock file are two small hunks, however many lines lie between them. Only a
    piece over ``MAX_LINES`` a side with no such line is all removals, then all additions. The output is
    capped at ``MAX_OUTPUT`` with a visible marker."""
    sides = [b"" if data is None else data for data in (old, new)]
    if any(len(data) > MAX_INPUT for data in sides):
        return None
    # Undecodable bytes stay themselves (as surrogates): every display spells them ``\\xNN``.
    a, b = (_LINES.findall(data.decode("utf-8", "surrogateescape")) for data in sides)
    name = path.translate(_HEADER_ESCAPES)  # a newline in a name must not start a forged line of the diff
    before = "/dev/null" if old is None else f"a/{name}"
    after = "/dev/null" if new is None else f"b/{name}"
    return _capped(_formatted(a, b, _merged(_opcodes(a, b, 0, 0)), before, after))


def hunks(old: str, new: str) -> Iterator[str]:
    """The unified diff's hunks from ``old`` to ``new`` (each a file's whole text), as ``unified`` splits them but
    neither capped nor headed: each line ends in ``\\n``, a last one without it followed by ``\\ No newline at
    end of file``. What a patch carries after its own header lines (``gitpatch``); the caller bounds the sides."""
    a, b = _LINES.findall(old), _LINES.findall(new)
    for line in _formatted(a, b, _merged(_opcodes(a, b, 0, 0)), "", "", header=False):
        yield line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"


def _merged(ops: list[Opcode]) -> list[Opcode]:
    """Neighbouring equal runs as one (the anchors come one line at a time), so that hunks split between them."""
    out: list[Opcode] = []
    for op in ops:
        if out and op[0] == "equal" == out[-1][0]:
            out[-1] = ("equal", out[-1][1], op[2], out[-1][3], op[4])
        else:
            out.append(op)
    return out


Opcode = tuple[Literal["replace", "delete", "insert", "equal"], int, int, int, int]


# The one opcode for a middle too long to match and with no line unique to both sides (never both sides empty).
_WHOLE: dict[tuple[bool, bool], Literal["replace", "delete", "insert"]] = {
    (True, True): "replace",
    (True, False): "delete",
    (False, True): "insert",
}


def _opcodes(a: list[str], b: list[str], a0: int, b0: int) -> list[Opcode]:
    """difflib's opcodes for ``a`` against ``b`` (which start at lines ``a0`` and ``b0`` of the files)."""
    head, tail = _shared_ends(a, b)
    ops: list[Opcode] = [("equal", a0, a0 + head, b0, b0 + head)] if head else []
    a_mid, b_mid = a[head : len(a) - tail], b[head : len(b) - tail]
    i0, j0 = a0 + head, b0 + head
    if len(a_mid) <= MAX_LINES and len(b_mid) <= MAX_LINES:
        found = difflib.SequenceMatcher(None, a_mid, b_mid).get_opcodes()
        ops += [(tag, i0 + i1, i0 + i2, j0 + j1, j0 + j2) for tag, i1, i2, j1, j2 in found]
    elif anchors := _unique_in_order(a_mid, b_mid):
        i, j = 0, 0
        for ai, bj in [*anchors, (len(a_mid), len(b_mid))]:
            ops += _opcodes(a_mid[i:ai], b_mid[j:bj], i0 + i, j0 + j)
            if ai < len(a_mid):
                ops.append(("equal", i0 + ai, i0 + ai + 1, j0 + bj, j0 + bj + 1))
            i, j = ai + 1, bj + 1
    else:
        ops.append((_WHOLE[bool(a_mid), bool(b_mid)], i0, i0 + len(a_mid), j0, j0 + len(b_mid)))
    if tail:
        ops.append(("equal", a0 + len(a) - tail, a0 + len(a), b0 + len(b) - tail, b0 + len(b)))
    return ops


def _unique_in_order(a: list[str], b: list[str]) -> list[tuple[int, int]]:
    """Lines each side holds exactly once, as (index in a, index in b): the longest run in the same order."""
    counts: dict[str, list[int]] = {}
    for side, lines in enumerate((a, b)):
        for index, line in enumerate(lines):
            seen = counts.setdefault(line, [0, 0, 0, 0])
            seen[side] += 1
            seen[2 + side] = index
    pairs = sorted((c[2], c[3]) for c in counts.values() if c[:2] == [1, 1])
    # Longest increasing subsequence of the b indexes (patience sorting), with links back to rebuild it.
    tops: list[int] = []
    top_at: list[int] = []
    back: list[int] = [-1] * len(pairs)
    for at, (_, j) in enumerate(pairs):
        pile = bisect.bisect_left(tops, j)
        back[at] = top_at[pile - 1] if pile else -1
        if pile == len(tops):
            tops.append(j)
            top_at.append(at)
        else:
            tops[pile], top_at[pile] = j, at
    chain, at = [], top_at[-1] if top_at else -1
    while at >= 0:
        chain.append(pairs[at])
        at = back[at]
    return chain[::-1]


def _formatted(
    a: list[str], b: list[str], ops: list[Opcode], before: str, after: str, header: bool = True
) -> Iterator[str]:
    """Unified diff text of ``ops``, grouped as difflib groups them (without ``header``, no ``---``/``+++`` lines)."""
    matcher = _Given(ops)
    for number, group in enumerate(matcher.get_grouped_opcodes(CONTEXT)):
        if number == 0 and header:
            yield f"--- {before}\n"
            yield f"+++ {after}\n"
        first, last = group[0], group[-1]
        yield f"@@ -{_range(first[1], last[2])} +{_range(first[3], last[4])} @@\n"
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                yield from (" " + line for line in a[i1:i2])
                continue
            yield from ("-" + line for line in a[i1:i2])
            yield from ("+" + line for line in b[j1:j2])


class _Given(difflib.SequenceMatcher[str]):
    """A matcher whose opcodes are given: difflib's grouping into hunks, over them."""

    def __init__(self, ops: list[Opcode]) -> None:
        super().__init__(None, [], [])
        self._given = ops

    def get_opcodes(self) -> list[Opcode]:
        return self._given


def _range(start: int, stop: int) -> str:
    """A unified diff's line range, as difflib writes it."""
    length = stop - start
    if length == 1:
        return f"{start + 1}"
    return f"{start if not length else start + 1},{length}"


def _shared_ends(a: list[str], b: list[str]) -> tuple[int, int]:
    """How many lines ``a`` and ``b`` share at their start, then at their end (not overlapping)."""
    head = 0
    while head < min(len(a), len(b)) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < min(len(a), len(b)) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    return head, tail


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
