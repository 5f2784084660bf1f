"""A Dockerfile's build context, read from the real checkout: listed, hashed and packed, bounded.

The context directory must resolve inside the repository. Its walk never follows a
symlink (a link is kept as a link, as ``docker build`` sends it), skips FIFOs, sockets and
devices, leaves out ``.git`` at any depth and whatever the context's ``.dockerignore``
excludes (Docker's own pattern rules, matched on RE2 in linear time). More than ``max_bytes`` of file contents or
``max_entries`` entries is refused, before anything is sent to the engine.

The hash covers each entry's name, type, permission bits, and contents or link target;
not owners or times, so the same files give the same hash in any checkout. Packing reads
the files again and checks each is the file listed and that the hash comes out the same,
so an image is never labelled with a hash of other contents.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ..errors import DefinitionError
from ..workspace.dockerignore import DockerIgnore
from .files import READ_FLAGS, is_inside, read_regular

MAX_CONTEXT_BYTES = 256 * 1024 * 1024
MAX_CONTEXT_ENTRIES = 50_000
ALWAYS_EXCLUDED = ".git"
"""Never part of a context: it changes with every commit (and would rebuild the image each time) and can be huge."""
DOCKERIGNORE = ".dockerignore"
CHUNK = 1 << 20


@dataclass(frozen=True)
class ContextEntry:
    """One path of the context: ``name`` relative to it (POSIX; undecodable bytes surrogate-escaped)."""

    name: str
    kind: str  # "dir", "file" or "symlink"
    mode: int
    size: int
    target: str
    device: int
    inode: int
    mtime: int


@dataclass(frozen=True)
class ScannedContext:
    """A context directory as listed: its real path and its entries in a stable order."""

    directory: Path
    entries: tuple[ContextEntry, ...]
    ignore_text: str

    @property
    def total_bytes(self) -> int:
        return sum(entry.size for entry in self.entries if entry.kind == "file")


def scan(
    directory: Path,
    root: Path,
    *,
    file: str,
    max_bytes: int | None = None,
    max_entries: int | None = None,
    leave_out: frozenset[str] = frozenset(),
) -> ScannedContext:
    """List the context at ``directory`` (already resolved inside ``root``), refusing one over the bounds.

    ``leave_out``: context-relative names never sent (the definition files, so editing a setup
    command does not rebuild the image).
    """
    max_bytes = MAX_CONTEXT_BYTES if max_bytes is None else max_bytes
    max_entries = MAX_CONTEXT_ENTRIES if max_entries is None else max_entries
    if not directory.is_dir():
        raise DefinitionError(f"{file}: the build context {directory} is not a directory.")
    ignore_text = _dockerignore(directory, root, file)
    patterns = [line.strip() for line in ignore_text.splitlines() if line.strip() and not line.startswith("#")]
    try:
        matcher = DockerIgnore(patterns)
    except ValueError as err:
        raise DefinitionError(f"{file}: the build context's .dockerignore: {err}.") from None
    negations = any(pattern.startswith("!") for pattern in patterns)
    walked = (entry for entry in _walk(directory, "", matcher, negations) if entry.name not in leave_out)
    entries = _bounded(walked, directory, file, max_bytes, max_entries)
    entries.sort(key=lambda e: _encoded(e.name))
    return ScannedContext(directory, tuple(entries), ignore_text)


def _bounded(
    walked: Iterator[ContextEntry], directory: Path, file: str, max_bytes: int, max_entries: int
) -> list[ContextEntry]:
    """The walk's entries, refused as soon as they hold more than ``max_bytes`` of files or number more than
    ``max_entries``: the walk stops there, not after listing the whole of a huge context."""
    entries: list[ContextEntry] = []
    total = 0
    for entry in walked:
        entries.append(entry)
        if entry.kind == "file":
            total += entry.size
        if total > max_bytes:
            raise DefinitionError(
                f"{file}: the build context {directory} holds more than {max_bytes // (1 << 20)} MiB of files.",
                hint="Narrow the context, or list what the build does not need (node_modules, build output, data) "
                "in its .dockerignore.",
            )
        if len(entries) > max_entries:
            raise DefinitionError(
                f"{file}: the build context {directory} has more than {max_entries} entries.",
                hint="Narrow the context, or list what the build does not need in its .dockerignore.",
            )
    return entries


def _dockerignore(directory: Path, root: Path, file: str) -> str:
    path = directory / DOCKERIGNORE
    if not os.path.lexists(path):
        return ""
    real = os.path.realpath(path)
    if not is_inside(root, real):
        raise DefinitionError(f"{file}: the context's .dockerignore resolves to {real}, outside the repository.")
    return read_regular(Path(real), 1 << 20, file=file, key="context").decode("utf-8", "replace")


def _walk(directory: Path, prefix: str, matcher: DockerIgnore, negations: bool) -> Iterator[ContextEntry]:
    try:
        with os.scandir(directory) as listing:
            children = sorted(listing, key=lambda c: c.name)
    except OSError as err:
        raise DefinitionError(f"the build context's directory {directory} cannot be listed: {err.strerror}.") from None
    for child in children:
        name = f"{prefix}{child.name}"
        if child.name == ALWAYS_EXCLUDED:
            continue
        info = child.stat(follow_symlinks=False)
        excluded = bool(matcher.matches(name))
        if stat.S_ISDIR(info.st_mode):
            yield from _directory(Path(child.path), name, info, excluded, matcher, negations)
        elif excluded:
            continue
        elif stat.S_ISREG(info.st_mode):
            yield _entry(name, "file", info)
        elif stat.S_ISLNK(info.st_mode):
            yield _entry(name, "symlink", info, os.readlink(child.path))
        # FIFOs, sockets and devices are left out: nothing in a build should read one.


def _directory(
    path: Path, name: str, info: os.stat_result, excluded: bool, matcher: DockerIgnore, negations: bool
) -> Iterator[ContextEntry]:
    """A directory's entry, unless excluded, and what it holds (a later !pattern may bring back something beneath)."""
    if not excluded:
        yield _entry(name, "dir", info)
    if not excluded or negations:
        yield from _walk(path, name + "/", matcher, negations)


