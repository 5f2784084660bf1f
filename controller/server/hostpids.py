"""The host's process ids, shared by every sandbox of every Cubicle process on the host.

Each engine container is bounded by its pids limit, but nothing bounded them together: under runsc the limit is 8
times the session's ``pids`` (gVisor's own host tasks, see ``isolation.GVISOR_HOST_TASKS_PER_PID``), and eight
runsc sessions at the default 512, or two at the ceiling of 4,096, could fill a ``kernel.pid_max`` of 32,768:
the host and every other sandbox would then fail to fork. So a session is charged every host pid its containers
may hold (the backend's ``host_pids``; the Docker backend's is ``isolation.host_pids``), and the charges of the
sessions loaded at once (a container stays up between turns) by all the host's Cubicle processes (each one's
total in the host's ledger, ``pidledger``) stay within a budget, by default half of ``kernel.pid_max`` as read
when the process starts. A storm in one sandbox then meets its own engine limit and ends that sandbox at worst.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from ..errors import CapacityError, InvalidRequestError
from ..wire.limits import Limits

PID_MAX = Path("/proc/sys/kernel/pid_max")
SHARE = 2
"""The default budget is ``pid_max // SHARE``: the other half stays the host's own (its daemons, the engine, the
controller and its walks, builds next to it)."""
FALLBACK_PID_MAX = 32_768
"""Linux's default ``pid_max``, assumed where the file cannot be read (not Linux, a masked /proc)."""


def host_pid_max(path: Path = PID_MAX) -> int:
    """The host's ``kernel.pid_max``."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return FALLBACK_PID_MAX


class HostPids:
    """The pids budget: ``total`` host pids for all the sandboxes of this host's Cubicle controllers together (the
    others' charges come from the host's ledger, ``pidledger``), each charged what ``charge`` (the backend's
    ``host_pids``) says a sandbox of its limits may hold."""

    def __init__(self, total: int, charge: Callable[[Limits], int]) -> None:
        self.total = total
        self.charge = charge

    @classmethod
    def of_host(cls, budget: int, charge: Callable[[Limits], int], path: Path = PID_MAX) -> HostPids:
        """``budget`` pids, or (0) half of the host's ``kernel.pid_max``."""
        return cls(budget or host_pid_max(path) // SHARE, charge)

    def refuse_alone(self, limits: Limits) -> None:
        """Refuse a session that alone would take more than the whole budget (no waiting could admit it)."""
        charge = self.charge(limits)
        if charge > self.total:
            most = self.total // max(1, charge // limits.pids)
            raise InvalidRequestError(
                f"A session of {limits.pids} pids under {limits.runtime} may hold {charge:,} of the host's process "
                f"ids; this host gives all its Cubicle sandboxes together {self.total:,}.",
                hint=f"Ask for fewer pids (about {most:,} under {limits.runtime} at most), or raise "
                "CUBICLE_HOST_PIDS_BUDGET on a host whose kernel.pid_max allows it.",
            )

    def charged(self, held: Iterable[Limits]) -> int:
        """What sessions holding ``held`` are charged together."""
        return sum(self.charge(limits) for limits in held)

    def fits(self, limits: Limits, held: Iterable[Limits], others: int = 0) -> bool:
        """Whether a session of ``limits`` fits beside sessions holding ``held`` and ``others`` pids charged by the
        host's other controller processes."""
        return self.charge(limits) + self.charged(held) + others <= self.total

    def refuse(self, limits: Limits, held: Iterable[Limits], others: int = 0) -> None:
        """CapacityError unless a session of ``limits`` fits beside ``held`` and the other processes' ``others``."""
        held = list(held)
        if not self.fits(limits, held, others):
            here = self.charged(held)
            raise CapacityError(
                f"The running sessions may hold {here + others:,} of the {self.total:,} host process ids all of "
                f"this host's Cubicle sandboxes share ({others:,} of them another controller process's); this one "
                f"needs {self.charge(limits):,}. Retry when one finishes."
            )
