"""What the agent changed: the upper layer read against the checkout, path by path.

Only the upper directory is walked; the lower (the checkout) is consulted per changed
path, so listing costs what the agent touched, not what the repository holds. Overlay's
vocabulary, as this kernel writes it with ``userxattr``:

- a whiteout (char device 0:0, or a zero-size file carrying ``user.overlay.whiteout``)
  deletes the lower entry of that name — a whole tree when it was a directory;
- an opaque directory (``user.overlay.opaque`` = "y") hides everything below it in the
  lower layer: lower entries not in the upper are deletions (``rm -rf d; mkdir d``);
- any other upper entry adds or replaces the lower one; a type change (file <-> dir)
  deletes the lower tree first. A copied-up file identical to the lower is no change.

The agent cannot forge these markers: with ``userxattr`` its own ``user.overlay.*``
writes are stored as ``user.overlay.overlay.*``, and overlay refuses to create a 0:0
device through the mount. Each change carries a disposition; only ``apply`` (and
``ignored`` when asked) ever reach the checkout.
"""

from __future__ import annotations

import collections
import json
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..wire.changeset import Change, Changes, Disposition, FileType, Kind
from . import beneath, gitlike, gitpointers, names, pipelines, textdiff
from .baseline import Baseline, is_git_name, is_git_path, load_nested, load_rules
from .checkout import TEMP_NAME
from .ignore import (
    MAX_TOOL_IGNORE_BYTES,
    MAX_TOOL_IGNORE_FILES,
    TOOL_IGNORE,
    IgnoreRules,
    NewDirectoryRules,
    tool_rules_text,
)
from .layer import Layer, LayerInfo, open_repo, open_setup, open_upper
from .names import DEFAULT_NAMES
from .records import file_type, shown

OPAQUE = "user.overlay.opaque"
WHITEOUT = "user.overlay.whiteout"
MAX_DEPTH = names.MAX_DEPTH
MAX_PATH_BYTES = 3000
"""A longer path in the layer is listed once, as unsafe, and nothing below it is read: it is never applied or
checkpointed (the layer's own path must fit beside it in PATH_MAX), and it would cost every listing its length."""
MAX_APPLY_BYTES = 1 << 30  # a larger file is listed but never copied into the checkout
MAX_DIFFS_TOTAL = 2 << 20
"""JSON bytes of diff text one listing carries: once spent, later files are listed without one
(each diff is capped, but a layer may hold any number of files)."""
MAX_LISTED = 50_000
"""A listing (what ``GET …/changes`` and the review show) carries at most this many changes by default, and
``MAX_LISTED_BYTES`` of their paths and link targets: the rest are counted (``Changes.unlisted``), not sent."""
MAX_LISTED_BYTES = 16 << 20
RENAME_MAX_BYTES = 256 * 1024
"""Files compared whole for the rename hint are at most this large."""
SPARSE_MIN_BYTES = 1 << 20  # a file this large holding less than half its size in blocks is sparse: never copied
UNSAFE_TYPES = (FileType.FIFO, FileType.SOCKET, FileType.DEVICE)
BUILD_CONTEXT_REASON = (
    "in the environment's build context, which its Dockerfile copies whole (COPY .): the next environment build "
    "runs this repository's files as root; applied only with the acknowledgement for all of them (apply --build-inputs)"
)
__all__ = ["Change", "Changes", "Disposition", "Kind", "listed", "scan", "symlink_problem"]


LISTING_RANK = {Disposition.APPLY: 0, Disposition.BUILD_INPUT: 1, Disposition.IGNORED: 2, Disposition.TRUSTED: 3}
"""Which changes a bounded listing keeps first: what a plain apply writes, then what one acknowledgement or
flag adds (build inputs, ignored files), then the definition files forced by name; the rest never reach the
checkout."""


