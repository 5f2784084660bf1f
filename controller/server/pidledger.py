"""The host's ledger of process ids held by sandboxes: what every Cubicle controller process of the host charged.

The pids budget (``hostpids``) is the host's, not one process's: a ``cubicle serve``, each ``cubicle run`` and
each ``cubicle mcp`` admit sandboxes on their own, and each counted only its own would give every one of them the
whole budget. So each process that holds sandboxes keeps one small file in a directory shared by all of them (by
default ``/dev/shm/cubicle-pids``, sticky and writable by every user, as ``/tmp`` is): its total charge, and the
holder's process id and start time. An admission reads the others' files and writes its own under an ``flock`` on
the directory's ``lock``, so two processes cannot both pass the check before either is counted. A file whose holder
is gone (its pid ended, or is another process's now) is ignored, and removed where this process may.

A process's file says what its sandboxes may hold (loaded sessions, containers still being removed, sessions about
to load): it is written at each admission and rewritten each tick and at close, so a release reaches the others
within a tick. What the files say is read as hostile: anything unreadable or malformed counts as nothing, a file
of a holder that is alive is counted as it says. A local user who may write the directory can thereby make Cubicle
refuse sessions (never admit more); ``CUBICLE_HOST_PIDS_LEDGER`` can name a directory only Cubicle's users reach.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import secrets
import stat
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

from ..errors import CapacityError
from ..sandbox import owners

SHARED = Path("/dev/shm")
NAME = "cubicle-pids"
LOCK = "lock"
SUFFIX = ".pids"
MAX_ENTRY = 256
"""The most of a ledger file read: a holder's file is a few dozen bytes."""
LOCK_WAIT_S = 60.0
"""How long an admission waits for the ledger's lock before it is refused (429): a holder stuck with it."""
POLL_S = 0.02


def default_directory() -> Path:
    """Where every user's controllers of this host keep the ledger: ``/dev/shm`` (a tmpfs each boot clears, not
    private to a service as ``/tmp`` may be), else the temporary directory."""
    base = SHARED if SHARED.is_dir() else Path(tempfile.gettempdir())
    return base / NAME


class Ledger:
    """This process's entry in the host's ledger at ``directory``, and the sum of the others'."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.holder = owners.owner_token("pids")
        self._path: Path | None = None
        """This process's file, once it holds a charge."""
        self._written = 0
        """The charge this process's file says."""

    @property
    def holds(self) -> bool:
        """Whether this process has a file in the ledger."""
        return self._path is not None

    def says(self, charge: int) -> bool:
        """Whether this process's entry already says ``charge`` (and its file is still there): nothing to write."""
        if self._path is None:
            return charge <= 0
        return charge == self._written and self._path.exists()

    def _ensure(self) -> None:
        """The directory, made sticky and writable by everyone if this process makes it; refused if someone other
        than root or this user owns it while others may remove its files (what they hold would go uncounted)."""
        if not self.directory.exists():
            self._make()
        info = os.lstat(self.directory)
        shared = info.st_mode & 0o022
        if not stat.S_ISDIR(info.st_mode) or (
            info.st_uid not in (0, os.geteuid()) and (not info.st_mode & stat.S_ISVTX or not shared)
        ):
            raise CapacityError(
                f"The host's pids ledger {self.directory} is not a directory Cubicle can trust (owned by uid "
                f"{info.st_uid}, mode {stat.filemode(info.st_mode)}); no session can be admitted.",
                hint="Remove it (root), or set CUBICLE_HOST_PIDS_LEDGER to a directory every controller of this "
                "host shares.",
            )

    def _make(self) -> None:
        """The directory, sticky and writable by everyone from the moment it has its name (made aside, then renamed
        into place: another process never sees it half made); one another process made first is as good."""
        self.directory.parent.mkdir(parents=True, exist_ok=True)
        aside = Path(tempfile.mkdtemp(prefix=f".{NAME}-", dir=self.directory.parent))
        os.chmod(aside, 0o1777)
        try:
            os.rename(aside, self.directory)
        except OSError:  # it exists now
            aside.rmdir()

    @contextlib.asynccontextmanager
    async def locked(self) -> AsyncIterator[None]:
        """The ledger to this process alone (an ``flock``, polled), within ``LOCK_WAIT_S``; CapacityError past it."""
        await asyncio.to_thread(self._ensure)
        fd = await asyncio.to_thread(self._open_lock)
        try:
            deadline = time.monotonic() + LOCK_WAIT_S
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise CapacityError(
                            f"The host's pids ledger {self.directory} stayed locked by another process. Retry later."
                        ) from None
                    await asyncio.sleep(POLL_S)
            yield
        finally:
            os.close(fd)

    def _open_lock(self) -> int:
        path = self.directory / LOCK
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
        except PermissionError:  # another user's: an flock needs no write access
            return os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with contextlib.suppress(PermissionError):
            os.fchmod(fd, 0o666)
        return fd

    def others(self) -> int:
        """What the other live holders' files say they hold; call it under ``locked``."""
        total = 0
        for path in self.directory.glob("*" + SUFFIX):
            if path != self._path:
                total += self._charge(path)
        return total

    def _charge(self, path: Path) -> int:
        """A file's charge if its holder lives; 0 (and the file removed where this process may) otherwise."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            with os.fdopen(fd, "rb") as file:
                entry = json.loads(file.read(MAX_ENTRY))
            holder, charge = entry["holder"], entry["charge"]
        except (OSError, ValueError, TypeError, KeyError):
            return 0
        if not isinstance(holder, str) or not isinstance(charge, int) or charge < 0 or holder == self.holder:
            return 0
        if owners.owner_alive(holder):
            return charge
        with contextlib.suppress(OSError):
            path.unlink()
        return 0

    def hold(self, charge: int) -> None:
        """Say this process's sandboxes may hold ``charge`` pids (0: none, and its file goes); under ``locked``."""
        if charge <= 0:
            if self._path is not None:
                with contextlib.suppress(FileNotFoundError):
                    self._path.unlink()
                self._path = None
            self._written = 0
            return
        try:
            fd = self._open_own()
        except FileNotFoundError:  # removed behind this process's back: a new one
            self._path = None
            fd = self._open_own()
        with os.fdopen(fd, "w") as file:
            file.write(json.dumps({"holder": self.holder, "charge": charge}))
        self._written = charge

    def _open_own(self) -> int:
        """This process's file, emptied; made (under a name no one could have taken before) if it has none."""
        if self._path is None:
            self._path = self.directory / f"{os.getpid()}-{secrets.token_hex(8)}{SUFFIX}"
            return os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        return os.open(self._path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC)
