"""Checkpoints of the upper layer at the end of a turn, and rewinding to one.

A checkpoint is a manifest of the upper directory — every entry's type, mode, owner,
mtime and user xattrs (overlay's opaque markers among them), whiteouts and symlink
targets — plus the bytes of its regular files in a content-addressed blob store shared
by all checkpoints. No directory is created and no unchanged byte is copied, so a
checkpoint costs one walk of the upper, one manifest, and the bytes changed since the
last checkpoint.

A file is known unchanged when its upper inode still has the number, ctime, size and
mtime recorded last time: ctime moves on every write, chmod or xattr change and cannot
be set by the agent. Its blob is then reused without reading it. Blobs are never shared
with the live upper (the agent could rewrite such an inode in place): they are copies,
written under a temporary name and renamed to their SHA-256.

What one walk may cost is bounded, whatever the agent made. It stops past the layer's
``names`` limit (TooManyEntriesError, nothing recorded). A hard link's later names are
entries of kind ``h`` naming the first: its bytes, metadata and xattrs are kept once, and
rewind links the names again. Past ``MAX_XATTR_BYTES`` in one checkpoint the agent's own
xattrs are no longer kept (overlay's markers always are). The manifest is written and
read one entry at a time, never held whole. Not kept, since they are never applied:
sockets, files over ``MAX_APPLY_BYTES``, sparse files, and entries deeper than ``MAX_DEPTH``.

Layout: ``checkpoints/<n>.json`` (renamed into place last; its presence makes the checkpoint),
JSON Lines: a header ``{"manifest": 2}``, then one entry per line, each directory before what
it holds (an older release's manifest, one JSON array, is still read); and
``checkpoints/blobs/<sha256>``. ``rewind`` rebuilds the upper from a manifest with fresh
inodes, forgets later checkpoints and their unshared blobs; it must run while the overlay is
unmounted.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import json
import logging
import os
import secrets
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ..errors import LayerMissingError, TooManyEntriesError, WorkspaceError
from . import beneath, names
from .changes import MAX_APPLY_BYTES, MAX_DEPTH, MAX_PATH_BYTES, is_sparse, unreadable
from .layer import Layer, ensure_unmounted, open_upper

MAX_MANIFEST_BYTES = 256 << 20
"""A checkpoint whose manifest would be larger is not made: long names by the hundred thousand cost bytes per name."""
MAX_XATTR_BYTES = 16 << 20
"""Bytes of the agent's own xattrs (names and values) one checkpoint keeps; past them only overlay's markers are."""
MANIFEST_VERSION = 2
OVERLAY_MARKER = "user.overlay."
ESCAPED = "user.overlay.overlay."
"""With ``userxattr`` the kernel keeps the agent's own ``user.overlay.*`` under this prefix: never a marker."""
log = logging.getLogger(__name__)

# One manifest entry: [path, kind, mode, uid, gid, mtime_ns, {xattr: hex}, detail, key]
# kind: d(ir) f(ile) l(ink) w(hiteout) p (fifo) h(ard link); detail: blob sha256, link target, or (``h``)
# the path of the file's first name; key: reuse key of a file.
Entry = list[Any]
ReuseKey = tuple[int, int, int, int]
"""A regular file's inode number, ctime, size and mtime: while all four are the same, so are its bytes."""


@dataclass
class _Walk:
    """What one checkpoint's walk carries: where entries go, what may be reused, what it has spent."""

    out: IO[bytes]
    known: dict[ReuseKey, tuple[dict[str, str], str]]  # the last checkpoint's files: xattrs and blob, by reuse key
    blobs: Path
    limit: int
    seen: int = 0
    xattr_bytes: int = 0
    written: int = 0
    first_names: dict[int, str] = field(default_factory=dict)  # inode -> first path, for files with hard links

    def add(self, entry: Entry) -> None:
        line = json.dumps(entry, separators=(",", ":")).encode("utf-8", "surrogatepass") + b"\n"
        self.written += len(line)
        if self.written > MAX_MANIFEST_BYTES:
            raise WorkspaceError(
                f"The checkpoint's list of the layer's entries would be larger than {MAX_MANIFEST_BYTES >> 20} MiB "
                "(long names by the hundred thousand); it was not made. Earlier checkpoints are kept."
            )
        self.out.write(line)


