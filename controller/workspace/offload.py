"""Walks of a layer in a child process with its own memory ceiling, never in the controller's.

Everything in a layer was made by the agent, and a walk of it (the checkpoint and the change
list at a turn's end, the retention sweep's count) costs what the agent chose: millions of
names, hard links, xattrs. In the controller's own process such a walk would hold the GIL
that every request needs, and grow the heap that every session shares. Here it runs in a
child process forked from a small server process that has the walk's modules loaded
(``multiprocessing``'s forkserver: no copy of the controller's threads or heap), one walk per
child, so whatever the walk allocated is returned to the system when it ends. The child's data
segment is limited (``RLIMIT_DATA``): a walk past it fails with a clear error and harms nobody
else.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import resource
import threading
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from .errors import WorkspaceError

T = TypeVar("T")

DEFAULT_MEMORY_MB = 1024
DEFAULT_WORKERS = 4
PRELOAD = ["__main__", "controller.workspaces"]
"""What the fork server imports once, so that each walk's child starts in milliseconds (the main module too, as
``multiprocessing`` does by default: a child would import it again otherwise)."""


class WalkMemoryError(WorkspaceError):
    """A walk of a layer needed more memory than a walk may have; the controller and other sessions are unharmed."""

    hint = (
        "The layer holds more than a walk can read within its memory (CUBICLE_WALK_MEMORY_MB): rewind the session "
        "to an earlier checkpoint or discard it."
    )


def _limit_memory(limit_bytes: int) -> None:
    """In the child: a data segment (heap and anonymous mappings) no larger than ``limit_bytes``."""
    resource.setrlimit(resource.RLIMIT_DATA, (limit_bytes, limit_bytes))


class Offload:
    """Runs functions in child processes, one call per child, at most ``workers`` at a time.

    ``run`` blocks; call it from a worker thread (``asyncio.to_thread``). The function and its
    arguments must be importable and picklable (a module-level function, plain values).
    """

    def __init__(self, memory_mb: int = DEFAULT_MEMORY_MB, workers: int = DEFAULT_WORKERS) -> None:
        self.memory_mb = memory_mb
        self.workers = workers
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._lock = threading.Lock()
        self._closed = False

    def run(self, fn: Callable[..., T], *args: Any) -> T:
        pool = self._current()
        try:
            return pool.submit(fn, *args).result()
        except MemoryError:
            raise WalkMemoryError(
                f"Reading the layer needed more than the {self.memory_mb} MiB a walk may use; nothing was changed."
            ) from None
        except BrokenProcessPool:
            self._replace(pool)
            raise WalkMemoryError(
                f"The process reading the layer was killed (more than the {self.memory_mb} MiB a walk may use, or "
                "the system's memory ran out); nothing was changed."
            ) from None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def _current(self) -> concurrent.futures.ProcessPoolExecutor:
        with self._lock:
            if self._closed:
                raise WorkspaceError("The controller is shutting down; the layer was not read.")
            if self._pool is None:
                context = multiprocessing.get_context("forkserver")
                context.set_forkserver_preload(PRELOAD)
                self._pool = concurrent.futures.ProcessPoolExecutor(
                    max_workers=self.workers, mp_context=context, initializer=_limit_memory,
                    initargs=(self.memory_mb << 20,), max_tasks_per_child=1,
                )  # fmt: skip
            return self._pool

    def _replace(self, broken: concurrent.futures.ProcessPoolExecutor) -> None:
        """A child died: the pool refuses all work from then on, so the next call gets a new one."""
        with self._lock:
            if self._pool is broken:
                self._pool = None
        broken.shutdown(wait=False, cancel_futures=True)
