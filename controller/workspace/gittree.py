"""A commit's files, written as git stores them, into a directory of the controller's that sessions on that commit
share as the checkout under their layers (``<data_dir>/git/trees/<commit>/``).

Why not ``git checkout`` or ``git clone``: a checkout runs what the repository asks for — ``.gitattributes``
filters and their smudge commands, LFS downloads, hooks, submodule fetches — on the controller, often as root.
Here nothing of the repository is run or interpreted:

* **Blobs as stored**: the tree is listed (``ls-tree -r -z``) and each blob's bytes read with ``cat-file --batch``,
  which applies no attribute, filter or end-of-line conversion; an LFS pointer stays a pointer. Files keep git's
  exec bit (0755 or 0644); a symlink is made as a link with its stored target and is never followed (every
  entry is created beneath a directory fd with ``O_NOFOLLOW``, in a directory only this call has written).
* **Submodules** (gitlinks) are left out as an empty directory, as a clone without ``--recurse-submodules`` leaves
  them; ``Tree.gitlinks`` lists them so a session can say so.
* **Names**: git accepts names this host must not write (``..``, ``.git`` in any case or spelling, an empty
  component from a leading ``/``, a NUL); a tree holding one is refused whole (``GitTreeError``), nothing written.
* **Bounds before writing**: the tree's blob sizes are summed from the listing and its entries counted; past
  ``max_bytes`` or ``max_entries`` it is refused, naming the size, before one byte is written.
* **Atomic and shared**: the tree is made in ``<data_dir>/git/tmp`` and renamed into place; two sessions making
  one commit's tree at once both succeed, one rename wins and the other's copy is removed. A tree is read-only to
  sessions because it is only ever a layer's lower directory; nothing writes it after the rename.
* **Owned by the agent** (``owner``, default 1000:1000, applied when the controller runs as root): the overlay
  copies a file up with its owner, and the agent must own what it edits.
* **A ``.git`` of its own**, so the session's tooling sees the commit: a fresh ``git init`` (no templates, no
  remote, no credentials), the commit's own objects (one pack, made by ``pack-objects`` from the mirror: the
  commit, its tree and blobs, none of its history), ``shallow`` naming the commit, a detached ``HEAD`` at it, and
  an index read from its tree (``read-tree``: no file is read or filtered). ``git log`` shows the commit and
  ``git diff``/``git status`` compare against it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ..errors import GitError, GitRefError, GitTooLargeError, GitTreeError
from . import beneath
from .gitrun import TIMEOUT_S, Git, home

_FULL_ID = re.compile(r"[0-9a-f]{40}")
_LISTED = re.compile(rb"(\d{6}) (\w+) ([0-9a-f]{40}) +(\d+|-)\t(.*)", re.DOTALL)
_NTFS_SHORT = re.compile(rb"git~\d+")
CHUNK = 1 << 20


@dataclass(frozen=True)
class TreeOptions:
    """Who owns a tree's files, and how large a tree may be."""

    owner: tuple[int, int] | None = (1000, 1000)
    max_bytes: int = 1 << 30
    max_entries: int = 500_000


@dataclass(frozen=True)
class Tree:
    """A commit's files: where they are, the submodules left out, the bytes of its blobs."""

    path: Path
    commit: str
    gitlinks: tuple[str, ...]
    size: int


@dataclass(frozen=True)
class TreeEntry:
    """One line of ``ls-tree -r -l``: a blob, a symlink or a gitlink."""

    mode: str
    oid: str
    size: int
    path: bytes


def parse_listing(listing: bytes) -> list[TreeEntry]:
    """The entries of ``ls-tree -r -z -l`` output."""
    entries = []
    for record in listing.split(b"\0"):
        if not record:
            continue
        match = _LISTED.fullmatch(record)
        if match is None:
            raise GitError(f"git ls-tree printed a line this reader does not know: {record[:80]!r}.")
        mode, _kind, oid, size, path = match.groups()
        entries.append(TreeEntry(mode.decode(), oid.decode(), 0 if size == b"-" else int(size), path))
    return entries


