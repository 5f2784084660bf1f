"""The only code that writes the user's real checkout, one entry at a time.

Each operation walks to its parent with ``beneath`` (a symlinked or non-directory parent
is refused), and replaces an entry by creating a new inode under a temporary name in
the same directory and renaming it over the old one — so an existing hardlink or
symlink at the destination is replaced, never written through. Only regular files,
directories and symlinks are created; setuid, setgid and sticky bits never are (except
when ``restore`` puts back the user's own original). When the controller runs as root,
new entries are given to the checkout's owner.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import re
import secrets
import stat
from collections.abc import Collection, Iterable
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from ..errors import UnsafePathError
from ..wire.changeset import FileType
from . import beneath
from .records import Identity, file_type

SAFE_BITS = 0o777  # what apply keeps of a mode: setuid, setgid and sticky are stripped
SHARED_WRITE = 0o022  # write for group and others
NEW_DIR_MODE = 0o700
"""What ``make_dir`` creates a directory with; apply gives it its mode once everything under it is written."""


def applied_mode(mode: int, held: int | None) -> int:
    """The mode apply gives the agent's entry: ``SAFE_BITS`` of it, and write for group or others only where the
    checkout's own entry (``held``, its mode, None when there is none) had that bit already. So the agent can make
    a script executable but cannot open the user's files or directories to other local users. A sticky bit the
    checkout's directory had stays (it only narrows who may delete in it); setuid and setgid never reach it."""
    if held is None:
        return mode & (SAFE_BITS & ~SHARED_WRITE)
    return mode & (SAFE_BITS & ~SHARED_WRITE | held & SHARED_WRITE) | held & stat.S_ISVTX


TEMP_PREFIX = re.compile(r"\.cubicle-[0-9a-f]{12}-")
TEMP_NAME = re.compile(TEMP_PREFIX.pattern + r".*\.tmp", re.DOTALL)
"""What ``Checkout`` names its temporary files: never applied from a layer, so a sweep removes only its own."""


class Prior(BaseModel):
    """What a path held before an apply touched it, enough to put it back exactly."""

    model_config = ConfigDict(extra="forbid")

    type: FileType | None = None  # None: the path was absent
    mode: int = 0
    uid: int = 0
    gid: int = 0
    mtime_ns: int = 0
    target: str | None = None  # a symlink's target
    blob: str | None = None  # file name of the saved contents, in the apply's directory


