"""Undo the newest apply not yet reverted, putting the checkout back byte for byte.

Every path the apply touched must still hold what the session expects (what the apply
wrote, or what a later revert restored); otherwise the user changed it since, and
revert writes nothing and returns those paths, unless they are forced by name. Restores
run in the reverse order of the apply's steps, so a directory the apply created is
emptied before it is removed, and one it removed exists again before its entries return.
The reverted changes do not return to the layer: the sandbox then sees the checkout.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Collection
from pathlib import Path

from ..errors import UnsafePathError
from ..wire.changeset import Conflict, FileType, Kind, RevertResult
from . import beneath
from .apply import open_checkout, step_mode, under_any
from .changes import same_bytes
from .checkout import NEW_DIR_MODE, Checkout
from .journal import ApplyRecord, Expectations, Status, Step, newest_unreverted, step_dirs, write
from .layer import Layer, ensure_unmounted, open_repo, open_upper
from .records import Identity


def revert(layer: Layer, force: Collection[str] = ()) -> RevertResult:
    ensure_unmounted(layer)  # it rewrites the directories apply kept in the upper layer
    record = newest_unreverted(layer)
    folder = layer.applies / str(record.number)
    with open_checkout(layer) as checkout:
        # What a kill in the middle of this apply (or of an earlier revert of it) left under a temporary name
        # would otherwise stay in the checkout, and look like an entry the user added to a directory to remove.
        checkout.remove_leftovers(record.temp_prefixes, step_dirs(record))
        expect = Expectations(layer)
        conflicts = _conflicts(layer, checkout, expect, record, force)
        if conflicts:
            return RevertResult(record=record.number, conflicts=conflicts)
        record.temp_prefixes.append(checkout.temp_prefix)
        write(layer, record)
        opened = _open_dirs(checkout, record.steps)
        try:
            for step in reversed(record.steps):
                checkout.restore(step.path, step.prior, folder)
        except BaseException:
            _close_dirs(checkout, opened)  # so that a second revert finds them as the apply left them
            raise
        expect.update(checkout, [step.path for step in record.steps])
    record.status = Status.REVERTED
    write(layer, record)
    _match_kept_dirs(layer, record.steps)  # best effort, once the revert is whole
    return RevertResult(record=record.number, reverted=[step.path for step in record.steps])


def _open_dirs(checkout: Checkout, steps: list[Step]) -> list[tuple[str, int, int]]:
    """Give the owner write and search on the apply's directories that lack them (an agent's ``chmod 555``), outermost
    first, so that a controller that is not root can restore what lies inside; each one's own step then puts its mode
    back (or removes it). (Root with its capabilities needs none of it.) One that cannot be opened is left for its
    restore to report. Returns what it changed: each path, its mode before and after."""
    opened = []
    for step in sorted(steps, key=lambda s: s.path.count("/")):
        with contextlib.suppress(OSError, UnsafePathError):
            held = checkout.identity(step.path)
            if held is not None and held.type == FileType.DIR and held.mode & 0o300 != 0o300:
                was = stat.S_IMODE(held.mode)
                checkout.set_mode(step.path, was | 0o300)
                opened.append((step.path, was, was | 0o300))
    return opened


def _close_dirs(checkout: Checkout, opened: list[tuple[str, int, int]]) -> None:
    """Put back the modes ``_open_dirs`` changed, innermost first, where a directory still has the one it gave."""
    for path, was, given in reversed(opened):
        with contextlib.suppress(OSError, UnsafePathError):
            held = checkout.identity(path)
            if held is not None and held.type == FileType.DIR and stat.S_IMODE(held.mode) == given:
                checkout.set_mode(path, was)


def _match_kept_dirs(layer: Layer, steps: list[Step]) -> None:
    """The apply kept the checkout's directories in the upper layer (see ``apply._retire``), with the mode it wrote:
    give each the mode the revert restored, or remove it (when empty) where the checkout now has none, so that
    what was reverted does not come back as a change. One the agent has changed since (its mode is no longer what
    the apply left) is its change, and stays. Best effort: what cannot be read is left as it is."""
    upper = open_upper(layer)
    repo = open_repo(layer)
    try:
        for step in sorted(steps, key=lambda s: -s.path.count("/")):
            with contextlib.suppress(OSError):
                after = Identity.from_row(step.after) if step.after is not None else None
                up = beneath.lstat(upper, step.path)
                if after is None or after.type != FileType.DIR or up is None or not stat.S_ISDIR(up.st_mode):
                    continue
                if stat.S_IMODE(up.st_mode) != stat.S_IMODE(after.mode):
                    continue
                held = beneath.lstat(repo, step.path)
                with beneath.parent(upper, step.path) as (fd, name):
                    if held is not None and stat.S_ISDIR(held.st_mode):
                        os.chmod(name, stat.S_IMODE(held.st_mode), dir_fd=fd, follow_symlinks=False)
                    else:
                        os.rmdir(name, dir_fd=fd)  # only when empty: what the agent left in it is still its change
    finally:
        os.close(upper)
        os.close(repo)


_SINCE = {Status.APPLIED: "it was applied"}  # else pending: the controller died mid-apply


def _conflicts(
    layer: Layer, checkout: Checkout, expect: Expectations, record: ApplyRecord, force: Collection[str]
) -> list[Conflict]:
    """Paths changed since the apply (unless forced), and directories to remove that gained entries meanwhile.

    A path that already holds what revert puts back is no conflict (a revert cut short by a kill restored
    it). A pending record (the controller died mid-apply) has no known after-state: each of its paths must
    hold its original or what the layer would have written there, so an edit the user made after the kill
    is never overwritten unasked.
    """
    conflicts = []
    touched = {step.path for step in record.steps}
    folder = layer.applies / str(record.number)
    for step in record.steps:
        if not under_any(step.path, force) and not _as_expected(layer, checkout, expect, record, step, folder):
            since = _SINCE.get(record.status, "its apply was cut short")
            conflicts.append(Conflict(path=step.path, reason=f"changed in the checkout since {since}"))
        elif step.prior.type != FileType.DIR and _is_dir(checkout, step.path):
            added = sorted(n for n in checkout.names(step.path) if f"{step.path}/{n}" not in touched)
            if added:
                conflicts.append(
                    Conflict(path=step.path, reason=f"the directory holds entries added since: {added[:5]}")
                )
    return conflicts


def _as_expected(
    layer: Layer, checkout: Checkout, expect: Expectations, record: ApplyRecord, step: Step, folder: Path
) -> bool:
    """Whether the path holds what this session left there: the apply's result, or already its original."""
    if record.status == Status.APPLIED and _unchanged(checkout, expect, step.path):
        return True
    try:
        if _holds(checkout, step.path, step.prior.type, step.prior.mode, step.prior.target, _blob(step, folder)):
            return True
        return record.status == Status.PENDING and _as_applied(layer, checkout, step)
    except (OSError, UnsafePathError):
        return False