def unsafe_component(name: bytes) -> bool:
    """Whether one component of a path must not be written here: empty, ``.``, ``..``, ``.git`` as Windows or
    macOS would also read it (any case, trailing dots or spaces, ``git~1``), or holding a NUL or a slash."""
    folded = name.lower().rstrip(b". ")
    return (
        name in (b"", b".", b"..")
        or b"\0" in name
        or b"/" in name
        or folded == b".git"
        or _NTFS_SHORT.fullmatch(folded) is not None
    )


def check_names(entries: list[TreeEntry]) -> None:
    """Refuse the tree if any entry's path is one this host must not write."""
    for entry in entries:
        if any(unsafe_component(part) for part in entry.path.split(b"/")):
            raise GitTreeError(f"The commit's tree holds the path {entry.path[:200]!r}, which is unsafe here.")


def check_size(entries: list[TreeEntry], options: TreeOptions) -> int:
    """The bytes of the tree's blobs, refused past ``max_bytes`` (or more entries than ``max_entries``)."""
    total = sum(entry.size for entry in entries)
    if total > options.max_bytes:
        raise GitTooLargeError(
            f"The commit's files hold {total:,} bytes, more than the {options.max_bytes:,} a checkout may."
        )
    if len(entries) > options.max_entries:
        raise GitTooLargeError(
            f"The commit's tree holds {len(entries):,} entries, more than the {options.max_entries:,} it may."
        )
    return total


def checkout_tree(data_dir: Path, mirror: Path, commit: str, options: TreeOptions | None = None) -> Tree:
    """The files of ``commit`` (a full id, in the mirror at ``mirror``) in ``<data_dir>/git/trees/<commit>``,
    made now or by an earlier call. Raises GitRefError (no such commit), GitTreeError (an unsafe name),
    GitTooLargeError (past a bound) or GitError, and then leaves nothing behind."""
    options = options or TreeOptions()
    if not _FULL_ID.fullmatch(commit):
        raise GitRefError(f"A checkout takes a full commit id, not {commit[:80]!r}.")
    done = data_dir / "git" / "trees" / commit
    known = _CHECKED.get((done, options))
    if known is not None and done.is_dir():  # a commit's tree never changes: listed and judged once a process
        with contextlib.suppress(OSError):  # young again, so gc's age test keeps it until its session names it
            os.utime(done)
        return known
    tree = _checked_out(data_dir, mirror, commit, options, done)
    if len(_CHECKED) >= MAX_CHECKED:
        _CHECKED.clear()
    _CHECKED[(done, options)] = tree
    return tree


MAX_CHECKED = 1024
"""Trees a process remembers having listed and judged (their submodules and size), at most."""
_CHECKED: dict[tuple[Path, TreeOptions], Tree] = {}


def _checked_out(data_dir: Path, mirror: Path, commit: str, options: TreeOptions, done: Path) -> Tree:
    git = Git(home(data_dir))
    try:
        listing = git.run(["ls-tree", "-r", "-z", "-l", "--full-tree", f"{commit}^{{tree}}"], mirror)
    except GitError:
        raise GitRefError(f"The mirror holds no commit {commit}.") from None
    entries = parse_listing(listing)
    check_names(entries)
    size = check_size(entries, options)
    gitlinks = tuple(os.fsdecode(e.path) for e in entries if e.mode == "160000")
    if not done.is_dir():
        done.parent.mkdir(parents=True, exist_ok=True)
        _made(git, data_dir, mirror, commit, entries, options, done)
    else:  # found made: young again, so gc's age test keeps it until the session now being made names it
        with contextlib.suppress(OSError):
            os.utime(done)
    return Tree(done, commit, gitlinks, size)


def _made(
    git: Git, data_dir: Path, mirror: Path, commit: str, entries: list[TreeEntry], options: TreeOptions, done: Path
) -> None:
    """Write the tree and its ``.git`` aside, then rename it to ``done`` (a tree another call made first wins)."""
    spare = data_dir / "git" / "tmp"
    spare.mkdir(parents=True, exist_ok=True)
    made = Path(tempfile.mkdtemp(prefix="tree-", dir=spare))
    try:
        os.chmod(made, 0o755)
        write_files(git, mirror, made, entries)
        make_dot_git(git, mirror, made, commit)
        if options.owner is not None and os.geteuid() == 0:
            own(made, *options.owner)
        try:
            os.rename(made, done)
        except OSError:
            if not done.is_dir():
                raise
    finally:
        shutil.rmtree(made, ignore_errors=True)


