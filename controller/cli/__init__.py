"""The ``cubicle`` command line: run a task, review and apply its changes, serve the API, build the image, sweep.

``cubicle run`` is a session like the API's: recorded in the same database (owned by this
process, so ``cubicle sessions`` lists it and a ``cubicle serve`` leaves it alone while it
runs), working in its own workspace layer. The checkout changes only when the changes are
applied: at the end of the run (``--apply``, or yes to the question on a terminal) or later
with ``cubicle apply ID``.

Exit codes of ``cubicle run``: 0 the agent finished its turn; 2 usage or configuration
error (bad flags, missing API key, ``--approve`` without a terminal, a root-owned repository);
3 a limit ended the turn (steps, token budget, wall clock); 4 sandbox, Docker, model API or
filesystem failure; 5 ``--apply`` met a conflict (the changes are kept, nothing was written),
or the repository overlaps one a running session uses; 130 interrupted (Ctrl-C); 129 and 143
stopped by SIGHUP and SIGTERM (128 + the signal). Ctrl-C, SIGTERM and SIGHUP all end the
session the same way: the running command is killed, the container is removed and the end
is recorded (``session_finished`` with reason ``cancelled``); the changes are kept.

The review commands (``changes``, ``apply``, ``revert``, ``rewind``, ``discard``,
``checkpoints``) work on any session, the API's too: 0 done; 2 usage (an unknown session,
checkpoint or apply); 5 a conflict (the paths are listed, nothing was written) or a turn is
running; 4 Docker or filesystem failure.

Everything the model or the sandbox wrote reaches the terminal through ``controller.cli.terminal``
(file names and diffs through ``controller.cli.review``).

Modules: ``app`` (the Typer app, exit codes, errors, the sessions of the database), ``run``
and ``finish`` (a run and what it does with its changes), ``workspace`` (the review
commands), ``service`` (serve, sessions, gc, image build, scripted-server), ``environment``
(env show, env build), ``mcp`` (the tools served over MCP), ``help_format`` (how ``--help`` shows parameters).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys

from . import environment, mcp, run, service, terminal, turns, workspace
from .app import app, err_console

__all__ = ["app", "environment", "main", "mcp", "run", "service", "turns", "workspace"]


def main() -> None:
    """Console-script entry point.

    The process ends with ``os._exit`` once the command has returned and the output is flushed:
    by then the container is gone and nothing is left to finalize, and tearing down the interpreter's
    modules can take most of a second on a busy machine, which Ctrl-C at a prompt must not wait for.
    """
    handler = logging.StreamHandler()
    handler.setFormatter(terminal.SafeFormatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler])
    try:
        app()
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else 0 if done.code is None else 1
        if not isinstance(done.code, int | None):
            err_console.print(terminal.safe_text(str(done.code)))
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)
