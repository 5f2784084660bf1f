"""Keeping the controller's git directory (``<data_dir>/git``, see ``gitmirror``) bounded: what ``cubicle gc``
removes there, and what it must never remove. It may run beside a server's sessions and other processes' fetches.

* **Trees** (``git/trees/<commit>``) no session's ``repo`` names go once ``settled_s`` old: a session being made
  on one may not have written its record yet.
* **Pins** of sessions that no longer exist are dropped, unless a fetch resolved their commit within
  ``settled_s`` (``gitmirror.hold``: such a pin may be a new session's whose record is not written yet).
* **Mirrors** are handled one at a time under their own lock, taken without waiting: a mirror whose lock is held
  (a fetch, a lease's fetch, a first clone) is left as it is for the next sweep. Under the lock,

  - a mirror no session pins and no session has used (``gitmirror.last_used``) for ``idle_s`` is removed: renamed
    into ``git/tmp`` first (so no half-removed mirror is ever taken for a whole one), then deleted, and its lock
    file unlinked while still held (``gitmirror.if_free`` opens the path anew after such an unlink);
  - a mirror that stays is compacted: holds older than ``settled_s`` and refs outside what a fetch, a pin or a hold writes
    are deleted, then ``git repack --cruft -d`` writes what its refs reach as one pack and prunes what they do not,
    except objects younger than ``settled_s`` (a push builds its commit's objects in the mirror outside the lock,
    and they are reachable from nothing until it is sent). A pin is a ref, so a pinned commit survives a
    force-push upstream and every compaction. A mirror whose refs have not changed since its last compaction,
    with one pack and no loose object, is not repacked again.
  - what a killed git left in it is removed once ``leftover_s`` old: a fetch's ``tmp_*`` pack files and the
    ``*.lock`` files of its refs (one left behind makes every later fetch fail).
* **Leftovers in ``git/tmp``** (a first fetch, a tree or a commit's index that a killed process never finished, a
  mirror whose removal was interrupted) go once ``leftover_s`` old, as does a mirror's lock file with no mirror. A
  symlink is unlinked, never followed; a directory is removed with ``shutil.rmtree``, which does not follow the
  links inside it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from . import gitmirror
from .gitrun import Git, home

SETTLED_S = 3600.0
"""A tree younger than this is kept even when no session names it yet; objects no ref reaches are kept as long."""
IDLE_S = 14 * 86400.0
LEFTOVER_S = 3 * 3600.0
COMPACT_TIMEOUT_S = 3600.0
COMPACTED = "cubicle-compacted"
"""A file in the mirror: a hash of its refs when it was last compacted."""
KEPT_REFS = ("refs/heads/", "refs/tags/", gitmirror.PINS, gitmirror.HELD, gitmirror.HEAD_REF)
_KEY = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True)
class SweepOptions:
    """The ages past which the sweep removes things (seconds)."""

    idle_s: float = IDLE_S
    settled_s: float = SETTLED_S
    leftover_s: float = LEFTOVER_S


def sweep(
    data_dir: Path, used: set[str], exists: Callable[[str], bool], options: SweepOptions | None = None
) -> list[str]:
    """Sweep ``data_dir``'s git directory: ``used`` are the sessions' ``repo`` paths, ``exists`` says whether a
    session is still recorded. What was done, as lines to print."""
    options = options or SweepOptions()
    root = data_dir / "git"
    if not root.is_dir() or root.is_symlink():
        return []
    done = sweep_trees(root / "trees", used, options.settled_s)
    mirrors = root / "mirrors"
    for entry in _entries(mirrors):
        if _KEY.fullmatch(entry.name) and entry.is_dir() and not entry.is_symlink():
            done += tend(data_dir, entry, exists, options)
        elif entry.name.endswith(".lock") and _KEY.fullmatch(entry.name[: -len(".lock")]):
            _drop_lonely_lock(entry)
    return done + sweep_leftovers(root / "tmp", options.leftover_s)


def _entries(directory: Path) -> list[Path]:
    if not directory.is_dir() or directory.is_symlink():
        return []
    return sorted(directory.iterdir())


def sweep_trees(trees: Path, used: set[str], settled_s: float) -> list[str]:
    """Remove the trees no session's ``repo`` names, once ``settled_s`` old. A tree is judged by its name (its
    commit), not by the spelling of its path: a gc run with another spelling of the data directory (a symlink, a
    relative path) than the server's must still see the trees its sessions sit on (at worst a tree is kept)."""
    names = {Path(repo).name for repo in used}
    done = []
    for tree in _entries(trees):
        if tree.is_dir() and not tree.is_symlink() and tree.name not in names and _older(tree, settled_s):
            what = f"the tree of commit {tree.name[:12]}, which no session uses"
            done.append(_removed(tree, what))
    return done


