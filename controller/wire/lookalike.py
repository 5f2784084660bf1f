"""Names a reader cannot tell apart: how each is spelled out, and which changes' names look like another's.

The agent chooses every name, and two different names can print as the same glyphs: ``café.py`` composed (NFC)
and decomposed (``e`` + U+0301), ``build.sh`` and ``build.sh `` (a trailing space), ``notes`` and ``n\\u043etes`` (a
Cyrillic o). A user who reviewed one and selects it by name could get the other. So:

- ``spelled`` prints a name with what a reader cannot see written out as escapes (``\\x20``, ``\\u0301``): the
  whitespace at either end of each component, and in a component that is not NFC the characters NFC would
  change (combining marks, singletons, conjoining jamo). An NFC name keeps its letters (``café``, ``日本``,
  ``मराठी``): escaping every accent would make ordinary names unreadable. A Cyrillic or Greek letter that
  looks Latin is escaped where Latin letters surround it (``n\\u043etes``), never in a name of its own
  script. ``strict`` escapes every character past ASCII, for names already known to look alike.
- ``skeleton`` is what a name looks like: NFKC, the look-alike table below, ``str.casefold``, the whitespace at
  both ends of each component stripped. Two changes whose paths (or whose folders) have one skeleton look alike:
  ``twins`` finds them, the review marks them, and a selection by name refuses them (an id picks one).

The table is our own, and modest: the Cyrillic and Greek letters commonly taken for Latin ones. Unicode's full
confusables data (and a library that carries it) is not a dependency of this project, and a name past the table
(a letter drawn like another in some font) is still escaped where it mixes scripts, or stays an honest guess.
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Iterable

from .inert import escape

LATIN_LOOKALIKES = {
    **dict(zip("АВЕЅІЈКМНОРСТХУҮӀԚԜ", "ABESIJKMHOPCTXYYIQW", strict=True)),  # Cyrillic capitals
    **dict(zip("аеѕіјорсухүԁһӏԛԝ", "aesijopcyxydhlqw", strict=True)),  # Cyrillic small letters
    **dict(zip("ΑΒΕΖΗΙΚΜΝΟΡΤΥΧ", "ABEZHIKMNOPTYX", strict=True)),  # Greek capitals
    **dict(zip("αιονρυχγϲϳ", "aiovpuxycj", strict=True)),  # Greek small letters
    "ı": "i",  # Latin dotless i
}
"""Letters of other scripts drawn like a Latin one, to that Latin letter (case kept: ``Н`` is ``H``, ``н`` none)."""
_TABLE = str.maketrans(LATIN_LOOKALIKES)
_JAMO = ((0x1100, 0x11FF), (0xA960, 0xA97F), (0xD7B0, 0xD7FF))
"""Conjoining Hangul jamo: NFC composes a run of them into one syllable."""


@functools.lru_cache(maxsize=65536)
def _skeleton_part(part: str) -> str:
    return unicodedata.normalize("NFKC", part).translate(_TABLE).casefold().strip()


def skeleton(path: str) -> str:
    """What ``path`` looks like, component by component: two paths of one skeleton may be taken for each other."""
    return "/".join(_skeleton_part(part) for part in path.split("/"))


def spelled(text: str, strict: bool = False) -> str:
    """``text`` (a printed name) with what a reader cannot see spelled out; see ``parts``."""
    return "".join(piece for piece, _ in parts(text, strict))


def parts(text: str, strict: bool = False) -> list[tuple[str, bool]]:
    """``text`` (a printed name: ``records.shown``, so a backslash of the name's own is already doubled and no
    escape here reads as a real name) as pieces, each with whether it is an escape made here."""
    out: list[tuple[str, bool]] = []
    for at, part in enumerate(text.split("/")):
        for piece, made in [("/", False)] * (at > 0) + _part(part, strict):
            if out and not made and not out[-1][1]:
                out[-1] = (out[-1][0] + piece, False)
            else:
                out.append((piece, made))
    return out


def _part(part: str, strict: bool) -> list[tuple[str, bool]]:
    """One component's pieces: each character kept or spelled out (``_hides``)."""
    unstable = not unicodedata.is_normalized("NFC", part)
    latin = any(_latin(c) for c in part)
    core = part.strip()
    lead = len(part) - len(part.lstrip())
    end = lead + len(core)
    out: list[tuple[str, bool]] = []
    for at, char in enumerate(part):
        out.append(
            (escape(char), True) if not lead <= at < end or _hides(char, strict, unstable, latin) else (char, False)
        )
    return out


def _hides(char: str, strict: bool, unstable: bool, latin: bool) -> bool:
    """Whether ``char`` (inside a component) is spelled out: past ASCII when ``strict``; what NFC changes in a
    component that is not NFC; a look-alike of a Latin letter among Latin letters."""
    if char.isascii():
        return False
    return strict or (unstable and _changed_by_nfc(char)) or (latin and char in LATIN_LOOKALIKES)


def _changed_by_nfc(char: str) -> bool:
    code = ord(char)
    return (
        unicodedata.category(char).startswith("M")
        or not unicodedata.is_normalized("NFC", char)
        or any(first <= code <= last for first, last in _JAMO)
    )


def _latin(char: str) -> bool:
    return char.isalpha() and (char.isascii() or unicodedata.name(char, "").startswith("LATIN "))


def twins(paths: Iterable[str]) -> dict[str, list[str]]:
    """Each of ``paths`` that looks like another (it, or a folder on its way, has the skeleton of a different
    path's or folder's): the real paths (or folders) it could be taken for, sorted. Paths that look like none
    are absent."""
    seen: dict[str, set[str]] = {}  # skeleton -> the real paths and folders of that skeleton
    listed = list(paths)
    for path in listed:
        for prefix, key in _prefixes(path):
            seen.setdefault(key, set()).add(prefix)
    found: dict[str, list[str]] = {}
    for path in listed:
        for prefix, key in _prefixes(path):
            others = seen[key] - {prefix}
            if others:
                found[path] = sorted(others)
                break
    return found


def _prefixes(path: str) -> Iterable[tuple[str, str]]:
    """Each folder on the way to ``path`` and ``path`` itself, with its skeleton."""
    pieces = path.split("/")
    keys = [_skeleton_part(piece) for piece in pieces]
    for depth in range(1, len(pieces) + 1):
        yield "/".join(pieces[:depth]), "/".join(keys[:depth])
