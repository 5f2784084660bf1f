"""A session's changes as one patch ``git apply`` takes: binary-safe, made of the layer's bytes, holding exactly what
a plain ``cubicle apply`` writes (``GET /v1/sessions/{id}/changes?format=patch``, ``cubicle changes ID --patch``).

The selection is apply's own (``apply.selected``, then its preflight against the checkout, ``apply.judged_here``):
what it holds back (trusted, ignored, build inputs, unsafe, the environment's, anything under ``.git``) is left out,
and so is what the preflight would stop at (a path changed in the checkout since the session saw it) or skip. The
rest is written in git's extended diff format, against the checkout as it is now (the overlay's lower layer):

- a text file as a unified diff, with ``index OLD..NEW`` (full blob ids) so that ``git apply --3way`` works too;
- a file that is not plain text (a NUL, bytes that are not UTF-8, a character a terminal obeys: an escape, a
  carriage return not ending a line, a bidi control), or longer than ``textdiff.MAX_INPUT``, as ``GIT binary
  patch`` with ``literal`` hunks (zlib, then git's base85: printable ASCII whatever the file holds);
- a new or deleted file with ``new file mode``/``deleted file mode``, a mode alone with ``old mode``/``new mode``
  (git keeps two modes, 100644 and 100755: executable when apply would write the owner's x bit);
- a symlink as mode 120000 with its target as the content (``\\ No newline at end of file``);
- a change of type (file to symlink, say) as a deletion and an addition of the same path.

Names are written as git writes them (``quoted``): C-quoted in double quotes when a byte needs it (a quote, a
backslash, a control character, any byte from 0x80), with git's tab after a ``---``/``+++`` name holding a space.
So no name reads back as another, and no byte of a name reaches a terminal raw.

A directory is no entry of a git patch: one the agent made is made by ``git apply`` for the files in it (with the
user's umask, where apply gives the agent's mode); an empty one, or a directory's mode alone, is left out. Every
change left out is listed in ``#`` comment lines before the first diff (``git apply`` skips them), with the
command that applies it deliberately (``HOW_TO_APPLY``); names there are spelled as the review prints them.

The whole is bounded (``MAX_PATCH_BYTES``): past it, ``PatchTooLargeError`` and no patch.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shlex
import zlib
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass

from ..errors import PatchTooLargeError, TooManyEntriesError, UnsafePathError
from ..wire import inert
from ..wire.changeset import HOW_TO_APPLY, Change, Conflict, FileType, Kind
from . import beneath, selection, textdiff
from .apply import judged_here, selected
from .changes import scan
from .checkout import applied_mode
from .layer import Layer, open_repo, open_upper
from .records import shown

MAX_PATCH_BYTES = 32 << 20
"""A patch holds at most this many bytes (and no file larger than that is read for one): well inside what the
client reads of an answer (64 MiB) and what a walk's child may hold."""
MAX_LISTED_LINES = 1000
"""Comment lines naming changes left out, at most, per reason; the rest are counted."""
NULL_ID = "0" * 40
SYMLINK_MODE = "120000"
BINARY_LINE = 52
"""Bytes of compressed data a line of a binary hunk holds at most (its first character says how many)."""
ZLIB_LEVEL = 1
"""git's own default (``core.compression`` unset: ``Z_BEST_SPEED``), so a literal hunk reads as git writes it."""
_ESCAPES = {7: "a", 8: "b", 9: "t", 10: "n", 11: "v", 12: "f", 13: "r", 0x22: '"', 0x5C: "\\"}
"""The bytes git's ``quote_c_style`` writes as a letter after a backslash; any other that needs quoting is octal."""


@dataclass(frozen=True)
class Side:
    """One side of a path in the patch: its git mode and what it holds (a file's bytes, a symlink's target)."""

    mode: str
    data: bytes


@dataclass(frozen=True)
class Left:
    """A change the patch leaves out, and why (a phrase, printed inert)."""

    change: Change
    why: str


@dataclass(frozen=True)
class Plain:
    """What a plain apply of a layer writes (``chosen``), what it holds back (``held``: trusted, ignored, build
    inputs, unsafe, the environment's, anything under ``.git``, and what its preflight skips as unsafe) and what
    its preflight would stop at (``conflicts``). The one selection the patch and a pushed commit (``gitpush``)
    both carry, so neither holds anything a plain apply would not write."""

    chosen: list[Change]
    held: list[Change]
    conflicts: list[Conflict]