def numbers(layer: Layer) -> list[int]:
    return sorted(int(p.stem) for p in layer.checkpoints.glob("*.json") if p.stem.isdigit())


def checkpoint(layer: Layer) -> int:
    """Record the upper layer as the next checkpoint; returns its number (1, 2, ...).

    A layer holding more names than its limit is not recorded (TooManyEntriesError): the names
    are counted before anything is copied, and the walk stops if the agent adds more meanwhile."""
    done = numbers(layer)
    number = (done or [0])[-1] + 1
    blobs = layer.checkpoints / "blobs"
    blobs.mkdir(mode=0o700, exist_ok=True)
    final = layer.checkpoints / f"{number}.json"
    tmp = final.with_name(f".{number}.json.{secrets.token_hex(4)}.tmp")
    upper = open_upper(layer)
    try:
        if names.count(upper, layer.info.names) > layer.info.names:
            raise TooManyEntriesError(layer.info.names)
        known = _reusable(layer, done[-1]) if done else {}
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb", buffering=1 << 16) as out:
            out.write(json.dumps({"manifest": MANIFEST_VERSION}).encode() + b"\n")
            _walk(upper, "", _Walk(out, known, blobs, layer.info.names))
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    finally:
        os.close(upper)
    return number


def _reusable(layer: Layer, number: int) -> dict[ReuseKey, tuple[dict[str, str], str]]:
    """The files of checkpoint ``number`` whose blob a later one may reuse, by reuse key (one per inode)."""
    return {
        (e[8][0], e[8][1], e[8][2], e[8][3]): (e[6], e[7])
        for e in entries(layer, number)
        if e[1] == "f" and e[8] is not None
    }


def rewind(layer: Layer, number: int) -> None:
    """Make the upper layer exactly as checkpoint ``number`` recorded it; later checkpoints are dropped."""
    if number not in numbers(layer):
        raise LayerMissingError(f"There is no checkpoint {number}.")
    ensure_unmounted(layer)
    kept = list(entries(layer, number))
    recover(layer, clean=True)
    staging = layer.fs / f"upper.rewind-{secrets.token_hex(4)}"
    root_st = os.stat(layer.upper)
    staging.mkdir(mode=0o700)
    try:
        for entry in kept:
            _create(staging, entry, layer.checkpoints / "blobs")
        for entry in sorted(kept, key=lambda e: -e[0].count("/")):
            if entry[1] != "h":  # a hard link's inode is finished under its first name
                _finish(staging / entry[0], entry)
        if os.geteuid() == 0:
            os.chown(staging, root_st.st_uid, root_st.st_gid)
        os.chmod(staging, stat.S_IMODE(root_st.st_mode))
    except OSError as err:
        _remove(layer, staging)
        raise WorkspaceError(
            f"Checkpoint {number} could not be restored ({err}); the files are as they were."
        ) from None
    _exchange(staging, layer.upper)  # one step: the old tree or the new one is ``upper`` at every instant
    for later in numbers(layer):
        if later > number:
            (layer.checkpoints / f"{later}.json").unlink()
    _collect_garbage(layer)
    _remove(layer, staging)  # the old tree; what cannot go (root's files, for a controller that is not) stays


def recover(layer: Layer, clean: bool = False) -> None:
    """Put back an upper a rewind left aside when it was killed between its two renames (no RENAME_EXCHANGE);
    with ``clean`` (a rewind starting, so none runs) also clear what killed rewinds left beside it."""
    old = layer.fs / "upper.old"
    if not os.path.lexists(layer.upper) and old.is_dir():
        os.rename(old, layer.upper)
    if clean:
        for leftover in [old, *layer.fs.glob("upper.rewind-*")]:
            _remove(layer, leftover)


