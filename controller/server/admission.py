"""Whether a turn may start: the controller's capacity, the host pids and the disk its sessions may hold, one start
at a time."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import AsyncIterator

from ..config import Settings
from ..errors import CapacityError
from ..wire.limits import Limits
from ..workspace.layer import DiskQuota
from ..workspace.manager import Workspaces
from .hostpids import HostPids
from .pidledger import Ledger
from .table import Loaded


class Admission:
    """The checks a new session or a follow-up passes before its turn is claimed."""

    def __init__(
        self, settings: Settings, workspaces: Workspaces, loaded: Loaded, pids: HostPids, ledger: Ledger
    ) -> None:
        self.settings = settings
        self.workspaces = workspaces
        self.loaded = loaded
        self._lock = asyncio.Lock()
        self.pids = pids
        self.ledger = ledger
        """The host's ledger: what the host's other controller processes charged, and this one's charge."""

    def check_capacity(self, preparing: int = 0) -> None:
        """Refuse a turn past ``max_concurrent_sessions`` running in this process, counting the ``preparing`` ones
        (a remote's files being fetched for its first turn)."""
        cap = self.settings.max_concurrent_sessions
        if len(self.loaded.running()) + preparing >= cap:
            raise CapacityError(
                f"{cap} sessions are running, the most this controller allows. Retry when one finishes."
            )

    async def make_room(self, limits: Limits, registered: list[Limits]) -> None:
        """Admit a sandbox of ``limits`` within the host pids budget, beside every loaded session (a container stays
        up between turns), those whose container is being removed, those ``registered`` but not loaded yet, and what
        the host's other controller processes charged (the ledger, locked meanwhile). This process's idle sessions'
        containers are removed first, the longest loaded first, as their idle timer would; CapacityError if the rest
        leave too little. Admitted, this process's charge in the ledger includes it. Call it within
        ``one_at_a_time``."""
        self.pids.refuse_alone(limits)
        async with self.ledger.locked():
            others = await asyncio.to_thread(self.ledger.others)
            for live in self.loaded.all():
                if self.pids.fits(limits, self._held(registered), others):
                    break
                await live.stop_idle()
            held = self._held(registered)
            self.pids.refuse(limits, held, others)
            await asyncio.to_thread(self.ledger.hold, self.pids.charged([limits, *held]))

    async def settle(self, registered: list[Limits]) -> None:
        """Bring this process's charge in the ledger up to date (each tick): what its sessions hold now, with those
        ``registered`` but not loaded yet; a container removed since is released for the other processes. A charge
        that has not changed is not written again (its file checked to be there still)."""
        async with self._lock:  # not between an admission and its session's row
            charge = self.pids.charged(self._held(registered))
            if not await asyncio.to_thread(self.ledger.says, charge):  # unchanged: no lock taken, nothing written
                async with self.ledger.locked():
                    await asyncio.to_thread(self.ledger.hold, charge)

    def _held(self, registered: list[Limits]) -> list[Limits]:
        return [live.record.limits for live in self.loaded.holding()] + registered

    async def refuse_overcommit(self, quota: DiskQuota, running: list[str], session_id: str | None = None) -> None:
        """Refuse a session whose disk quota, with those of the ``running`` sessions, the data disk cannot hold."""
        settings = self.settings
        await asyncio.to_thread(
            self.workspaces.refuse_overcommit,
            quota,
            running,
            settings.min_free_mb,
            session_id,
            settings.session_events_mb,
        )

    @contextlib.asynccontextmanager
    async def one_at_a_time(self) -> AsyncIterator[None]:
        """One admission at a time: in this process (a lock) and across processes on the data directory (an flock
        on ``admission.lock``), so two starts cannot both pass the free-space check before either is counted."""
        async with self._lock:
            path = self.settings.data_dir / "admission.lock"
            await asyncio.to_thread(path.parent.mkdir, parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                while True:  # polled, not a blocking call in a thread that a cancellation would leave behind
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        await asyncio.sleep(0.02)
                yield
            finally:
                os.close(fd)
