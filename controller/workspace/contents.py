"""What each file of the checkout held when the session started, by content: so a conflict is a real change.

Apply and revert refuse a path the user changed since the session saw it. Judged by metadata
alone, a file that is byte for byte what the session saw but was rewritten (``git checkout``,
``git stash && git stash pop``, ``touch``, an edit undone by hand) would be a conflict. So the
session keeps, beside its metadata baseline, a content id for the files it can know cheaply,
and a path whose metadata moved is still no conflict when its type, mode and content id are
what the session expects.

The content id is git's blob id (SHA-1 of ``blob <size>\\0`` and the bytes). Its sources, at
session start:

1. **The checkout's own ``.git/index``, parsed here without running git**, in the walk's child that records the
   baseline (``Workspaces.create``), so an index of a million entries costs that child's bounded memory, not the
   controller's. An entry whose
   stat (size, mtime, inode) still matches the file names its blob id without a byte being
   read. An entry is trusted only when the file is older than the index itself (git's "racy
   clean" rule: a file written in the same second as the index may differ from its blob).
   Index versions 2, 3 and 4 are read; anything else (SHA-256 repositories among them, or a
   ``.git`` that is a file or a symlink) is no source, never an error.
2. **Otherwise, a hash taken at start**, bounded: files of at most ``MAX_HASHED_FILE`` bytes,
   ``MAX_HASHED_BYTES`` in all. A file past those has no content id and is judged by its
   metadata, as before.

After an apply (or a revert) the content ids of what it wrote are kept with its expectations
(``journal.Expectations``), so a later revert judges "what apply wrote" the same way.
"""

from __future__ import annotations

import hashlib
import os
import stat
import struct
from collections.abc import Iterator

from ..errors import UnsafePathError
from . import beneath

MAX_INDEX_BYTES = 64 << 20
"""A larger ``.git/index`` is not read (a checkout of millions of files): its files are hashed within the budget."""
MAX_HASHED_FILE = 1 << 20
MAX_HASHED_BYTES = 32 << 20
"""What session start may read to hash files the index does not vouch for."""
CHUNK = 1 << 20
SHA1_BYTES = 20
ENTRY_FIXED = 62
"""An index entry's fixed part: ten 32-bit stat fields, the 20-byte id and 16 bits of flags."""
EXTENDED = 0x4000
MAX_NAME = 4096
"""The longest path an entry may name (Linux's PATH_MAX): past it the index is not read."""


def blob_id_of(fd: int, size: int | None = None) -> str:
    """Git's blob id of the open file's bytes, read from its start (``size``: its length, if known)."""
    if size is None:
        size = os.fstat(fd).st_size
    digest = hashlib.sha1(b"blob %d\0" % size, usedforsecurity=False)
    offset = 0
    while offset <= size and (chunk := os.pread(fd, min(CHUNK, size + 1 - offset), offset)):  # a growing file: no
        digest.update(chunk)
        offset += len(chunk)
    if offset != size:  # it changed while read: no id rather than a wrong one
        return ""
    return digest.hexdigest()


def blob_id(root_fd: int, rel: str) -> str:
    """The blob id of the regular file at ``rel`` under ``root_fd`` (never through a symlink)."""
    with beneath.reading(root_fd, rel) as fd:
        return blob_id_of(fd)


class IndexEntry:
    __slots__ = ("blob", "ino", "mtime_ns", "size")

    def __init__(self, mtime_ns: int, ino: int, size: int, blob: str) -> None:
        self.mtime_ns = mtime_ns
        self.ino = ino
        self.size = size
        self.blob = blob

    def vouches_for(self, st: os.stat_result, index_mtime_ns: int) -> bool:
        """Whether this entry's blob is the file's content: its stat matches, and the file is older than the index
        by a whole second (git's racy-clean rule)."""
        return (
            self.mtime_ns == st.st_mtime_ns
            and self.size == st.st_size & 0xFFFFFFFF
            and self.ino == st.st_ino & 0xFFFFFFFF
            and st.st_mtime_ns // 1_000_000_000 < index_mtime_ns // 1_000_000_000
        )


class GitIndex:
    """The regular files' entries of a checkout's ``.git/index`` (stage 0 only), and when the index was written."""

    def __init__(self, entries: dict[str, IndexEntry], mtime_ns: int) -> None:
        self.entries = entries
        self.mtime_ns = mtime_ns

    def blob(self, rel: str, st: os.stat_result) -> str | None:
        entry = self.entries.get(rel)
        return entry.blob if entry is not None and entry.vouches_for(st, self.mtime_ns) else None