def _exchange(new: Path, current: Path) -> None:
    """Swap two directories atomically (``renameat2(RENAME_EXCHANGE)``); where the kernel or libc lacks it,
    two renames that ``recover`` completes if the process dies between them."""
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is not None:
        at_fdcwd, rename_exchange = -100, 2
        if renameat2(at_fdcwd, os.fsencode(new), at_fdcwd, os.fsencode(current), rename_exchange) == 0:
            return
        if ctypes.get_errno() not in (errno.EINVAL, errno.ENOSYS):
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()), str(current))
    old = current.with_name("upper.old")
    os.rename(current, old)
    os.rename(new, current)
    os.rename(old, new)


def _remove(layer: Layer, path: Path) -> None:
    """Remove a tree the layer no longer needs; best effort (what is left is only clutter, and ``discard`` clears it)."""
    if not os.path.lexists(path):
        return
    try:
        beneath.remove_path(path)
    except OSError as err:
        log.warning("could not remove %s: %s", path, err)


def entries(layer: Layer, number: int) -> Iterator[Entry]:
    """The entries of checkpoint ``number``, one at a time, in the order they were walked."""
    yield from read_manifest(layer.checkpoints / f"{number}.json")


def read_manifest(path: Path) -> Iterator[Entry]:
    with path.open("rb") as f:
        first = f.readline()
        if first.startswith(b"["):  # an older release's manifest: one JSON array
            yield from json.loads((first + f.read()).decode("utf-8", "surrogatepass"))
            return
        header = json.loads(first)
        if not isinstance(header, dict) or header.get("manifest") != MANIFEST_VERSION:
            raise WorkspaceError(f"The checkpoint {path.name} is of an unknown format ({first[:80]!r}).")
        for line in f:
            yield json.loads(line.decode("utf-8", "surrogatepass"))


def _walk(dir_fd: int, prefix: str, walk: _Walk) -> None:
    if prefix.count("/") >= MAX_DEPTH:
        return  # deeper entries are not kept; ``scan`` lists such a tree as unsafe and it is never applied
    listing, more = names.listing(dir_fd, walk.limit - walk.seen)
    walk.seen += len(listing)
    if more:
        raise TooManyEntriesError(walk.limit)  # the agent went on adding names while the turn ended
    for name, st in listing:
        if len(os.fsencode(prefix + name)) > MAX_PATH_BYTES or unreadable(st):
            continue  # rewind recreates entries by path (a longer one could not come back); unreadable: never applied
        if not stat.S_ISDIR(st.st_mode):
            entry = _leaf(dir_fd, name, prefix + name, st, walk)
            if entry is not None:
                walk.add(entry)
            continue
        child = beneath.open_dir(dir_fd, name)
        try:
            walk.add(_entry(prefix + name, st, "d", _xattrs(child, walk)))
            _walk(child, prefix + name + "/", walk)
        finally:
            os.close(child)


def _entry(
    rel: str, st: os.stat_result, kind: str, xattrs: dict[str, str], detail: str | None = None, key: Any = None
) -> Entry:
    return [rel, kind, stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, st.st_mtime_ns, xattrs, detail, key]


def _leaf(dir_fd: int, name: str, rel: str, st: os.stat_result, walk: _Walk) -> Entry | None:
    """A non-directory's entry; a file's bytes are stored unless its inode is provably unchanged since the last
    checkpoint, and a hard link's later names only name its first."""
    if stat.S_ISREG(st.st_mode):
        return _file(dir_fd, name, rel, st, walk)
    if stat.S_ISLNK(st.st_mode):
        return _entry(rel, st, "l", {}, os.readlink(name, dir_fd=dir_fd))
    if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
        return _entry(rel, st, "w", {})
    if stat.S_ISFIFO(st.st_mode):
        return _entry(rel, st, "p", {})
    return None  # sockets: never applied, nothing to keep


