"""The workspace layers of one data directory: pinned at session start, reviewed, applied, rewound, discarded.

``workspace`` is the library (one layer, no knowledge of sessions); this module is what
the CLI and the API share on top of it. It decides which checkouts may have a layer at
all, names a session's layer by its id, summarizes changes for events and the terminal,
and turns the library's result values into the errors the interfaces report. Every
method blocks (filesystem work): callers on the event loop use ``asyncio.to_thread``.

Rewriting a layer (apply, revert, rewind, discard) needs the session's container gone;
``Sessions`` stops it first.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import functools
import logging
import os
import shutil
import stat
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from .. import workspace
from ..errors import (
    ApplyConflictError,
    ConflictError,
    CubicleError,
    ForbiddenRepoError,
    NotFoundError,
    QuotaFullError,
    RepoError,
    StoreError,
)
from ..wire.changeset import (
    ApplyResult,
    Change,
    Checkpoint,
    Conflict,
    Disposition,
    Kind,
    RevertResult,
)
from ..wire.events import MAX_LISTED_PATHS, AppliedEvent, ChangesEvent, ChangeSummary, ErrorEvent, EventSink
from . import Layer, baseline, journal
from . import checkpoints as checkpoint_files
from .buildinputs import BuildInputs
from .changes import MAX_LISTED
from .gitpatch import session_patch
from .gitpush import Built, session_commit
from .layer import UNSAFE_IN_OPTIONS, DiskQuota, discard_dir, disk_image, layer_dir
from .offload import Offload
from .quota import Disks
from .records import encodable
from .records import shown as shown  # the one spelling of a layer path as text; callers import it from here

T = TypeVar("T")
log = logging.getLogger(__name__)

WAIT_THREADS = 16
"""Threads that may wait on walks at once (each walk's child is bounded by ``Offload``'s slots)."""
INLINE_NAMES = 2_000
INLINE_RECORD_BYTES = 8 << 20
"""A layer whose upper holds at most ``INLINE_NAMES`` names and whose recorded checkout (baseline, ignore files,
content ids) takes at most ``INLINE_RECORD_BYTES`` on disk is listed in the calling process when the
``Workspaces`` allow it (``inline_small``): what such a listing holds is small and bounded without a child.
A larger one is always listed in a walk's child."""
SWEEP_GRACE_S = 60.0
"""``sweep`` leaves a layer without a session alone this long: its session's row may be about to be written."""
STORAGE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO)
"""What a data dir answers when it cannot take more: the layer is then a StoreError (507), like the database."""


MIN_FREE_INODES = 1000
"""With fewer free inodes than this on the data directory's filesystem, no new session starts either."""


def refuse_low_space(data_dir: Path, floor_mb: int) -> None:
    """StoreError (507) when the filesystem of ``data_dir`` has less than ``floor_mb`` MiB (or MIN_FREE_INODES
    inodes) free: a session started there would fail its first write, or fill the disk other sessions use."""
    if floor_mb <= 0:
        return
    probe = data_dir
    while not probe.exists() and probe != probe.parent:  # the data directory is made on first use
        probe = probe.parent
    try:
        fs = os.statvfs(probe)
    except OSError as err:
        raise StoreError(f"The free space of {data_dir} could not be read: {err.strerror}.") from None
    free_mb = fs.f_bavail * fs.f_frsize // (1 << 20)
    free_inodes = fs.f_favail if fs.f_files else MIN_FREE_INODES  # some filesystems report no inode counts
    if free_mb < floor_mb or free_inodes < MIN_FREE_INODES:
        raise StoreError(
            f"No new session: the filesystem of the data directory {data_dir} has {free_mb} MiB and "
            f"{free_inodes} inodes free, below the floor of {floor_mb} MiB and {MIN_FREE_INODES} inodes "
            "(CUBICLE_MIN_FREE_MB).",
            hint="Free space there (`cubicle gc --older-than 7d` removes old ended sessions), or lower CUBICLE_MIN_FREE_MB.",
        )


def quota_full(layer: Layer) -> bool:
    """Whether the layer's own filesystem (its disk quota) has no block or no inode left."""
    if layer.info.disk is None:
        return False
    free, inodes, dev = _free(layer.fs)
    return dev != -1 and (free < MIB or inodes < 16)