def read_index(root_fd: int) -> GitIndex | None:
    """The checkout's index, or None when there is none this module can read (see the module's docstring)."""
    try:
        with beneath.reading(root_fd, ".git/index") as fd:
            st = os.fstat(fd)
            if st.st_size > MAX_INDEX_BYTES:
                return None
            data = os.pread(fd, st.st_size, 0)
    except (OSError, UnsafePathError):
        return None
    try:
        return GitIndex(dict(_entries(data)), st.st_mtime_ns)
    except (struct.error, ValueError, IndexError, UnicodeDecodeError):
        return None


def _entries(data: bytes) -> Iterator[tuple[str, IndexEntry]]:
    signature, version, count = struct.unpack_from(">4sII", data, 0)
    if signature != b"DIRC" or version not in _NAME_READERS:
        raise ValueError("not an index this reader knows")
    end = len(data) - SHA1_BYTES  # the index's own checksum closes it
    offset, previous, named = 12, b"", 0
    for _ in range(count):
        start = offset
        _, _, mtime_s, mtime_ns, _, ino, mode, _, _, size, sha, flags = struct.unpack_from(">10I20sH", data, offset)
        offset += ENTRY_FIXED + (_EXTENDED_BYTES[version] if flags & EXTENDED else 0)
        name, offset = _NAME_READERS[version](data, start, offset, previous)
        named += len(name)  # v4 names are made from the last one: a few bytes each can name 4 KiB each
        if offset > end or len(name) > MAX_NAME or named > len(data):
            raise ValueError("an entry runs past the end of the index, or names more than a path can be")
        previous = name
        if (flags >> 12) & 0x3 == 0 and stat.S_ISREG(mode):  # stage 0, a regular file
            yield os.fsdecode(name), IndexEntry(mtime_s * 1_000_000_000 + mtime_ns, ino, size, sha.hex())


def _padded_name(data: bytes, start: int, offset: int, previous: bytes) -> tuple[bytes, int]:
    """An entry's name (versions 2 and 3), NUL-padded so that the entry's length is a multiple of eight (one NUL at
    least); and the offset of the next entry."""
    nul = data.index(b"\0", offset)
    return data[offset:nul], start + (nul - start + 8) // 8 * 8


def _stripped_name(data: bytes, start: int, offset: int, previous: bytes) -> tuple[bytes, int]:
    """An entry's name (version 4): the previous one less ``strip`` bytes, plus what follows; no padding."""
    strip, offset = _varint(data, offset)
    if strip > len(previous):
        raise ValueError("a name strips more than the previous name holds")
    nul = data.index(b"\0", offset)
    return previous[: len(previous) - strip] + data[offset:nul], nul + 1


# By index version: how its entries' names are written, and the bytes an entry's extended flags take.
_NAME_READERS = {2: _padded_name, 3: _padded_name, 4: _stripped_name}
_EXTENDED_BYTES = {2: 0, 3: 2, 4: 2}


def _varint(data: bytes, offset: int) -> tuple[int, int]:
    """Git's offset varint (each continuation adds one before shifting), and the offset after it; one longer than
    a name can be long (two bytes would do) is refused before it grows: its cost would be quadratic in its length."""
    byte = data[offset]
    value = byte & 0x7F
    offset += 1
    while byte & 0x80:
        byte = data[offset]
        value = ((value + 1) << 7) | (byte & 0x7F)
        offset += 1
        if value > MAX_NAME:
            raise ValueError("a name strips more than a path can be")
    return value, offset


class Hasher:
    """The content ids session start records: from the index where it vouches, else hashed within the budget."""

    def __init__(self, root_fd: int) -> None:
        self.index = read_index(root_fd)
        self.budget = MAX_HASHED_BYTES

    def blob(self, dir_fd: int, name: str, rel: str, st: os.stat_result) -> str | None:
        """The content id of the regular file ``name`` in ``dir_fd`` (``rel`` in the checkout), or None."""
        if self.index is not None and (known := self.index.blob(rel, st)) is not None:
            return known
        if st.st_size > MAX_HASHED_FILE or st.st_size > self.budget:
            return None
        self.budget -= st.st_size
        try:
            fd = beneath.open_file(dir_fd, name)
        except (OSError, UnsafePathError):
            return None
        try:
            if os.fstat(fd).st_ino != st.st_ino:
                return None  # replaced since it was listed
            return blob_id_of(fd) or None
        finally:
            os.close(fd)
