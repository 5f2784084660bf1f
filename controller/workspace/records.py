"""What the layer keeps and reports: atomic JSON records, the identity of a checkout entry, a change.

Every piece of state lives in a file under the session's layer directory, written to a
temporary name, fsynced and renamed, so a controller killed at any instant leaves either
the old record or the new one, never half of one. Paths may hold any bytes the agent
chose; they are kept as ``os.fsdecode`` strings (lone surrogates for non-UTF-8 bytes),
which the stdlib ``json`` module round-trips and pydantic's Rust serializer does not —
hence ``json.dumps(model.model_dump())`` rather than ``model_dump_json``.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

from ..wire.changeset import FileType
from .beneath import write_all

M = TypeVar("M", bound=BaseModel)


def file_type(mode: int) -> FileType:
    if stat.S_ISREG(mode):
        return FileType.FILE
    if stat.S_ISDIR(mode):
        return FileType.DIR
    if stat.S_ISLNK(mode):
        return FileType.SYMLINK
    if stat.S_ISFIFO(mode):
        return FileType.FIFO
    if stat.S_ISSOCK(mode):
        return FileType.SOCKET
    return FileType.DEVICE


class Identity(BaseModel):
    """A cheap fingerprint of one checkout entry, enough to notice that someone changed it.

    Directories compare by type and mode only: their size and mtime move whenever an entry
    inside them changes, which is the entries' business, not theirs.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: FileType
    mode: int  # permission bits, setuid/setgid/sticky included
    size: int = 0
    mtime_ns: int = 0
    ino: int = 0
    target: str | None = None  # a symlink's target, never followed

    def same(self, other: Identity | None) -> bool:
        if other is None or other.type != self.type or other.mode != self.mode:
            return False
        return self.type == FileType.DIR or self == other

    def as_row(self) -> list[Any]:
        return [self.type.value, self.mode, self.size, self.mtime_ns, self.ino, self.target]

    @classmethod
    def from_row(cls, row: list[Any]) -> Identity:
        kind, mode, size, mtime_ns, ino, target = row
        return cls(type=FileType(kind), mode=mode, size=size, mtime_ns=mtime_ns, ino=ino, target=target)

    @classmethod
    def of(cls, st: os.stat_result, target: str | None = None) -> Identity:
        return cls.from_row(identity_row(st, target))


def shown(path: str) -> str:
    """A path as text that any encoder takes: the agent's non-UTF-8 bytes become ``\\xNN`` escapes, and a backslash
    of its own is doubled (``\\\\``), so no two paths print alike: a name holding the four characters ``\\xff``
    prints as ``\\\\xff``, the byte 0xFF as ``\\xff``. ``unshown`` reads it back."""
    return os.fsencode(path).replace(b"\\", b"\\\\").decode("utf-8", "backslashreplace")


def encodable(text: str) -> str:
    """Text of the agent's (a diff) that any encoder takes: its non-UTF-8 bytes as ``\\xNN``, nothing else changed.
    Not a name: a name is ``shown``, which no other name prints as."""
    return os.fsencode(text).decode("utf-8", "backslashreplace")


_ESCAPE = re.compile(r"\\(\\|x[0-9a-f]{2})")


def unshown(text: str) -> str | None:
    """The path that ``shown`` prints as ``text``, or None when ``text`` is no path's printed form (a lone
    backslash, an escape of a byte that needs none, a byte no printed form holds): the inverse of ``shown``."""
    pieces = _ESCAPE.split(text)  # text, escape, text, escape, ..., text
    try:
        raw = [
            piece.encode("utf-8") if at % 2 == 0 else b"\\" if piece == "\\" else bytes([int(piece[1:], 16)])
            for at, piece in enumerate(pieces)
        ]
    except UnicodeEncodeError:  # a lone surrogate: the agent's byte itself, never its printed form
        return None
    path = os.fsdecode(b"".join(raw))
    return path if shown(path) == text else None


def identity_row(st: os.stat_result, target: str | None = None) -> list[Any]:
    """An Identity as a plain list: the baseline holds tens of thousands, and models cost ~10x more."""
    kind = file_type(st.st_mode)
    size = st.st_size if kind != FileType.DIR else 0
    return [kind.value, stat.S_IMODE(st.st_mode), size, st.st_mtime_ns, st.st_ino, target]


def write_json(path: Path, data: Any) -> None:
    """Replace ``path`` atomically with ``data`` as JSON."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        write_all(fd, json.dumps(data, separators=(",", ":")).encode("utf-8", "surrogatepass"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    return json.loads(path.read_bytes().decode("utf-8", "surrogatepass"))


def save(path: Path, model: BaseModel) -> None:
    write_json(path, model.model_dump(mode="python"))


def load(path: Path, model: type[M]) -> M:
    return model.model_validate(read_json(path))