def plain_apply(layer: Layer, force: Collection[str] = ()) -> Plain:
    """``Plain`` of ``layer``: apply's own ``selected`` then ``judged_here``, with ``force`` as ``cubicle apply
    --force`` takes it (a trusted path taken by its exact name, a conflict under it overridden). Writes nothing;
    TooManyEntriesError for a layer past its ``names`` limit (never applied)."""
    changes = scan(layer, with_diffs=False)
    if changes.truncated_at is not None:
        raise TooManyEntriesError(changes.truncated_at)
    force = selection.forced(force, changes)
    chosen, skipped = selected(layer, changes, force=force)
    conflicts, unsafe = judged_here(layer, chosen, force)
    stopped = {c.path for c in conflicts} | {c.path for c in unsafe}
    return Plain([c for c in chosen if c.path not in stopped], [*skipped, *unsafe], conflicts)


def session_patch(layer: Layer, session_id: str, limit: int = MAX_PATCH_BYTES) -> bytes:
    """The patch of what a plain apply of ``layer`` writes (see the module); PatchTooLargeError past ``limit``,
    TooManyEntriesError for a layer past its ``names`` limit (never applied). Writes nothing."""
    plain = plain_apply(layer)
    writer = _Writer(limit)
    left = _write_all(layer, plain.chosen, writer)
    head = _comments(session_id, len(writer.files), plain.held, left, plain.conflicts)
    out = head.encode("utf-8") + b"".join(writer.removals) + b"".join(writer.writes)
    if len(out) > limit:
        raise PatchTooLargeError(len(out), limit)
    return out


class _Writer:
    """The diffs, appended within the bound as each is made (so what is held is bounded too): the removals, which
    come first in the patch (a type change's old side too), and what is written."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = 0
        self.removals: list[bytes] = []
        self.writes: list[bytes] = []
        self.files: set[str] = set()

    def add(self, path: str, text: str, removal: bool = False) -> None:
        data = text.encode("utf-8")  # names quoted, binary in base85, text only of characters a terminal draws
        self.size += len(data)
        if self.size > self.limit:
            raise PatchTooLargeError(self.size, self.limit)
        (self.removals if removal else self.writes).append(data)
        self.files.add(path)


def _write_all(layer: Layer, chosen: list[Change], writer: _Writer) -> list[Left]:
    """Each chosen change's diff into ``writer``; the changes left out, and why."""
    left: list[Left] = []
    written = Parents(chosen)
    lower, upper = open_repo(layer), open_upper(layer)
    try:
        for change in chosen:
            if FileType.DIR in (change.type, change.previous) and not has_entries(change):
                why = written.directory(change)
                if why:
                    left.append(Left(change, why))
                continue
            try:
                old, new = _sides(change, lower, upper, writer.limit)
            except (OSError, UnsafePathError) as err:
                left.append(Left(change, f"it could not be read ({type(err).__name__})"))
                continue
            why = _unpatchable(old, new)
            if why:
                left.append(Left(change, why))
            elif new is not None and old is not None and (old.mode == SYMLINK_MODE) == (new.mode == SYMLINK_MODE):
                writer.add(change.path, diff(change.path, old, new))
            else:
                if old is not None:
                    writer.add(change.path, diff(change.path, old, None), removal=True)
                if new is not None:
                    writer.add(change.path, diff(change.path, None, new))
    finally:
        os.close(lower)
        os.close(upper)
    return left


def has_entries(change: Change) -> bool:
    """Whether ``change`` has a side that is a file or a symlink (a directory's side is no entry of a patch or of
    a git tree)."""
    sides = (
        change.previous if change.kind != Kind.ADDED else None,
        change.type if change.kind != Kind.DELETED else None,
    )
    return any(side in (FileType.FILE, FileType.SYMLINK) for side in sides)


class Parents:
    """The directories above the files and symlinks the patch (or a pushed commit) removes, and above those it
    writes: git keeps no directory of its own, so a directory's change goes with its files or not at all."""

    def __init__(self, chosen: list[Change]) -> None:
        entries = [c for c in chosen if has_entries(c)]
        self.removing = _ancestors(c.path for c in entries if c.kind == Kind.DELETED)
        self.making = _ancestors(c.path for c in entries if c.kind != Kind.DELETED)

    def directory(self, change: Change) -> str:
        """Why a directory's change is left out; empty when git makes or removes it with its files."""
        if change.kind == Kind.DELETED:
            return "" if change.path in self.removing else "an empty directory's removal: git keeps files only"
        if change.previous != FileType.DIR and change.path in self.making:
            return ""
        return "a directory's own change (its mode, or an empty directory): git keeps files only"


def _ancestors(paths: Iterable[str]) -> set[str]:
    found: set[str] = set()
    for path in paths:
        parts = path.split("/")
        found.update("/".join(parts[:n]) for n in range(1, len(parts)))
    return found


