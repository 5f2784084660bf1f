"""Cubicle toolbox: the long-lived process inside every sandbox container.

It reads one JSON request per line on stdin and writes one JSON response per
line on stdout:

    {"id": 7, "op": "read_file", "args": {"path": "src/app.py"}}
    {"id": 7, "ok": true, "result": {...}}
    {"id": 7, "ok": false, "error": {"kind": "not_found", "message": "..."}}

Each request runs on a thread (its own for commands and searches, a kept one for
the rest), so several may be in flight and their answers may come back in any
order; the id ties them together.

Stdlib only: the image must not need pip. Every path is resolved inside the
container, so a symlink to "/" in the repository points at the container's
root, never the host's. Output of any size is kept as a bounded head and
tail, so nothing the agent runs can grow this process's memory.

The agent's commands run as this process's uid, so it guards itself: it runs as
``python3 -I -S`` from outside the workspace (nothing the agent writes, and no
PYTHON* variable, is on its import path), it keeps the environment it was started
with for the commands and uses a fixed one of its own, and it makes itself
undumpable before reading any request, so no command can ptrace it or open its
memory, file descriptors or environment under /proc.

The image runs this directory (``python3 -I -S -u /opt/cubicle/toolbox``); see
``__main__`` for how it then imports itself as the package ``toolbox``. Its modules
import each other only relatively, so none of them is ever a top-level module that
could stand in for a stdlib one. Importing the package runs nothing: the unit tests
import it as ``toolbox`` too (pytest puts ``sandbox-image/`` on the path) and point a
``Workspace`` at a temporary directory.

Every sandbox start waits for this process to answer, and under gVisor each import
costs milliseconds (about 50 µs a system call), so what is imported only for type
checking (``typing``, ``collections.abc``) sits under a local ``TYPE_CHECKING = False``
that mypy reads as true, and heavier stdlib modules (``shutil``, ``platform``, ``queue``)
are left out. The image holds the toolbox's bytecode, compiled when it is built.

    errors      ToolError, the failure a model reads
    limits      every cap and timing, in one place
    capture     bounded head + tail of a stream
    workspace   resolving and showing paths under the workspace root
    files       list_files, read_file, write_file
    edits       edit_file and its hints
    search      search (ripgrep, or the same in Python where the image lacks it)
    groups      which process groups may live; killing and sweeping the rest
    jobs        run_command requests that a cancel can find, and cancel
    pump        reading a command's pipes until it ends
    processes   run_command: running a command to its end
    protocol    the op table, request dispatch and answers
    pool        kept threads for the quick requests
    writes      writing a whole answer, however many writes it takes
    guardian    the front that holds the controller's stream under gVisor (runsc)
    seccomp     the filter the guardian installs where the engine's profile does not apply
    relay       what the guardian passes between the controller and the toolbox, and how it checks it
    __main__    startup: the self-guard and the request loop
"""
