"""Disk and inode quotas: each session's workspace layer lives on a filesystem of its own.

Everything the agent writes lands in its layer's upper directory on the host. Memory, CPU
and processes are bounded by the container; disk is bounded here. With a quota, a layer's
writable parts (``upper``, ``work``, ``checkpoints``, ``applies``; see ``workspace.layer``)
are on an ext4 filesystem made for the session: a sparse image file ``disk.img`` in the
layer's directory, loop-mounted on ``disk/``. Its size is the disk quota and its inode
count the file quota, so ``fallocate -l 50G`` or a million ``touch`` es fail inside the
sandbox with ENOSPC while the host's filesystem only ever holds what was written. Checkpoints
and apply backups are on it too and count. Deleting always works at the quota: what the
agent made is a plain unlink; a file of the checkout needs a whiteout, whose directory entry
may take one of the blocks reserved for root (overlayfs writes whiteouts with the mounter's
credentials), and whose inodes ``workspace.headroom`` takes ahead of time.

Why this mechanism: the host's ext4 has no project quotas to turn on, Docker's ``local``
volume driver cannot loop-mount an image file, and a watchdog is too late for one
``fallocate``. A loop mount is the one privileged step, and this module names it:

- ``HostMounter`` runs ``mkfs.ext4``, ``mount`` and ``umount`` itself; for a controller that
  is root in the host's mount namespace (``cubicle run`` as root, CI).
- A ``Mounter`` of the sandbox backend runs them elsewhere, for a controller that is not root
  or runs in a container: the Docker backend's ``HelperMounter`` (``sandbox.mounters``) in a
  short-lived container whose mounts propagate to the host.

A layer's filesystem is mounted while something uses it (a sandbox, a review, an apply) and
unmounted when the last use in any process ends (see ``Disks``); the kernel frees its loop
device on unmount. What a killed process left mounted, or attached, is undone by
``Disks.sweep`` when the next controller starts, and by ``cubicle gc``.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shlex
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

from ..errors import DiskError, StoreError
from .layer import DiskQuota, Layer, disk_image, disk_mount

log = logging.getLogger(__name__)

MOUNT_OPTIONS = "nosuid,nodev,noatime,discard,noinit_itable,errors=remount-ro"
"""nosuid, nodev: nothing the agent left there is a setuid binary or a device on the host. discard: what the agent
deletes is freed in the image file too (the loop device punches holes). noinit_itable:
the kernel does not zero the unused inode tables in the background, so the image stays sparse."""
RESERVED_PERCENT = "1"
"""Blocks only root may use: overlayfs writes whiteouts as root, so a delete works when the agent has filled the rest."""
COMMAND_TIMEOUT_S = 120.0
RELEASE_PATIENCE_S = 0.5
"""How long an unmount after a use here waits out a hold that a starting child still copies (a fork-to-exec
window; a real holder in another process costs this much, once, at the end of each use here)."""
CLOSE_WAIT_S = 30.0
"""How long ``Disks.close`` waits for this process's uses of layers, and their mounts and unmounts under way, to
end: a bound against a hang (each is one command; a walk holding a layer ends when its child is stopped)."""


def mkfs_argv(image: Path, quota: DiskQuota, uid: int, gid: int) -> list[str]:
    """``mkfs.ext4`` for a layer's filesystem: ``quota.mb`` MiB, at least ``quota.inodes`` inodes, its root ``uid``'s.

    Inode tables and the journal are left unwritten (lazy), so a new image takes a few MiB of the host's disk.
    """
    options = f"lazy_itable_init=1,lazy_journal_init=1,root_owner={uid}:{gid}"
    return [
        "mkfs.ext4",
        "-q",
        "-F",
        "-b",
        "4096",
        "-m",
        RESERVED_PERCENT,
        "-N",
        str(inode_count(quota)),
        "-I",
        "256",
        "-E",
        options,
        "-L",
        "cubicle",
        str(image),
        f"{quota.mb}M",
    ]


MAX_INODES_PER_MIB = 128
"""The inode tables of a small filesystem must fit in it: a file quota is at most this many per MiB of disk quota."""


def inode_count(quota: DiskQuota) -> int:
    return min(quota.inodes, quota.mb * MAX_INODES_PER_MIB)


def mount_script(image: Path, target: Path) -> str:
    """Attach the image to a free loop device with direct I/O (no second page cache: writes run at about the
    host disk's speed) and mount it; ``losetup -d`` on the now busy device makes the kernel free it on unmount."""
    dev, img, at = "$dev", shlex.quote(str(image)), shlex.quote(str(target))
    return (
        f"set -e; dev=$(losetup --find --show --direct-io=on {img}); "
        f'mount -t ext4 -o {MOUNT_OPTIONS} "{dev}" {at} || {{ losetup -d "{dev}"; exit 1; }}; '
        f'losetup -d "{dev}"'
    )


def unmount_argv(target: Path) -> list[str]:
    return ["umount", str(target)]


class Mounter(Protocol):
    """The privileged step: make and mount a layer's filesystem, and unmount it. Each raises ``DiskError``."""

    @property
    def name(self) -> str: ...

    @property
    def linger_s(self) -> float:
        """How long a filesystem this process mounted stays mounted after its last use (a helper is slow to start)."""
        ...

    def make(self, image: Path, target: Path, quota: DiskQuota) -> None: ...

    def mount(self, image: Path, target: Path) -> None: ...

    def unmount(self, target: Path) -> None: ...

    def detach_loop(self, device: str) -> None: ...


class HostMounter:
    """Runs ``mkfs.ext4``, ``mount`` and ``umount`` in this process's mount namespace (root on the host)."""

    name = "host"
    linger_s = 0.0

    def make(self, image: Path, target: Path, quota: DiskQuota) -> None:
        _run(mkfs_argv(image, quota, os.geteuid(), os.getegid()), "make the filesystem of")
        self.mount(image, target)

    def mount(self, image: Path, target: Path) -> None:
        _run(["sh", "-c", mount_script(image, target)], "mount the filesystem of")

    def unmount(self, target: Path) -> None:
        _run(unmount_argv(target), "unmount the filesystem of")

    def detach_loop(self, device: str) -> None:
        _run(["losetup", "-d", device], "detach the loop device of")


def _run(argv: list[str], what: str) -> None:
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False, env=_with_sbin(os.environ)
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise DiskError(f"Could not {what} a workspace layer ({argv[0]}: {err}).") from None
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip()[-500:]
        raise DiskError(f"Could not {what} a workspace layer: {' '.join(argv)}: {detail}")


def _with_sbin(env: os._Environ[str]) -> dict[str, str]:
    """The environment with the system directories on PATH: ``mkfs.ext4`` and ``losetup`` live in sbin, which an
    MCP client's or a service's PATH may lack."""
    path = env.get("PATH", "")
    extra = [d for d in ("/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/bin", "/bin") if d not in path.split(":")]
    return {**env, "PATH": ":".join([p for p in [path, *extra] if p])}


class Disks:
    """The quota filesystems of one data directory's layers, mounted while some process uses them.

    A use (``acquire`` … ``release``) holds a shared flock on the layer's image, in this process
    and across processes. The first use mounts the filesystem unless it is mounted; when the last
    one ends (at once, or after the mounter's ``linger_s``) it is unmounted, but only if no
    process holds the image: an exclusive, non-blocking flock must succeed first. So neither
    another process's last use, nor ``sweep`` in the next controller or ``cubicle gc``, unmounts
    a layer still in use. Mounting and unmounting themselves are serialized by an exclusive flock
    on ``disk.lock`` beside the image.

    ``close`` is the end of this process's uses: it refuses new ones and waits for those under way, since
    what still runs in a thread when the process ends is cut off (``cubicle serve`` ends with the signal
    that stopped it the moment its application has shut down), and a mount cut off so stays.
    """

    def __init__(self, mounter: Mounter, workspaces: Path) -> None:
        self.mounter = mounter
        self.workspaces = workspaces
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # notified when a call under way (``_under_way``) ends
        self._closed = False
        self._busy = 0  # ``make``, ``acquire`` and ``release`` calls under way (mounting or unmounting, perhaps)
        self._real: Path | None = None  # ``workspaces`` with every symlink resolved: the kernel names mounts so
        self._uses: dict[Path, int] = {}
        self._holds: dict[Path, int] = {}  # the fd holding the shared flock of each layer in use here
        self._locks: dict[Path, threading.Lock] = {}
        self._lingering: dict[Path, threading.Timer] = {}

    def make(self, layer: Layer) -> None:
        """Make the layer's filesystem and mount it, held once: the caller releases it."""
        quota = layer.info.disk
        if quota is None:
            raise DiskError(f"The layer of {layer.repo} has no disk quota.")
        root = layer.root
        image, target = disk_image(root), disk_mount(root)
        with self._under_way(starting=True), self._layer_lock(root):
            try:  # sparse: only what the filesystem writes takes space
                fd = os.open(image, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
                try:
                    os.truncate(fd, quota.mb << 20)
                finally:
                    os.close(fd)
            except OSError as err:
                raise StoreError(f"The disk image of the layer at {root} could not be made: {err.strerror}.") from None

            def made() -> None:
                with _flock(_lock_file(root)):
                    self.mounter.make(image, target, quota)
                    self._check_mounted(target)
                os.chmod(target, 0o700)

            self._first_use(root, made)

    def acquire(self, layer: Layer) -> None:
        """Count one use of the layer's filesystem, mounting it first if it is not."""
        if layer.info.disk is None:
            return
        root = layer.root
        with self._under_way(starting=True), self._layer_lock(root):
            with self._lock:
                timer = self._lingering.pop(root, None)
                if timer is not None:
                    timer.cancel()
                if self._uses.get(root, 0) > 0:
                    self._uses[root] += 1
                    return
            image, target = disk_image(root), disk_mount(root)

            def mounted() -> None:
                if not os.path.ismount(target):  # checked each time: another process may have unmounted it
                    with _flock(_lock_file(root)):
                        if not os.path.ismount(target):
                            self.mounter.mount(image, target)
                            self._check_mounted(target)

            self._first_use(root, mounted)

    @contextlib.contextmanager
    def _under_way(self, starting: bool = False) -> Iterator[None]:
        """A call that may mount or unmount, which ``close`` waits for; a use ``starting`` once it began is refused."""
        with self._lock:
            if starting and self._closed:
                raise DiskError("The controller is shutting down: the layer's filesystem was not mounted.")
            self._busy += 1
        try:
            yield
        finally:
            with self._lock:
                self._busy -= 1
                self._changed.notify_all()

    def _first_use(self, root: Path, attach: Callable[[], None]) -> None:
        """This process's first use of the layer: hold its image (shared flock), ``attach`` (mount it when
        needed), count the use; the hold is let go again if ``attach`` fails."""
        hold = _hold(disk_image(root))
        try:
            attach()
        except BaseException:
            os.close(hold)
            raise
        with self._lock:
            self._uses[root] = 1
            self._holds[root] = hold

    def release(self, layer: Layer) -> None:
        """End one use; after the last, the filesystem is unmounted unless another process uses it."""
        if layer.info.disk is None:
            return
        root = layer.root
        with self._under_way(), self._layer_lock(root):
            with self._lock:
                left = self._uses.get(root, 0) - 1
                if left > 0:
                    self._uses[root] = left
                    return
                self._uses.pop(root, None)
                hold = self._holds.pop(root, None)
                linger = self.mounter.linger_s if hold is not None and not self._closed else 0.0
            if hold is None:
                return
            os.close(hold)
            if linger > 0:
                timer = threading.Timer(linger, self._unmount_idle, (root,))
                timer.daemon = True
                with self._lock:
                    self._lingering[root] = timer
                timer.start()
                return
            self._unmount_idle(root, locked=True)

    def close(self, wait_s: float = CLOSE_WAIT_S) -> None:
        """The end of this process's uses: refuse new ones, wait up to ``wait_s`` for those under way (a mount
        included) to end, then unmount what lingers after its last use here and what a use never let go of
        (unless another process uses it)."""
        deadline = time.monotonic() + wait_s
        with self._lock:
            self._closed = True
            while self._busy or self._uses:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(left)
            lingering = list(self._lingering.items())
            kept = {root: self._holds.pop(root) for root in list(self._uses) if root in self._holds}
            self._uses.clear()
        for root, timer in lingering:
            timer.cancel()
            self._unmount_idle(root)
        for root, hold in kept.items():
            log.warning("the layer at %s was still in use here when this process stopped; unmounting it", root)
            os.close(hold)
            self._unmount_idle(root)

    def detach(self, root: Path) -> None:
        """Unmount the filesystem of the layer at ``root``, which is being discarded; DiskError if a process uses it."""
        with self._layer_lock(root):
            with self._lock:
                timer = self._lingering.pop(root, None)
                in_use = self._uses.get(root, 0) > 0
            if timer is not None:
                timer.cancel()
            if in_use or not self._unmount_if_unused(root, RELEASE_PATIENCE_S):
                raise DiskError(f"The workspace layer at {root} is in use (by this or another Cubicle process).")

    def mounted(self) -> list[Path]:
        """The layer directories whose filesystem is mounted (as this process sees the mounts)."""
        real = self._real_workspaces()
        found = []
        for mount_point, _ in _mounts():
            if mount_point.name == "disk" and mount_point.parent.parent == real:
                found.append(self.workspaces / mount_point.parent.name)
        return found

    def _real_workspaces(self) -> Path:
        if self._real is None:
            self._real = Path(os.path.realpath(self.workspaces))
        return self._real

    def sweep(self, in_use: Callable[[str], bool]) -> list[str]:
        """Unmount what processes that are gone left: the filesystems of sessions not ``in_use`` that no process
        holds, and loop devices of layers that nothing mounts (a kill between ``losetup`` and ``mount``). Returns
        the session ids unmounted."""
        unmounted = []
        for root in self.mounted():
            with self._lock:
                held = root in self._uses
            if held or in_use(root.name):
                continue
            try:
                if self._unmount_if_unused(root):
                    unmounted.append(root.name)
            except DiskError as err:
                log.warning("%s", err)
        self._detach_stray_loops()
        return unmounted

    def _unmount_idle(self, root: Path, locked: bool = False) -> None:
        """After the last use here: unmount unless a use began since, or another process holds the layer."""
        with contextlib.nullcontext() if locked else self._layer_lock(root):
            with self._lock:
                self._lingering.pop(root, None)
                if self._uses.get(root, 0) > 0:
                    return
            try:
                self._unmount_if_unused(root, RELEASE_PATIENCE_S)
            except DiskError as err:  # busy (a container whose process is gone uses it): the sweep retries
                log.warning("%s", err)

    def _unmount_if_unused(self, root: Path, patience_s: float = 0.0) -> bool:
        """Unmount unless some process holds the layer; True when it is not mounted any more.

        A hold this process has just let go of can outlive its ``close`` for a moment: a child that another thread
        is starting (``mount``, ``umount``, the engine's CLI) has a copy of every fd until its exec closes them, and
        the flock goes with the last copy. So after a use here ends, a refusal is tried again for ``patience_s``
        (seen on a 2-CPU machine with twelve layers released at once: one stayed mounted).
        """
        image, target = disk_image(root), disk_mount(root)
        if not os.path.ismount(target):
            return True
        try:
            probe = os.open(image, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:  # the image is gone (a half-removed layer): nobody can hold it
            probe = -1
        try:
            if probe >= 0 and not flock_within(probe, patience_s):
                return False
            with _flock(_lock_file(root)):
                if os.path.ismount(target):
                    self.mounter.unmount(target)
            return True
        finally:
            if probe >= 0:
                os.close(probe)

    def _detach_stray_loops(self) -> None:
        """Detach loop devices backed by an image under ``workspaces/`` that no mount uses, under the layer's
        ``disk.lock`` (a process between its ``losetup`` and its ``mount`` holds it)."""
        sources = _mounted()
        for device, backing in _loops():
            deleted = backing.endswith(" (deleted)")
            path = Path(backing.removesuffix(" (deleted)"))
            if path.name != "disk.img" or path.parent.parent != self._real_workspaces() or device in sources:
                continue
            path = self.workspaces / path.parent.name / path.name
            try:
                if deleted or not path.parent.is_dir():
                    self.mounter.detach_loop(device)
                    continue
                with _flock(_lock_file(path.parent)):
                    if device not in _mounted():
                        self.mounter.detach_loop(device)
            except (DiskError, OSError) as err:
                log.warning("could not detach the loop device %s of %s: %s", device, path, err)

    def _check_mounted(self, target: Path) -> None:
        if not os.path.ismount(target):
            with contextlib.suppress(DiskError):  # mounted where this process cannot see it: not left there
                self.mounter.unmount(target)
            raise DiskError(
                f"The layer's filesystem was mounted on {target}, yet this process does not see it there.",
                hint="A controller in a container needs its data directory mounted with rslave propagation "
                "(compose.yaml does so); the host's mount of that directory must be shared (`mount --make-rshared /`).",
            )

    def _layer_lock(self, root: Path) -> threading.Lock:
        with self._lock:
            return self._locks.setdefault(root, threading.Lock())


def _lock_file(root: Path) -> Path:
    return root / "disk.lock"


def flock_within(fd: int, patience_s: float, every_s: float = 0.01, stop: threading.Event | None = None) -> bool:
    """Take the exclusive flock of ``fd``, trying every ``every_s`` for ``patience_s`` (or until ``stop`` is set);
    whether it was taken."""
    deadline = time.monotonic() + patience_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline or (stop is not None and stop.is_set()):
                return False
            time.sleep(every_s)


def _hold(image: Path) -> int:
    """An fd on the image holding a shared flock: this process uses the layer until it is closed."""
    fd = os.open(image, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def _flock(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _loops() -> list[tuple[str, str]]:
    """(device, backing file) of every attached loop device."""
    found = []
    for backing in Path("/sys/block").glob("loop*/loop/backing_file"):
        with contextlib.suppress(OSError):
            found.append((f"/dev/{backing.parent.parent.name}", backing.read_text().strip()))
    return found


def _mounted() -> set[str]:
    """The source of every mount this process sees."""
    return {source for _, source in _mounts()}


def _mounts(mountinfo: Path = Path("/proc/self/mountinfo")) -> list[tuple[Path, str]]:
    """(mount point, source) of every mount this process sees (mountinfo's octal escapes undone)."""
    found = []
    with contextlib.suppress(OSError):
        for line in mountinfo.read_bytes().splitlines():
            fields = line.split(b" ")
            tail = line.split(b" - ", 1)[-1].split(b" ")
            if len(fields) > 4 and len(tail) > 1:
                found.append((Path(os.fsdecode(_unescape(fields[4]))), os.fsdecode(_unescape(tail[1]))))
    return found


def _unescape(raw: bytes) -> bytes:
    for code in (b"\\040", b"\\011", b"\\012", b"\\134"):
        raw = raw.replace(code, bytes([int(code[1:], 8)]))
    return raw
