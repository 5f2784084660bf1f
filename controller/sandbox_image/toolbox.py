#!/usr/bin/env python3
"""Cubicle toolbox: the long-lived process inside every sandbox container.

It reads one JSON request per line on stdin and writes one JSON response per
line on stdout:

    {"id": 7, "op": "read_file", "args": {"path": "src/app.py"}}
    {"id": 7, "ok": true, "result": {...}}
    {"id": 7, "ok": false, "error": {"kind": "not_found", "message": "..."}}

Each request runs on its own thread, so several may be in flight and their
answers may come back in any order; the id ties them together.

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
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import selectors
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import IO, Any

JSON = dict[str, Any]

WORKSPACE = "/workspace"
READ_CHUNK = 1 << 16
KILL_GRACE_S = 2.0
DRAIN_AFTER_EXIT_S = 0.25
UNKILLABLE_WAIT_S = 5.0
MAX_LIST_ENTRIES = 1000
MAX_LINE_CHARS = 2000
DEFAULT_READ_LINES = 2000
MAX_READ_BYTES = 256 * 1024
MAX_SCAN_BYTES = 64 * 1024 * 1024
MAX_EDIT_FILE_BYTES = 16 * 1024 * 1024
SEARCH_TIMEOUT_S = 30.0
SWEEP_PASSES = 200
PR_SET_DUMPABLE = 4
OWN_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
"""The toolbox's own environment, and that of the helpers it runs for itself (ripgrep)."""

_out_lock = threading.Lock()
_active_groups: set[int] = set()
_groups_lock = threading.Lock()
_spawning = 0  # requests that are starting or running a process; under _groups_lock
_command_env: dict[str, str] | None = None  # what the container was started with; commands get it


class ToolError(Exception):
    """A failure the model should read: ``kind`` is stable, ``message`` says what to do."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


# --------------------------------------------------------------------------- output


class Capture:
    """Keeps the first ``head`` and last ``tail`` bytes of a stream and counts the rest."""

    def __init__(self, cap: int) -> None:
        self.head_cap = cap // 2
        self.tail_cap = cap - self.head_cap
        self.head = bytearray()
        self.tail: collections.deque[bytes] = collections.deque()
        self.tail_len = 0
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if not data:
            return
        self.tail.append(data)
        self.tail_len += len(data)
        while self.tail and self.tail_len - len(self.tail[0]) >= self.tail_cap:
            self.tail_len -= len(self.tail.popleft())

    def result(self) -> dict[str, object]:
        tail = b"".join(self.tail)[-self.tail_cap :] if self.tail_cap else b""
        omitted = self.total - len(self.head) - len(tail)
        text = _decode(bytes(self.head))
        if omitted > 0:
            text += f"\n[... {omitted} bytes omitted ...]\n"
        text += _decode(tail)
        return {"text": text, "total_bytes": self.total, "truncated": omitted > 0}


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _encode(text: str) -> bytes:
    """Round-trip bytes that edit_file decoded with surrogateescape; replace any other lone surrogate."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace")