def listed(found: Changes, most: int = MAX_LISTED, most_bytes: int = MAX_LISTED_BYTES) -> Changes:
    """At most ``most`` of ``found``, and ``most_bytes`` of them as JSON text, sorted by path: what a review can
    show, held whole in the controller's memory and sent whole. Ranked by ``LISTING_RANK``, so a flood of
    entries an apply never writes cannot push its real edits out of view. The rest are only counted
    (``unlisted``, ``unlisted_applied``); apply is not bounded by this, it judges every change again."""
    kept: list[Change] = []
    spent = 0
    for change in sorted(found, key=lambda c: LISTING_RANK.get(c.disposition, 4)):  # stable: by path within each
        spent += listed_size(change)
        if len(kept) >= most or spent > most_bytes:
            break
        kept.append(change)
    out = Changes(sorted(kept, key=lambda c: c.path))
    out.truncated_at = found.truncated_at
    out.unlisted = found.unlisted + len(found) - len(kept)
    out.unlisted_applied = (
        found.unlisted_applied
        + sum(c.disposition == Disposition.APPLY for c in found)
        - sum(c.disposition == Disposition.APPLY for c in kept)
    )
    return out


def listed_size(change: Change) -> int:
    """About the bytes a change takes as JSON once its names are made printable: the agent's bytes as ``\\xNN``,
    control characters as JSON escapes (six bytes each). Its diff is bounded apart (``MAX_DIFFS_TOTAL``)."""
    texts = (change.path, change.target or "", change.renamed_from or "", change.reason)
    return 200 + sum(len(json.dumps(shown(t))) for t in texts)


def scan(layer: Layer, with_diffs: bool = True) -> Changes:
    """Every change in the layer, sorted by path, each with its disposition.

    Without ``with_diffs`` (what ``apply`` needs) no file's contents are read: no diff,
    binary flag or rename hint. The walk reads at most the layer's ``names`` entries of the
    upper layer; past them it stops and says so (``Changes.truncated_at``).
    """
    lower = open_repo(layer)
    upper = open_upper(layer)
    setup = open_setup(layer)
    try:
        walker = _Walker(lower, setup, layer.baseline, layer.info.mirrored, layer.info.names)
        walker.directory(upper, "", lower_is_dir=True, opaque=False, depth=0)
        found = Changes(sorted(walker.found, key=lambda c: c.path))
        found.truncated_at = layer.info.names if walker.truncated else None
        _judge_all(found, layer, upper, lower, setup)
        with _Dirs(upper) as uppers, _Dirs(lower) as lowers:
            _describe_all(found, uppers, lowers, with_diffs)
            gitlike.guard(found, lower)
            if with_diffs:
                _find_renames(found, uppers, lowers)
    finally:
        beneath.close_all(upper, lower, setup)
    return found


def _judge_all(found: Changes, layer: Layer, upper: int, lower: int, setup: int | None) -> None:
    """Give every change found its disposition (``_judge``), a symlink judged by its target."""
    rules = load_rules(layer.baseline_file)
    nested = load_nested(layer.baseline_file)  # the repositories the checkout held at the session's start
    pointers = gitpointers.pointers(Path(layer.info.repo), nested=nested)  # as their git configs are now
    linked = pipelines.through(Path(layer.info.repo), nested)  # the CI definitions its symlinks lead to
    reads = _Reads(gitpointers.Index(pointers), frozenset(map(gitpointers.fold, nested)), linked)
    for change in found:
        if change.kind != Kind.DELETED and change.type == FileType.SYMLINK and change.target is None:
            change.target = beneath.readlink(upper, change.path)  # judged by it (the walk read most already)
        from_setup = setup is not None and made_by_setup(setup, lower, change.path)
        _judge(change, rules, from_setup, layer.info, reads)
    _hold_back(found, tool_rules(found, upper, layer.baseline))