def _entry(name: str, kind: str, info: os.stat_result, target: str = "") -> ContextEntry:
    size = info.st_size if kind == "file" else 0
    mtime = min(max(int(info.st_mtime), 0), 8**11 - 1)  # what a tar header holds
    return ContextEntry(name, kind, stat.S_IMODE(info.st_mode), size, target, info.st_dev, info.st_ino, mtime)


def _encoded(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def _open(context: ScannedContext, entry: ContextEntry) -> int:
    """Open a listed file again, refusing one that is no longer the file listed (replaced, or now a symlink)."""
    path = context.directory / entry.name
    try:
        fd = os.open(path, READ_FLAGS)
    except OSError as err:
        raise DefinitionError(f"the build context's file {entry.name!r} cannot be read: {err.strerror}.") from None
    info = os.fstat(fd)
    if (info.st_dev, info.st_ino) != (entry.device, entry.inode) or info.st_size != entry.size:
        os.close(fd)
        raise DefinitionError(f"the build context's file {entry.name!r} changed while it was read; try again.")
    os.set_blocking(fd, True)
    return fd


def _contents(context: ScannedContext, entry: ContextEntry) -> Iterator[bytes]:
    fd = _open(context, entry)
    try:
        left = entry.size
        while left > 0:
            chunk = os.read(fd, min(CHUNK, left))
            if not chunk:
                raise DefinitionError(f"the build context's file {entry.name!r} shrank while it was read; try again.")
            left -= len(chunk)
            yield chunk
    finally:
        os.close(fd)


def _header(hasher: Any, entry: ContextEntry) -> None:
    hasher.update(f"{entry.kind}\0{entry.mode:o}\0{entry.size}\0".encode())
    hasher.update(_encoded(entry.name) + b"\0" + _encoded(entry.target) + b"\0")


def digest(context: ScannedContext) -> str:
    """The context's content hash (sha256 hex)."""
    hasher = hashlib.sha256(b"cubicle-context-v1\0")
    for entry in context.entries:
        _header(hasher, entry)
        if entry.kind == "file":
            for chunk in _contents(context, entry):
                hasher.update(chunk)
    return hasher.hexdigest()


class _Reader:
    """A file object over a listed file's chunks, which also feeds the hash as tarfile reads it."""

    def __init__(self, chunks: Iterator[bytes], hasher: Any) -> None:
        self._chunks = chunks
        self._hasher = hasher
        self._buffer = b""

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self._buffer) < size:
            chunk = next(self._chunks, b"")
            if not chunk:
                break
            self._hasher.update(chunk)
            self._buffer += chunk
        if size < 0:
            data, self._buffer = self._buffer, b""
        else:
            data, self._buffer = self._buffer[:size], self._buffer[size:]
        return data


def pack(context: ScannedContext, archive: tarfile.TarFile, replace: dict[str, bytes] | None = None) -> str:
    """Add every entry to ``archive`` (owned by root, as ``docker build`` sends them); returns the context's hash.

    ``replace``: names whose contents are written instead of the file's (added when absent);
    the hash is still of the files as listed, so it can be checked against ``digest``.
    """
    replace = dict(replace or {})
    hasher = hashlib.sha256(b"cubicle-context-v1\0")
    for entry in context.entries:
        _header(hasher, entry)
        info = tarfile.TarInfo(entry.name)
        info.mode, info.mtime, info.uid, info.gid, info.uname, info.gname = entry.mode, entry.mtime, 0, 0, "", ""
        if entry.kind == "file":
            chunks = _contents(context, entry)
            if entry.name in replace:
                for chunk in chunks:
                    hasher.update(chunk)
                add_bytes(archive, entry.name, replace.pop(entry.name), entry.mode)
                continue
            info.size = entry.size
            archive.addfile(info, _Reader(chunks, hasher))
            for _ in chunks:  # tarfile reads exactly size bytes; exhausting the generator closes the file
                pass
            continue
        if entry.name in replace:  # a directory or link where a generated file goes: the file wins
            add_bytes(archive, entry.name, replace.pop(entry.name))
            continue
        if entry.kind == "dir":
            info.type = tarfile.DIRTYPE
        else:
            info.type, info.linkname = tarfile.SYMTYPE, entry.target
        archive.addfile(info)
    for name, data in replace.items():
        add_bytes(archive, name, data)
    return hasher.hexdigest()


def open_archive(fileobj: IO[bytes]) -> tarfile.TarFile:
    """A tar writer for a build context: GNU format, names written as their raw bytes."""
    return tarfile.open(
        fileobj=fileobj, mode="w", format=tarfile.GNU_FORMAT, encoding="utf-8", errors="surrogateescape"
    )


def add_bytes(archive: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    """Add one generated file (a Dockerfile, a script) owned by root."""
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, 0
    archive.addfile(info, io.BytesIO(data))
