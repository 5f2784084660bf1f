"""Which processes may live: the process groups of running commands, pid 1 and the toolbox. Everything else dies.

A command may setsid, double fork or leave threads running behind an exited leader, so
killing its group is not enough; after each command /proc is swept, and when no other
request is running a process, kill(-1) ends whatever the sweep could not catch.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from threading import Lock

from .limits import KILL_ALL_PATIENCE_S, KILL_ALL_STUCK_S, SWEEP_PASSES

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator

_lock = Lock()
_active: set[int] = set()  # process groups of commands still running; the sweep spares them
_spawning = 0  # requests that are starting or running a process


@contextlib.contextmanager
def spawning() -> Iterator[None]:
    """Count a request that starts a process; when the last one ends, nothing but pid 1 and the toolbox is left."""
    global _spawning
    with _lock:
        _spawning += 1
    try:
        yield
    finally:
        with _lock:
            _spawning -= 1
            if _spawning == 0:
                _kill_everything_else()


def add(group: int) -> None:
    """Spare ``group`` from sweeps while its command runs."""
    with _lock:
        _active.add(group)


def discard(group: int) -> None:
    with _lock:
        _active.discard(group)


_armed = False
"""Set by the entry point inside the sandbox only: on a host, sweeping every other process would be a disaster."""


def arm() -> None:
    """Allow the sweep and kill(-1): called by ``__main__.main`` as pid 1's child in the container, never on import."""
    global _armed
    _armed = True


def _check_armed() -> None:
    if not _armed:
        raise RuntimeError("the toolbox kills every stray process only inside its sandbox; call groups.arm() there")


def kill_group(group: int, sig: int) -> None:
    """Signal a whole group; one that is already gone is no error."""
    with contextlib.suppress(OSError):
        os.killpg(group, sig)


def _kill_everything_else() -> None:
    """With no other request running a process, nothing but pid 1 and the toolbox may live: kill(-1) ends the rest.

    The sweep lists /proc and then kills, so a chain of processes that each fork and exit within
    microseconds is gone from the list by the time it is killed, and slips through. Linux makes
    kill(-1) one atomic act against fork. gVisor does not: it signals a list of the processes it
    took first, so the child of a fork in flight is born after the list and lives on (seen: about
    one chain in 40). So kill(-1) is repeated until /proc lists no process of the toolbox's uid but
    pid 1 (under runc, tini has that uid too) and itself, zombies included: a process that lists
    nobody else has nobody left to fork. The agent's processes all have that uid (none can change
    it); others are not the agent's, and kill(-1) cannot touch them anyway: the guardian, a
    ``docker exec`` as root. Normally the first two looks find nobody (two, since gVisor's ``/proc``
    may leave a dying process out of one listing: a fork-chain test once outlived its command under
    runsc). The caller holds _lock, so no request starts a process meanwhile.

    Past KILL_ALL_PATIENCE_S, processes among which none new has appeared for KILL_ALL_STUCK_S of looks are
    killed already and only slow to die (stuck in the kernel, or a CPU spinner gVisor has yet to
    preempt): they are left to their end. Not sooner: under gVisor a link of a chain, caught in a
    slow fork with the kill pending, still finishes that fork, so the same one at two looks a
    millisecond apart proves nothing (seen: a chain that lived on). One born since, and running,
    escapes the kills (born since: no earlier look listed it; under gVisor a dying process may be missing from
    one listing and back in the next, so one look back is not enough): then the toolbox fails closed and
    exits, so the whole container goes and the controller starts a fresh one on the same workspace, rather
    than answer with something still running in it. So does a set that never settles, after four more patiences.
    """
    _check_armed()
    me, uid = str(os.getpid()), os.getuid()
    deadline = time.monotonic() + KILL_ALL_PATIENCE_S
    ever: set[str] = set()  # every pid any earlier look listed: gVisor's /proc may skip a dying one in a look
    same_since = time.monotonic()
    empty = 0  # looks in a row that listed nobody: two are needed, as a dying process may be missing from one
    while True:
        for _ in range(2):  # twice before each look: a fork in flight at the first is caught by the second
            with contextlib.suppress(OSError):
                os.kill(-1, signal.SIGKILL)
        others = (name for name in os.listdir("/proc") if name.isdigit() and name not in ("1", me))
        left = [name for name in others if _uid(name) == uid]
        empty = 0 if left else empty + 1
        if empty == 2:
            return
        if not left:
            continue
        now = time.monotonic()
        if set(left) - ever:  # a pid no look listed before; the dying leaving is no change (spinners under gVisor)
            same_since = now
        if now > deadline:
            running = [pid for pid in left if pid not in ever and _running(pid)]
            if running:
                os.write(
                    2,
                    f"toolbox: processes outlived every kill ({' '.join(running[:10])}); ending the sandbox\n".encode(),
                )
                os._exit(70)
            if now - same_since >= KILL_ALL_STUCK_S:
                return
            if now > deadline + KILL_ALL_PATIENCE_S * 4:  # never settles: end the sandbox if any of it can act
                if any(_running(pid) for pid in left):
                    os.write(2, b"toolbox: processes kept changing under every kill; ending the sandbox\n")
                    os._exit(70)
                return
        ever.update(left)
        time.sleep(0.001)


def _uid(pid: str) -> int | None:
    """The real uid of ``pid`` (from its status, which stays readable when the process is undumpable); None: gone."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def _running(pid: str) -> bool:
    """Whether ``pid`` can still act: not gone, not stuck in the kernel (D), not a zombie without live threads."""
    fields = _stat(pid)
    if not fields or fields[0] in (b"D", b"X"):
        return False
    return fields[0] != b"Z" or _has_live_threads(pid)


def _stat(pid: str) -> list[bytes]:
    """The fields of /proc/<pid>/stat after the command's name (state first, then ppid, pgrp, ...); none when gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return []


def sweep_strays() -> None:
    """Kill what escaped its group (setsid, double fork): nothing outlives its command.

    Repeated until a pass finds nothing, because a fork bomb forks while we kill.
    """
    for _ in range(SWEEP_PASSES):
        if not _sweep_once():
            return
        time.sleep(0.005)


def _sweep_once() -> int:
    """One pass over /proc: SIGKILL every process outside the spared groups; how many were signalled."""
    _check_armed()
    keep = {os.getpgrp()}
    with _lock:
        keep |= _active
    me = os.getpid()
    killed = 0
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in (1, me):
            continue
        fields = _stat(name)
        if not fields:
            continue
        if int(fields[2]) in keep or (fields[0] == b"Z" and not _has_live_threads(name)):
            continue
        with contextlib.suppress(OSError):
            os.kill(int(name), signal.SIGKILL)
            killed += 1
    return killed


def _has_live_threads(pid: str) -> bool:
    """A `Z` entry is a leader whose own thread exited; its other threads may still run (and write).

    A true zombie (every thread gone, waiting for its parent to reap it) lists only itself
    under task/; killing it again would change nothing and keep the sweep going round.
    """
    try:
        return len(os.listdir(f"/proc/{pid}/task")) > 1
    except OSError:
        return False
