"""Checkpoints of the upper layer at the end of a turn, and rewinding to one.

A checkpoint is a copy of the upper directory — whiteouts, opaque markers (xattrs),
modes, owners and mtimes included — so its cost follows what the agent changed, never
the repository's size. Sharing inodes with the live upper would be wrong: the agent can
rewrite an upper file in place and so change the checkpoint. Sharing between checkpoints
is safe, since nothing writes them: a file whose upper inode has the same number, ctime,
size and mtime as when the previous checkpoint copied it (ctime moves on every write,
chmod or xattr change, and cannot be set by the agent) is hardlinked from that previous
checkpoint instead of copied. So a checkpoint costs one walk of the upper plus the bytes
changed since the last one.

Layout: ``checkpoints/<n>/`` is the tree, ``checkpoints/<n>.json`` its manifest, written
last: a checkpoint without a manifest is incomplete and ignored. Hardlinks inside the
upper are copied as separate files; sockets are not kept (they are never applied).

``rewind`` replaces the upper's contents with fresh copies of a checkpoint (new inodes,
so the agent cannot reach a checkpoint through them) and forgets later checkpoints. It
must run while the overlay is unmounted.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from pathlib import Path
from typing import Any

from . import beneath
from .errors import LayerMissingError
from .layer import Layer, ensure_unmounted
from .records import read_json, write_json

Manifest = dict[str, list[int]]


def numbers(layer: Layer) -> list[int]:
    return sorted(int(p.stem) for p in layer.checkpoints.glob("*.json") if p.stem.isdigit())


def checkpoint(layer: Layer) -> int:
    """Copy the upper layer as the next checkpoint; returns its number (1, 2, ...)."""
    done = numbers(layer)
    number = (done or [0])[-1] + 1
    previous = (layer.checkpoints / str(done[-1]), read_json(layer.checkpoints / f"{done[-1]}.json")) if done else None
    tree = layer.checkpoints / str(number)
    _remove(tree)  # left by a checkpoint that died before its manifest
    tree.mkdir(mode=0o700)
    copier = _Copier(previous)
    upper = beneath.open_root(layer.upper)
    try:
        copier.tree(upper, tree, "")
    finally:
        os.close(upper)
    write_json(layer.checkpoints / f"{number}.json", copier.manifest)
    return number


def rewind(layer: Layer, number: int) -> None:
    """Make the upper layer exactly as checkpoint ``number`` kept it; later checkpoints are dropped."""
    if number not in numbers(layer):
        raise LayerMissingError(f"There is no checkpoint {number}.")
    ensure_unmounted(layer)
    for entry in os.listdir(layer.upper):
        _remove(layer.upper / entry)
    source = beneath.open_root(layer.checkpoints / str(number))
    try:
        _Copier(None).tree(source, layer.upper, "")
    finally:
        os.close(source)
    for later in numbers(layer):
        if later > number:
            (layer.checkpoints / f"{later}.json").unlink()
            _remove(layer.checkpoints / str(later))


class _Copier:
    """Copies a tree read through fds into a private destination, reusing unchanged files of ``previous``."""

    def __init__(self, previous: tuple[Path, Any] | None) -> None:
        self.previous = previous
        self.manifest: Manifest = {}

    def tree(self, src_fd: int, dest: Path, prefix: str) -> None:
        with os.scandir(src_fd) as it:
            entries = [(e.name, e.stat(follow_symlinks=False)) for e in it]
        for name, st in entries:
            rel, target = prefix + name, dest / name
            if stat.S_ISDIR(st.st_mode):
                self.directory(src_fd, name, target, rel, st)
            elif stat.S_ISREG(st.st_mode):
                self.file(src_fd, name, target, rel, st)
            elif stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(name, dir_fd=src_fd), target)
            elif stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
                os.mknod(target, stat.S_IFCHR | 0o000, os.makedev(0, 0))  # a whiteout; unprivileged since Linux 5.8
            elif stat.S_ISFIFO(st.st_mode):
                os.mkfifo(target, 0o600)
            else:
                continue
            _finish(target, st)

    def directory(self, src_fd: int, name: str, target: Path, rel: str, st: os.stat_result) -> None:
        target.mkdir(mode=0o700)
        child = beneath.open_dir(src_fd, name)
        try:
            _copy_xattrs(child, target)
            self.tree(child, target, rel + "/")
        finally:
            os.close(child)

    def file(self, src_fd: int, name: str, target: Path, rel: str, st: os.stat_result) -> None:
        key = [st.st_ino, st.st_ctime_ns, st.st_size, st.st_mtime_ns]
        if self.previous is not None and self.previous[1].get(rel) == key:
            with contextlib.suppress(OSError):
                os.link(self.previous[0] / rel, target)
                self.manifest[rel] = key
                return
        fd = beneath.open_file(src_fd, name)
        try:
            out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                beneath.copy_fd(fd, out)
            finally:
                os.close(out)
            _copy_xattrs(fd, target)
            after = os.fstat(fd)
        finally:
            os.close(fd)
        if after.st_ctime_ns == st.st_ctime_ns:  # written to while we copied: do not share it later
            self.manifest[rel] = key


def _copy_xattrs(src_fd: int, target: Path) -> None:
    """Overlay's markers and the agent's own (escaped) user xattrs, before the mode can forbid writing them."""
    for attr in os.listxattr(src_fd):
        if attr.startswith("user."):
            os.setxattr(target, attr, os.getxattr(src_fd, attr), follow_symlinks=False)


def _finish(target: Path, st: os.stat_result) -> None:
    """Owner, mode and mtime last: chown clears setuid bits, and a read-only mode would block the rest."""
    if os.geteuid() == 0:
        os.chown(target, st.st_uid, st.st_gid, follow_symlinks=False)
    if not stat.S_ISLNK(st.st_mode):
        os.chmod(target, stat.S_IMODE(st.st_mode))
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)


def _remove(path: Path) -> None:
    """Remove a tree we own whatever modes it has (the agent may leave directories at 000)."""
    if path.is_symlink() or not path.exists():
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return
    if not path.is_dir():
        path.unlink()
        return
    os.chmod(path, 0o700)
    for root, dirs, _files in os.walk(path):
        for d in dirs:
            child = os.path.join(root, d)
            if not os.path.islink(child):
                with contextlib.suppress(OSError):
                    os.chmod(child, 0o700)
    shutil.rmtree(path)
