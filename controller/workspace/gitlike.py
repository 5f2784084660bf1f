"""Directories git would take for a repository, and the agent's changes that would make one.

Walking up from its working directory, git takes a directory for a (bare) repository
when it holds ``HEAD`` plus ``objects/`` and ``refs/`` (or a ``commondir`` file), and then
obeys that directory's ``config`` (``core.pager``, ``core.fsmonitor``, aliases, hooks). So
the agent must not assemble one anywhere in the checkout, even outside ``.git``: when a
directory would look like a repository after the apply, the agent's entries there with
repository names (and everything below them) are marked unsafe, those of the environment's
definition too (``trusted``: a force can accept a definition, never a repository). Names are
compared case-insensitively, as a case-insensitive filesystem would.
"""

from __future__ import annotations

import contextlib
import os
from collections import defaultdict

from . import beneath
from .errors import UnsafePathError
from .records import Change, Disposition, Kind

REPO_NAMES = frozenset(
    {"head", "config", "commondir", "objects", "refs", "hooks", "info", "packed-refs", "index", "gitdir"}
)


def looks_like_repo(names: set[str]) -> bool:
    folded = {name.casefold() for name in names}
    return "head" in folded and ({"objects", "refs"} <= folded or "commondir" in folded)


def guard(changes: list[Change], lower_fd: int) -> None:
    """Mark unsafe the agent's repository-named entries in directories that would look like a repository."""
    members: dict[str, list[Change]] = defaultdict(list)
    children: dict[str, list[Change]] = defaultdict(list)
    for change in changes:
        parts = change.path.split("/")
        children["/".join(parts[:-1])].append(change)
        for depth, name in enumerate(parts):
            if name.casefold() in REPO_NAMES and change.kind != Kind.DELETED:
                members["/".join(parts[:depth])].append(change)
    for folder, found in members.items():
        if looks_like_repo(_names_after(lower_fd, folder, children[folder])):
            for change in found:
                if change.disposition in (Disposition.APPLY, Disposition.IGNORED, Disposition.TRUSTED):
                    change.disposition = Disposition.UNSAFE
                    change.reason = f"would make {folder or 'the repository root'!r} look like a git repository"


def _names_after(lower_fd: int, folder: str, direct: list[Change]) -> set[str]:
    names: set[str] = set()
    with contextlib.suppress(OSError, UnsafePathError):
        fd = _open(lower_fd, folder)
        try:
            names = set(os.listdir(fd))
        finally:
            os.close(fd)
    for change in direct:
        name = change.path.rsplit("/", 1)[-1]
        if change.kind == Kind.DELETED:
            names.discard(name)
        else:
            names.add(name)
    return names


def _open(root_fd: int, folder: str) -> int:
    if not folder:
        return os.dup(root_fd)
    with beneath.parent(root_fd, folder) as (parent_fd, name):
        return beneath.open_dir(parent_fd, name)
