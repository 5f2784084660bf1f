"""Which repositories a session may use. The API holds the Docker socket, so this is the door to the host.

A repo must resolve (after every symlink) to an existing directory under one of the
configured roots, and must not be, or contain, anything that would hand the host to
the sandbox: the filesystem root, system directories, the Docker socket, or the
controller's own data.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from pathlib import Path

from ..errors import ForbiddenRepoError, RepoError

# Never a repository, nor anything under them.
SYSTEM_TREES = (
    "/proc",
    "/sys",
    "/dev",
    "/boot",
    "/etc",
    "/run",
    "/var/run",
    "/var/lib",
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/snap",
)
# Never a repository themselves (too broad), though a directory under them may be.
TOP_LEVELS = ("/", "/home", "/root", "/tmp", "/var", "/opt", "/srv", "/mnt", "/media")


def _within(path: Path, parent: Path) -> bool:
    return path == parent or parent in path.parents


def check_text(raw: str) -> str:
    """Reject what no path should hold before touching the filesystem."""
    if not raw or any(c in raw for c in "\x00\n\r"):
        raise RepoError("The repo path is empty or contains NUL or newline characters.")
    return raw


def resolve(raw: str, roots: Iterable[Path], protected: Iterable[Path]) -> Path:
    """The real directory behind ``raw``, or a RepoError/ForbiddenRepoError that says why not."""
    check_text(raw)
    if not os.path.isabs(raw):
        raise RepoError(f"The repo path must be absolute: {raw!r}.")
    try:
        real = Path(os.path.realpath(raw, strict=True))
    except OSError:
        raise RepoError(f"The repo {raw!r} does not exist.") from None
    if not real.is_dir():
        raise RepoError(f"The repo {raw!r} is not a directory.")
    if str(real) in TOP_LEVELS or any(_within(real, Path(tree)) for tree in SYSTEM_TREES):
        raise ForbiddenRepoError(f"The repo {raw!r} resolves to {real}, a system directory.")
    refuse_protected(real, protected, raw)
    real_roots = list(map(Path, map(os.path.realpath, roots)))
    if not any(_within(real, root) for root in real_roots):
        allowed = ", ".join(map(str, real_roots)) or "none configured (set CUBICLE_REPO_ROOTS)"
        raise ForbiddenRepoError(f"The repo {raw!r} resolves to {real}, outside the allowed roots: {allowed}.")
    return real


def refuse_protected(real: Path, protected: Iterable[Path], raw: str | None = None) -> None:
    """Refuse a repository that is, contains or lies inside one of ``protected`` (the data dir, the engine's socket).

    The CLI checks this too: a data directory inside the repository would show the agent every
    session's transcript and let an apply write the layers' own records.
    """
    for item in protected:
        target = Path(os.path.realpath(item))
        if _within(target, real) or _within(real, target):
            raise ForbiddenRepoError(f"The repo {raw or str(real)!r} would expose {item} to the sandbox.")


MAX_LISTED = 500
LIST_DEPTH = 3


def listed(roots: Iterable[Path], protected: Iterable[Path]) -> list[str]:
    """Git checkouts under ``roots`` (each root too, and up to ``LIST_DEPTH`` levels below), for a form to offer.

    Each is one ``resolve`` accepts; hidden directories are not entered; at most ``MAX_LISTED``.
    The list is a convenience: a session may still name any repository under the roots.
    """
    protected = list(protected)
    found: list[str] = []

    def walk(folder: Path, depth: int) -> None:
        if len(found) >= MAX_LISTED:
            return
        if (folder / ".git").exists():
            with contextlib.suppress(RepoError, ForbiddenRepoError):  # listed only if a session could use it
                found.append(str(resolve(str(folder), roots, protected)))
            return
        if depth >= LIST_DEPTH:
            return
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            return
        for entry in entries:
            if not entry.name.startswith(".") and entry.is_dir(follow_symlinks=False):
                walk(Path(entry.path), depth + 1)

    for root in roots:
        walk(Path(root), 0)
    return sorted(set(found))


def own_checkout() -> Path | None:
    """The source checkout this controller runs from (an editable install, ``PYTHONPATH``), or None when it runs
    from an installed wheel: the directory above the package, when it holds ``pyproject.toml`` and ``.git``."""
    top = Path(__file__).resolve().parents[2]
    return top if (top / "pyproject.toml").is_file() and (top / ".git").exists() else None


def preselected(found: Iterable[str], roots: Iterable[Path], own: Path | None) -> str | None:
    """The repository a form offers first: the first of ``found`` under the first root that has one, Cubicle's own
    checkout (``own``) aside. A session on the controller's own source is possible, but never the default."""
    found = list(found)
    for root in roots:
        real = Path(os.path.realpath(root))
        for repo in found:
            if _within(Path(repo), real) and (own is None or Path(repo) != own):
                return repo
    return None
