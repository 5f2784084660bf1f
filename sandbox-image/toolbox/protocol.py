"""The op table and the answers: one JSON line out per request, whatever the operation does.

The wire format is the controller's contract (controller/protocol.py): key order and
separators here are what it has always read, so change them only together with it.

Commands and searches need ``subprocess`` and the toolbox's process handling, the largest part
of its imports: they are loaded on a thread of their own once the first answer is out (every
sandbox start waits for that answer), or by the first command that comes sooner.
"""

from __future__ import annotations

import json
import os
import threading
from functools import partial

from . import jobs
from .edits import edit_file
from .errors import JSON, ToolError
from .files import list_files, read_file, write_file
from .live import Live
from .workspace import Workspace
from .writes import write_all

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import BinaryIO

    Operation = Callable[[JSON], JSON]
OWN_THREAD_OPS = frozenset({"run_command", "search", "cancel"})
"""Operations that get a thread of their own: those that may run long (a command, a walk of a large tree), and
cancel, which must never wait behind busy kept threads."""

NO_THREADS = (
    "The sandbox has no free processes (its pids limit is reached). Wait for running commands to end, or kill them."
)


class Toolbox:
    """One toolbox: the workspace its operations act on, the environment its commands get, and where it answers."""

    def __init__(self, workspace: Workspace, command_env: dict[str, str] | None, output: BinaryIO) -> None:
        self.workspace = workspace
        self.command_env = command_env
        self.output = output
        self._out_lock = threading.Lock()
        self._loading = False
        self.operations: dict[str, Operation] = {
            "list_files": partial(list_files, workspace),
            "read_file": partial(read_file, workspace),
            "write_file": partial(write_file, workspace),
            "edit_file": partial(edit_file, workspace),
            "search": partial(_search, workspace),
            "run_command": self.run_command,
            "cancel": jobs.cancel,
            "ping": lambda args: {"pid": os.getpid(), "uid": os.getuid()},
        }

    def run_command(self, args: JSON, job: jobs.Job | None = None) -> JSON:
        """Commands run in the workspace with the environment the container was started with, not the toolbox's.
        A request that asks for ``live_output`` (and could be cancelled, so has an id) gets its output as it comes,
        in lines ``{"id", "output": {"text", "truncated"}}`` before its answer."""
        from . import processes

        limit = args.get("live_output")
        live = None
        if job and type(limit) is int and limit > 0:
            live = Live(partial(self.send_output, job.rid), limit)
        return processes.run_command(args, self.workspace.root, self.command_env, job, live)

    def send_output(self, rid: int, text: str, truncated: bool) -> None:
        """One piece of a running command's output (see ``live``)."""
        self.send({"id": rid, "output": {"text": text, "truncated": truncated}})

    def send(self, message: JSON) -> None:
        """Write one response line whole: requests answer from many threads, and a line must never interleave."""
        line = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "replace") + b"\n"
        with self._out_lock:
            write_all(self.output, line)

    def handle(self, request: JSON, job: jobs.Job | None = None) -> None:
        """Answer one request, on a thread of its own or a kept one: every request gets exactly one answer, even
        on a bug."""
        rid = request.get("id")
        try:
            op = self.operations.get(request.get("op", ""))
            if op is None:
                raise ToolError("unknown_op", f"Unknown operation {request.get('op')!r}.")
            args = request.get("args") or {}
            self.send({"id": rid, "ok": True, "result": self.run_command(args, job) if job else op(args)})
        except ToolError as err:
            self.send({"id": rid, "ok": False, "error": {"kind": err.kind, "message": err.message}})
        except Exception as err:  # noqa: BLE001 - the toolbox must answer every request
            self.send(
                {"id": rid, "ok": False, "error": {"kind": "internal", "message": f"{type(err).__name__}: {err}"}}
            )
        finally:
            if job:
                jobs.forget(job)
            if not self._loading:
                self._loading = True
                try:
                    threading.Thread(target=load_command_modules, daemon=True).start()
                except RuntimeError:  # no thread to be had (the pids limit): the first command imports them
                    self._loading = False


def load_command_modules() -> None:
    """Import what commands and searches run on (see the module's docstring)."""
    from . import processes, search  # noqa: F401


def _search(workspace: Workspace, args: JSON) -> JSON:
    from .search import search

    return search(workspace, args)
