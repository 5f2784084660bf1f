"""Apply the layer's changes to the real checkout: checked first, written all or nothing, undoable.

1. ``scan`` lists the changes; only disposition ``apply`` (and ``ignored`` when asked, and
   ``trusted`` when forced by name) are candidates, optionally narrowed to named paths.
2. Preflight writes nothing. A path conflicts when the checkout no longer holds what the
   session expects (the baseline, or what this session last wrote there); a removal
   conflicts when the directory holds entries this apply would not remove. Any conflict
   (not forced by name) returns the list and stops. Symlinks whose target passes through
   a symlink in the checkout are skipped as unsafe.
3. What every touched path holds is saved (``journal``), then the checkout is written
   through ``Checkout`` only: removals deepest first, then creations shallowest first,
   then directory modes. A failure midway restores the saved state and raises.
4. Applied paths leave the upper layer, so the sandbox sees the checkout's new state
   and the changes list no longer shows them. Inside an opaque directory that still has
   unapplied changes nothing is dropped, since dropping would hide the lower entries.

The upper layer must not be rewritten while mounted: call this with the sandbox stopped.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Collection, Iterable, Iterator
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from ..errors import ApplyTooLargeError, TooManyEntriesError, UnsafePathError, WorkspaceError
from ..wire.changeset import ApplyResult, Change, Conflict, Disposition, FileType, Kind
from . import beneath, gitlike, selection
from .changes import MAX_APPLY_BYTES, OPAQUE, UNSAFE_TYPES, scan
from .checkout import Checkout, Prior, applied_mode
from .journal import ApplyRecord, Expectations, Status, Step, interrupted, next_number, settle, step_dirs, write
from .layer import Layer, ensure_unmounted, open_repo, open_upper
from .records import Identity


@contextlib.contextmanager
def open_checkout(layer: Layer) -> Iterator[Checkout]:
    """The checkout, written as its owner: root chowns what it creates; anyone else must be the owner."""
    euid = os.geteuid()
    if euid not in (0, layer.info.uid):
        raise WorkspaceError(
            f"Only root or the checkout's owner (uid {layer.info.uid}) may write {layer.repo}; this is uid {euid}.",
            hint="Run the controller as the repository's owner, or as root.",
        )
    fd = open_repo(layer)
    try:
        yield Checkout(fd, (layer.info.uid, layer.info.gid) if os.geteuid() == 0 else None)
    finally:
        os.close(fd)


def apply(
    layer: Layer,
    paths: Collection[str] | None = None,
    include_ignored: bool = False,
    force: Collection[str] = (),
    bounds: ApplyBounds | None = None,
    build_inputs: bool = False,
    ids: Collection[str] | None = None,
) -> ApplyResult:
    """Apply the selected changes, or nothing at all when any of them conflicts.

    ``bounds`` limit what it may write, counted in whole blocks: into the checkout (each file is written whole,
    so hardlinks in the layer or files that are mostly one hole would become far more there than in the layer),
    its new entries, and the originals it keeps in the layer. Past any, ApplyTooLargeError and nothing is written.
    ``build_inputs`` acknowledges, once for all, the paths of a build context the environment's Dockerfile copies
    whole (disposition ``build_input``). ``paths`` and ``ids`` narrow it, each meaning one change (``selection``).
    """
    ensure_unmounted(layer)
    changes = scan(layer, with_diffs=False)
    if changes.truncated_at is not None:
        raise TooManyEntriesError(changes.truncated_at)  # what the walk did not read cannot be judged
    force = selection.forced(force, changes)
    chosen, skipped = selected(layer, changes, _wanted(changes, paths, ids), include_ignored, force, build_inputs)
    with open_checkout(layer) as checkout:
        for killed in interrupted(layer):
            checkout.remove_leftovers(killed.temp_prefixes, step_dirs(killed))
        if bounds is not None:
            _check_bounds(checkout, chosen, bounds)
        expect = Expectations(layer)
        conflicts, unsafe = _preflight(checkout, chosen, expect, force)
        chosen, skipped = _skip(chosen, skipped, unsafe)
        if conflicts or not chosen:
            return ApplyResult(conflicts=conflicts, skipped=skipped)
        record = _execute(layer, checkout, chosen)
        settle(layer, record, expect.update(checkout, [step.path for step in record.steps]))
    written = {c.path for c in chosen}
    _retire(layer, changes, written)
    left = {c.path for c in changes if c.disposition == Disposition.APPLY} - written
    return ApplyResult(applied=[c.path for c in chosen], skipped=skipped, record=record.number, left=len(left))


def selected(
    layer: Layer,
    changes: list[Change],
    paths: Collection[str] | None = None,
    include_ignored: bool = False,
    force: Collection[str] = (),
    build_inputs: bool = False,
) -> tuple[list[Change], list[Change]]:
    """What an apply of ``changes`` takes, and what it skips, before the checkout is consulted: ``_select``, then
    the repository look-alikes the chosen deletions would make (``_unsafe_lookalikes``) skipped as unsafe. ``paths``
    are real paths (``_wanted``), ``force`` real names (``selection.forced``). What ``apply`` and the session's
    patch (``gitpatch``) both start from, so that a patch carries exactly what a plain apply writes."""
    chosen, skipped = _select(changes, paths, include_ignored, force, build_inputs)
    return _skip(chosen, skipped, _unsafe_lookalikes(layer, changes, chosen))


def judged_here(layer: Layer, chosen: list[Change], force: Collection[str] = ()) -> tuple[list[Conflict], list[Change]]:
    """The preflight of ``chosen`` against the checkout as it is now, writing nothing: the conflicts an apply would
    stop at, and the changes it would skip as unsafe (a symlink whose target passes through another)."""
    fd = open_repo(layer)
    try:
        return _preflight(Checkout(fd, None), chosen, Expectations(layer), force)
    finally:
        os.close(fd)


BLOCK = 4096
"""What the smallest file or directory takes on a disk, at least: sizes are counted in these."""


class ApplyBounds(BaseModel):
    """What an apply may write: bytes into the checkout, entries it creates there, bytes of originals it keeps."""

    model_config = ConfigDict(extra="forbid")

    checkout_bytes: int
    checkout_entries: int
    saved_bytes: int
    combined_bytes: int | None = None  # the checkout and the layer share a filesystem: both together


def _blocks(size: int) -> int:
    return max(BLOCK, -(-size // BLOCK) * BLOCK)


def _check_bounds(checkout: Checkout, chosen: list[Change], bounds: ApplyBounds) -> None:
    """ApplyTooLargeError unless writing ``chosen`` fits ``bounds`` (sizes in whole blocks)."""
    written = [c for c in chosen if c.kind != Kind.DELETED]
    total = sum(_blocks(c.size if c.type == FileType.FILE else 0) for c in written)
    saved = sum(_blocks(held.size) for held in _originals(checkout, chosen) if held.type == FileType.FILE)
    limits = [
        ("bytes in the checkout", total, bounds.checkout_bytes),
        (ApplyTooLargeError.ENTRIES, len(written), bounds.checkout_entries),
        ("bytes of the checkout's originals kept in the layer", saved, bounds.saved_bytes),
        ("bytes written and kept together", total + saved, bounds.combined_bytes),
    ]  # fmt: skip - a table
    for what, used, bound in limits:
        if bound is not None and used > bound:
            raise ApplyTooLargeError(what, used, bound)


def _originals(checkout: Checkout, chosen: list[Change]) -> Iterator[Identity]:
    """What the checkout holds where ``chosen`` changes an existing entry (what an apply saves in the layer)."""
    for change in chosen:
        with contextlib.suppress(UnsafePathError, OSError):
            held = None if change.kind == Kind.ADDED else checkout.identity(change.path)
            if held is not None:
                yield held


def _select(
    changes: list[Change],
    paths: Collection[str] | None,
    include_ignored: bool,
    force: Collection[str] = (),
    build_inputs: bool = False,
) -> tuple[list[Change], list[Change]]:
    """The candidates: ``apply`` (and ``ignored`` when asked), and ``trusted`` paths only when forced by name.

    By name means the exact path: a force naming a directory (a conflict's, say, as the viewer's overwrite
    button sends them) overwrites what is under it but accepts no definition file there. A trusted
    directory the agent made (where the checkout has none) is taken along when a trusted path under it is named,
    so that it can be written.
    """
    asked = {Disposition.APPLY: True, Disposition.IGNORED: include_ignored, Disposition.BUILD_INPUT: build_inputs}
    taken = _trusted_taken(changes, force)
    chosen: list[Change] = []
    skipped: list[Change] = []
    for change in changes:
        (chosen if asked.get(change.disposition, False) or change.path in taken else skipped).append(change)
    return (chosen if paths is None else _narrowed(chosen, list(paths))), skipped


def _trusted_taken(changes: list[Change], force: Collection[str]) -> set[str]:
    """The trusted paths an apply takes: those forced by name, and the directories above them that the agent made
    (where the checkout has none, so that they can be written); a mode it gave an existing one stays unapplied."""
    trusted = [c for c in changes if c.disposition == Disposition.TRUSTED]
    holding = _all_ancestors(c.path for c in trusted if c.path in force)
    return {c.path for c in trusted if c.path in force or (c.path in holding and _made_here(c))}


def _made_here(change: Change) -> bool:
    """Whether ``change`` makes a directory where the checkout has none."""
    return change.type == FileType.DIR and change.kind != Kind.DELETED and change.previous != FileType.DIR


def _narrowed(eligible: list[Change], paths: list[str]) -> list[Change]:
    """The eligible changes at or under ``paths``, with the directories above them that the checkout lacks (the
    agent's mode on one that exists is a change of its own, applied only when named)."""
    named = [c for c in eligible if under_any(c.path, paths)]
    needed = _all_ancestors(c.path for c in named)
    made = [c for c in eligible if c.path in needed and _made_here(c)]
    return sorted({c.path: c for c in named + made}.values(), key=lambda c: c.path)


def _unsafe_lookalikes(layer: Layer, changes: list[Change], chosen: list[Change]) -> list[Change]:
    """``scan`` judged repository lookalikes by the deletions a plain apply makes; this apply may make fewer (only
    some paths chosen) or more (ignored ones too). Judged again by the deletions chosen: the chosen changes that
    would now make a repository, marked unsafe."""
    again = [change.model_copy() for change in changes]
    lower = open_repo(layer)
    try:
        gitlike.guard(again, lower, {c.path for c in chosen if c.kind == Kind.DELETED})
    finally:
        os.close(lower)
    judged = {change.path: change for change in again}
    return [judged[c.path] for c in chosen if judged[c.path].disposition == Disposition.UNSAFE]


def _skip(chosen: list[Change], skipped: list[Change], unsafe: list[Change]) -> tuple[list[Change], list[Change]]:
    """``chosen`` without the ``unsafe`` ones, which join ``skipped``."""
    dropped = {c.path for c in unsafe}
    return [c for c in chosen if c.path not in dropped], skipped + unsafe


def _wanted(changes: list[Change], paths: Collection[str] | None, ids: Collection[str] | None) -> list[str] | None:
    """The real paths an apply is narrowed to (None: all of them), each meaning exactly one change or tree."""
    if paths is None and ids is None:
        return None
    return selection.roots(paths or (), changes) + selection.by_ids(ids or (), changes)


def under_any(path: str, roots: Collection[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def _ancestors(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def _all_ancestors(paths: Iterable[str]) -> set[str]:
    return {parent for path in paths for parent in _ancestors(path)}


def _removes(change: Change) -> bool:
    """Whether the checkout's entry must go first: a deletion, or a change between directory and non-directory."""
    if change.kind == Kind.DELETED:
        return True
    return change.kind == Kind.MODIFIED and (change.previous == FileType.DIR) != (change.type == FileType.DIR)


def _preflight(
    checkout: Checkout, chosen: list[Change], expect: Expectations, force: Collection[str]
) -> tuple[list[Conflict], list[Change]]:
    conflicts: list[Conflict] = []
    unsafe: list[Change] = []
    plan = _Plan(chosen)
    for change in chosen:
        try:
            reason = _conflict(checkout, change, expect, under_any(change.path, force), plan)
            problem = _symlink_detour(checkout, change, plan)
        except UnsafePathError:
            reason, problem = "a parent directory in the checkout is a symlink or not a directory", ""
        if reason:
            conflicts.append(Conflict(path=change.path, reason=reason))
        elif problem:
            unsafe.append(change.model_copy(update={"disposition": Disposition.UNSAFE, "reason": problem}))
    return conflicts, unsafe


class _Plan:
    """What the chosen changes make, remove and replace, for judging each against the checkout."""

    def __init__(self, chosen: list[Change]) -> None:
        self.dirs = {c.path for c in chosen if c.kind != Kind.DELETED and c.type == FileType.DIR}
        self.removed = {c.path for c in chosen if _removes(c)}
        self.links = {c.path for c in chosen if c.kind != Kind.DELETED and c.type == FileType.SYMLINK}
        self.undirs = _undirs(chosen)

    def kept_entries(self, checkout: Checkout, change: Change, current: Identity | None) -> str:
        """The conflict of a removal whose directory holds entries this apply does not remove."""
        if not _removes(change) or current is None or current.type != FileType.DIR:
            return ""
        kept = sorted(n for n in checkout.names(change.path) if f"{change.path}/{n}" not in self.removed)
        return f"the directory holds entries this apply does not remove: {kept[:5]}" if kept else ""

    def parent_gone(self, checkout: Checkout, change: Change) -> str:
        """The conflict of a creation whose parent directory neither the checkout holds nor this apply makes."""
        parent = change.path.rpartition("/")[0]
        if change.kind == Kind.DELETED or not parent or parent in self.dirs:
            return ""
        held = checkout.identity(parent)
        if held is None or held.type != FileType.DIR or parent in self.removed:
            return "its parent directory no longer exists in the checkout"
        return ""


def _undirs(chosen: list[Change]) -> set[str]:
    """Non-directories a directory replaces: nothing can be below them in the checkout yet."""
    return {c.path for c in chosen if c.kind == Kind.MODIFIED and c.type == FileType.DIR and c.previous != FileType.DIR}


def _below_undir(path: str, undirs: set[str]) -> bool:
    """Whether ``path`` is under a non-directory this apply replaces by a directory (so the checkout has nothing)."""
    return any(a in undirs for a in _ancestors(path))


def _conflict(checkout: Checkout, change: Change, expect: Expectations, forced: bool, plan: _Plan) -> str:
    current = None if _below_undir(change.path, plan.undirs) else checkout.identity(change.path)
    if current is not None and current.type in UNSAFE_TYPES:
        return f"the checkout holds a {current.type.value} here"
    if not forced and not expect.holds(checkout, change.path, current):
        return "changed in the checkout since the session started (or since this session last applied it)"
    return plan.kept_entries(checkout, change, current) or plan.parent_gone(checkout, change)


def _symlink_detour(checkout: Checkout, change: Change, plan: _Plan) -> str:
    """Why a symlink's target, walked as the kernel would from the checkout, passes through a symlink."""
    if change.kind == Kind.DELETED or change.type != FileType.SYMLINK:
        return ""
    where = change.path.split("/")[:-1]
    for part in (change.target or "").split("/"):
        if part == "..":
            where.pop()
        elif part not in ("", "."):
            where.append(part)
            rel = "/".join(where)
            held = checkout.identity(rel)
            if rel in plan.links or (held is not None and held.type == FileType.SYMLINK and rel not in plan.removed):
                return "the symlink's target passes through another symlink"
    return ""


def _execute(layer: Layer, checkout: Checkout, chosen: list[Change]) -> ApplyRecord:
    """Save what every touched path holds, then write; on failure put it all back and raise."""
    folder = layer.applies / str(next_number(layer))
    folder.mkdir(mode=0o700)
    removals = sorted((c for c in chosen if _removes(c)), key=lambda c: (-c.path.count("/"), c.path))
    creations = sorted((c for c in chosen if c.kind != Kind.DELETED), key=lambda c: (c.path.count("/"), c.path))
    order = removals + [c for c in creations if not _removes(c)]
    undirs = _undirs(chosen)
    try:  # nothing is written to the checkout until every original is saved
        steps = [
            Step(path=c.path, change=c, prior=_save(checkout, c.path, undirs, folder / str(i)))
            for i, c in enumerate(order)
        ]
        record = ApplyRecord(
            number=int(folder.name), status=Status.PENDING, steps=steps, temp_prefixes=[checkout.temp_prefix]
        )
        write(layer, record)
    except BaseException:
        with contextlib.suppress(OSError):
            beneath.remove_path(folder)
        raise
    try:
        _write(layer, checkout, removals, creations, steps)
    except (OSError, WorkspaceError) as err:
        for step in reversed(steps):
            with contextlib.suppress(OSError, WorkspaceError):
                checkout.restore(step.path, step.prior, folder)
        record.status = Status.REVERTED
        write(layer, record)
        raise WorkspaceError(f"Apply failed at the checkout and was rolled back: {err}.") from err
    return record


def step_mode(step: Step) -> int:
    """The mode the step's change is written with: ``applied_mode``, against what the checkout held there before."""
    held = step.prior.mode if step.prior.type == step.change.type else None
    return applied_mode(step.change.mode, held)


def _save(checkout: Checkout, rel: str, undirs: set[str], blob: Path) -> Prior:
    """What ``rel`` holds; nothing when an ancestor is a non-directory being replaced by a directory."""
    if _below_undir(rel, undirs):
        return Prior()
    return checkout.save(rel, blob)


def _write(
    layer: Layer, checkout: Checkout, removals: list[Change], creations: list[Change], steps: list[Step]
) -> None:
    upper = open_upper(layer)
    try:
        modes = {step.path: step_mode(step) for step in steps}
        for change in removals:
            with contextlib.suppress(FileNotFoundError):
                checkout.remove(change.path)
        for change in creations:
            if change.type == FileType.DIR:
                checkout.make_dir(change.path)
            elif change.type == FileType.SYMLINK:
                checkout.write_symlink(change.path, change.target or "")
            else:
                with beneath.reading(upper, change.path) as src:
                    checkout.write_file(change.path, src, modes[change.path], MAX_APPLY_BYTES)
        for change in reversed(creations):
            if change.type == FileType.DIR:
                checkout.set_mode(change.path, modes[change.path])
    finally:
        os.close(upper)


def _retire(layer: Layer, changes: list[Change], applied: set[str]) -> None:
    """Drop applied paths from the upper layer, deepest first, except under opaque dirs with work left.

    An opaque directory with nothing left to apply below it now matches the checkout, so its
    marker goes too (else it would hide what was just applied), and it goes when empty,
    unless it is a directory the checkout had at the session's start: ``headroom`` made those
    so that a deletion there works at the quota. Such a one is kept; one this apply wrote gets
    the checkout's mode (what was written, setgid and the like stripped), so it shows the
    checkout as it is. A path whose own change stays unapplied loses only its opaque marker.
    """
    upper = open_upper(layer)
    repo = open_repo(layer)
    start = layer.baseline()
    try:
        left = {c.path for c in changes if c.path not in applied}
        blocked = {a for a in _all_ancestors(left) if is_opaque(upper, a)}
        for path in sorted(applied | _all_ancestors(applied), key=lambda p: -p.count("/")):
            if under_any(path, blocked):
                continue
            if path in left:  # a change of its own not applied (a directory's mode, say): only its marker goes
                _unmark(upper, path)
                continue
            was = start.get(path)
            keep = was is not None and was.type == FileType.DIR
            _drop(upper, repo if keep else None, path, only_if_empty=path not in applied, reset=path in applied)
    finally:
        os.close(upper)
        os.close(repo)


def is_opaque(upper: int, rel: str) -> bool:
    """Whether the directory ``rel`` under ``upper`` carries overlay's opaque marker (no symlink followed)."""
    try:
        with beneath.parent(upper, rel) as (parent_fd, name):
            fd = beneath.open_dir(parent_fd, name)
        try:
            return os.getxattr(fd, OPAQUE) == b"y"
        finally:
            os.close(fd)
    except OSError:
        return False


def _unmark(upper: int, rel: str) -> None:
    with contextlib.suppress(OSError), beneath.parent(upper, rel) as (fd, name):
        child = beneath.open_dir(fd, name)
        try:
            os.removexattr(child, OPAQUE)
        finally:
            os.close(child)


def _drop(upper: int, keep_as_in: int | None, rel: str, only_if_empty: bool, reset: bool) -> None:
    """Remove ``rel`` from the upper layer; a directory only when empty, and none at all with ``keep_as_in`` (the
    checkout's fd) where the checkout holds a directory: that one stays, given the checkout's mode when ``reset``
    (it was applied: what the apply wrote, setgid and the like stripped), else as it was (a setup's mode, say)."""
    with contextlib.suppress(OSError), beneath.parent(upper, rel) as (fd, name):
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            child = beneath.open_dir(fd, name)
            try:
                with contextlib.suppress(OSError):
                    os.removexattr(child, OPAQUE)
                held = beneath.lstat(keep_as_in, rel) if keep_as_in is not None else None
                if held is not None and stat.S_ISDIR(held.st_mode):
                    if reset:
                        os.chmod(child, stat.S_IMODE(held.st_mode))
                    return
            finally:
                os.close(child)
            os.rmdir(name, dir_fd=fd)  # only when empty: what is left in it is still a change
        elif not only_if_empty:
            os.unlink(name, dir_fd=fd)
