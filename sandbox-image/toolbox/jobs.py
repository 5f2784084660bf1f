"""run_command requests that a ``cancel`` can find, and ``cancel`` itself.

A request is registered when its line is read, before its thread starts, so a cancel
read after it always finds it, even if the command has not started yet.
"""

from __future__ import annotations

import os
import signal
import threading

from . import groups
from .errors import JSON


class Job:
    """A run_command request, registered when it is read so that a `cancel` after it always finds it."""

    def __init__(self, rid: int) -> None:
        self.rid = rid
        self.group = 0  # the command's process group, once it runs
        self.cancelled = False
        self.finished = False  # the command's outcome is settled; a cancel now changes nothing
        self.wake = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)  # wakes its pump on cancel

    def started(self, group: int) -> None:
        """Record the command's group, so a cancel from now on kills it directly."""
        with _lock:
            self.group = group

    def settle(self) -> None:
        """The outcome is decided: a cancel arriving now answers that it cancelled nothing."""
        with _lock:
            self.finished = True


_jobs: dict[int, Job] = {}
_lock = threading.Lock()


def register(request: JSON) -> Job | None:
    """A Job for a run_command request with an integer id not already running; None for anything else."""
    rid = request.get("id")
    if request.get("op") != "run_command" or type(rid) is not int:
        return None
    with _lock:
        if rid in _jobs:
            return None  # a reused id: the running one keeps it
        try:
            job = _jobs[rid] = Job(rid)
        except OSError:  # no descriptor left: the command still runs, it just cannot be cancelled
            return None
    return job


def forget(job: Job) -> None:
    """Drop a job once its request has answered; its id may then be used again."""
    with _lock:
        if _jobs.get(job.rid) is job:
            del _jobs[job.rid]
        job.finished = True
        os.close(job.wake)


def cancel(args: JSON) -> JSON:
    """Kill request ``id``'s command group now; that request then answers with what the command printed."""
    rid = args.get("id")
    with _lock:
        job = _jobs.get(rid) if type(rid) is int else None
        if job is None or job.finished or job.cancelled:
            return {"cancelled": False}
        job.cancelled = True
        if job.group:
            groups.kill_group(job.group, signal.SIGKILL)
        os.eventfd_write(job.wake, 1)
    groups.sweep_strays()
    return {"cancelled": True}