def _quota(layer: Layer) -> tuple[int | None, int | None]:
    """The layer's disk quota (MiB, files), as a QuotaFullError names it; None, None without one."""
    quota = layer.info.disk
    return (quota.mb, quota.inodes) if quota else (None, None)


APPLY_FREE_FLOOR_MB = 64
"""An apply leaves at least this much free on the checkout's filesystem and on the data directory's."""
APPLY_FREE_INODES = 1000
MIB = 1 << 20


def _free(path: Path) -> tuple[int, int, int]:
    """(bytes, inodes) free to an unprivileged user on the filesystem of ``path``, and its device (-1: unknown)."""
    try:
        fs, dev = os.statvfs(path), os.stat(path).st_dev
    except OSError:
        return 0, 0, -1
    inodes = fs.f_favail if fs.f_files else 1 << 40  # some filesystems count no inodes
    return fs.f_bavail * fs.f_frsize, inodes, dev


def quota_left(root: Path) -> int:
    """Bytes the layer at ``root`` may still take from the host: its quota less what its image holds (0 without one)."""
    try:
        info = workspace.open_layer(root.parent.parent, root.name).info
        held = disk_image(root).stat().st_blocks * 512
    except (CubicleError, OSError, ValueError):
        return 0
    return max(0, info.disk.mb * MIB - held) if info.disk is not None else 0


def pin(raw: Path) -> Path:
    """The checkout's real path (every symlink resolved), refused when no sandbox may run on it.

    A root-owned checkout is refused: the sandbox runs as the checkout's owner and never as uid 0.
    So is a path the overlay's mount options cannot carry, here rather than when the sandbox starts.
    """
    try:
        real = Path(os.path.realpath(raw, strict=True))
        st = os.stat(real)
    except OSError:
        raise RepoError(f"The repository {raw} does not exist.") from None
    if not stat.S_ISDIR(st.st_mode):
        raise RepoError(f"The repository {raw} is not a directory.")
    if UNSAFE_IN_OPTIONS.search(str(real)):
        raise RepoError(
            f"The repository path {shown(str(real))!r} holds a comma, colon, backslash, '=' or a control "
            "character, which the overlay's mount options cannot carry.",
            hint="Move it to a path without them (a symlink does not help: sessions use the real path).",
        )
    if st.st_uid == 0:
        raise ForbiddenRepoError(
            f"The repository {real} is owned by root; the sandbox runs as the repository's owner and never as root.",
            hint=f"Give it to an unprivileged user (e.g. `chown -R 1000:1000 {real}`), or copy it to one's home.",
        )
    return real


def refuse_overlap(repo: Path, others: Iterable[tuple[str, str]]) -> None:
    """Refuse a checkout that contains, or lies inside, one that another running session ``(id, repo)`` uses."""
    for session_id, other in others:
        theirs = Path(other)
        if repo == theirs or theirs in repo.parents or repo in theirs.parents:
            raise ConflictError(
                f"Session {session_id} is running on {theirs}, which overlaps {repo}.",
                hint="Wait for it to finish (or cancel it), then start this one.",
            )


def summarize(changes: list[Change]) -> ChangeSummary:
    """Counts for an event or a terminal line: files per kind, lines added and removed, paths held back (and
    where the walk stopped and how many a listing left out, when ``changes`` is a scan's ``Changes``)."""
    summary = ChangeSummary()
    if isinstance(changes, workspace.Changes):
        summary.truncated_at, summary.unlisted = changes.truncated_at, changes.unlisted
        summary.unlisted_applied = changes.unlisted_applied
    for change in changes:
        if change.disposition != Disposition.APPLY:
            summary.held_back += 1
            summary.build_inputs += change.disposition == Disposition.BUILD_INPUT
            continue
        summary.files += 1
        if change.kind == Kind.ADDED:
            summary.added += 1
        elif change.kind == Kind.MODIFIED:
            summary.modified += 1
        else:
            summary.deleted += 1
        for line in (change.diff or "").split("\n")[2:]:  # after the two lines that name the files
            if line.startswith("+"):
                summary.lines_added += 1
            elif line.startswith("-"):
                summary.lines_removed += 1
    return summary