def _as_applied(layer: Layer, checkout: Checkout, step: Step) -> bool:
    """Whether the path holds what the layer would have written there (a pending record's after-state)."""
    change = step.change
    if change.kind == Kind.DELETED:
        return checkout.identity(step.path) is None
    upper = open_upper(layer)
    try:
        source = _upper_file(upper, change.path) if change.type == FileType.FILE else None
        modes = {step_mode(step)}
        if change.type == FileType.DIR and step.prior.type != FileType.DIR:
            modes.add(NEW_DIR_MODE)  # made, and the kill came before apply gave it its mode
        return any(_holds(checkout, step.path, change.type, m, change.target, source) for m in modes)
    finally:
        os.close(upper)


def _blob(step: Step, folder: Path) -> Callable[[], int] | None:
    blob = step.prior.blob
    if step.prior.type != FileType.FILE or blob is None:
        return None
    return lambda: os.open(folder / blob, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)


def _upper_file(upper: int, rel: str) -> Callable[[], int]:
    def opened() -> int:
        with beneath.parent(upper, rel) as (fd, name):
            return beneath.open_file(fd, name)

    return opened


def _holds(
    checkout: Checkout, rel: str, kind: FileType | None, mode: int, target: str | None, data: Callable[[], int] | None
) -> bool:
    """Whether ``rel`` in the checkout is absent (``kind`` None), or that kind with that mode, symlink target,
    or (a file) the bytes ``data`` opens. A directory's entries are checked apart (``_conflicts``); its mode is
    checked here, so a chmod the user made since the apply is a conflict, not overwritten."""
    held = checkout.identity(rel)
    if kind is None or held is None:
        return kind is None and held is None
    if held.type != kind:
        return False
    if kind == FileType.SYMLINK:
        return held.target == target
    if stat.S_IMODE(held.mode) != stat.S_IMODE(mode):
        return False
    if kind == FileType.DIR:
        return True
    if data is None:
        return False
    with beneath.reading(checkout.fd, rel) as mine:
        theirs = data()
        try:
            return os.fstat(mine).st_size == os.fstat(theirs).st_size and same_bytes(mine, theirs)
        finally:
            os.close(theirs)


def _is_dir(checkout: Checkout, rel: str) -> bool:
    try:
        held = checkout.identity(rel)
    except UnsafePathError:
        return False
    return held is not None and held.type == FileType.DIR


def _unchanged(checkout: Checkout, expect: Expectations, rel: str) -> bool:
    try:
        return expect.holds(checkout, rel, checkout.identity(rel))
    except UnsafePathError:
        return False
