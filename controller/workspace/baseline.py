"""The checkout as it was when the session started: one cheap identity per entry, and content ids.

``apply`` must not overwrite what the user changed while the agent worked, so it needs
to know what each path looked like at the start. Recording an ``lstat`` (and a symlink's
target) per entry costs one syscall each. The ignore files are kept so the session judges
"ignored" by the rules it started with, and regular files get a content id where one is
cheap (``contents``: from the checkout's git index, else hashed within a budget), so a
file rewritten with the same bytes is not taken for a change. Nothing under a ``.git``
directory (any case) is recorded: it is never applied. The folders holding one (repositories nested in the
checkout: submodules, vendored clones) are kept apart (``repos.json``): git obeys each one's own configuration.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from . import beneath, contents
from .ignore import EXCLUDE, IgnoreRules
from .records import Identity, identity_row, read_json, write_json

MAX_IGNORE_FILE = 1 << 20
MAX_DEPTH = 256


# Code points HFS+ ignores in names, so ".g\u200cit" is ".git" there (git's own is_hfs_dotgit list).
HFS_IGNORED = dict.fromkeys(
    map(ord, "\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u206a\u206b\u206c\u206d\u206e\u206f\ufeff")
)


def is_git_name(name: str) -> bool:
    """Any name some filesystem git runs on would take for ``.git``: any case, HFS+-ignored
    code points, NTFS's trailing dots and spaces, and the 8.3 short name ``git~1``."""
    folded = name.translate(HFS_IGNORED).casefold().rstrip(" .")
    return folded in (".git", "git~1")


def is_git_path(rel: str) -> bool:
    folded = rel.translate(HFS_IGNORED).casefold()
    if ".git" not in folded and "git~1" not in folded:
        return False  # what every git name holds once folded: most paths are decided in one pass
    return any(is_git_name(part) for part in rel.split("/"))


class Baseline:
    """Entries by relative path, plus the ignore files, as recorded at session start.

    An entry is kept as one string ("type mode size mtime_ns ino", symlink targets apart):
    JSON decodes 20,000 strings several times faster than 20,000 small lists.
    """

    def __init__(
        self,
        entries: dict[str, str],
        targets: dict[str, str],
        ignore_files: dict[str, str],
        blobs: dict[str, str] | None = None,
        nested: list[str] | None = None,
    ) -> None:
        self._entries = entries
        self._targets = targets
        self.ignore_files = ignore_files
        self.blobs = blobs or {}
        """Content ids of regular files, where session start knew one (``contents``); saved apart (``blobs.json``)."""
        self.nested = nested or []
        """The folders below the top holding a ``.git`` (any case), as walked; saved apart (``repos.json``)."""

    def get(self, rel: str) -> Identity | None:
        packed = self._entries.get(rel)
        if packed is None:
            return None
        kind, *numbers = packed.split(" ")
        return Identity.from_row([kind, *map(int, numbers), self._targets.get(rel)])

    def paths(self) -> list[str]:
        return list(self._entries)

    def save(self, path: Path) -> None:
        """Entries to ``path``; ignore files apart (``ignore.json``), so listing changes skips the big file."""
        write_json(path, {"entries": self._entries, "targets": self._targets})
        write_json(path.with_name("ignore.json"), self.ignore_files)
        write_json(blobs_file(path), self.blobs)
        write_json(path.with_name("repos.json"), self.nested)

    @classmethod
    def load(cls, path: Path) -> Baseline:
        data = read_json(path)
        return cls(data["entries"], data["targets"], read_json(path.with_name("ignore.json")))


def blobs_file(path: Path) -> Path:
    """Where the content ids of the baseline at ``path`` are kept."""
    return path.with_name("blobs.json")


def load_blobs(path: Path) -> dict[str, str]:
    """The content ids recorded beside the baseline at ``path`` (none for a layer made before they were)."""
    where = blobs_file(path)
    return read_json(where) if where.exists() else {}


