"""What a deletion needs at the quota, made before the agent can use the last inode.

Deleting a file the agent made is a plain unlink in the upper layer. Deleting a file of
the checkout (or of the environment's setup) is a *whiteout* in the upper layer, and
overlayfs then needs, on a filesystem with no inode left:

- the parent directories in the upper layer: the first change under a directory copies it
  up, one inode each level;
- one inode for the first whiteout of each mount: overlayfs makes one whiteout in its work
  directory and hard-links every later whiteout of that mount to it (a link takes no inode).

Overlay writes all of this with the mounter's credentials, as it writes the agent's own
files, so no filesystem quota or reserve can tell the two apart. Instead both are made
ahead, while inodes are free:

- ``mirror``: at the layer's first mount, every directory of the checkout gets its upper
  directory, with the mode, owner and mtime the merged view already shows (so nothing is
  listed as a change). It costs one inode and one block per directory of the quota, made
  once per session. ``.git`` is left out: it is never applied.
- ``prepare`` and the seed: a layer with a quota has a tiny read-only lower layer of its
  own, topmost, holding one empty file, ``SEED``. The toolbox deletes it as it starts
  (``SEED_VARIABLE`` tells it to), which makes that mount's shared whiteout then. Before each
  mount the last mount's whiteout of the seed is removed from the upper layer, so the seed
  shows again. ``changes`` never lists it.

Left uncovered: a directory the checkout gains after the first mount, a checkout with a
file named ``SEED`` at its root (no seed then), and a directory of the checkout this
process cannot give its owner (a controller that is not root, on someone else's files):
each deletion there takes inodes as before.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from pathlib import Path

from . import beneath
from .baseline import MAX_DEPTH, is_git_name
from .changes import OPAQUE
from .layer import SEED, Layer, open_repo, open_upper, seed_dir
from .records import save

log = logging.getLogger(__name__)

SEED_VARIABLE = "CUBICLE_SEED"
"""Set (to 1) in a sandbox whose overlay has the seed on top: the toolbox deletes ``SEED`` as it starts."""


def prepare(layer: Layer) -> bool:
    """Ready the layer of a quota for its next mount (it must not be mounted); True when the seed is to be sown.

    Best effort: what cannot be made only costs a deletion at the exact quota its inodes, as before.
    """
    return layer.info.disk is not None and ready(layer)


def ready(layer: Layer) -> bool:
    """What ``prepare`` does, for a layer with a quota or without."""
    try:
        upper = open_upper(layer)
    except OSError as err:
        log.warning("could not ready the layer of %s for deletions at its quota: %s", layer.repo, err)
        return False
    try:
        if not layer.info.mirrored:
            _mirror_checkout(layer, upper)
            layer.info = layer.info.model_copy(update={"mirrored": True})
            save(layer.root / "layer.json", layer.info)
        return _ready_seed(layer, upper)
    except OSError as err:
        log.warning("could not ready the layer of %s for deletions at its quota: %s", layer.repo, err)
        return False
    finally:
        os.close(upper)


def _ready_seed(layer: Layer, upper: int) -> bool:
    """Make the seed's lower layer and clear the last mount's whiteout of it; False when the seed cannot be used."""
    lower = open_repo(layer)
    try:
        if beneath.lstat(lower, SEED) is not None:
            return False  # the checkout's own file: the seed would hide it
    finally:
        os.close(lower)
    st = beneath.lstat(upper, SEED)
    if st is not None:
        if not (stat.S_ISCHR(st.st_mode) and st.st_rdev == 0):
            return False  # the agent's own file by that name (after an earlier seed went): the toolbox must keep it
        os.unlink(SEED, dir_fd=upper)
    seeds = seed_dir(layer.root)
    if not (seeds / SEED).is_file():
        seeds.mkdir(mode=0o755, exist_ok=True)
        fd = os.open(seeds / SEED, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        os.close(fd)
    return True


def _mirror_checkout(layer: Layer, upper: int) -> None:
    lower = open_repo(layer)
    setup = beneath.open_root(Path(layer.info.setup)) if layer.info.setup else None
    try:
        mirror(lower, upper, setup, 0)
    finally:
        for fd in (lower, setup):
            if fd is not None:
                os.close(fd)


def mirror(lower: int, upper: int, setup: int | None, depth: int) -> None:
    """Give every directory of ``lower`` below these fds its upper directory, where the upper has no entry.

    The upper directory copies what the merged view shows: the setup tree's directory where
    it has one (it is the higher lower layer), else the checkout's. An upper entry of any kind
    is left as it is, and nothing is made below a whiteout, a file or an opaque directory,
    where the checkout's entries are hidden. Directories are given their mode and mtime after
    their children, so one without write permission can still be filled.
    """
    if depth >= MAX_DEPTH:
        return
    with os.scandir(lower) as it:
        names = [e.name for e in it if e.is_dir(follow_symlinks=False) and not is_git_name(e.name)]
    for name in names:
        shown = os.stat(name, dir_fd=lower, follow_symlinks=False)
        setup_child = None
        if setup is not None:
            made = beneath.lstat(setup, name)
            if made is not None:
                if not stat.S_ISDIR(made.st_mode) or _opaque(setup, name):
                    continue
                shown, setup_child = made, beneath.open_dir(setup, name)
        try:
            _mirror_one(lower, upper, name, shown, setup_child, depth)
        finally:
            if setup_child is not None:
                os.close(setup_child)


def _mirror_one(lower: int, upper: int, name: str, shown: os.stat_result, setup: int | None, depth: int) -> None:
    existing = beneath.lstat(upper, name)
    made = existing is None
    if existing is None:
        if not _can_own(shown):
            return
        os.mkdir(name, 0o700, dir_fd=upper)
        os.chown(name, shown.st_uid, shown.st_gid, dir_fd=upper, follow_symlinks=False)
    elif not stat.S_ISDIR(existing.st_mode) or _opaque(upper, name):
        return
    try:
        child_lower = beneath.open_dir(lower, name)
        child_upper = beneath.open_dir(upper, name)
    except OSError as err:
        if err.errno in (errno.EACCES, errno.EPERM):  # a directory the agent closed (chmod 000) stays as it is
            return
        raise
    try:
        mirror(child_lower, child_upper, setup, depth + 1)
    finally:
        os.close(child_lower)
        os.close(child_upper)
    if made:
        os.chmod(name, stat.S_IMODE(shown.st_mode), dir_fd=upper, follow_symlinks=False)
        os.utime(name, ns=(shown.st_atime_ns, shown.st_mtime_ns), dir_fd=upper, follow_symlinks=False)


def _can_own(st: os.stat_result) -> bool:
    """Whether this process can give a new directory ``st``'s owner and group (root can; others only their own)."""
    if os.geteuid() == 0:
        return True
    return st.st_uid == os.geteuid() and (st.st_gid == os.getegid() or st.st_gid in os.getgroups())


def _opaque(dir_fd: int, name: str) -> bool:
    try:
        fd = beneath.open_dir(dir_fd, name)
    except OSError:
        return False
    try:
        return os.getxattr(fd, OPAQUE) == b"y"
    except OSError:
        return False
    finally:
        os.close(fd)