class Checkout:
    """Writes into one checkout through a directory fd; ``owner`` is (uid, gid) to chown to, or None."""

    def __init__(self, root_fd: int, owner: tuple[int, int] | None) -> None:
        self.fd = root_fd
        self.owner = owner
        self.temp_prefix = f".cubicle-{secrets.token_hex(6)}-"
        """How every temporary name this instance makes begins. An apply or revert records it before it writes,
        so what a kill leaves under such a name can be found and removed later (``remove_leftovers``)."""

    def identity(self, rel: str) -> Identity | None:
        """What ``rel`` holds; None when absent, also when a parent is a file. A symlinked parent raises."""
        try:
            st = beneath.lstat(self.fd, rel)
        except UnsafePathError:
            if self._symlinked_parent(rel):
                raise
            return None
        if st is None:
            return None
        return Identity.of(st, beneath.readlink(self.fd, rel) if stat.S_ISLNK(st.st_mode) else None)

    def _symlinked_parent(self, rel: str) -> bool:
        parts = rel.split("/")
        for depth in range(1, len(parts)):
            st = beneath.lstat(self.fd, "/".join(parts[:depth]))
            if st is None or not stat.S_ISDIR(st.st_mode):
                return st is not None and stat.S_ISLNK(st.st_mode)
        return False

    def remove_leftovers(self, prefixes: Collection[str], dirs: Iterable[str]) -> list[str]:
        """Remove the temporary files and symlinks named with one of ``prefixes`` (made by a killed apply or
        revert) from the directories ``dirs``; returns their paths. Anything else is left alone."""
        valid = tuple(p for p in prefixes if TEMP_PREFIX.fullmatch(p))
        removed: list[str] = []
        for rel in sorted(set(dirs)) if valid else []:
            for path in self._temp_entries(rel, valid):
                st = beneath.lstat(self.fd, path)
                if st is not None and file_type(st.st_mode) in (FileType.FILE, FileType.SYMLINK):
                    self.remove(path)
                    removed.append(path)
        return removed

    def _temp_entries(self, rel: str, prefixes: tuple[str, ...]) -> list[str]:
        """The paths in directory ``rel`` named as temporary entries with one of ``prefixes``, by name."""
        try:
            names = self.names(rel)
        except (OSError, UnsafePathError):
            return []  # gone, or no longer a plain directory: nothing of ours can be in it
        return [posixpath.join(rel, n) for n in sorted(names) if n.startswith(prefixes) and n.endswith(".tmp")]

    def names(self, rel: str) -> set[str]:
        if not rel:
            return set(os.listdir(self.fd))
        with beneath.parent(self.fd, rel) as (parent_fd, name):
            fd = beneath.open_dir(parent_fd, name)
        try:
            return set(os.listdir(fd))
        finally:
            os.close(fd)

    def save(self, rel: str, blob: Path) -> Prior:
        """Record what ``rel`` holds; a regular file's bytes are copied to ``blob``."""
        st = beneath.lstat(self.fd, rel)
        if st is None:
            return Prior()
        kind = file_type(st.st_mode)
        prior = Prior(type=kind, mode=stat.S_IMODE(st.st_mode), uid=st.st_uid, gid=st.st_gid, mtime_ns=st.st_mtime_ns)
        if kind == FileType.SYMLINK:
            prior.target = beneath.readlink(self.fd, rel)
        elif kind == FileType.FILE:
            with beneath.reading(self.fd, rel) as src:
                _copy_to_new(src, blob)
            prior.blob = blob.name
        elif kind != FileType.DIR:
            raise UnsafePathError(f"The checkout holds a {kind.value} at {rel!r}; it is neither saved nor replaced.")
        return prior

    def remove(self, rel: str) -> None:
        with beneath.parent(self.fd, rel) as (fd, name):
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                os.rmdir(name, dir_fd=fd)
            else:
                os.unlink(name, dir_fd=fd)

    def write_file(self, rel: str, src_fd: int, mode: int, limit: int | None) -> None:
        with beneath.parent(self.fd, rel) as (fd, name):
            tmp = self._temp_name()
            out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd)
            try:
                try:
                    beneath.copy_fd(src_fd, out, limit)
                    self._own(out, mode)
                finally:
                    os.close(out)
                os.rename(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
            except BaseException:
                _unlink_quietly(tmp, fd)
                raise

    def write_symlink(self, rel: str, target: str) -> None:
        with beneath.parent(self.fd, rel) as (fd, name):
            tmp = self._temp_name()
            os.symlink(target, tmp, dir_fd=fd)
            try:
                if self.owner is not None:
                    os.chown(tmp, *self.owner, dir_fd=fd, follow_symlinks=False)
                os.rename(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
            except BaseException:
                _unlink_quietly(tmp, fd)
                raise

    def make_dir(self, rel: str) -> None:
        """Create ``rel`` (owner-writable until ``set_mode``), or leave an existing directory as it is."""
        with beneath.parent(self.fd, rel) as (fd, name):
            try:
                os.mkdir(name, 0o700, dir_fd=fd)
            except FileExistsError:
                os.close(beneath.open_dir(fd, name))  # refuses a symlink or a file in the way
                return
            child = beneath.open_dir(fd, name)
            try:
                self._own(child, NEW_DIR_MODE)
            finally:
                os.close(child)

    def set_mode(self, rel: str, mode: int) -> None:
        with beneath.parent(self.fd, rel) as (fd, name):
            child = beneath.open_dir(fd, name)
        try:
            os.fchmod(child, mode)
        finally:
            os.close(child)

    def restore(self, rel: str, prior: Prior, blobs: Path) -> None:
        """Put back exactly what ``save`` recorded: bytes, mode (special bits included), owner, mtime."""
        current = beneath.lstat(self.fd, rel)
        # In the way: anything where nothing was, and a directory where another kind was or the other way about (a
        # file or symlink is replaced by renaming over it).
        if current is not None and (
            prior.type is None or stat.S_ISDIR(current.st_mode) != (prior.type == FileType.DIR)
        ):
            self.remove(rel)
        if prior.type == FileType.FILE and prior.blob is not None:
            src = os.open(blobs / prior.blob, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                self.write_file(rel, src, prior.mode, limit=None)
            finally:
                os.close(src)
        elif prior.type == FileType.SYMLINK and prior.target is not None:
            self.write_symlink(rel, prior.target)
        elif prior.type == FileType.DIR:
            self.make_dir(rel)
            self.set_mode(rel, prior.mode)
        if prior.type is not None:
            self._restore_meta(rel, prior)

    def _restore_meta(self, rel: str, prior: Prior) -> None:
        with beneath.parent(self.fd, rel) as (fd, name):
            if os.geteuid() == 0:
                os.chown(name, prior.uid, prior.gid, dir_fd=fd, follow_symlinks=False)
            if prior.type == FileType.FILE:  # chown clears setuid bits, so the mode goes last
                os.chmod(name, prior.mode, dir_fd=fd)
            os.utime(name, ns=(prior.mtime_ns, prior.mtime_ns), dir_fd=fd, follow_symlinks=False)

    def _temp_name(self) -> str:
        return f"{self.temp_prefix}{secrets.token_hex(8)}.tmp"

    def _own(self, fd: int, mode: int) -> None:
        if self.owner is not None:
            os.fchown(fd, *self.owner)
        os.fchmod(fd, mode & SAFE_BITS)


def _unlink_quietly(name: str, dir_fd: int) -> None:
    """Remove a temporary entry that could not be renamed into place (a failure is already on its way up)."""
    with contextlib.suppress(OSError):
        os.unlink(name, dir_fd=dir_fd)


def _copy_to_new(src_fd: int, dest: Path) -> None:
    out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        beneath.copy_fd(src_fd, out)
    finally:
        os.close(out)