def _clean(name: str) -> str:
    """File names may hold bytes that are not UTF-8; show them replaced, never crash."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


# --------------------------------------------------------------------------- paths


def _resolve(path: str) -> str:
    if "\x00" in path:
        raise ToolError("invalid_path", "The path contains a NUL byte.")
    return os.path.normpath(os.path.join(WORKSPACE, path))


def _display(full: str) -> str:
    if full == WORKSPACE:
        return "."
    if full.startswith(WORKSPACE + "/"):
        return full[len(WORKSPACE) + 1 :]
    return full


def _os_error(err: OSError, path: str) -> ToolError:
    shown = _display(path)
    known = {
        2: ("not_found", f"{shown} does not exist. List the directory to see what is there."),
        13: ("permission_denied", f"Permission denied: {shown}."),
        20: ("not_a_directory", f"A part of {shown} is not a directory."),
        21: ("is_directory", f"{shown} is a directory, not a file. Use list_files on it."),
        30: ("read_only", f"{shown} is on a read-only filesystem and cannot be changed."),
        36: ("name_too_long", f"The path {shown} is too long."),
        40: ("symlink_loop", f"{shown} is a symlink loop."),
    }
    kind, message = known.get(err.errno or 0, ("os_error", f"{shown}: {err.strerror or err}"))
    return ToolError(kind, message)


def _open_regular(full: str, flags: int) -> int:
    """Open without blocking on FIFOs and refuse anything that is not a regular file."""
    try:
        fd = os.open(full, flags | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        raise _os_error(err, full) from None
    mode = os.fstat(fd).st_mode
    if stat.S_ISREG(mode):
        os.set_blocking(fd, True)
        return fd
    os.close(fd)
    if stat.S_ISDIR(mode):
        raise ToolError("is_directory", f"{_display(full)} is a directory, not a file. Use list_files on it.")
    raise ToolError("not_regular", f"{_display(full)} is not a regular file (a device, FIFO or socket).")


# --------------------------------------------------------------------------- operations


def list_files(args: JSON) -> JSON:
    root = _resolve(args.get("path") or ".")
    depth = args.get("depth") or 2
    try:
        if not stat.S_ISDIR(os.stat(root).st_mode):
            raise ToolError("not_a_directory", f"{_display(root)} is a file, not a directory. Use read_file on it.")
    except OSError as err:
        raise _os_error(err, root) from None
    entries: list[JSON] = []
    truncated = False
    stack = [(root, 1)]
    while stack and not truncated:
        directory, level = stack.pop()
        try:
            with os.scandir(directory) as it:
                children = sorted(it, key=lambda e: e.name)
        except OSError:
            continue
        for child in children:
            if len(entries) >= MAX_LIST_ENTRIES:
                truncated = True
                break
            entries.append(_entry(child))
            if child.is_dir(follow_symlinks=False) and level < depth and child.name != ".git":
                stack.append((child.path, level + 1))
    entries.sort(key=lambda e: e["path"])
    return {"entries": entries, "truncated": truncated}


def _entry(child: os.DirEntry[str]) -> JSON:
    rel = _clean(_display(os.path.normpath(child.path)))
    try:
        st = child.stat(follow_symlinks=False)
    except OSError:
        return {"path": rel, "type": "unknown", "size": 0}
    kind = (
        "dir"
        if stat.S_ISDIR(st.st_mode)
        else "file"
        if stat.S_ISREG(st.st_mode)
        else "symlink"
        if stat.S_ISLNK(st.st_mode)
        else "other"
    )
    return {"path": rel, "type": kind, "size": st.st_size if kind == "file" else 0}


def read_file(args: JSON) -> JSON:
    full = _resolve(args["path"])
    offset = max(1, args.get("offset") or 1)
    limit = args.get("limit") or DEFAULT_READ_LINES
    fd = _open_regular(full, os.O_RDONLY)
    with os.fdopen(fd, "rb") as f:
        if b"\x00" in f.read(8192):
            size = os.fstat(f.fileno()).st_size
            raise ToolError(
                "binary",
                f"{_display(full)} looks binary ({size} bytes). Inspect it with run_command, e.g. `xxd | head`.",
            )
        f.seek(0)
        return _read_lines(f, full, offset, limit)


def _lines(f: IO[bytes], state: JSON) -> Iterator[tuple[bytes, int]]:
    """Yield each line's first bytes and full length, never holding a long line whole.

    Stops after MAX_SCAN_BYTES in all, so a huge sparse file or one endless line costs
    a bounded read, not a walk through gigabytes of holes.
    """
    keep = MAX_LINE_CHARS * 4
    budget = MAX_SCAN_BYTES
    while budget > 0:
        raw = f.readline(min(keep, budget))
        if not raw:
            return
        length = len(raw)
        while not raw.endswith(b"\n") and length < budget:
            more = f.readline(min(READ_CHUNK, budget - length))
            if not more:
                break
            length += len(more)
            if more.endswith(b"\n"):
                break
        budget -= length
        yield raw, length
    state["exhausted"] = True


def _read_lines(f: IO[bytes], full: str, offset: int, limit: int) -> JSON:
    lines: list[str] = []
    number = shown = 0
    state = {"exhausted": False}
    truncated = False
    for raw, length in _lines(f, state):
        number += 1
        if number < offset:
            continue
        if len(lines) >= limit or shown >= MAX_READ_BYTES:
            truncated = True
            break
        text = _decode(raw.rstrip(b"\r\n"))
        if len(text) > MAX_LINE_CHARS or length > len(raw):
            text = text[:MAX_LINE_CHARS] + f" [line truncated: {length} bytes]"
        shown += len(text)
        lines.append(f"{number:6}\t{text}")
    if state["exhausted"]:
        if not lines:
            raise ToolError(
                "too_large",
                f"Nothing to show within the first {MAX_SCAN_BYTES} bytes of {_display(full)} from line {offset}; "
                "use run_command with sed, head or tail instead.",
            )
        truncated = True
    elif number < offset and number:
        raise ToolError(
            "out_of_range", f"offset {offset} is past the end of {_display(full)}, which has {number} lines."
        )
    size = os.fstat(f.fileno()).st_size
    return {
        "content": "\n".join(lines),
        "first_line": offset,
        "lines": len(lines),
        "truncated": truncated,
        "size": size,
    }


def write_file(args: JSON) -> JSON:
    full = _resolve(args["path"])
    data = _encode(args["content"])
    parent = os.path.dirname(full)
    try:
        os.makedirs(parent, exist_ok=True)
    except FileExistsError:
        raise ToolError("not_a_directory", f"A part of {_display(parent)} is a file, not a directory.") from None
    except OSError as err:
        raise _os_error(err, parent) from None
    try:
        fd = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as err:
        raise _os_error(err, full) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ToolError("not_regular", f"{_display(full)} is not a regular file (a device, FIFO or socket).")
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError as err:
        raise _os_error(err, full) from None
    finally:
        os.close(fd)
    return {"path": _display(full), "bytes_written": len(data)}


def edit_file(args: JSON) -> JSON:
    full = _resolve(args["path"])
    old, new = args["old_string"], args["new_string"]
    if old == "":
        raise ToolError("invalid_edit", "old_string is empty. To create or overwrite a file use write_file.")
    if old == new:
        raise ToolError("invalid_edit", "old_string and new_string are the same; nothing would change.")
    fd = _open_regular(full, os.O_RDONLY)
    with os.fdopen(fd, "rb") as f:
        raw = f.read(MAX_EDIT_FILE_BYTES + 1)
    if len(raw) > MAX_EDIT_FILE_BYTES:
        raise ToolError(
            "too_large", f"{_display(full)} is larger than {MAX_EDIT_FILE_BYTES} bytes; edit it with run_command."
        )
    text = raw.decode("utf-8", "surrogateescape")
    count = text.count(old)
    if count == 0:
        raise ToolError("not_found", _missing_hint(text, old, new, _display(full)))
    if count > 1 and not args.get("replace_all"):
        raise ToolError("not_unique", _ambiguous_hint(text, old, count, _display(full)))
    updated = text.replace(old, new) if args.get("replace_all") else text.replace(old, new, 1)
    write_file({"path": full, "content": updated})
    return {"path": _display(full), "replacements": count if args.get("replace_all") else 1}


def _missing_hint(text: str, old: str, new: str, shown: str) -> str:
    if new and new in text:
        return f"old_string was not found in {shown}, but new_string already is: the edit may already be applied. Read the file to check."
    first = next((line.strip() for line in old.splitlines() if line.strip()), "")
    near = [i + 1 for i, line in enumerate(text.splitlines()) if first and first in line][:5]
    message = (
        f"old_string was not found in {shown}. It must match the file exactly, including whitespace and indentation."
    )
    if near:
        message += (
            f" Its first line appears at line(s) {', '.join(map(str, near))}; read those lines and copy them exactly."
        )
    else:
        message += " Read the file first and copy the text you want to change."
    return message


def _ambiguous_hint(text: str, old: str, count: int, shown: str) -> str:
    starts: list[int] = []
    at = text.find(old)
    while at != -1 and len(starts) < 10:
        starts.append(text.count("\n", 0, at) + 1)
        at = text.find(old, at + 1)
    where = ", ".join(map(str, starts))
    return (
        f"old_string occurs {count} times in {shown} (at line(s) {where}). Include more surrounding lines so it matches exactly once, "
        "or set replace_all to true to change every occurrence."
    )


def search(args: JSON) -> JSON:
    target = _resolve(args.get("path") or ".")
    if not os.path.exists(target):
        raise _os_error(FileNotFoundError(2, "not found"), target)
    cmd = [
        "rg",
        "--line-number",
        "--no-heading",
        "--color",
        "never",
        "--max-columns",
        "300",
        "--max-columns-preview",
        "--max-count",
        "100",
    ]
    if args.get("glob"):
        cmd += ["--glob", args["glob"]]
    cmd += ["--regexp", args["pattern"]]
    if target != WORKSPACE:
        cmd += ["--", _display(target)]
    run = _run(cmd, args.get("max_output") or 64 * 1024, SEARCH_TIMEOUT_S)
    code = run["exit_code"]
    errors = str(run["stderr"]["text"]).strip()
    if code == 2 and (
        "regex parse error" in errors or "glob" in errors or (not run["stdout"]["total_bytes"] and not errors)
    ):
        raise ToolError("search_failed", "ripgrep failed: " + errors[:2000])
    return {"matches": run["stdout"], "exit_code": code, "timed_out": run["timed_out"], "errors": errors[-2000:]}


def run_command(args: JSON, job: Job | None = None) -> JSON:
    cmd = ["bash", "-lc", args["command"]]
    timeout = float(args.get("timeout_s") or 60)
    result = _run(cmd, args.get("max_output") or 1 << 20, timeout, job=job, env=_command_env)
    result["cancelled"] = bool(job and job.cancelled)
    return result


# --------------------------------------------------------------------------- cancel


class Job:
    """A run_command request, registered when it is read so that a `cancel` after it always finds it."""

    def __init__(self, rid: int) -> None:
        self.rid = rid
        self.group = 0  # the command's process group, once it runs
        self.cancelled = False
        self.finished = False  # the command's outcome is settled; a cancel now changes nothing
        self.wake = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)  # wakes its _pump on cancel


_jobs: dict[int, Job] = {}
_jobs_lock = threading.Lock()


def _register(request: JSON) -> Job | None:
    rid = request.get("id")
    if request.get("op") != "run_command" or type(rid) is not int:
        return None
    with _jobs_lock:
        if rid in _jobs:
            return None  # a reused id: the running one keeps it
        try:
            job = _jobs[rid] = Job(rid)
        except OSError:  # no descriptor left: the command still runs, it just cannot be cancelled
            return None
    return job


def _forget(job: Job) -> None:
    with _jobs_lock:
        if _jobs.get(job.rid) is job:
            del _jobs[job.rid]
        job.finished = True
        os.close(job.wake)


def cancel(args: JSON) -> JSON:
    """Kill request ``id``'s command group now; that request then answers with what the command printed."""
    rid = args.get("id")
    with _jobs_lock:
        job = _jobs.get(rid) if type(rid) is int else None
        if job is None or job.finished or job.cancelled:
            return {"cancelled": False}
        job.cancelled = True
        if job.group:
            _kill_group(job.group, signal.SIGKILL)
        os.eventfd_write(job.wake, 1)
    _sweep_strays()
    return {"cancelled": True}