def _sides(change: Change, lower: int, upper: int, limit: int) -> tuple[Side | None, Side | None]:
    """What the checkout holds at the change's path (None: no file or symlink) and what apply writes there."""
    old: Side | None = None
    new: Side | None = None
    if change.kind != Kind.ADDED and change.previous in (FileType.FILE, FileType.SYMLINK):
        held = beneath.lstat(lower, change.path)
        if held is not None and change.previous == FileType.SYMLINK:
            old = Side(SYMLINK_MODE, os.fsencode(beneath.readlink(lower, change.path)))
        elif held is not None:
            _within(held.st_size, limit)
            old = Side(file_mode(held.st_mode & 0o7777), _read(lower, change.path))
    if change.kind != Kind.DELETED and change.type == FileType.SYMLINK:
        new = Side(SYMLINK_MODE, os.fsencode(change.target or beneath.readlink(upper, change.path)))
    elif change.kind != Kind.DELETED and change.type == FileType.FILE:
        _within(change.size, limit)
        held_mode = change.previous_mode if change.previous == FileType.FILE else None
        new = Side(file_mode(applied_mode(change.mode, held_mode)), _read(upper, change.path))
    return old, new


def _within(size: int, limit: int) -> None:
    if size > limit:
        raise PatchTooLargeError(size, limit)


def _read(root: int, rel: str) -> bytes:
    with beneath.reading(root, rel) as fd:
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)


def file_mode(mode: int) -> str:
    """git's mode of a regular file: executable when the owner may run it."""
    return "100755" if mode & 0o100 else "100644"


def _unpatchable(old: Side | None, new: Side | None) -> str:
    """Why the change cannot be written as apply writes it; empty when it can. A symlink's target that is not plain
    text would have to be a binary hunk, which git applies to files only."""
    for side in (old, new):
        if side is not None and side.mode == SYMLINK_MODE and as_text(side.data) is None:
            return "a symlink whose target is not plain text"
    return ""


def diff(path: str, old: Side | None, new: Side | None) -> str:
    """git's extended diff of ``path`` from ``old`` to ``new`` (None: absent; not both): ASCII text."""
    a, b = quoted(b"a/" + os.fsencode(path)), quoted(b"b/" + os.fsencode(path))
    lines = [f"diff --git {a} {b}\n"]
    if old is None and new is not None:
        lines.append(f"new file mode {new.mode}\n")
    elif new is None and old is not None:
        lines.append(f"deleted file mode {old.mode}\n")
    elif old is not None and new is not None and old.mode != new.mode:
        lines += [f"old mode {old.mode}\n", f"new mode {new.mode}\n"]
    before, after = (b"" if side is None else side.data for side in (old, new))
    if old is not None and new is not None and before == after:
        return "".join(lines)  # a mode alone
    same = f" {old.mode}" if old is not None and new is not None and old.mode == new.mode else ""
    lines.append(f"index {blob_id(old)}..{blob_id(new)}{same}\n")
    texts = (as_text(before), as_text(after))
    if texts[0] is None or texts[1] is None:
        return "".join([*lines, "GIT binary patch\n", binary_literal(after), binary_literal(before)])
    if before or after:
        lines.append(f"--- {label(a) if old is not None else '/dev/null'}\n")
        lines.append(f"+++ {label(b) if new is not None else '/dev/null'}\n")
        lines += textdiff.hunks(texts[0], texts[1])
    return "".join(lines)


def label(name: str) -> str:
    """A name on a ``---``/``+++`` line as git writes it: a tab after one holding a space, so that no reader
    takes what follows the space for a date."""
    return name + "\t" if " " in name else name


def blob_id(side: Side | None) -> str:
    """git's object id of what ``side`` holds (a blob, SHA-1); zeros for an absent side."""
    if side is None:
        return NULL_ID
    return hashlib.sha1(b"blob %d\0" % len(side.data) + side.data, usedforsecurity=False).hexdigest()


def as_text(data: bytes) -> str | None:
    """``data`` as the text a unified diff may carry, or None when it must be a binary hunk: a NUL, bytes that are
    not UTF-8, more than ``textdiff.MAX_INPUT`` bytes, or a character a terminal obeys or draws as nothing (the
    ``\\r`` of a ``\\r\\n`` line ending excepted)."""
    if len(data) > textdiff.MAX_INPUT or b"\0" in data:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if inert.safe(text) == text.replace("\r\n", "\n") else None


