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
from .live import Live


def _exit_fd(pid: int) -> int | None:
    """A descriptor that becomes readable when ``pid`` exits, or None where the kernel has no pidfds."""
    try:
        return os.pidfd_open(pid)
    except OSError:
        return None


def pump(
    proc: subprocess.Popen[bytes],
    cap: int,
    deadline: float,
    group: int,
    job: Job | None = None,
    live: Live | None = None,
) -> tuple[Capture, Capture, bool]:
    """Read both pipes until the command exits (and its pipes drain), times out or is cancelled.

    The command ends when its main process exits, not when its pipes close: a process that
    closed its output may still be running, and killing its group then would turn a clean
    exit into a SIGKILL. Pipes that stay open after the exit (background children) get a
    short drain, then the group is killed by the caller. The exit itself wakes the loop
    (a pidfd in the selector), so a command that closes its pipes before it exits costs no
    polling delay. A cancel wakes it too: the group is already dead, and what the pipes
    still hold is drained the same way. With ``live``, what the pipes give is also sent as it comes.
    """
    pumping = _Pump(proc, cap, deadline, group, job, live)
    try:
        pumping.run()
        if live:
            live.finish(time.monotonic())
    finally:
        pumping.close()
    return pumping.out, pumping.err, pumping.timed_out


class _Pump:
    """The state of one command's pump: its pipes and wake-ups in a selector, and when it timed out or ended."""

    def __init__(
        self, proc: subprocess.Popen[bytes], cap: int, deadline: float, group: int, job: Job | None, live: Live | None
    ) -> None:
        assert proc.stdout is not None and proc.stderr is not None
        self.proc, self.deadline, self.group, self.job, self.live = proc, deadline, group, job, live
        self.out, self.err = Capture(cap), Capture(cap)
        self.captures = {proc.stdout.fileno(): self.out, proc.stderr.fileno(): self.err}
        self.sel = selectors.DefaultSelector()
        for fd in self.captures:
            self.sel.register(fd, selectors.EVENT_READ)
        self.exit_fd = _exit_fd(proc.pid)
        if self.exit_fd is not None:
            self.sel.register(self.exit_fd, selectors.EVENT_READ)
        if job:
            self.sel.register(job.wake, selectors.EVENT_READ)
        self.timed_out, self.term_at, self.exited_at, self.cancelled_at = False, 0.0, 0.0, 0.0

    def run(self) -> None:
        while True:
            now = time.monotonic()
            if self._enforce_deadline(now) or self._finished(now):
                return
            for key, _ in self.sel.select(max(0.0, self._wake_at(now) - now)):
                self._handle(key.fd, now)
            if self.live and (due := self.live.due()) is not None and time.monotonic() >= due:
                self.live.flush()

    def _enforce_deadline(self, now: float) -> bool:
        """TERM at the deadline, KILL after the grace; True when the group is stuck in the kernel even so."""
        if not self.timed_out and not self.cancelled_at and now >= self.deadline:
            self.timed_out, self.term_at = True, now
            kill_group(self.group, signal.SIGTERM)
        if self.timed_out and now >= self.term_at + KILL_GRACE_S:
            kill_group(self.group, signal.SIGKILL)
            return now >= self.term_at + KILL_GRACE_S + UNKILLABLE_WAIT_S  # report it rather than wait forever
        return False

    def _finished(self, now: float) -> bool:
        """Ended (exited or cancelled) and drained, or background children hold the pipes past the drain."""
        if not self.exited_at and self.proc.poll() is not None:
            self.exited_at = now
        ended = self.exited_at or self.cancelled_at
        pipes_open = any(fd in self.captures for fd in self.sel.get_map())
        return bool(ended) and (not pipes_open or now >= ended + DRAIN_AFTER_EXIT_S)

    def _wake_at(self, now: float) -> float:
        wake = [self.deadline if not self.timed_out else self.term_at + KILL_GRACE_S]
        ended = self.exited_at or self.cancelled_at
        if ended:
            wake.append(ended + DRAIN_AFTER_EXIT_S)
        elif self.exit_fd is None:
            wake.append(now + 0.005)  # no pidfd: poll for the exit
        if self.live and (due := self.live.due()) is not None:
            wake.append(due)
        return min(wake)

    def _handle(self, fd: int, now: float) -> None:
        if fd == self.exit_fd:
            self.sel.unregister(fd)  # it stays readable; proc.poll() collects the exit
        elif self.job and fd == self.job.wake:
            self.sel.unregister(fd)
            self.cancelled_at = now
            kill_group(self.group, signal.SIGKILL)  # the cancel may have come before the job knew its group
        elif data := os.read(fd, READ_CHUNK):
            self.captures[fd].feed(data)
            if self.live:
                self.live.feed(fd, data, now)
        else:
            self.sel.unregister(fd)

    def close(self) -> None:
        self.sel.close()
        if self.exit_fd is not None:
            os.close(self.exit_fd)