def tool_rules(found: Changes, upper: int, load_baseline: Callable[[], Baseline]) -> NewDirectoryRules:
    """The ignore files of ``found`` that count (``ignore.NewDirectoryRules``): each a ``.gitignore`` added in a
    directory the agent added, which the checkout had neither at the session's start nor now."""
    added_dirs = {c.path for c in found if c.kind == Kind.ADDED and c.type == FileType.DIR}
    candidates = [
        c
        for c in found
        if c.kind == Kind.ADDED
        and c.type == FileType.FILE
        and c.path.rpartition("/")[2] == TOOL_IGNORE
        and c.path.rpartition("/")[0] in added_dirs
        and c.disposition not in (Disposition.DISCARDED, Disposition.UNSAFE, Disposition.ENVIRONMENT)
    ][:MAX_TOOL_IGNORE_FILES]
    files: dict[str, str] = {}
    if candidates:
        baseline = load_baseline()
        for change in candidates:
            directory = change.path.rpartition("/")[0]
            text = _tool_rules_at(upper, change) if baseline.get(directory) is None else None
            if text is not None:
                files[directory] = text
    return NewDirectoryRules(files)


def _tool_rules_at(upper: int, change: Change) -> str | None:
    if change.size > MAX_TOOL_IGNORE_BYTES:
        return None
    try:
        with beneath.reading(upper, change.path) as fd:
            return tool_rules_text(textdiff.read_head(fd, MAX_TOOL_IGNORE_BYTES + 1))
    except OSError:
        return None


def _hold_back(found: Changes, rules: NewDirectoryRules) -> None:
    """What a plain apply would write that a counted tool's ignore file ignores is ``ignored`` instead; and so is
    each of those new directories that then holds nothing else (as git shows neither)."""
    if not rules.directories:
        return
    for change in found:
        directory = rules.holding(change.path, change.type == FileType.DIR)
        if directory is not None and change.disposition == Disposition.APPLY:
            change.disposition, change.reason = Disposition.IGNORED, _held_reason(directory)
    inside: dict[str, list[Change]] = {directory: [] for directory in rules.directories}
    for change in found:
        parts = change.path.split("/")
        for n in range(1, len(parts)):
            inside.get("/".join(parts[:n]), []).append(change)
    by_path = {change.path: change for change in found}
    for directory in sorted(rules.directories, key=lambda d: -d.count("/")):  # the deepest first: it is inside
        change = by_path[directory]
        held = inside[directory]
        if change.disposition == Disposition.APPLY and all(c.disposition == Disposition.IGNORED for c in held):
            change.disposition, change.reason = Disposition.IGNORED, _held_reason(directory)


def _held_reason(directory: str) -> str:
    return f"ignored by {directory}/{TOOL_IGNORE}, which the session's tools wrote in a directory they made"


def _describe_all(found: Changes, uppers: _Dirs, lowers: _Dirs, with_diffs: bool) -> None:
    """Describe every change (``_describe``) while the diff allowance lasts.

    The allowance goes first to what an apply may write (files it never applies, ignored ones say,
    cannot spend it), smallest first: a padding of large files cannot leave a short script undiffed.
    """
    budget = MAX_DIFFS_TOTAL
    order = sorted(found, key=lambda c: (c.disposition not in (Disposition.APPLY, Disposition.TRUSTED), c.size))
    for change in order:
        _describe(change, uppers, lowers, with_diffs and budget > 0)
        if change.diff is not None:
            budget -= textdiff.encoded_size(change.diff)


def made_by_setup(setup: int, lower: int, path: str) -> bool:
    """Whether ``path`` lies in something the environment's setup made: an entry of the setup tree
    (itself or an ancestor) that is not a directory the checkout has too. Those never reach the checkout."""
    parts = path.split("/")
    for depth in range(1, len(parts) + 1):
        prefix = "/".join(parts[:depth])
        made = beneath.lstat(setup, prefix)
        if made is None:
            return False
        if not stat.S_ISDIR(made.st_mode) or beneath.lstat(lower, prefix) is None:
            return True
    return False


def is_environment_config(path: str) -> bool:
    """The environment's definition (any case): whoever changes it changes what the next session runs."""
    top = path.split("/", 1)[0].lower()
    return top in (".devcontainer", ".cubicle", ".devcontainer.json")


