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
from collections.abc import Callable, Collection

from ..errors import UnsafePathError
from ..wire.changeset import Change, Disposition, Kind
from . import beneath

REPO_NAMES = frozenset(
    {"head", "config", "commondir", "objects", "refs", "hooks", "info", "packed-refs", "index", "gitdir"}
)


def looks_like_repo(names: set[str]) -> bool:
    folded = {name.casefold() for name in names}
    return "head" in folded and ({"objects", "refs"} <= folded or "commondir" in folded)


def guard(changes: list[Change], lower_fd: int, deleting: Collection[str] | None = None) -> None:
    """Mark unsafe the agent's repository-named entries in directories that would look like a repository.

    A deletion counts as made when it is in ``deleting`` (an apply's chosen ones) or, without it, when a plain
    apply makes it (disposition ``apply``); any other may leave the checkout's entry where it is."""
    members: dict[str, list[Change]] = defaultdict(list)  # by the folder's case-folded path
    children: dict[str, list[Change]] = defaultdict(list)  # by the parent's exact path
    spelled: dict[str, set[str]] = defaultdict(set)  # each folder's spellings, all listed from the checkout
    for change in changes:
        parts = change.path.split("/")
        children["/".join(parts[:-1])].append(change)
        for folder in _repo_folders(parts) if change.kind != Kind.DELETED else ():
            members[folder.casefold()].append(change)
            spelled[folder.casefold()].add(folder)

    def made(change: Change) -> bool:
        return change.path in deleting if deleting is not None else change.disposition == Disposition.APPLY

    for key, found in members.items():
        names: set[str] = set()
        for folder in spelled[key]:
            names |= _names_after(lower_fd, folder, children[folder], made)
        if looks_like_repo(names):
            for change in found:
                if change.disposition in (Disposition.APPLY, Disposition.IGNORED, Disposition.TRUSTED):
                    change.disposition = Disposition.UNSAFE
                    change.reason = (
                        f"would make {min(spelled[key]) or 'the repository root'!r} look like a git repository"
                    )


def _repo_folders(parts: list[str]) -> list[str]:
    """The folders along a path (its ``parts``) that it names a repository's entry in (``HEAD``, ``refs``...)."""
    return ["/".join(parts[:depth]) for depth, name in enumerate(parts) if name.casefold() in REPO_NAMES]


def _names_after(lower_fd: int, folder: str, direct: list[Change], made: Callable[[Change], bool]) -> set[str]:
    """The names ``folder`` would hold after an apply, at the most: what the checkout holds there, less the
    deletions ``made`` says happen, plus every entry the agent adds there."""
    names: set[str] = set()
    with contextlib.suppress(OSError, UnsafePathError):
        fd = _open(lower_fd, folder)
        try:
            names = set(os.listdir(fd))
        finally:
            os.close(fd)
    for change in direct:
        if change.kind == Kind.DELETED and made(change):
            names.discard(change.path.rsplit("/", 1)[-1])
    return names | {change.path.rsplit("/", 1)[-1] for change in direct if change.kind != Kind.DELETED}


def _open(root_fd: int, folder: str) -> int:
    if not folder:
        return os.dup(root_fd)
    with beneath.parent(root_fd, folder) as (parent_fd, name):
        return beneath.open_dir(parent_fd, name)