def binary_literal(data: bytes) -> str:
    """One ``literal`` hunk of a ``GIT binary patch``: the size, then ``data`` deflated, in lines of at most
    ``BINARY_LINE`` bytes, each a length character (``A``-``Z`` for 1-26, ``a``-``z`` for 27-52) and git's base85
    of the line's bytes (its alphabet is RFC 1924's, ``base64.b85encode``'s; a last group of fewer than four bytes
    padded with zeros, as git's ``encode_85`` does), then an empty line."""
    packed = zlib.compress(data, ZLIB_LEVEL)
    lines = [f"literal {len(data)}\n"]
    lines += (_length_char(len(chunk)) + encode85(chunk) + "\n" for chunk in _chunks(packed, BINARY_LINE))
    return "".join([*lines, "\n"])


def _chunks(data: bytes, size: int) -> Iterator[bytes]:
    return (data[at : at + size] for at in range(0, len(data), size))


def _length_char(count: int) -> str:
    return chr(ord("A") + count - 1) if count <= 26 else chr(ord("a") + count - 27)


def encode85(data: bytes) -> str:
    """git's base85 of ``data``: five characters for each four bytes, big-endian, a last short group padded."""
    return base64.b85encode(data, pad=True).decode("ascii")


def quoted(name: bytes) -> str:
    """``name`` as git writes a path in a patch (``quote_c_style``): as is when every byte is printable ASCII other
    than ``"`` and ``\\``; else in double quotes, those two, ``\\a\\b\\t\\n\\v\\f\\r`` as backslash escapes and
    every other control byte or byte from 0x80 as three octal digits (``core.quotePath``, git's default)."""
    if all(0x20 <= byte < 0x7F and byte not in (0x22, 0x5C) for byte in name):
        return name.decode("ascii")
    out = []
    for byte in name:
        if byte in _ESCAPES:
            out.append("\\" + _ESCAPES[byte])
        elif 0x20 <= byte < 0x7F:
            out.append(chr(byte))
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def _comments(session_id: str, files: int, held: list[Change], left: list[Left], conflicts: list[Conflict]) -> str:
    """The ``#`` lines before the first diff: what the patch is, and each change it leaves out with how to get it."""
    sid = shlex.quote(_inert(session_id))
    lines = [
        f"# cubicle changes {sid} --patch: what a plain `cubicle apply {sid}` writes, for `git apply`, against the "
        f"checkout as it is now: {files} path(s) here; {len(held)} held back, {len(left)} not patchable and "
        f"{len(conflicts)} changed in the checkout, listed below.",
    ]
    if held:
        lines.append(
            f"# Held back: a plain `cubicle apply {sid}` does not write these, and this patch does not either:"
        )
        lines += _bounded([_held_line(sid, c) for c in held], sid)
    if left:
        lines.append(f"# Not in this patch, though a plain `cubicle apply {sid}` writes them (apply them with it):")
        lines += _bounded(
            [f"#   {printed(x.change.path)}: {x.why}; cubicle apply {sid} {printed(x.change.path)}" for x in left], sid
        )
    if conflicts:
        lines.append(
            f"# Changed in the checkout since the session saw them: a plain `cubicle apply {sid}` stops at these "
            "and writes nothing; not in this patch:"
        )
        lines += _bounded(
            [
                f"#   {printed(c.path)}: {_inert(c.reason)}; cubicle apply {sid} {printed(c.path)} --force {printed(c.path)}"
                for c in conflicts
            ],
            sid,
        )
    return "".join(line + "\n" for line in lines)


def _held_line(sid: str, change: Change) -> str:
    how = HOW_TO_APPLY.get(change.disposition)
    name = printed(change.path)
    get = how.format(sid=sid, path=name) if how else "never applied"
    reason = _inert(change.reason) or change.disposition.value
    return f"#   {change.disposition.value}: {name} ({reason}); {get}"


def _bounded(lines: list[str], sid: str) -> list[str]:
    if len(lines) <= MAX_LISTED_LINES:
        return lines
    more = len(lines) - MAX_LISTED_LINES
    return [*lines[:MAX_LISTED_LINES], f"#   ... and {more} more (`cubicle changes {sid}` lists them)"]


def printed(path: str) -> str:
    """A name in a comment line: as the review prints it (``records.shown``, then every character a terminal
    obeys spelled out, a newline and a tab too), as one shell word that ``cubicle apply`` takes."""
    return shlex.quote(_inert(shown(path)))


def _inert(text: str) -> str:
    """``text`` on one line of characters a terminal only draws: the hidden ones spelled out (``inert``), newlines
    and tabs too."""
    return inert.safe(text).replace("\n", "\\n").replace("\t", "\\t")