class _Walker:
    """Walks the upper tree with dir fds (never path strings), comparing each entry with the lower."""

    def __init__(
        self,
        lower_fd: int,
        setup_fd: int | None,
        load_baseline: Callable[[], Baseline],
        mirrored: bool = False,
        limit: int = DEFAULT_NAMES,
    ) -> None:
        self.lower = lower_fd
        self.setup = setup_fd
        self.mirrored = mirrored  # ``headroom`` made the checkout's directories: an empty one may be its
        self._load_baseline = load_baseline  # read only when a directory differs from the checkout
        self._baseline: Baseline | None = None
        self.found: list[Change] = []
        self.limit = limit
        self.seen = 0  # entries of the upper read so far
        self.truncated = False  # the upper holds more than ``limit``: the walk stopped there

    def directory(self, fd: int, prefix: str, lower_is_dir: bool, opaque: bool, depth: int) -> None:
        entries, more = names.listing(fd, self.limit - self.seen)
        self.seen += len(entries)
        self.truncated |= more
        lower = self._lower_dir(prefix) if lower_is_dir else None  # opened once: each entry costs one stat there
        try:
            for name, st in entries:  # each within the allowance; a directory below may use up the rest
                low = _lstat_in(lower, name) if lower is not None else None
                self.entry(fd, prefix, name, st, low, opaque, depth)
        finally:
            if lower is not None:
                os.close(lower)
        if opaque and lower_is_dir and prefix and not more:  # (a partial listing would invent deletions)
            self.hidden(prefix, {name for name, _ in entries})

    def entry(
        self, fd: int, prefix: str, name: str, st: os.stat_result, low: os.stat_result | None, opaque: bool, depth: int
    ) -> None:
        path = prefix + name
        if len(os.fsencode(path)) > MAX_PATH_BYTES:
            self.add(path, _kind(low), st, low, reason=f"a path longer than {MAX_PATH_BYTES} bytes")
        elif _is_whiteout(fd, name, st):
            if low is not None:
                self.deleted_tree(path, low)
        elif stat.S_ISDIR(st.st_mode):
            self.subdir(fd, path, name, st, low, opaque, depth)
        else:
            self.leaf(fd, path, name, st, low)

    def hidden(self, prefix: str, seen: set[str]) -> None:
        """The checkout's entries under the opaque directory ``prefix`` that its upper does not hold: deleted."""
        for name, st in _listing(self.lower, prefix.rstrip("/")):
            if name not in seen:
                self.deleted_tree(prefix + name, st)

    def _lower_dir(self, prefix: str) -> int | None:
        """An fd on the checkout's directory ``prefix`` (no symlink followed); None when it is gone."""
        if not prefix:
            return os.dup(self.lower)
        try:
            with beneath.parent(self.lower, prefix.rstrip("/")) as (parent_fd, name):
                return beneath.open_dir(parent_fd, name)
        except FileNotFoundError:
            return None

    def subdir(
        self, fd: int, path: str, name: str, st: os.stat_result, low: os.stat_result | None, opaque: bool, depth: int
    ) -> None:
        low_is_dir = low is not None and stat.S_ISDIR(low.st_mode)
        reason = "deeper than the walk goes" if depth >= MAX_DEPTH else ""
        if reason or unreadable(st):
            self.add(path, _kind(low), st, low, reason=reason)
            return  # an unreadable one is listed once, as unsafe; what it holds is never read, so never applied
        child = beneath.open_dir(fd, name)
        try:
            marked = _has_marker(child, OPAQUE, b"y")
            if self._differs(path, st, low) and (marked or not self._made_ahead(path, st, low_is_dir, child)):
                self.add(path, _kind(low), st, low)
            self.directory(child, path + "/", low_is_dir, low_is_dir and (opaque or marked), depth + 1)
        finally:
            os.close(child)

    def _made_ahead(self, path: str, st: os.stat_result, low_is_dir: bool, child: int) -> bool:
        """Whether the directory ``path`` (open as ``child``) is as it was at the session's start while the checkout
        has it too, or, when ``headroom`` mirrored the checkout's directories, is still empty."""
        return self._as_at_start(path, st) and (low_is_dir or (self.mirrored and _empty(child)))

    def _differs(self, path: str, st: os.stat_result, low: os.stat_result | None) -> bool:
        """Whether the upper directory ``path`` shows other than the checkout's ``low`` (the setup's mode is the same)."""
        if low is None or not stat.S_ISDIR(low.st_mode):
            return True
        return stat.S_IMODE(low.st_mode) != stat.S_IMODE(st.st_mode) and not self._setup_mode(path, st)

    def _as_at_start(self, path: str, st: os.stat_result) -> bool:
        """Whether the directory ``path`` is as the checkout had it at the session's start (``headroom`` made it so,
        or a copy-up did): then the checkout changed since, by the user's hand, and it is no change of the agent's.
        (Unless the user took the directory away and the agent's entries in it need it: then it is listed, so that
        applying them, when forced, can bring it back.)"""
        if self._baseline is None:
            self._baseline = self._load_baseline()
        was = self._baseline.get(path)
        return was is not None and was.type == FileType.DIR and was.mode == stat.S_IMODE(st.st_mode)

    def _setup_mode(self, path: str, st: os.stat_result) -> bool:
        """Whether the directory ``path`` has the mode the environment's setup gave it: what the merged view showed
        before the agent did anything (a copy-up, or ``headroom``'s mirror, copies it), so no change of the agent's."""
        if self.setup is None:
            return False
        made = beneath.lstat(self.setup, path)
        return (
            made is not None and stat.S_ISDIR(made.st_mode) and stat.S_IMODE(made.st_mode) == stat.S_IMODE(st.st_mode)
        )

    def leaf(self, fd: int, path: str, name: str, st: os.stat_result, low: os.stat_result | None) -> None:
        sparse = sparse_reason(fd, name, st)
        if low is None or unreadable(st):
            kind = _kind(low)
        elif stat.S_ISDIR(low.st_mode):
            for child, child_st in _listing(self.lower, path):
                self.deleted_tree(f"{path}/{child}", child_st)
            kind = Kind.MODIFIED
        elif not _identical(fd, name, st, self.lower, path, low):
            kind = Kind.MODIFIED
        else:
            return
        self.add(path, kind, st, previous=low, reason=sparse)
        if stat.S_ISLNK(st.st_mode):
            self.found[-1].target = os.readlink(name, dir_fd=fd)  # read here, where its directory is open

    def deleted_tree(self, path: str, st: os.stat_result) -> None:
        """A lower entry and everything below it; inside ``.git`` (discarded anyway) only the top entry, not every object."""
        if stat.S_ISDIR(st.st_mode) and not is_git_path(path):
            for child, child_st in _listing(self.lower, path):
                self.deleted_tree(f"{path}/{child}", child_st)
        self.found.append(
            Change(
                path=path,
                kind=Kind.DELETED,
                type=file_type(st.st_mode),
                previous=file_type(st.st_mode),
                mode=stat.S_IMODE(st.st_mode),
                size=st.st_size,
            )
        )

    def add(
        self, path: str, kind: Kind, st: os.stat_result, previous: os.stat_result | None = None, reason: str = ""
    ) -> None:
        reason = reason or unreadable_reason(st)
        self.found.append(
            Change(
                path=path,
                kind=kind,
                type=file_type(st.st_mode),
                previous=None if previous is None else file_type(previous.st_mode),
                mode=stat.S_IMODE(st.st_mode),
                previous_mode=(
                    stat.S_IMODE(previous.st_mode)
                    if previous is not None and file_type(previous.st_mode) == file_type(st.st_mode)
                    else None
                ),
                size=st.st_size if stat.S_ISREG(st.st_mode) else 0,
                disposition=Disposition.UNSAFE if reason else Disposition.APPLY,
                reason=reason,
            )
        )