def write_files(git: Git, mirror: Path, root: Path, entries: list[TreeEntry]) -> None:
    """Each entry's stored bytes under ``root``: regular files, symlinks, an empty directory for a gitlink."""
    blobs = [entry for entry in entries if entry.mode != "160000"]
    root_fd = beneath.open_root(root)
    try:
        for entry in entries:
            if entry.mode == "160000":
                with _parent(root_fd, entry.path) as (fd, name):
                    os.mkdir(name, 0o755, dir_fd=fd)
        with _blobs(git, mirror, blobs) as stream:
            for entry in blobs:
                with _parent(root_fd, entry.path) as (fd, name):
                    _write(stream, entry, fd, name)
    finally:
        os.close(root_fd)


@contextlib.contextmanager
def _parent(root_fd: int, path: bytes) -> Iterator[tuple[int, str]]:
    """The directory holding ``path`` (its parents made as directories on the way), and its last name."""
    *dirs, last = os.fsdecode(path).split("/")
    fd = os.dup(root_fd)
    try:
        for name in dirs:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o755, dir_fd=fd)
            child = beneath.open_dir(fd, name)
            os.close(fd)
            fd = child
        yield fd, last
    finally:
        os.close(fd)


@contextlib.contextmanager
def _blobs(git: Git, mirror: Path, entries: list[TreeEntry]) -> Iterator[IO[bytes]]:
    """``cat-file --batch``'s answers for each entry's blob, in order (raw bytes: no filter, no conversion)."""
    with git.started(["cat-file", "--batch"], mirror, stdin=subprocess.PIPE) as run, run.deadline(TIMEOUT_S * 10):
        feeder = run.feed(b"".join(f"{entry.oid}\n".encode() for entry in entries))
        assert run.proc.stdout is not None
        yield run.proc.stdout
        feeder.join()


def _write(stream: IO[bytes], entry: TreeEntry, dir_fd: int, name: str) -> None:
    """One blob from the stream into ``name``: a symlink's target, or a new file of the entry's mode."""
    header = stream.readline().split()
    if len(header) != 3 or header[0].decode() != entry.oid or header[1] != b"blob":
        raise GitError(f"git cat-file answered {b' '.join(header)[:120]!r} for the blob {entry.oid}.")
    size = int(header[2])
    if entry.mode == "120000":
        target = _exactly(stream, size)
        if b"\0" in target:
            raise GitTreeError(f"The symlink {entry.path[:200]!r} has a target with a NUL.")
        os.symlink(os.fsdecode(target), name, dir_fd=dir_fd)
    else:
        mode = 0o755 if entry.mode == "100755" else 0o644
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
        try:
            while size:
                chunk = _exactly(stream, min(size, CHUNK))
                beneath.write_all(fd, chunk)
                size -= len(chunk)
            os.fchmod(fd, mode)  # the umask took bits off
        finally:
            os.close(fd)
    _exactly(stream, 1)  # the newline after each object


def _exactly(stream: IO[bytes], size: int) -> bytes:
    data = stream.read(size)
    if len(data) != size:
        raise GitError("git cat-file stopped before the end of a blob.")
    return data


def make_dot_git(git: Git, mirror: Path, root: Path, commit: str) -> None:
    """``root/.git``: a new repository holding the commit's objects alone, HEAD detached at it, its index."""
    git.run(["init", "--quiet", "--template=", str(root)], root)
    dot_git = root / ".git"
    objects = git.run(["rev-list", "--objects", "--no-walk", commit], mirror)
    (dot_git / "objects" / "pack").mkdir(parents=True, exist_ok=True)
    git.run(["pack-objects", "--quiet", str(dot_git / "objects" / "pack" / "pack")], mirror, stdin=objects)
    (dot_git / "shallow").write_text(f"{commit}\n")
    git.run(["update-ref", "--no-deref", "HEAD", commit], root)
    git.run(["read-tree", commit], root)


def own(root: Path, uid: int, gid: int) -> None:
    """Give everything under ``root`` (itself included; symlinks themselves, never their targets) to uid:gid."""
    os.chown(root, uid, gid, follow_symlinks=False)
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            os.chown(os.path.join(top, name), uid, gid, follow_symlinks=False)
