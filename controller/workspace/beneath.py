"""Opening paths beneath a directory file descriptor without ever following a symlink.

Every name in the layer was chosen by the agent, and the checkout may change under us.
A path string handed to the kernel whole follows any symlink along the way, so here a
path is walked one component at a time from a directory fd with ``O_NOFOLLOW``: a
symlink (or a non-directory) anywhere in the parent chain fails the walk instead of
leading somewhere else. This is the only place that turns a relative path into an fd.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

from ..errors import UnsafePathError

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO must not wait for a writer; O_NOCTTY: never adopt a terminal.
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY


def close_all(*fds: int | None) -> None:
    """Close each fd given (None stands for one never opened)."""
    for fd in fds:
        if fd is not None:
            os.close(fd)


def split(rel: str) -> list[str]:
    """The components of a relative path, refusing anything that could climb out or is ambiguous."""
    parts = rel.split("/")
    if not rel or "\x00" in rel or any(p in ("", ".", "..") for p in parts):
        raise UnsafePathError(f"Not a plain relative path: {rel!r}.")
    return parts


def open_root(path: Path) -> int:
    """An fd on a root directory; the root itself must not be a symlink."""
    return os.open(path, DIR_FLAGS)


def open_dir(parent_fd: int, name: str) -> int:
    """An fd on the directory ``name`` in ``parent_fd``; a symlink or non-directory there is refused."""
    try:
        return os.open(name, DIR_FLAGS, dir_fd=parent_fd)
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafePathError(f"{name!r} is a symlink or not a directory.") from None
        raise


@contextlib.contextmanager
def parent(root_fd: int, rel: str) -> Iterator[tuple[int, str]]:
    """Yield (fd of the directory holding ``rel``, its last name); a missing parent raises FileNotFoundError."""
    parts = split(rel)
    fd = os.dup(root_fd)
    try:
        for name in parts[:-1]:
            child = open_dir(fd, name)
            os.close(fd)
            fd = child
        yield fd, parts[-1]
    finally:
        os.close(fd)


def lstat(root_fd: int, rel: str) -> os.stat_result | None:
    """The entry at ``rel`` itself (a symlink is not followed), or None when it or a parent is absent."""
    try:
        with parent(root_fd, rel) as (fd, name):
            return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def readlink(root_fd: int, rel: str) -> str:
    with parent(root_fd, rel) as (fd, name):
        return os.readlink(name, dir_fd=fd)


def open_file(dir_fd: int, name: str) -> int:
    """A read fd on a regular file; anything else (FIFO, device, socket, symlink) is refused."""
    fd = os.open(name, READ_FLAGS, dir_fd=dir_fd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UnsafePathError(f"{name!r} is not a regular file.")
    return fd


@contextlib.contextmanager
def reading(root_fd: int, rel: str) -> Iterator[int]:
    """A read fd on the regular file at ``rel``, closed on exit."""
    with parent(root_fd, rel) as (dir_fd, name):
        fd = open_file(dir_fd, name)
    try:
        yield fd
    finally:
        os.close(fd)


def copy_fd(src: int, dst: int, limit: int | None = None) -> int:
    """Copy from ``src``'s current offset to ``dst``; in-kernel when the filesystem allows it."""
    total = 0
    while limit is None or total < limit:
        chunk = 1 << 20 if limit is None else min(1 << 20, limit - total)
        try:
            n = os.copy_file_range(src, dst, chunk)
        except OSError:
            data = os.read(src, chunk)
            n = len(data)
            write_all(dst, data)
        if n == 0:
            break
        total += n
    return total


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def remove_path(path: Path) -> None:
    """``remove_tree`` of the tree at ``path``, its parent opened as a root (not a symlink)."""
    parent = open_root(path.parent)
    try:
        remove_tree(parent, path.name)
    finally:
        os.close(parent)


def remove_tree(parent_fd: int, name: str) -> None:
    """Remove ``name`` and everything below it, never following a symlink, whatever the modes.

    Each subdirectory met is emptied of files and its own subdirectories are moved up into
    ``name`` itself, so a hostile depth costs neither recursion nor file descriptors (two at
    most). Directories are opened up (chmod 0700) first: the agent may leave them at 000.
    """
    st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=parent_fd)
        return
    if _removed_if_empty(parent_fd, name):
        return
    os.chmod(name, 0o700, dir_fd=parent_fd)
    top = open_dir(parent_fd, name)
    try:
        while entries := os.listdir(top):
            for entry in entries:
                _empty_into(top, entry)
    finally:
        os.close(top)
    os.rmdir(name, dir_fd=parent_fd)


def _removed_if_empty(parent_fd: int, name: str) -> bool:
    """Remove an empty directory without opening it: the kernel leaves overlay's ``work/work`` owned by root
    at mode 000, which only root could open, yet anyone who may write its parent may remove it empty."""
    try:
        os.rmdir(name, dir_fd=parent_fd)
    except OSError as err:
        if err.errno in (errno.ENOTEMPTY, errno.EEXIST):
            return False
        raise
    return True


def _empty_into(top: int, entry: str) -> None:
    """Remove ``entry`` of ``top`` if it is a file; if a directory, move its subdirectories up into ``top``."""
    if not stat.S_ISDIR(os.stat(entry, dir_fd=top, follow_symlinks=False).st_mode):
        os.unlink(entry, dir_fd=top)
        return
    if _removed_if_empty(top, entry):
        return
    os.chmod(entry, 0o700, dir_fd=top)
    sub = open_dir(top, entry)
    try:
        for inner in os.listdir(sub):
            if stat.S_ISDIR(os.stat(inner, dir_fd=sub, follow_symlinks=False).st_mode):
                os.chmod(inner, 0o700, dir_fd=sub)
                os.rename(inner, f".rm-{secrets.token_hex(8)}", src_dir_fd=sub, dst_dir_fd=top)
            else:
                os.unlink(inner, dir_fd=sub)
    finally:
        os.close(sub)
    os.rmdir(entry, dir_fd=top)