def _removed(path: Path, what: str) -> str:
    """Remove ``path`` (a directory, not followed if a link; anything else unlinked), and say whether it went."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)  # another sweep may be removing it too
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    return f"could not remove {what}" if os.path.lexists(path) else f"removed {what}"


def _older(path: Path, age_s: float) -> bool:
    try:
        return time.time() - path.lstat().st_mtime > age_s
    except FileNotFoundError:  # another sweep took it
        return False


def tend(data_dir: Path, mirror: Path, exists: Callable[[str], bool], options: SweepOptions) -> list[str]:
    """One mirror, under its lock: its purged sessions' pins dropped, then removed when idle, else compacted.
    A mirror whose lock is held is left alone."""
    git = Git(home(data_dir))
    with gitmirror.if_free(gitmirror.lock_of(mirror)) as held:
        if not held or not mirror.is_dir():
            return []
        done = _unpin_purged(git, mirror, exists, options.settled_s)
        if not gitmirror.pins(mirror) and time.time() - gitmirror.last_used(mirror) > options.idle_s:
            _remove(data_dir, mirror)
            return [*done, f"removed the mirror {mirror.name[:12]}, which no session has used for a while"]
        _drop_stale_files(mirror, options.leftover_s)
        return done + compact(git, mirror, options.settled_s)


def _unpin_purged(git: Git, mirror: Path, exists: Callable[[str], bool], settled_s: float) -> list[str]:
    """Drop the pins of sessions that no longer exist, but not one of a commit held for less than ``settled_s``: it
    may be a new session's whose record is not written yet."""
    now = time.time()
    held = {name.rsplit("-", 1)[-1] for name, at in gitmirror.holds(git, mirror) if now - at <= settled_s}
    done = []
    for session_id in gitmirror.pins(mirror):
        if not exists(session_id) and gitmirror.pinned(mirror, session_id) not in held:
            gitmirror.unpin(mirror, session_id)
            done.append(f"unpinned the commit of purged session {session_id}")
    return done


def _remove(data_dir: Path, mirror: Path) -> None:
    """Rename the mirror into ``git/tmp`` and delete it there; unlink its lock file (the caller holds it)."""
    spare = data_dir / "git" / "tmp"
    spare.mkdir(parents=True, exist_ok=True)
    gone = Path(tempfile.mkdtemp(prefix="gone-", dir=spare))
    os.rename(mirror, gone / mirror.name)
    gitmirror.lock_of(mirror).unlink(missing_ok=True)
    shutil.rmtree(gone, ignore_errors=True)


def compact(git: Git, mirror: Path, settled_s: float) -> list[str]:
    """Delete the refs no longer wanted, then pack what the rest reach and prune what is older than ``settled_s``
    and reached by none (see the module). Skipped when nothing changed since the last time."""
    now = time.time()
    expired = [name for name, at in gitmirror.holds(git, mirror) if now - at > settled_s]
    refs = _refs(git, mirror)
    gitmirror.drop(git, mirror, expired + [name for name in refs if not name.startswith(KEPT_REFS)])
    state = hashlib.sha256(git.run(["for-each-ref", "--format=%(objectname) %(refname)"], mirror)).hexdigest()
    if _read(mirror / COMPACTED) == state and _packed_alone(git, mirror):
        return []
    before = gitmirror.tree_size(mirror / "objects")
    expiry = f"{int(settled_s)}.seconds.ago" if settled_s > 0 else "now"
    args = ["repack", "-d", "--cruft", f"--cruft-expiration={expiry}", "-q", "--no-write-bitmap-index"]
    git.run(args, mirror, timeout=COMPACT_TIMEOUT_S)
    (mirror / COMPACTED).write_text(f"{state}\n")
    after = gitmirror.tree_size(mirror / "objects")
    return [f"compacted the mirror {mirror.name[:12]} ({before:,} bytes of objects, now {after:,})"]


def _refs(git: Git, mirror: Path) -> list[str]:
    return git.run(["for-each-ref", "--format=%(refname)"], mirror).decode().splitlines()


def _read(path: Path) -> str:
    with contextlib.suppress(OSError):
        return path.read_text().strip()
    return ""


def _packed_alone(git: Git, mirror: Path) -> bool:
    """Whether the mirror's objects are one pack and no loose object."""
    counted = dict(
        line.split(": ", 1) for line in git.run(["count-objects", "-v"], mirror).decode().splitlines() if ": " in line
    )
    return counted.get("count") == "0" and counted.get("packs") in ("0", "1")


def _drop_stale_files(mirror: Path, leftover_s: float) -> None:
    """A killed fetch's ``tmp_*`` packs and a killed git's ref locks, once ``leftover_s`` old (the caller holds
    the mirror's lock, so no fetch of ours is writing them)."""
    for leftover in [*_files(mirror / "objects" / "pack", "tmp_*"), *_lock_files(mirror)]:
        if _older(leftover, leftover_s):
            leftover.unlink(missing_ok=True)


def _files(directory: Path, pattern: str) -> Iterator[Path]:
    if directory.is_dir() and not directory.is_symlink():
        yield from directory.glob(pattern)


def _lock_files(mirror: Path) -> Iterator[Path]:
    """``*.lock`` beside the mirror's own files and under its ``refs`` (walked without following links)."""
    yield from _files(mirror, "*.lock")
    for top, _dirs, files in os.walk(mirror / "refs"):
        yield from (Path(top) / name for name in files if name.endswith(".lock"))


def _drop_lonely_lock(lock: Path) -> None:
    """Unlink a mirror's lock file that has no mirror beside it (a first fetch that failed), if nobody holds it."""
    with gitmirror.if_free(lock) as held:
        if held and not lock.with_suffix("").exists():
            lock.unlink(missing_ok=True)


def sweep_leftovers(spare: Path, leftover_s: float) -> list[str]:
    """Remove what unfinished work left in ``git/tmp`` once ``leftover_s`` old; a symlink is unlinked, never
    followed."""
    done = []
    for entry in _entries(spare):
        if _older(entry, leftover_s):
            done.append(_removed(entry, f"{entry.name[:80]!r} from git/tmp, left by unfinished work"))
    return done
