"""Reading a command's two pipes into bounded captures until the command ends, times out or is cancelled."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time

from .capture import Capture
from .groups import kill_group
from .jobs import Job
from .limits import DRAIN_AFTER_EXIT_S, KILL_GRACE_S, READ_CHUNK, UNKILLABLE_WAIT_S


def _exit_fd(pid: int) -> int | None:
    """A descriptor that becomes readable when ``pid`` exits, or None where the kernel has no pidfds."""
    try:
        return os.pidfd_open(pid)
    except OSError:
        return None


def pump(
    proc: subprocess.Popen[bytes], cap: int, deadline: float, group: int, job: Job | None = None
) -> tuple[Capture, Capture, bool]:
    """Read both pipes until the command exits (and its pipes drain), times out or is cancelled.

    The command ends when its main process exits, not when its pipes close: a process that
    closed its output may still be running, and killing its group then would turn a clean
    exit into a SIGKILL. Pipes that stay open after the exit (background children) get a
    short drain, then the group is killed by the caller. The exit itself wakes the loop
    (a pidfd in the selector), so a command that closes its pipes before it exits costs no
    polling delay. A cancel wakes it too: the group is already dead, and what the pipes
    still hold is drained the same way.
    """
    assert proc.stdout is not None and proc.stderr is not None
    out, err = Capture(cap), Capture(cap)
    captures = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
    sel = selectors.DefaultSelector()
    for fd in captures:
        sel.register(fd, selectors.EVENT_READ)
    exit_fd = _exit_fd(proc.pid)
    if exit_fd is not None:
        sel.register(exit_fd, selectors.EVENT_READ)
    if job:
        sel.register(job.wake, selectors.EVENT_READ)
    timed_out, term_at, exited_at, cancelled_at = False, 0.0, 0.0, 0.0
    try:
        while True:
            now = time.monotonic()
            if not timed_out and not cancelled_at and now >= deadline:
                timed_out, term_at = True, now
                kill_group(group, signal.SIGTERM)
            if timed_out and now >= term_at + KILL_GRACE_S:
                kill_group(group, signal.SIGKILL)
                if now >= term_at + KILL_GRACE_S + UNKILLABLE_WAIT_S:
                    break  # stuck in the kernel; report it rather than wait forever
            if not exited_at and proc.poll() is not None:
                exited_at = now
            ended = exited_at or cancelled_at
            pipes_open = any(fd in captures for fd in sel.get_map())
            if ended and (not pipes_open or now >= ended + DRAIN_AFTER_EXIT_S):
                break  # pipes drained, or background children hold them open; they die with the group
            wake = [deadline if not timed_out else term_at + KILL_GRACE_S]
            if ended:
                wake.append(ended + DRAIN_AFTER_EXIT_S)
            elif exit_fd is None:
                wake.append(now + 0.005)  # no pidfd: poll for the exit
            for key, _ in sel.select(max(0.0, min(wake) - now)):
                if key.fd == exit_fd:
                    sel.unregister(exit_fd)  # it stays readable; proc.poll() above collects the exit
                elif job and key.fd == job.wake:
                    sel.unregister(job.wake)
                    cancelled_at = now
                    kill_group(group, signal.SIGKILL)  # the cancel may have come before the job knew its group
                elif data := os.read(key.fd, READ_CHUNK):
                    captures[key.fd].feed(data)
                else:
                    sel.unregister(key.fd)
    finally:
        sel.close()
        if exit_fd is not None:
            os.close(exit_fd)
    return out, err, timed_out
