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

- ``Mirror``: at the layer's first mount, the checkout's directories get their upper
  directories, with the mode, owner and mtime the merged view already shows (so nothing is
  listed as a change), made once per session, an inode and a block of the quota each.
  ``.git`` and ignored directories (``node_modules``, say) are left out, and at most
  ``MIRROR_MAX`` directories, and a tenth of the quota, are made. ``apply`` keeps them.
- ``prepare`` and the seed: a layer with a quota has a tiny read-only lower layer of its
  own, topmost, holding one empty file, ``SEED``. The toolbox deletes it as it starts
  (``SEED_VARIABLE`` tells it to), which makes that mount's shared whiteout then. Before each
  mount the last mount's whiteout of the seed is removed from the upper layer, so the seed
  shows again. ``changes`` never lists it (the checkout has no such file).

Left uncovered, where a deletion takes inodes as before: a directory the checkout gains
after the first mount, one past the mirror's bounds, an ignored one, a checkout with a
file named ``SEED`` at its root (no seed then), a directory of the checkout this process
cannot give its owner (a controller that is not root, on someone else's files), and past
65,000 deletions in one mount (ext4's most links to one inode; overlay then makes another).
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from pathlib import Path

from . import beneath
from .apply import BLOCK, is_opaque
from .baseline import MAX_DEPTH, is_git_name, load_rules
from .ignore import IgnoreRules
from .layer import SEED, DiskQuota, Layer, open_repo, open_setup, open_upper, seed_dir
from .records import save

log = logging.getLogger(__name__)

MAKING = "cubicle-mirror"
"""The name in the work directory (never seen by the agent) a mirrored directory is made under."""
MIRROR_MAX = 10_000
"""At most this many directories are made ahead (each is an inode and a block of the quota, and a step of
every later listing and checkpoint)."""
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
            try:
                _mirror_checkout(layer, upper)
            except OSError as err:  # say, the quota is used up already: what was made is right, the rest waits
                log.warning("could not make the directories of %s in its layer: %s", layer.repo, err)
            else:
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
    for tree in (layer.repo, Path(layer.info.setup) if layer.info.setup else None):
        if tree is not None and os.path.lexists(tree / SEED):
            return False  # the checkout's own file, or the setup's: the seed would hide it
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


def mirror_budget(quota: DiskQuota | None) -> int:
    """How many directories a layer's mirror may make: ``MIRROR_MAX``, and a tenth of the quota's inodes and blocks."""
    if quota is None:
        return MIRROR_MAX
    return min(MIRROR_MAX, quota.inodes // 10, (quota.mb << 20) // BLOCK // 10)


def _mirror_checkout(layer: Layer, upper: int) -> None:
    lower = open_repo(layer)
    work = beneath.open_root(layer.work)
    setup = open_setup(layer)
    try:
        if beneath.lstat(work, MAKING) is not None:
            beneath.remove_tree(work, MAKING)  # what a killed mirror left
        Mirror(load_rules(layer.baseline_file), mirror_budget(layer.info.disk), work).walk(lower, upper, setup, "")
    finally:
        beneath.close_all(lower, work, setup)


class Mirror:
    """Gives directories of the checkout their upper directories, where the upper has no entry, up to ``budget``.

    The upper directory copies what the merged view shows: the setup tree's directory where
    it has one (it is the higher lower layer), else the checkout's. An upper entry of any kind
    is left as it is, and nothing is made below a whiteout, a file or an opaque directory,
    where the checkout's entries are hidden. Ignored directories (``node_modules``, say) are
    left out, as ``.git`` is: their files are never applied, and there may be many.
    A directory is made in the work directory (``MAKING``), given its owner and mode there and
    only then renamed into place, so a mirror cut short (a kill, a full quota) leaves only
    right ones; its mtime comes after its children, whose creation moves it.
    """

    def __init__(self, rules: IgnoreRules, budget: int, work: int) -> None:
        self.rules = rules
        self.left = budget
        self.work = work

    def walk(self, lower: int, upper: int, setup: int | None, prefix: str) -> None:
        if prefix.count("/") >= MAX_DEPTH:
            return
        with os.scandir(lower) as it:
            names = sorted(e.name for e in it if e.is_dir(follow_symlinks=False) and not is_git_name(e.name))
        for name in names:
            if self.left <= 0:
                return
            if not self.rules.ignored(prefix + name, is_dir=True):
                self._entry(lower, upper, setup, name, prefix)

    def _entry(self, lower: int, upper: int, setup: int | None, name: str, prefix: str) -> None:
        """The checkout's directory ``name`` as the merged view shows it: the setup tree's directory where it has one,
        and nothing where the setup tree's entry hides it (a file, an opaque directory)."""
        shown = os.stat(name, dir_fd=lower, follow_symlinks=False)
        made = beneath.lstat(setup, name) if setup is not None else None
        if setup is None or made is None:
            self._one(lower, upper, name, shown, None, prefix)
            return
        if not stat.S_ISDIR(made.st_mode) or is_opaque(setup, name):
            return
        setup_child = beneath.open_dir(setup, name)
        try:
            self._one(lower, upper, name, made, setup_child, prefix)
        finally:
            os.close(setup_child)

    def _one(self, lower: int, upper: int, name: str, shown: os.stat_result, setup: int | None, prefix: str) -> None:
        existing = beneath.lstat(upper, name)
        mode = stat.S_IMODE(shown.st_mode)
        later = mode if os.geteuid() != 0 and mode & 0o700 != 0o700 else None  # its owner must fill it first
        if existing is None:
            if not _can_own(shown):
                return
            self._make(upper, name, shown, later)
        elif not stat.S_ISDIR(existing.st_mode) or is_opaque(upper, name):
            return
        try:
            child_lower = beneath.open_dir(lower, name)
            child_upper = beneath.open_dir(upper, name)
        except OSError as err:
            if err.errno in (errno.EACCES, errno.EPERM):  # a directory the agent closed (chmod 000) stays as it is
                return
            raise
        try:
            self.walk(child_lower, child_upper, setup, f"{prefix}{name}/")
        finally:
            beneath.close_all(child_lower, child_upper)
            if existing is None:
                self._finish(upper, name, shown, later)

    def _make(self, upper: int, name: str, shown: os.stat_result, later: int | None) -> None:
        """Make the directory ``name`` in the upper with ``shown``'s owner and mode (unless its mode must come
        ``later``): made in the work directory and renamed into place, so none is ever seen half made."""
        os.mkdir(MAKING, 0o700, dir_fd=self.work)
        self.left -= 1
        os.chown(MAKING, shown.st_uid, shown.st_gid, dir_fd=self.work, follow_symlinks=False)
        if later is None:
            os.chmod(MAKING, stat.S_IMODE(shown.st_mode), dir_fd=self.work, follow_symlinks=False)
        os.rename(MAKING, name, src_dir_fd=self.work, dst_dir_fd=upper)

    @staticmethod
    def _finish(upper: int, name: str, shown: os.stat_result, later: int | None) -> None:
        """Once its children are made: the made directory's mode if it had to wait (``later``), then its times."""
        if later is not None:
            os.chmod(name, later, dir_fd=upper, follow_symlinks=False)
        os.utime(name, ns=(shown.st_atime_ns, shown.st_mtime_ns), dir_fd=upper, follow_symlinks=False)


def _can_own(st: os.stat_result) -> bool:
    """Whether this process can give a new directory ``st``'s owner and group (root can; others only their own)."""
    if os.geteuid() == 0:
        return True
    return st.st_uid == os.geteuid() and (st.st_gid == os.getegid() or st.st_gid in os.getgroups())
