"""Threads kept for the quick requests, so a file operation does not pay for a thread of its own.

Starting a thread is a handful of system calls: nothing under runc (0.1 ms), but under gVisor's
ptrace platform each system call stops the process twice, and a thread costs about a millisecond,
more than the rest of a read_file. Requests that can run long (run_command, search) and cancel
still get a thread each; the others run on kept threads. A new thread is started only when every kept one is
busy (up to ``MAX_KEPT``; past that they queue), so a slow request never holds up a quick one
for long, and the pool costs nothing until it is used.
"""

from __future__ import annotations

import threading

try:  # the C queue alone: the queue module brings heapq and more, and the toolbox's start is timed
    from _queue import SimpleQueue
except ImportError:  # another Python
    from queue import SimpleQueue

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

MAX_KEPT = 8
"""Kept threads at most; each is one of the sandbox's pids while it lives."""


class Pool:
    """Kept threads and the work queued for them. Every queued item is either promised to an idle thread
    (``submit`` took it off ``_idle``) or part of ``_backlog``, which the next thread to finish takes."""

    def __init__(self, kept: int = MAX_KEPT) -> None:
        self._work: SimpleQueue[Callable[[], None]] = SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0
        self._backlog = 0
        self._kept = kept

    def submit(self, work: Callable[[], None]) -> None:
        """Run ``work`` on a kept thread; RuntimeError when none is idle and none can be started (pids limit)."""
        with self._lock:
            if self._idle:
                self._idle -= 1
            elif self._threads < self._kept:
                threading.Thread(target=self._serve, daemon=True).start()  # RuntimeError: nothing was counted
                self._threads += 1
            else:
                self._backlog += 1
            self._work.put(work)

    def _serve(self) -> None:
        while True:
            work = self._work.get()
            try:
                work()
            finally:
                with self._lock:
                    if self._backlog:
                        self._backlog -= 1
                    else:
                        self._idle += 1