def _listed(layer: Layer, diff: bool, most: int) -> workspace.Changes:
    """What the review shows, bounded in the walk's child: only that much crosses into the controller."""
    found = workspace.listed(workspace.scan(layer, with_diffs=True), most)
    if not diff:
        for change in found:
            change.diff = None
    return found


def _small(layer: Layer) -> bool:
    """Whether a listing of the layer stays small: few names in its upper, a small recorded checkout."""
    recorded = (
        layer.baseline_file,
        layer.baseline_file.with_name("ignore.json"),
        baseline.blobs_file(layer.baseline_file),
    )
    sizes = [path.stat().st_size for path in recorded if path.exists()]
    if sum(sizes) > INLINE_RECORD_BYTES:
        return False
    return workspace.layer.count_names(layer, INLINE_NAMES) <= INLINE_NAMES


def _applied(
    layer: Layer,
    paths: Collection[str] | None,
    include_ignored: bool,
    force: Collection[str],
    bounds: workspace.ApplyBounds,
    build_inputs: bool,
    most: int,
    ids: Collection[str] | None = None,
) -> ApplyResult:
    """``workspace.apply`` in the walk's child, its answer bounded there like a listing."""
    return workspace.apply(layer, paths, include_ignored, force, bounds, build_inputs, ids).bounded(most)


def _reverted(layer: Layer, force: Collection[str], most: int) -> RevertResult:
    return workspace.revert(layer, force=force).bounded(most)


def _pending(layer: Layer) -> int:
    found = workspace.scan(layer, with_diffs=False)
    return len(found) + (found.truncated_at is not None)


def _checkpoint_and_summary(layer: Layer) -> tuple[int | None, ChangeSummary]:
    """A checkpoint and the summary; past the ``names`` limit no checkpoint, and a summary that says so."""
    try:
        number: int | None = workspace.checkpoint(layer)
    except workspace.TooManyEntriesError:
        number = None
    summary = summarize(workspace.scan(layer, with_diffs=True))
    if number is None and summary.truncated_at is None:  # the agent's processes removed names meanwhile
        summary.truncated_at = layer.info.names
    return number, summary


