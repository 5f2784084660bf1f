"""Startup: the image runs this directory as ``/usr/bin/python3 -I -S -u /opt/cubicle/toolbox``.

-I -S keep the workspace, the current directory, user and site packages and every PYTHON*
variable off the import path, so nothing the agent writes or sets runs in the toolbox.

Running a directory makes the directory itself sys.path[0], and this file a top-level
``__main__`` with no package: its siblings would be importable as top-level names, which
stdlib modules imported later would find before their own (a ``selectors.py`` here would
stand in for the one subprocess uses). So before anything else this file takes the
directory off sys.path, appends its parent (/opt/cubicle: root-owned, on the read-only root
filesystem, holding only this directory) after the stdlib, so the stdlib always wins, and
runs itself again as ``toolbox.__main__``, as ``python3 -m toolbox`` would (-I cannot run
that: it keeps the current directory off sys.path). From then on every module is
``toolbox.<name>`` and imports its siblings relatively. The interpreter's own start (runpy,
before this file) still sees the directory first, so no module here may take a stdlib name;
tests/unit/sandbox_image/test_toolbox_files.py checks that.

No ``from __future__ import``: it would be an import before the one above.
"""

import os
import sys

if not __package__:
    import runpy

    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [*(p for p in sys.path if p != _here), os.path.dirname(_here)]
    runpy.run_module(os.path.basename(_here), run_name="__main__", alter_sys=True)
    raise SystemExit

WORKSPACE = "/workspace"

if __name__ == "__main__" and os.getuid() == 0:
    # A runtime that needs the guardian (see guardian): it forks before the toolbox's own imports, so the fork
    # copies a small process and the guardian sets up its relay while the worker imports. Only the worker,
    # now the owner, goes on past this line.
    from . import guardian

    guardian.split(WORKSPACE)

import functools
import json
import signal
import threading

from . import groups, jobs
from .pool import Pool
from .protocol import NO_THREADS, OWN_THREAD_OPS, Toolbox
from .workspace import Workspace

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

PR_SET_DUMPABLE = 4
SEED = ".cubicle-seed"
SEED_VARIABLE = "CUBICLE_SEED"
OWN_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
"""The toolbox's own environment, and that of the helpers it runs for itself (ripgrep)."""


def guard_self() -> dict[str, str]:
    """Make this process undumpable and give it a fixed environment, before it reads any request.

    An undumpable process cannot be ptraced, and its /proc/<pid>/mem, fd/, environ and the like
    belong to root and stay closed to every process without CAP_SYS_PTRACE: every command here.
    Commands are exec'd, which makes them dumpable again, so the toolbox can still set their OOM
    score. It refuses to run unguarded. Returns the environment it was started with, for commands.
    """
    import ctypes  # only here: importing this module must not need it

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise SystemExit(f"toolbox: prctl(PR_SET_DUMPABLE, 0) failed: {os.strerror(ctypes.get_errno())}")
    command_env = dict(os.environ)
    command_env.pop(SEED_VARIABLE, None)
    os.environ.clear()
    os.environ.update(OWN_ENV)
    return command_env


def serve(toolbox: Toolbox, lines: "Iterable[bytes]") -> None:
    """Read requests until stdin ends, each answered on a thread: its own for those in OWN_THREAD_OPS, a kept
    one for the rest (``pool``); a bad line gets an answer with id null."""
    kept = Pool()
    for line in lines:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except ValueError as err:
            toolbox.send({"id": None, "ok": False, "error": {"kind": "bad_request", "message": f"invalid JSON: {err}"}})
            continue
        if not isinstance(request, dict):
            toolbox.send(
                {"id": None, "ok": False, "error": {"kind": "bad_request", "message": "a request is a JSON object"}}
            )
            continue
        job = jobs.register(request)
        try:
            if request.get("op") in OWN_THREAD_OPS:
                threading.Thread(target=toolbox.handle, args=(request, job), daemon=True).start()
            else:
                kept.submit(functools.partial(toolbox.handle, request, job))
        except RuntimeError:  # the pids limit is exhausted (a fork bomb): answer, don't die
            if job:
                jobs.forget(job)
            toolbox.send({"id": request.get("id"), "ok": False, "error": {"kind": "busy", "message": NO_THREADS}})


def sow_seed() -> None:
    """Delete the seed: the controller put an empty ``.cubicle-seed`` in a lower layer of /workspace, topmost.

    Deleting it makes overlayfs create the whiteout this mount shares with every later deletion
    of a checkout file (each a hard link to it), now, while an inode is free: so at the exact
    file quota a deletion still works. Under /workspace the agent may have taken the owner's
    write permission away; it is given back for the one unlink.
    """
    try:
        mode = os.stat(".").st_mode & 0o7777
        if not mode & 0o200:
            os.chmod(".", mode | 0o200)
        try:
            os.unlink(SEED)
        finally:
            if not mode & 0o200:
                os.chmod(".", mode)
    except OSError:
        pass  # only a deletion at the exact quota pays for it


def main() -> None:
    seeded = os.environ.get(SEED_VARIABLE) == "1"
    command_env = guard_self()
    groups.arm()
    os.chdir(WORKSPACE)
    if seeded:
        sow_seed()
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    serve(Toolbox(Workspace(WORKSPACE), command_env, sys.stdout.buffer), sys.stdin.buffer)


if __name__ == "__main__":
    main()
