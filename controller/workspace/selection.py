"""Which changes a name the user gives means: exactly one thing, or a refusal that names the candidates.

The review prints each path with ``records.shown``: the agent's non-UTF-8 bytes as ``\\xNN`` and its own
backslashes doubled, so no two paths print alike. A name given back (``cubicle apply ID PATH``, the API's
``paths`` and ``force``, a review comment's ``path``) may be a real path or a printed one, and the agent can
make one path's real name another's printed name (a file ``notes`` + byte 0xFF prints as ``notes\\xff``, which
is the real name of a directory the agent may make too). A name that reads as two different changes, or
trees of changes, is therefore refused, naming both with their ids, and nothing is written. An id
(``Change.id``, from the real path's bytes) always means one change: the viewer selects by it.

Names that print alike to a person are refused the same way: a name that means one change (or folder) whose
``lookalike.skeleton`` is another change's (``café.py`` composed and decomposed, ``build.sh`` and ``build.sh ``,
``notes`` and ``n\\u043etes``) could be the one the user did not review, whichever spelling they typed; the refusal
names each, spelled out (``lookalike.spelled``), with its id. An id is the deliberate choice, as for the twins.
``--force`` names are the exception: a force permits what it names exactly and selects nothing.
"""

from __future__ import annotations

from collections.abc import Collection

from ..errors import AmbiguousNameError, NotFoundError
from ..wire import lookalike
from ..wire.changeset import Change
from .records import shown, unshown

MAX_NAMED = 5
"""Candidates a refusal lists (each with its id)."""


def roots(given: Collection[str], changes: list[Change]) -> list[str]:
    """The real path each name in ``given`` means: a change's path, or a directory above changes, each given as it
    is or as the review printed it. A name meaning none is NotFoundError, one meaning two AmbiguousNameError."""
    found = []
    for name in given:
        root = _one_root(name, changes)
        if root is not None:
            _unlike(name, root, changes)
        if root is None:
            raise NotFoundError(
                f"No change of this session is at {shown(name)!r}: nothing was written.",
                hint="`cubicle changes ID` lists them; give each path as it shows it, or a directory above some.",
            )
        found.append(root)
    return found


def forced(given: Collection[str], changes: list[Change]) -> list[str]:
    """``roots`` for ``--force`` names: one that names no change is kept as given (it forces nothing), one that
    reads as two is refused all the same (forcing the wrong one would overwrite, or accept, what was not meant)."""
    return [_one_root(name, changes) or name for name in given]


def by_ids(ids: Collection[str], changes: list[Change]) -> list[str]:
    """The real paths of the changes with these ids; an id of no change is NotFoundError, nothing written."""
    paths: dict[str, list[str]] = {}
    for change in changes:
        paths.setdefault(change.id, []).append(change.path)
    found = []
    for wanted in ids:
        held = paths.get(wanted, [])
        if len(held) > 1:
            raise AmbiguousNameError(f"Id {wanted!r} is shared by {len(held)} changes: nothing was written.")
        if not held:
            raise NotFoundError(
                f"No change of this session has the id {shown(wanted)!r}: nothing was written.",
                hint="The session changed since it was listed: list its changes again.",
            )
        found.append(held[0])
    return found


def exactly(name: str, changes: list[Change]) -> Change | None:
    """The one change whose path is ``name``, real or printed; None when none is; AmbiguousNameError when two."""
    readings = _readings(name)
    hits = [c for c in changes if c.path in readings]
    if len({c.path for c in hits}) > 1:
        raise _ambiguous(name, {c.path: [c] for c in hits})
    if hits:
        _unlike(name, hits[0].path, changes)
    return hits[0] if hits else None


def _unlike(name: str, root: str, changes: list[Change]) -> None:
    """Refuse ``name``, which means ``root`` (a change's path or a folder above changes), when another change's
    path or folder looks like it: the user may have reviewed that one."""
    meant = lookalikes(root, changes)
    if len(meant) > 1:
        raise _ambiguous(name, meant)


def lookalikes(root: str, changes: list[Change]) -> dict[str, list[Change]]:
    """``root`` (a change's path or a folder above changes) and each other path or folder, at its depth, of the
    same ``lookalike.skeleton``, with the changes at or under each; ``root`` first."""
    key, depth = lookalike.skeleton(root), root.count("/") + 1
    meant: dict[str, list[Change]] = {root: []}
    for change in changes:
        prefix = "/".join(change.path.split("/")[:depth])
        if prefix.count("/") + 1 == depth and lookalike.skeleton(prefix) == key:
            meant.setdefault(prefix, []).append(change)
    return meant


def _readings(name: str) -> list[str]:
    """The real paths ``name`` may stand for: itself, and the path that prints as it (when it is a printed form)."""
    printed = unshown(name)
    return [name] if printed is None or printed == name else [name, printed]


def _one_root(name: str, changes: list[Change]) -> str | None:
    root = name.rstrip("/") or name
    meant = {reading: [c for c in changes if _at_or_under(c.path, reading)] for reading in _readings(root)}
    meant = {reading: hits for reading, hits in meant.items() if hits}
    if len(meant) > 1:
        raise _ambiguous(name, meant)
    return next(iter(meant), None)


def _ambiguous(name: str, meant: dict[str, list[Change]]) -> AmbiguousNameError:
    """The refusal of ``name``, naming each change (or folder of changes) it could mean, spelled out in full."""
    described = []
    for reading, hits in list(meant.items())[:MAX_NAMED]:
        own = next((c for c in hits if c.path == reading), None)
        printed = lookalike.spelled(shown(reading), strict=True)
        what = (
            f"the {own.type.value} printed {printed!r} (id {own.id})" if own else f"the directory printed {printed!r}"
        )
        below = len(hits) - (own is not None)
        described.append(what + (f", with {below} change(s) under it" if below else ""))
    return AmbiguousNameError(
        f"{shown(name)!r} could mean {len(meant)} different changes: "
        + "; or ".join(described)
        + ". Nothing was written."
    )


def _at_or_under(path: str, root: str) -> bool:
    return path == root or path.startswith(root + "/")