class Workspaces:
    """The layers under ``<data_dir>/workspaces``, one per session id."""

    def __init__(
        self,
        data_dir: Path,
        clear_as_root: Callable[[Path], None] | None = None,
        disks: Disks | None = None,
        offload: Offload | None = None,
        listing: int = MAX_LISTED,
        *,
        inline_small: bool = False,
    ) -> None:
        self.data_dir = data_dir
        self.listing = listing
        """Changes one listing carries at most (``workspace.listed``); the rest are counted, not sent."""
        self.clear_as_root = clear_as_root
        """Empties a directory with root's rights (through the engine); blocking. See ``discard``."""
        self.disks = disks
        """Makes and mounts each layer's own filesystem (its disk quota); None: layers without a quota."""
        self.offload = offload
        """Where the walks the agent sizes run (turn ends, listings, the retention count); None: in this process."""
        self.inline_small = inline_small
        """A small layer's listing runs in this process (see ``INLINE_NAMES``): for a one-shot command, which no
        other request waits on and which would otherwise start the walks' fork server (a new interpreter importing
        the workspace package) for one listing."""
        self._waiting = concurrent.futures.ThreadPoolExecutor(WAIT_THREADS, thread_name_prefix="cubicle-walk")
        """Threads that wait on walks: a slow walk never holds a thread of asyncio's default pool, which every
        other blocking call of the controller (a session's start, the engine's API) needs."""

    async def in_thread(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` (a method of this object that walks a layer) in a thread of the walks' own pool."""
        return await asyncio.get_running_loop().run_in_executor(self._waiting, functools.partial(fn, *args))

    def create(
        self,
        session_id: str,
        repo: Path,
        quota: DiskQuota | None = None,
        names: int = workspace.DEFAULT_NAMES,
        *,
        definition: tuple[tuple[str, ...], BuildInputs],
    ) -> Layer:
        """A new session's layer over ``repo`` (already pinned), with the checkout's baseline.

        ``definition`` is what the repository's environment definition reads and what its build and setup take
        from the checkout (``environment.definition_files``): those paths are held back from apply.

        With ``quota`` (and ``disks``), its writable parts are on a filesystem of that size and inode count; ``names``
        bounds the entries the agent may make. A path the overlay's options cannot carry (a comma, colon, '=' or control
        character in the repository's or the data directory's path) is refused here, not at the first mount. A data dir
        that cannot take it (full, read-only) is StoreError, like the database on it; what was made of the layer goes.
        """
        disks = self.disks if quota is not None else None
        disk = (quota, disks.make) if disks is not None and quota is not None else None
        trusted, build = definition
        try:
            layer = workspace.create(
                self.data_dir, session_id, repo, trusted, disk, names, build, recorder=self._record_baseline
            )
        except (OSError, CubicleError) as err:
            self._remove_made(session_id)
            if isinstance(err, OSError) and err.errno in STORAGE_ERRNOS:
                why = f"The workspace layer of session {session_id} could not be written: {err.strerror}."
                raise StoreError(why) from None
            raise
        if disks is not None:
            disks.release(layer)  # mounted again by whatever uses it next
        try:
            workspace.mount_options(layer)
        except workspace.WorkspaceError as err:
            self.discard(session_id)
            raise RepoError(str(err), hint="Move or rename the directory so its path has none of , : = \\.") from None
        return layer

    def apply_bounds(self, layer: Layer) -> workspace.ApplyBounds:
        """What an apply of ``layer`` may write: into the checkout no more than its disk quota (what it could hold
        as distinct files) and the checkout's free space and inodes above the floors; into the layer (the
        originals it keeps) no more than the quota has left and the data directory has free above the floor."""
        floor = APPLY_FREE_FLOOR_MB * MIB
        repo_bytes, repo_inodes, repo_dev = _free(layer.repo)
        data_bytes, _, data_dev = _free(self.data_dir)
        checkout = repo_bytes - floor
        saved = data_bytes - floor
        if layer.info.disk is not None:
            checkout = min(checkout, layer.info.disk.mb * MIB)
            saved = min(saved, _free(layer.fs)[0])
        return workspace.ApplyBounds(
            checkout_bytes=checkout,
            checkout_entries=repo_inodes - APPLY_FREE_INODES,
            saved_bytes=saved,
            combined_bytes=data_bytes - floor if repo_dev == data_dev else None,
        )

    def refuse_overcommit(
        self, quota: DiskQuota, running: Iterable[str], floor_mb: int, session_id: str | None = None, events_mb: int = 0
    ) -> None:
        """StoreError (507) unless the data directory's filesystem can hold what this session's quota and every
        running session's could still write, above the free-space floor. Images are sparse: without this, quotas
        that together exceed the disk would let sessions fill it. Each also counts ``events_mb``, the cap on
        its stored events. ``session_id``: a session whose layer exists (a follow-up), counted by what its
        quota has left."""
        if self.disks is None:
            return
        events = events_mb * MIB  # what each session may still store as events, besides its files
        own = (quota_left(layer_dir(self.data_dir, session_id)) if session_id else quota.mb * MIB) + events
        others = sum(quota_left(layer_dir(self.data_dir, other)) + events for other in set(running) - {session_id})
        free, _, dev = _free(self.data_dir)
        if dev == -1:
            return  # refuse_low_space has said what is wrong with it
        free -= floor_mb * MIB
        if own + others > free:
            raise StoreError(
                f"No room for this session's disk quota: it may write {own // MIB} MiB and the running sessions "
                f"{others // MIB} MiB more, but the filesystem of the data directory {self.data_dir} has "
                f"{max(free, 0) // MIB} MiB free above its floor (CUBICLE_MIN_FREE_MB).",
                hint="Ask for a smaller quota (--disk, limits.disk_mb), wait for running sessions to end, or free space.",
            )

    def _remove_made(self, session_id: str) -> None:
        root = layer_dir(self.data_dir, session_id)
        if self.disks is not None:
            with contextlib.suppress(CubicleError, OSError):
                self.disks.detach(root)
        shutil.rmtree(root, ignore_errors=True)

    def open(self, session_id: str) -> Layer:
        """The layer's description; its files are reachable only while it is held (``hold`` or ``using``)."""
        try:
            return workspace.open_layer(self.data_dir, session_id)
        except workspace.LayerMissingError as err:
            raise NotFoundError(
                str(err), hint="Its changes were discarded, or it was made before layers existed."
            ) from None

    def hold(self, layer: Layer) -> None:
        """Make the layer's files reachable until ``release`` (its filesystem mounted, a killed rewind undone)."""
        if self.disks is not None:
            self.disks.acquire(layer)
        try:
            checkpoint_files.recover(layer)
        except BaseException:
            self.release(layer)
            raise

    def count_names(self, layer: Layer, limit: int) -> int:
        """The names in the layer's upper directory, up to one past ``limit`` (in a walk's child when offloaded)."""
        return self._walk(workspace.layer.count_names, layer, limit)

    def release(self, layer: Layer) -> None:
        if self.disks is not None:
            self.disks.release(layer)

    @contextlib.contextmanager
    def using(self, session_id: str) -> Iterator[Layer]:
        """The layer, held; a write that fails because its disk quota is used up is a QuotaFullError (507)."""
        layer = self.open(session_id)
        self.hold(layer)
        try:
            yield layer
        except OSError as err:
            if err.errno in (errno.ENOSPC, errno.EDQUOT) and quota_full(layer):
                raise QuotaFullError(session_id, *_quota(layer)) from None
            raise
        finally:
            self.release(layer)

    def changes(self, session_id: str, diff: bool = False) -> workspace.Changes:
        """The layer's changes (up to its ``names`` limit), at most ``listing`` of them and the rest counted; with
        ``diff``, bounded unified diffs of text files."""
        with self.using(session_id) as layer:
            if self.inline_small and _small(layer):
                return _listed(layer, diff, self.listing)
            return self._walk(_listed, layer, diff, self.listing)

    def patch(self, session_id: str) -> bytes:
        """The session's changes as a patch for ``git apply`` of what a plain apply writes (``workspace.gitpatch``),
        made in a walk's child: it reads the layer's files whole."""
        with self.using(session_id) as layer:
            return self._walk(session_patch, layer, session_id)

    def commit(
        self, session_id: str, mirror: Path, base: str, author: tuple[str, str], message: str, force: Collection[str]
    ) -> Built:
        """One commit on ``base`` in ``mirror`` of what a plain apply of the session's layer writes
        (``workspace.gitpush``), made in a walk's child: it reads the layer's files whole."""
        with self.using(session_id) as layer:
            return self._walk(_committed, layer, session_id, mirror, base, author, message, tuple(force))

    def pending(self, session_id: str) -> int:
        """How many changes the layer holds (past its ``names`` limit: the limit, and more)."""
        with self.using(session_id) as layer:
            return self._walk(_pending, layer)

    def checkpoint_and_summary(self, session_id: str) -> tuple[int | None, ChangeSummary]:
        """``checkpoint`` then ``summary``, with the layer held once for both; no checkpoint (None) of a layer
        past its ``names`` limit, whose summary says where the listing stopped."""
        with self.using(session_id) as layer:
            return self._walk(_checkpoint_and_summary, layer)

    def _record_baseline(self, repo: str, path: str) -> None:
        """The checkout's baseline, recorded where walks run: its index is parsed in the child's bounded memory."""
        if self.offload is None:
            baseline.record_into(repo, path)
        else:
            self.offload.run(baseline.record_into, repo, path)

    def _walk(self, fn: Callable[..., T], layer: Layer, *args: Any) -> T:
        return self.offload.run(fn, layer, *args) if self.offload is not None else fn(layer, *args)

    def checkpoints(self, session_id: str) -> list[Checkpoint]:
        with self.using(session_id) as layer:
            return [
                Checkpoint(turn=n, created_at=(layer.checkpoints / f"{n}.json").stat().st_mtime)
                for n in checkpoint_files.numbers(layer)
            ]

    def apply(
        self,
        session_id: str,
        force: Collection[str] = (),
        include_ignored: bool = False,
        build_inputs: bool = False,
        paths: Collection[str] | None = None,
        ids: Collection[str] | None = None,
    ) -> ApplyResult:
        """Apply the changes (those ``paths`` and ``ids`` name, when given); ApplyConflictError (nothing written)
        when the checkout changed under any of them."""
        with self.using(session_id) as layer:
            try:
                result = self._walk(  # a scan first, as large as the agent's tree: in the walk's child
                    _applied,
                    layer,
                    paths,
                    include_ignored,
                    tuple(force),
                    self.apply_bounds(layer),
                    build_inputs,
                    self.listing,
                    None if ids is None else tuple(ids),
                )
            except workspace.ApplyTooLargeError as err:
                raise StoreError(
                    f"Nothing was written: the apply would need {err.total / MIB:.1f} MiB ({err.what}), more than "
                    f"the {max(err.limit, 0) / MIB:.1f} MiB it may: it writes no more than the session's disk quota, "
                    f"leaves {APPLY_FREE_FLOOR_MB} MiB and {APPLY_FREE_INODES:,} inodes free on the checkout's "
                    "filesystem and on the data directory's, and keeps each file it overwrites inside the quota. "
                    "Files the agent hardlinked, or left mostly empty, take their full size each in the checkout."
                    if err.what != workspace.ApplyTooLargeError.ENTRIES
                    else f"Nothing was written: the apply would create {err.total:,} entries in {layer.repo}, more "
                    f"than the {max(err.limit, 0):,} it may (it leaves {APPLY_FREE_INODES:,} inodes free there).",
                    hint="Review the changes (`cubicle changes ID`), free space, or discard them.",
                ) from None
        if result.conflicts:
            raise ApplyConflictError(_conflict_message("apply", result.conflicts), result.conflicts)
        return result

    def revert(self, session_id: str, force: Collection[str] = ()) -> RevertResult:
        """Undo the newest apply not yet reverted; ApplyConflictError when the user changed its paths since."""
        with self.using(session_id) as layer:
            try:
                result = self._walk(_reverted, layer, tuple(force), self.listing)  # reads the whole apply record
            except workspace.LayerMissingError:
                raise NotFoundError(f"Session {session_id} has no apply to revert.") from None
        if result.conflicts:
            raise ApplyConflictError(_conflict_message("revert", result.conflicts), result.conflicts)
        return result

    def rewind(self, session_id: str, turn: int) -> None:
        with self.using(session_id) as layer:
            try:
                self._walk(workspace.rewind, layer, turn)  # it reads a manifest as large as the agent's tree
            except workspace.LayerMissingError:
                have = ", ".join(str(n) for n in checkpoint_files.numbers(layer)) or "none yet"
                raise NotFoundError(f"Session {session_id} has no checkpoint {turn} (it has: {have}).") from None

    def has_applied(self, session_id: str) -> bool:
        """Whether any apply of this session was recorded (its layer then stays, so it can be reverted)."""
        try:
            with self.using(session_id) as layer:
                return bool(journal.numbers(layer))
        except NotFoundError:
            return False

    def discard(self, session_id: str) -> list[str]:
        """Drop the layer; returns what could not be removed (see ``workspace.discard``).

        A controller that is not root cannot remove what the kernel left in ``work/work``
        (root's, mode 000), nor directories the kernel copied up still owned by root; with
        ``clear_as_root`` the engine empties the layer's directory, then the rest goes.
        """
        root = layer_dir(self.data_dir, session_id)
        if self.disks is not None:
            self.disks.detach(root)  # a filesystem that will not unmount is in use: nothing is removed
        left = discard_dir(root)
        if left and self.clear_as_root is not None and os.geteuid() != 0 and root.is_dir():
            try:
                self.clear_as_root(root)
            except Exception as err:  # noqa: BLE001 - the engine's errors are many; what is left is reported
                log.warning("the engine could not clear %s: %s", root / "work", err)
                return left
            left = discard_dir(root)
        return left

    def close(self) -> None:
        """Unmount the layer filesystems this process mounted that nothing uses now; stop the walkers' processes."""
        if self.offload is not None:
            self.offload.close()
        self._waiting.shutdown(wait=False, cancel_futures=True)
        if self.disks is not None:
            self.disks.close()

    def unmount_unused(self, in_use: Callable[[str], bool]) -> list[str]:
        """Unmount the layer filesystems a killed process left mounted (of sessions not ``in_use``)."""
        return self.disks.sweep(in_use) if self.disks is not None else []

    def sessions(self) -> list[str]:
        """The ids of every layer on disk."""
        root = self.data_dir / "workspaces"
        return sorted(p.name for p in root.iterdir()) if root.is_dir() else []

    def sweep(self, known: Callable[[str], bool], grace_s: float = SWEEP_GRACE_S) -> list[str]:
        """Discard the layers of sessions ``known`` does not know (purged); returns their ids.

        A layer is made just before its session's row is written, so one younger than
        ``grace_s`` may belong to a session being created and is left alone.
        """
        removed = []
        for session_id in self.sessions():
            root = self.data_dir / "workspaces" / session_id
            with contextlib.suppress(OSError):
                if known(session_id) or time.time() - root.stat().st_mtime < grace_s:
                    continue
                left = self.discard(session_id)
                if left:
                    log.warning(
                        "the layer of %s left %s (root-owned kernel files; root can remove them)", session_id, left
                    )
                removed.append(session_id)
        return removed


def printable(change: Change) -> Change:
    """The change with its names made encodable (for JSON and the terminal); the layer keeps the real bytes."""
    names = {"path": change.path, "renamed_from": change.renamed_from, "target": change.target}
    update = {k: shown(v) for k, v in names.items() if v is not None}
    return change.model_copy(update=update | ({} if change.diff is None else {"diff": encodable(change.diff)}))


def printable_conflict(conflict: Conflict) -> Conflict:
    return conflict.model_copy(update={"path": shown(conflict.path)})


def _conflict_message(what: str, conflicts: list[Conflict]) -> str:
    listed = "; ".join(f"{shown(c.path)}: {c.reason}" for c in conflicts[:20])
    more = f" (and {len(conflicts) - 20} more)" if len(conflicts) > 20 else ""
    return f"Nothing was written: the checkout changed under {len(conflicts)} path(s) the {what} would write: {listed}{more}."


async def record_changes(workspaces: Workspaces, session_id: str, sink: EventSink) -> ChangeSummary | None:
    """End of a turn: keep the layer as a checkpoint and report its changes (a ``changes`` event).

    A layer that cannot be read is reported as an ``error`` event (kind ``workspace``) and
    ends nothing: the transcript and the layer stay as they are.
    """
    try:
        number, summary = await workspaces.in_thread(workspaces.checkpoint_and_summary, session_id)
    except (workspace.WorkspaceError, NotFoundError, QuotaFullError, OSError) as err:
        log.warning("could not checkpoint the layer of %s: %s", session_id, err)
        await sink.emit(
            ErrorEvent(session_id=session_id, kind="workspace", message=f"No checkpoint of the files: {err}")
        )
        return None
    if number is None:
        over = workspace.TooManyEntriesError(summary.truncated_at or 0)
        await sink.emit(
            ErrorEvent(session_id=session_id, kind="too_many_entries", message=f"No checkpoint of the files: {over}")
        )
    await sink.emit(ChangesEvent(session_id=session_id, summary=summary, checkpoint=number))
    return summary


async def apply_and_report(
    workspaces: Workspaces,
    session_id: str,
    sink: EventSink,
    force: Collection[str] = (),
    include_ignored: bool = False,
    build_inputs: bool = False,
    paths: Collection[str] | None = None,
    ids: Collection[str] | None = None,
) -> ApplyResult:
    """Apply the layer (its container must be gone) and emit ``applied``; ApplyConflictError writes nothing."""
    result = await workspaces.in_thread(workspaces.apply, session_id, force, include_ignored, build_inputs, paths, ids)
    if result.record is not None:
        paths = [shown(p) for p in result.applied[:MAX_LISTED_PATHS]]
        more = max(0, len(result.applied) - MAX_LISTED_PATHS) + result.more_applied
        skipped = len(result.skipped) + result.more_skipped
        await sink.emit(
            AppliedEvent(
                session_id=session_id, apply=result.record, paths=paths, skipped=skipped, more=more, left=result.left
            )
        )
    return result


def _committed(
    layer: Layer,
    session_id: str,
    mirror: Path,
    base: str,
    author: tuple[str, str],
    message: str,
    force: tuple[str, ...],
) -> Built:
    return session_commit(layer, session_id, mirror, base, author=author, message=message, force=force)