def _kind(low: os.stat_result | None) -> Kind:
    """An upper entry's change: added if the checkout has nothing there (``low``), else modified."""
    return Kind.ADDED if low is None else Kind.MODIFIED


def _lstat_in(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _empty(dir_fd: int) -> bool:
    with os.scandir(dir_fd) as it:
        return next(it, None) is None


def unreadable(st: os.stat_result) -> bool:
    """An entry this process may not read (a controller that is not root, facing the agent's ``chmod 000``)."""
    if os.geteuid() == 0 or not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        return False
    need = stat.S_IRUSR | (stat.S_IXUSR if stat.S_ISDIR(st.st_mode) else 0)
    if st.st_uid != os.geteuid():
        need >>= 6  # the others' bits; group membership is not worth guessing at
    return (st.st_mode & need) != need


def unreadable_reason(st: os.stat_result) -> str:
    if not unreadable(st):
        return ""
    return f"unreadable (mode {stat.S_IMODE(st.st_mode):o}): it cannot be reviewed, so it is never applied"


def is_sparse(dir_fd: int, name: str, st: os.stat_result) -> bool:
    """A regular file with holes, holding far fewer blocks than its size: it costs the agent nothing and a copy
    all of it. Its blocks alone could mislead (compressed or not yet allocated on ZFS), so a hole must be there."""
    if not (stat.S_ISREG(st.st_mode) and st.st_size > SPARSE_MIN_BYTES and st.st_blocks * 512 < st.st_size // 2):
        return False

    def has_hole(fd: int) -> bool:
        try:
            return os.lseek(fd, 0, os.SEEK_HOLE) < st.st_size
        except OSError:
            return False

    return _probe(dir_fd, name, has_hole)


def sparse_reason(dir_fd: int, name: str, st: os.stat_result) -> str:
    if not is_sparse(dir_fd, name, st):
        return ""
    return f"a sparse file ({st.st_size} bytes on {st.st_blocks * 512} allocated) is never applied nor checkpointed"


def _is_whiteout(dir_fd: int, name: str, st: os.stat_result) -> bool:
    if stat.S_ISCHR(st.st_mode):
        return st.st_rdev == 0
    if not stat.S_ISREG(st.st_mode) or st.st_size != 0:
        return False
    return _probe(dir_fd, name, lambda fd: _has_marker(fd, WHITEOUT, None))


def _probe(dir_fd: int, name: str, check: Callable[[int], bool]) -> bool:
    """``check`` on a read fd of the regular file ``name``; False when it cannot be opened as one."""
    try:
        fd = beneath.open_file(dir_fd, name)
    except OSError:
        return False
    try:
        return check(fd)
    finally:
        os.close(fd)


def _has_marker(fd: int, name: str, value: bytes | None) -> bool:
    """Whether overlay's own xattr ``name`` is set (to ``value``, unless None); the agent's are escaped."""
    try:
        found = os.getxattr(fd, name)
    except OSError:
        return False
    return value is None or found == value


def _listing(root_fd: int, rel: str) -> list[tuple[str, os.stat_result]]:
    """The entries of the checkout directory ``rel``, without following symlinks; ``.git`` included."""
    with beneath.parent(root_fd, rel) as (parent_fd, name):
        fd = beneath.open_dir(parent_fd, name)
    try:
        with os.scandir(fd) as it:
            return sorted((e.name, e.stat(follow_symlinks=False)) for e in it)
    finally:
        os.close(fd)


def _identical(dir_fd: int, name: str, st: os.stat_result, lower: int, path: str, low: os.stat_result) -> bool:
    """A copy-up that changed nothing (``touch``, ``chmod`` to the same mode, a rewrite of the same bytes)."""
    if file_type(st.st_mode) != file_type(low.st_mode) or stat.S_IMODE(st.st_mode) != stat.S_IMODE(low.st_mode):
        return False
    if stat.S_ISLNK(st.st_mode):
        return os.readlink(name, dir_fd=dir_fd) == beneath.readlink(lower, path)
    if not stat.S_ISREG(st.st_mode) or st.st_size != low.st_size:
        return False
    fd = beneath.open_file(dir_fd, name)
    try:
        with beneath.reading(lower, path) as old:
            return same_bytes(fd, old)
    finally:
        os.close(fd)


def same_bytes(a: int, b: int) -> bool:
    """Whether two open files hold the same bytes (read from the start, whatever their offsets)."""
    offset = 0
    while True:
        left, right = os.pread(a, 1 << 20, offset), os.pread(b, 1 << 20, offset)
        if left != right:
            return False
        if not left:
            return True
        offset += len(left)


class _Dirs:
    """Directory fds below a root by relative path, the last few kept open: the paths of one listing share their
    directories, so reading each file no longer walks its whole path from the root (an agent's paths may be deep)."""

    def __init__(self, root: int, keep: int = 32) -> None:
        self.root = root
        self.keep = keep
        self._open: collections.OrderedDict[str, int] = collections.OrderedDict()

    def __enter__(self) -> _Dirs:
        return self

    def __exit__(self, *_: object) -> None:
        for fd in self._open.values():
            os.close(fd)
        self._open.clear()

    def directory(self, rel: str) -> int:
        """An fd on directory ``rel`` ("" is the root), owned by this object; no symlink on the way is followed."""
        if not rel:
            return self.root
        fd = self._open.get(rel)
        if fd is not None:
            self._open.move_to_end(rel)
            return fd
        parent, _, name = rel.rpartition("/")
        fd = beneath.open_dir(self.directory(parent), name)
        self._open[rel] = fd
        while len(self._open) > self.keep:
            os.close(self._open.popitem(last=False)[1])
        return fd


def _describe(change: Change, upper: _Dirs, lower: _Dirs, with_diffs: bool) -> None:
    """Fill in the binary flag and the diff, reading each side at most once, boundedly."""
    if not with_diffs or (change.type != FileType.FILE and change.previous != FileType.FILE):
        return
    if change.reason.startswith("unreadable"):
        return  # held back, and a diff against nothing would read as the whole file deleted
    new = _head(upper, change.path) if change.kind != Kind.DELETED and change.type == FileType.FILE else None
    old = _head(lower, change.path) if change.previous == FileType.FILE else None
    change.binary = textdiff.shown_as_binary(old, new, executable=bool(change.mode & 0o111))
    if not change.binary and not is_git_path(change.path):
        change.diff = textdiff.unified(change.path, old, new)


def _head(dirs: _Dirs, path: str, limit: int = textdiff.MAX_INPUT + 1) -> bytes | None:
    parent, _, name = path.rpartition("/")
    try:
        fd = beneath.open_file(dirs.directory(parent), name)
    except OSError:
        return None
    try:
        return textdiff.read_head(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


@dataclass(frozen=True)
class _Reads:
    """What host git and the CI services read of the checkout, as judging finds it."""

    git: gitpointers.Index
    """The paths the checkout's git configurations (its own and its nested repositories') point at."""
    nested: frozenset[str] = frozenset()
    """The nested repositories' folders, folded (``gitpointers.fold``): each has CI definitions of its own."""
    ci: gitpointers.Index | None = None
    """The CI definitions where the checkout's own symlinks lead (``pipelines.through``)."""


def _judge(change: Change, rules: IgnoreRules, from_setup: bool, info: LayerInfo, reads: _Reads | None = None) -> None:
    """Decide what may reach the checkout; the first reason that applies wins."""
    problem = unsafe_reason(change)
    trusted = _trusted_because(change, info, reads)
    if is_git_path(change.path):
        change.disposition, change.reason = Disposition.DISCARDED, "inside .git, which is never applied"
    elif problem:
        change.disposition, change.reason = Disposition.UNSAFE, problem
    elif from_setup:
        change.disposition, change.reason = Disposition.ENVIRONMENT, "made by the environment's setup; never applied"
    elif trusted:
        change.disposition = Disposition.TRUSTED
        change.reason = trusted
    elif info.build.copied_whole(change.path):
        change.disposition, change.reason = Disposition.BUILD_INPUT, BUILD_CONTEXT_REASON
    elif rules.ignored(change.path, change.type == FileType.DIR):
        change.disposition, change.reason = Disposition.IGNORED, "ignored by the repository's ignore rules"


def _trusted_because(change: Change, info: LayerInfo, reads: _Reads | None) -> str:
    """Why the change is applied only when forced by name (what runs it or reads it as code, and how to apply it);
    empty if nothing does."""
    is_dir = change.type == FileType.DIR
    pointer = reads.git.covering(change.path, is_dir) if reads is not None else None
    if is_environment_config(change.path) or change.path in info.trusted:
        why = "the environment's definition"
    elif pointer is not None:
        why = f"git runs files here ({pointer.why})"
    else:
        pipeline = pipelines.why(change.path, is_dir, *((reads.nested, reads.ci) if reads is not None else ()))
        if pipeline is not None:
            return pipeline
        why = info.build.why(change.path, is_dir) or ""
    return f"{why}: applied only when forced by name (apply --force PATH)" if why else ""


def unsafe_reason(change: Change) -> str:
    if change.reason:
        return change.reason
    if change.kind == Kind.DELETED:
        return ""
    if TEMP_NAME.fullmatch(change.path.rpartition("/")[2]):
        return "named like the temporary files an apply writes, which a later apply or revert may remove"
    if change.type in UNSAFE_TYPES:
        return f"a {change.type.value} is never applied"
    if change.type == FileType.FILE and change.size > MAX_APPLY_BYTES:
        return f"larger than {MAX_APPLY_BYTES} bytes"
    if change.type == FileType.SYMLINK:
        return symlink_problem(change.path, change.target or "")
    return ""


def symlink_problem(link: str, target: str) -> str:
    """Why a symlink at ``link`` pointing to ``target`` may not enter the checkout, judged by its text alone.

    Text is only the kernel's reading when every ``..`` comes first: the link's own parents
    are real directories, but a name in the target may be another symlink (``up -> ..``), and
    ``name/..`` then climbs from wherever it leads — ``sub/deep/up/../..`` leaves the repository.
    """
    if target[:1] in ("", "/"):
        return "the symlink's target is absolute or empty"
    where = link.split("/")[:-1]
    named = False
    for part in target.split("/"):
        if part == "..":
            if named:
                return "the symlink's target climbs ('..') after a name, which may itself be a symlink"
            if not where:
                return "the symlink's target leaves the repository"
            where.pop()
        elif part not in ("", "."):
            where.append(part)
            named = True
    if not where:
        return "the symlink points at the repository root"
    if any(is_git_name(part) for part in where):
        return "the symlink points into .git"
    return ""


def _find_renames(found: list[Change], upper: _Dirs, lower: _Dirs) -> None:
    """Pair an added file with a deleted one of the same small size and bytes; a hint for the reviewer only."""
    deleted: dict[int, list[Change]] = {}
    for c in found:
        if _small_file(c, Kind.DELETED):
            deleted.setdefault(c.size, []).append(c)
    for change in found:
        if not _small_file(change, Kind.ADDED) or change.size not in deleted:
            continue
        new = _head(upper, change.path, RENAME_MAX_BYTES + 1)
        for old in deleted[change.size]:
            if _head(lower, old.path, RENAME_MAX_BYTES + 1) == new:
                change.renamed_from = old.path
                break


def _small_file(change: Change, kind: Kind) -> bool:
    """Whether ``change`` is a file of ``kind`` small enough to be compared as a rename."""
    return change.kind == kind and change.type == FileType.FILE and change.size <= RENAME_MAX_BYTES
