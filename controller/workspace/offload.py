"""Walks of a layer in a child process with its own memory ceiling, never in the controller's.

Everything in a layer was made by the agent, and a walk of it (the checkpoint and the change
list at a turn's end, a listing, apply's scan, a rewind, the retention sweep's count) costs
what the agent chose: millions of names, hard links, xattrs, deep trees. In the controller's own process such a walk would hold the GIL
that every request needs, and grow the heap that every session shares. Here it runs in a
child process forked from a small server process that has the walk's modules loaded
(``multiprocessing``'s forkserver: no copy of the controller's threads or heap), one walk per
child, so whatever the walk allocated is returned to the system when it ends. The child's data
segment is limited (``RLIMIT_DATA``), its time too (killed past ``timeout_s``), and it runs at a
lower priority: a walk past its limits fails with a clear error and harms nobody else. (A one-shot command,
such as ``cubicle changes``, lists a small layer itself instead of starting the fork server for one walk:
``Workspaces.inline_small``.)
"""

from __future__ import annotations

import os
import resource
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import WalkMemoryError, WalkTimeoutError, WorkspaceError

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.process import BaseProcess

T = TypeVar("T")

DEFAULT_MEMORY_MB = 1024
DEFAULT_TIMEOUT_S = 600.0
DEFAULT_WORKERS = 4
NICE = 10
"""How much lower a walk's child runs than the controller."""
PRELOAD = ["__main__", "controller.workspace.manager"]
"""What the fork server imports once, so that each walk's child starts in milliseconds (the main module too, as
``multiprocessing`` does by default: a child would import it again otherwise). See ``preload``."""


def preload() -> list[str]:
    """``PRELOAD``, and when the program is a script, the modules of what it imported.

    A script (the ``cubicle`` command is pip's wrapper: ``from controller.cli import main``) is run again in each
    child, to rebuild ``__main__``. The fork server is meant to run it once for them all (``"__main__"`` above),
    but Python 3.11's never receives the script's path: each walk imported the whole command line again (0.6 s of
    CPU, at every turn's end in ``cubicle serve``). With those modules in the server, the script's imports in the
    child find them loaded. A program run as a module (``python -m controller``) leaves ``__main__`` alone.
    """
    main = sys.modules["__main__"]
    if getattr(main, "__spec__", None) is not None or not getattr(main, "__file__", None):
        return PRELOAD
    held = {getattr(value, "__module__", None) for value in vars(main).values()}
    return PRELOAD + sorted(
        name for name in held if isinstance(name, str) and name in sys.modules and name != "__main__"
    )


def _child(conn: Connection, limit_bytes: int, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """In the child: a data segment (heap and anonymous mappings) no larger than ``limit_bytes``, then the call;
    its result or its exception goes back through ``conn``."""
    resource.setrlimit(resource.RLIMIT_DATA, (limit_bytes, limit_bytes))
    os.nice(NICE)  # background work: the sessions' own requests come first on a busy machine
    try:
        outcome: tuple[str, Any] = ("result", fn(*args))
    except BaseException as err:  # noqa: BLE001 - everything goes back to the caller, to be raised there
        outcome = ("error", err)
    try:
        conn.send(outcome)
    except Exception as err:  # noqa: BLE001 - an answer that cannot be pickled (or no memory left for it)
        conn.send(("error", WorkspaceError(f"The walk's answer could not be sent back: {err}")))
    finally:
        conn.close()


class Offload:
    """Runs functions in child processes, one child per call, at most ``workers`` at a time.

    ``run`` blocks; call it from a thread of its own (``Workspaces.in_thread``). The function and its
    arguments must be importable and picklable (a module-level function, plain values). (Not a
    ``ProcessPoolExecutor``: with ``max_tasks_per_child`` it can stop replacing workers and hang,
    CPython gh-115634, in every 3.11.)
    """

    def __init__(
        self, memory_mb: int = DEFAULT_MEMORY_MB, workers: int = DEFAULT_WORKERS, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> None:
        self.memory_mb = memory_mb
        self.timeout_s = timeout_s
        self._slots = threading.BoundedSemaphore(workers)
        self._lock = threading.Lock()
        self._running: set[BaseProcess] = set()
        self._closed = False

    def run(self, fn: Callable[..., T], *args: Any) -> T:
        with self._slots:
            kind, value = self._call(fn, args)
        if kind == "result":
            return value  # type: ignore[no-any-return]
        if isinstance(value, MemoryError):
            raise WalkMemoryError(
                f"Reading the layer needed more than the {self.memory_mb} MiB a walk may use; nothing was changed."
            )
        raise value

    def close(self) -> None:
        """Refuse new walks and stop the running ones (the controller is going away)."""
        with self._lock:
            self._closed = True
            running = list(self._running)
        for process in running:
            process.terminate()

    def _call(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[str, Any]:
        import multiprocessing  # here: a one-shot command that lists a small layer itself never starts a child

        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(preload())
        with self._lock:
            if self._closed:
                raise WorkspaceError("The controller is shutting down; the layer was not read.")
            receiving, sending = context.Pipe(duplex=False)
            process = context.Process(target=_child, args=(sending, self.memory_mb << 20, fn, args), daemon=True)
            try:
                process.start()
            except BaseException:
                receiving.close()
                raise
            finally:
                sending.close()
            self._running.add(process)
        try:
            if not receiving.poll(self.timeout_s):
                process.kill()
                process.join()
                raise WalkTimeoutError(
                    f"Reading the layer took longer than the {self.timeout_s:.0f} s a walk may; it was stopped."
                )
            outcome: tuple[str, Any] = receiving.recv()
        except EOFError:
            process.join()
            raise WalkMemoryError(
                f"The process reading the layer ended without an answer (exit code {process.exitcode}): killed for "
                f"using more than the {self.memory_mb} MiB a walk may, or by the system."
            ) from None
        finally:
            receiving.close()
            with self._lock:
                self._running.discard(process)
        process.join()
        return outcome