def load_nested(path: Path) -> list[str]:
    """The nested repositories recorded beside the baseline at ``path`` (none for a layer made before they were)."""
    where = path.with_name("repos.json")
    return list(read_json(where)) if where.exists() else []


def load_rules(path: Path) -> IgnoreRules:
    """The ignore rules recorded beside the baseline at ``path``."""
    return IgnoreRules(read_json(path.with_name("ignore.json")))


def record(repo: Path, with_contents: bool = True) -> Baseline:
    """Walk the checkout without following symlinks and fingerprint every entry outside ``.git``; with
    ``with_contents``, the files' content ids too (the benchmark's baseline records without them)."""
    entries: dict[str, str] = {}
    targets: dict[str, str] = {}
    ignore_files: dict[str, str] = {}
    blobs: dict[str, str] = {}
    nested: list[str] = []
    root = beneath.open_root(repo)
    try:
        hasher = contents.Hasher(root) if with_contents else None
        _walk(root, "", _Into(entries, targets, ignore_files, blobs, hasher, nested), 0)
        exclude = _read_small(root, EXCLUDE)
        if exclude is not None:
            ignore_files[EXCLUDE] = exclude
    finally:
        os.close(root)
    return Baseline(entries, targets, ignore_files, blobs, nested)


def record_into(repo: str, path: str) -> None:
    """``record`` of ``repo``, saved at ``path``: what a walk's child runs at session start (``Workspaces.create``),
    so the checkout's listing and its ``.git/index`` (hundreds of MB parsed for a checkout of a million files) cost
    that child's bounded memory, never the controller's."""
    record(Path(repo)).save(Path(path))


@dataclass
class _Into:
    entries: dict[str, str]
    targets: dict[str, str]
    ignores: dict[str, str]
    blobs: dict[str, str]
    hasher: contents.Hasher | None
    nested: list[str]


def _walk(dir_fd: int, prefix: str, into: _Into, depth: int) -> None:
    with os.scandir(dir_fd) as it:
        every = [(e.name, e.stat(follow_symlinks=False)) for e in it]
    listing = [(name, st) for name, st in every if not is_git_name(name)]
    if prefix and len(listing) < len(every):
        into.nested.append(prefix.rstrip("/"))
    for name, st in listing:
        rel = f"{prefix}{name}"
        row = identity_row(st)
        into.entries[rel] = " ".join(map(str, row[:5]))
        if stat.S_ISREG(st.st_mode):
            _file(dir_fd, name, rel, st, into)
        elif stat.S_ISLNK(st.st_mode):
            into.targets[rel] = os.readlink(name, dir_fd=dir_fd)
        elif stat.S_ISDIR(st.st_mode) and depth < MAX_DEPTH:
            child = beneath.open_dir(dir_fd, name)
            try:
                _walk(child, rel + "/", into, depth + 1)
            finally:
                os.close(child)


def _file(dir_fd: int, name: str, rel: str, st: os.stat_result, into: _Into) -> None:
    """A regular file: its blob, when contents are hashed, and its text if it is an ignore file."""
    if into.hasher is not None:
        blob = into.hasher.blob(dir_fd, name, rel, st)
        if blob is not None:
            into.blobs[rel] = blob
    if name == ".gitignore":
        text = _read_small(dir_fd, name)
        if text is not None:
            into.ignores[rel.removesuffix(name).rstrip("/")] = text


def _read_small(dir_fd: int, rel: str) -> str | None:
    """A small ignore file's text, or None if it is absent, not a regular file or too big."""
    try:
        with beneath.parent(dir_fd, rel) as (parent_fd, name):
            fd = beneath.open_file(parent_fd, name)
        try:
            data = os.read(fd, MAX_IGNORE_FILE + 1)
        finally:
            os.close(fd)
    except OSError:
        return None
    return None if len(data) > MAX_IGNORE_FILE else data.decode("utf-8", "surrogateescape")
