"""Checkpoints of the upper layer at the end of a turn, and rewinding to one.

A checkpoint is a manifest of the upper directory — every entry's type, mode, owner,
mtime and user xattrs (overlay's opaque markers among them), whiteouts and symlink
targets — plus the bytes of its regular files in a content-addressed blob store shared
by all checkpoints. No directory is created and no unchanged byte is copied, so a
checkpoint costs one walk of the upper, one JSON file, and the bytes changed since the
last checkpoint.

A file is known unchanged when its upper inode still has the number, ctime, size and
mtime recorded last time: ctime moves on every write, chmod or xattr change and cannot
be set by the agent. Its blob is then reused without reading it. Blobs are never shared
with the live upper (the agent could rewrite such an inode in place): they are copies,
written under a temporary name and renamed to their SHA-256.

Layout: ``checkpoints/<n>.json`` (written last; its presence makes the checkpoint) and
``checkpoints/blobs/<sha256>``. Hardlinks inside the upper come back as separate files.
Not kept, since they are never applied: sockets, files over ``MAX_APPLY_BYTES``, sparse files, and
entries deeper than ``MAX_DEPTH``. ``rewind`` rebuilds the upper from a
manifest with fresh inodes, forgets later checkpoints and their unshared blobs; it must
run while the overlay is unmounted.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import logging
import os
import secrets
import shutil
import stat
from pathlib import Path
from typing import Any

from . import beneath
from .changes import MAX_APPLY_BYTES, MAX_DEPTH, is_sparse, unreadable
from .errors import LayerMissingError, WorkspaceError
from .layer import Layer, ensure_unmounted, open_upper
from .records import read_json, write_json

MAX_PATH_BYTES = 3000
"""Entries whose path in the layer is longer are not kept (the layer's own path must fit beside it in PATH_MAX)."""
log = logging.getLogger(__name__)

# One manifest entry: [path, kind, mode, uid, gid, mtime_ns, {xattr: hex}, detail, key]
# kind: d(ir) f(ile) l(ink) w(hiteout) p (fifo); detail: blob sha256 or link target; key: reuse key of a file.
Entry = list[Any]


def numbers(layer: Layer) -> list[int]:
    return sorted(int(p.stem) for p in layer.checkpoints.glob("*.json") if p.stem.isdigit())


def checkpoint(layer: Layer) -> int:
    """Record the upper layer as the next checkpoint; returns its number (1, 2, ...)."""
    done = numbers(layer)
    number = (done or [0])[-1] + 1
    known = {e[0]: e for e in _load(layer, done[-1])} if done else {}
    blobs = layer.checkpoints / "blobs"
    blobs.mkdir(mode=0o700, exist_ok=True)
    entries: list[Entry] = []
    upper = open_upper(layer)
    try:
        _walk(upper, "", entries, known, blobs)
    finally:
        os.close(upper)
    write_json(layer.checkpoints / f"{number}.json", entries)
    return number


def rewind(layer: Layer, number: int) -> None:
    """Make the upper layer exactly as checkpoint ``number`` recorded it; later checkpoints are dropped."""
    if number not in numbers(layer):
        raise LayerMissingError(f"There is no checkpoint {number}.")
    ensure_unmounted(layer)
    entries = _load(layer, number)
    recover(layer, clean=True)
    staging = layer.fs / f"upper.rewind-{secrets.token_hex(4)}"
    root_st = os.stat(layer.upper)
    staging.mkdir(mode=0o700)
    try:
        for entry in entries:
            _create(staging / entry[0], entry, layer.checkpoints / "blobs")
        for entry in sorted(entries, key=lambda e: -e[0].count("/")):
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
    parent = beneath.open_root(path.parent)
    try:
        beneath.remove_tree(parent, path.name)
    except OSError as err:
        log.warning("could not remove %s: %s", path, err)
    finally:
        os.close(parent)


def _load(layer: Layer, number: int) -> list[Entry]:
    entries: list[Entry] = read_json(layer.checkpoints / f"{number}.json")
    return entries


def _walk(dir_fd: int, prefix: str, entries: list[Entry], known: dict[str, Entry], blobs: Path) -> None:
    if prefix.count("/") >= MAX_DEPTH:
        return  # deeper entries are not kept; ``scan`` lists such a tree as unsafe and it is never applied
    with os.scandir(dir_fd) as it:
        listing = sorted((e.name, e.stat(follow_symlinks=False)) for e in it)
    for name, st in listing:
        if len(os.fsencode(prefix + name)) > MAX_PATH_BYTES or unreadable(st):
            continue  # rewind recreates entries by path (a longer one could not come back); unreadable: never applied
        if not stat.S_ISDIR(st.st_mode):
            entry = _leaf(dir_fd, name, prefix + name, st, known.get(prefix + name), blobs)
            if entry is not None:
                entries.append(entry)
            continue
        child = beneath.open_dir(dir_fd, name)
        try:
            entries.append(_entry(prefix + name, st, "d", _xattrs(child)))
            _walk(child, prefix + name + "/", entries, known, blobs)
        finally:
            os.close(child)


def _entry(
    rel: str, st: os.stat_result, kind: str, xattrs: dict[str, str], detail: str | None = None, key: Any = None
) -> Entry:
    return [rel, kind, stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, st.st_mtime_ns, xattrs, detail, key]


def _leaf(dir_fd: int, name: str, rel: str, st: os.stat_result, old: Entry | None, blobs: Path) -> Entry | None:
    """A non-directory's entry; a file's bytes are stored unless its inode is provably unchanged since ``old``."""
    if stat.S_ISREG(st.st_mode):
        if st.st_size > MAX_APPLY_BYTES or is_sparse(dir_fd, name, st):
            return None  # never applied either; keeping it would let the agent fill the data dir with what costs it nothing
        key = [st.st_ino, st.st_ctime_ns, st.st_size, st.st_mtime_ns]
        if old is not None and old[8] == key:
            return _entry(rel, st, "f", old[6], old[7], key)
        xattrs, sha, reuse = _store(dir_fd, name, blobs, key)
        return _entry(rel, st, "f", xattrs, sha, reuse)
    if stat.S_ISLNK(st.st_mode):
        return _entry(rel, st, "l", {}, os.readlink(name, dir_fd=dir_fd))
    if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
        return _entry(rel, st, "w", {})
    if stat.S_ISFIFO(st.st_mode):
        return _entry(rel, st, "p", {})
    return None  # sockets: never applied, nothing to keep


def _store(dir_fd: int, name: str, blobs: Path, key: list[int]) -> tuple[dict[str, str], str, list[int] | None]:
    """Copy a file into the blob store while hashing it; returns (xattrs, sha256, reuse key or None)."""
    fd = beneath.open_file(dir_fd, name)
    try:
        digest = hashlib.sha256()
        tmp = blobs / f".{secrets.token_hex(8)}.tmp"
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            while data := os.read(fd, 1 << 20):
                digest.update(data)
                beneath.write_all(out, data)
        finally:
            os.close(out)
        xattrs, after = _xattrs(fd), os.fstat(fd)
    finally:
        os.close(fd)
    sha = digest.hexdigest()
    os.replace(tmp, blobs / sha)
    return xattrs, sha, key if after.st_ctime_ns == key[1] else None  # written to meanwhile: never reuse


def _xattrs(fd: int) -> dict[str, str]:
    """User xattrs: overlay's markers and the agent's own (stored escaped by the kernel)."""
    return {a: os.getxattr(fd, a).hex() for a in os.listxattr(fd) if a.startswith("user.")}


def _create(path: Path, entry: Entry, blobs: Path) -> None:
    kind, detail = entry[1], entry[7]
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
    used = {e[7] for n in numbers(layer) for e in _load(layer, n) if e[1] == "f"}
    for blob in blobs.iterdir():
        if blob.name not in used:
            blob.unlink()
