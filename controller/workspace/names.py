"""Counting the names in a layer, boundedly: every walk of the agent's tree stops at the session's limit.

A name is one directory entry: a file, a directory, a link, a whiteout. Hard links cost the
agent one name each and no inode, so the inode quota does not bound them; this does. The
count reads directory entries only (``d_type``, no ``stat``), and stops one past ``limit``.
"""

from __future__ import annotations

import os

from . import beneath

DEFAULT_NAMES = 1_000_000
"""Names a session's layer may hold unless its limits say otherwise: far above any real repository's."""
MAX_DEPTH = 256
"""How deep every walk of a layer reads (``changes`` lists a deeper tree as unsafe, checkpoints skip it): a name
below it counts as past the limit."""


def count(root_fd: int, limit: int) -> int:
    """The names below the directory ``root_fd``, or ``limit + 1`` as soon as there are more than ``limit``
    or any name lies deeper than ``MAX_DEPTH`` directories (no walk reads there, so nothing there may be
    made unseen).

    A directory that cannot be opened (gone, or unreadable to a controller that is not root) is counted
    but not entered: no walk can read what it holds, so it costs none."""
    return _count(root_fd, limit, 0, 0)


def _count(dir_fd: int, limit: int, seen: int, depth: int) -> int:
    subdirs = []
    with os.scandir(dir_fd) as it:
        for entry in it:
            seen += 1
            if seen > limit or depth >= MAX_DEPTH:
                return limit + 1
            if entry.is_dir(follow_symlinks=False):
                subdirs.append(entry.name)
    for name in subdirs:
        try:
            child = beneath.open_dir(dir_fd, name)
        except OSError:
            continue
        try:
            seen = _count(child, limit, seen, depth + 1)
        finally:
            os.close(child)
        if seen > limit:
            return seen
    return seen


def listing(dir_fd: int, room: int) -> tuple[list[tuple[str, os.stat_result]], bool]:
    """The directory's entries (name, lstat) sorted by name, at most ``room`` of them (the first the kernel gives),
    and whether it holds more: a walk never holds more of one directory than its remaining allowance."""
    entries: list[tuple[str, os.stat_result]] = []
    with os.scandir(dir_fd) as it:
        for entry in it:
            if len(entries) >= room:
                return sorted(entries), True
            entries.append((entry.name, entry.stat(follow_symlinks=False)))
    return sorted(entries), False