def _file(dir_fd: int, name: str, rel: str, st: os.stat_result, walk: _Walk) -> Entry | None:
    """A regular file's entry: its bytes stored, or named by the last checkpoint's, or by its first hard link's."""
    if st.st_size > MAX_APPLY_BYTES or is_sparse(dir_fd, name, st):
        return None  # never applied either; keeping it would let the agent fill the data dir with what costs it nothing
    if st.st_nlink > 1:
        first = walk.first_names.setdefault(st.st_ino, rel)
        if first != rel:
            return _entry(rel, st, "h", {}, first)
    key = (st.st_ino, st.st_ctime_ns, st.st_size, st.st_mtime_ns)
    old = walk.known.get(key)
    if old is not None:
        return _entry(rel, st, "f", old[0], old[1], list(key))
    xattrs, sha, reuse = _store(dir_fd, name, walk, key)
    return _entry(rel, st, "f", xattrs, sha, reuse)


def _store(dir_fd: int, name: str, walk: _Walk, key: ReuseKey) -> tuple[dict[str, str], str, list[int] | None]:
    """Copy a file into the blob store while hashing it; returns (xattrs, sha256, reuse key or None)."""
    fd = beneath.open_file(dir_fd, name)
    try:
        digest = hashlib.sha256()
        tmp = walk.blobs / f".{secrets.token_hex(8)}.tmp"
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            while data := os.read(fd, 1 << 20):
                digest.update(data)
                beneath.write_all(out, data)
        finally:
            os.close(out)
        xattrs, after = _xattrs(fd, walk), os.fstat(fd)
    finally:
        os.close(fd)
    sha = digest.hexdigest()
    os.replace(tmp, walk.blobs / sha)
    return xattrs, sha, list(key) if after.st_ctime_ns == key[1] else None  # written to meanwhile: never reuse


def _xattrs(fd: int, walk: _Walk) -> dict[str, str]:
    """User xattrs: overlay's markers, always, and the agent's own (kept escaped by the kernel) while the
    checkpoint's allowance of xattr bytes lasts."""
    kept = {}
    for attr in os.listxattr(fd):
        if not attr.startswith("user."):
            continue
        marker = attr.startswith(OVERLAY_MARKER) and not attr.startswith(ESCAPED)
        if not marker and walk.xattr_bytes >= MAX_XATTR_BYTES:
            continue
        try:
            value = os.getxattr(fd, attr)
        except OSError:
            continue  # removed meanwhile
        if not marker:
            walk.xattr_bytes += len(attr) + len(value)
        kept[attr] = value.hex()
    return kept


def _create(staging: Path, entry: Entry, blobs: Path) -> None:
    path, kind, detail = staging / entry[0], entry[1], entry[7]
    if kind == "h":
        os.link(staging / detail, path, follow_symlinks=False)
        return
    if kind == "d":
        path.mkdir(mode=0o700)
    elif kind == "f":
        shutil.copyfile(blobs / detail, path, follow_symlinks=False)
        os.chmod(path, 0o600)
    elif kind == "l":
        os.symlink(detail, path)
    elif kind == "w":
        os.mknod(path, stat.S_IFCHR | 0o000, os.makedev(0, 0))  # a whiteout; unprivileged since Linux 5.8
    elif kind == "p":
        os.mkfifo(path, 0o600)
    for attr, value in entry[6].items():
        os.setxattr(path, attr, bytes.fromhex(value), follow_symlinks=False)


def _finish(path: Path, entry: Entry) -> None:
    """Owner, mode and mtime last (deepest first): chown clears setuid bits, a read-only mode blocks the rest."""
    if os.geteuid() == 0:
        os.chown(path, entry[3], entry[4], follow_symlinks=False)
    if entry[1] != "l":
        os.chmod(path, entry[2])
    os.utime(path, ns=(entry[5], entry[5]), follow_symlinks=False)


def _collect_garbage(layer: Layer) -> None:
    blobs = layer.checkpoints / "blobs"
    used = {e[7] for n in numbers(layer) for e in entries(layer, n) if e[1] == "f"}
    for blob in blobs.iterdir():
        if blob.name not in used:
            blob.unlink()