# --------------------------------------------------------------------------- processes


def _raise_oom_score(pid: int) -> None:
    """Make the agent's processes, not the toolbox, the OOM killer's first choice."""
    try:
        with open(f"/proc/{pid}/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass


def _run(cmd: list[str], cap: int, timeout: float, job: Job | None = None, env: dict[str, str] | None = None) -> JSON:
    """Run ``cmd`` in a session of its own; when it ends, nothing it started is left (see _kill_everything_else)."""
    global _spawning
    start = time.monotonic()
    with _groups_lock:
        _spawning += 1
    try:
        return _run_counted(cmd, cap, timeout, job, env, start)
    finally:
        with _groups_lock:
            _spawning -= 1
            if _spawning == 0:
                _kill_everything_else()


def _run_counted(
    cmd: list[str], cap: int, timeout: float, job: Job | None, env: dict[str, str] | None, start: float
) -> JSON:
    if job and job.cancelled:  # cancelled before it started: it never runs
        return _outcome(128 + signal.SIGKILL, Capture(0), Capture(0), False, start)
    proc = subprocess.Popen(
        cmd,
        cwd=WORKSPACE,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    _raise_oom_score(proc.pid)
    group = proc.pid
    with _groups_lock:
        _active_groups.add(group)
    if job:
        with _jobs_lock:
            job.group = group
    try:
        out, err, timed_out = _pump(proc, cap, start + timeout, group, job)
    finally:
        if job:
            with _jobs_lock:
                job.finished = True
        _kill_group(group, signal.SIGKILL)
        with _groups_lock:
            _active_groups.discard(group)
        _sweep_strays()
        for pipe in (proc.stdout, proc.stderr):
            if pipe:
                pipe.close()
    try:
        code = proc.wait(timeout=UNKILLABLE_WAIT_S)
    except subprocess.TimeoutExpired:  # stuck in the kernel (e.g. D state); answer anyway
        code = -signal.SIGKILL
    return _outcome(code if code >= 0 else 128 - code, out, err, timed_out, start)


def _outcome(code: int, out: Capture, err: Capture, timed_out: bool, start: float) -> JSON:
    return {
        "exit_code": code,
        "stdout": out.result(),
        "stderr": err.result(),
        "timed_out": timed_out,
        "duration_s": round(time.monotonic() - start, 4),
    }


def _exit_fd(pid: int) -> int | None:
    """A descriptor that becomes readable when ``pid`` exits, or None where the kernel has no pidfds."""
    try:
        return os.pidfd_open(pid)
    except OSError:
        return None


def _pump(
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
                _kill_group(group, signal.SIGTERM)
            if timed_out and now >= term_at + KILL_GRACE_S:
                _kill_group(group, signal.SIGKILL)
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
                    _kill_group(group, signal.SIGKILL)  # the cancel may have come before the job knew its group
                elif data := os.read(key.fd, READ_CHUNK):
                    captures[key.fd].feed(data)
                else:
                    sel.unregister(key.fd)
    finally:
        sel.close()
        if exit_fd is not None:
            os.close(exit_fd)
    return out, err, timed_out


def _kill_group(group: int, sig: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(group, sig)


def _kill_everything_else() -> None:
    """With no other request running a process, nothing but pid 1 and the toolbox may live: kill(-1) ends the rest.

    The sweep lists /proc and then kills, so a chain of processes that each fork and exit within
    microseconds is gone from the list by the time it is killed, and slips through. kill(-1) is one
    atomic act against fork in the kernel. The caller holds _groups_lock, so no request starts a
    process meanwhile.
    """
    with contextlib.suppress(OSError):
        os.kill(-1, signal.SIGKILL)


def _sweep_strays() -> None:
    """Kill what escaped its group (setsid, double fork): nothing outlives its command.

    Repeated until a pass finds nothing, because a fork bomb forks while we kill.
    """
    for _ in range(SWEEP_PASSES):
        if not _sweep_once():
            return
        time.sleep(0.005)


def _sweep_once() -> int:
    keep = {os.getpgrp()}
    with _groups_lock:
        keep |= _active_groups
    me = os.getpid()
    killed = 0
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in (1, me):
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) in keep or (fields[0] == b"Z" and not _has_live_threads(name)):
            continue
        with contextlib.suppress(OSError):
            os.kill(int(name), signal.SIGKILL)
            killed += 1
    return killed


def _has_live_threads(pid: str) -> bool:
    """A `Z` entry is a leader whose own thread exited; its other threads may still run (and write).

    A true zombie (every thread gone, waiting for its parent to reap it) lists only itself
    under task/; killing it again would change nothing and keep the sweep going round.
    """
    try:
        return len(os.listdir(f"/proc/{pid}/task")) > 1
    except OSError:
        return False


# --------------------------------------------------------------------------- protocol

OPERATIONS: dict[str, Callable[[JSON], JSON]] = {
    "list_files": list_files,
    "read_file": read_file,
    "write_file": write_file,
    "edit_file": edit_file,
    "search": search,
    "run_command": run_command,
    "cancel": cancel,
    "ping": lambda args: {"pid": os.getpid(), "uid": os.getuid()},
}


_NO_THREADS = (
    "The sandbox has no free processes (its pids limit is reached). Wait for running commands to end, or kill them."
)


def _send(message: JSON) -> None:
    line = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "replace") + b"\n"
    with _out_lock:
        sys.stdout.buffer.write(line)
        sys.stdout.buffer.flush()


def handle(request: JSON, job: Job | None = None) -> None:
    rid = request.get("id")
    try:
        op = OPERATIONS.get(request.get("op", ""))
        if op is None:
            raise ToolError("unknown_op", f"Unknown operation {request.get('op')!r}.")
        args = request.get("args") or {}
        _send({"id": rid, "ok": True, "result": run_command(args, job) if job else op(args)})
    except ToolError as err:
        _send({"id": rid, "ok": False, "error": {"kind": err.kind, "message": err.message}})
    except Exception as err:  # noqa: BLE001 - the toolbox must answer every request
        _send({"id": rid, "ok": False, "error": {"kind": "internal", "message": f"{type(err).__name__}: {err}"}})
    finally:
        if job:
            _forget(job)


def _guard_self() -> None:
    """Make this process undumpable and give it a fixed environment, before it reads any request.

    An undumpable process cannot be ptraced, and its /proc/<pid>/mem, fd/, environ and the like
    belong to root and stay closed to every process without CAP_SYS_PTRACE: every command here.
    Commands are exec'd, which makes them dumpable again, so the toolbox can still set their OOM
    score. It refuses to run unguarded.
    """
    global _command_env
    import ctypes  # only here: the unit tests load this module without running it

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise SystemExit(f"toolbox: prctl(PR_SET_DUMPABLE, 0) failed: {os.strerror(ctypes.get_errno())}")
    _command_env = dict(os.environ)
    os.environ.clear()
    os.environ.update(OWN_ENV)


def main() -> None:
    _guard_self()
    os.chdir(WORKSPACE)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    for line in sys.stdin.buffer:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except ValueError as err:
            _send({"id": None, "ok": False, "error": {"kind": "bad_request", "message": f"invalid JSON: {err}"}})
            continue
        if not isinstance(request, dict):
            _send({"id": None, "ok": False, "error": {"kind": "bad_request", "message": "a request is a JSON object"}})
            continue
        job = _register(request)
        try:
            threading.Thread(target=handle, args=(request, job), daemon=True).start()
        except RuntimeError:  # the pids limit is exhausted (a fork bomb): answer, don't die
            if job:
                _forget(job)
            _send({"id": request.get("id"), "ok": False, "error": {"kind": "busy", "message": _NO_THREADS}})


if __name__ == "__main__":
    main()
