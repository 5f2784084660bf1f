"""list_files, read_file and write_file: bounded views of the workspace, and whole-file writes.

Every answer is bounded whatever the workspace holds (a million files, a file of one
endless line, a sparse file of terabytes), and nothing blocks on a FIFO or device.
"""

from __future__ import annotations

import errno
import io
import os
import stat

from .capture import decode
from .errors import JSON, ToolError
from .limits import (
    DEFAULT_READ_LINES,
    MAX_LINE_CHARS,
    MAX_LIST_ENTRIES,
    MAX_READ_BYTES,
    MAX_SCAN_BYTES,
    READ_CHUNK,
)
from .workspace import Workspace

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import IO


def list_files(ws: Workspace, args: JSON) -> JSON:
    """Entries under a directory to ``depth`` levels (never into .git), at most MAX_LIST_ENTRIES of them."""
    root = ws.resolve(args.get("path") or ".")
    depth = args.get("depth") or 2
    try:
        if not stat.S_ISDIR(os.stat(root).st_mode):
            raise ToolError("not_a_directory", f"{ws.display(root)} is a file, not a directory. Use read_file on it.")
    except OSError as err:
        raise ws.os_error(err, root) from None
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
            entries.append(_entry(ws, child))
            if child.is_dir(follow_symlinks=False) and level < depth and child.name != ".git":
                stack.append((child.path, level + 1))
    entries.sort(key=lambda e: e["path"])
    return {"entries": entries, "truncated": truncated}


def _entry(ws: Workspace, child: os.DirEntry[str]) -> JSON:
    """One entry, its symlinks shown as symlinks (not followed), so a link loop or a link to / costs nothing."""
    rel = _clean(ws.display(os.path.normpath(child.path)))
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


def _clean(name: str) -> str:
    """File names may hold bytes that are not UTF-8; show them replaced, never crash."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


READ_BUFFER = 1 << 16
"""read_file reads a file this small in one system call: under gVisor each costs tens of microseconds."""


def read_file(ws: Workspace, args: JSON) -> JSON:
    """Numbered lines from ``offset`` (1-based), ``limit`` of them, each cut at MAX_LINE_CHARS; binary files refused.

    A file that fits in READ_BUFFER is read whole with one read (a short read of a regular file is its end),
    so it costs an open, a stat, a read and a close; a larger one is read through a buffer, as before.
    """
    full = ws.resolve(args["path"])
    offset = max(1, args.get("offset") or 1)
    limit = args.get("limit") or DEFAULT_READ_LINES
    fd, size = ws.open_regular_sized(full, os.O_RDONLY)
    try:
        head = os.read(fd, READ_BUFFER)
        if b"\x00" in head[:8192]:
            raise ToolError(
                "binary",
                f"{ws.display(full)} looks binary ({size} bytes). Inspect it with run_command, e.g. `xxd | head`.",
            )
        if len(head) < READ_BUFFER:
            return _read_lines(ws, io.BytesIO(head), full, offset, limit, size)
        os.lseek(fd, 0, os.SEEK_SET)
        with os.fdopen(fd, "rb", buffering=READ_BUFFER, closefd=False) as f:  # a size given: no isatty() call
            return _read_lines(ws, f, full, offset, limit, size)
    finally:
        os.close(fd)


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


def _read_lines(ws: Workspace, f: IO[bytes], full: str, offset: int, limit: int, size: int) -> JSON:
    """The page of lines read_file answers with; an offset past the end or a page that is all scan budget fails."""
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
        text = decode(raw.rstrip(b"\r\n"))
        if len(text) > MAX_LINE_CHARS or length > len(raw):
            text = text[:MAX_LINE_CHARS] + f" [line truncated: {length} bytes]"
        shown += len(text)
        lines.append(f"{number:6}\t{text}")
    if state["exhausted"]:
        if not lines:
            raise ToolError(
                "too_large",
                f"Nothing to show within the first {MAX_SCAN_BYTES} bytes of {ws.display(full)} from line {offset}; "
                "use run_command with sed, head or tail instead.",
            )
        truncated = True
    elif number < offset and number:
        raise ToolError(
            "out_of_range", f"offset {offset} is past the end of {ws.display(full)}, which has {number} lines."
        )
    return {
        "content": "\n".join(lines),
        "first_line": offset,
        "lines": len(lines),
        "truncated": truncated,
        "size": size,
    }


def write_file(ws: Workspace, args: JSON) -> JSON:
    """Create or overwrite a file, and its missing parent directories; a FIFO or device is refused, not opened.

    A write that fails for want of room (the disk quota) leaves things as they were: the room
    is allocated first (``posix_fallocate``), before a byte is overwritten, and what this call
    created (the file, a symlink's target, parent directories) is removed again. Overwriting
    keeps the file's inode (its hardlinks, mode and owner).
    """
    full = ws.resolve(args["path"])
    data = _encode(args["content"])
    parent = os.path.dirname(full)
    made = _missing_parents(parent)
    try:
        os.makedirs(parent, exist_ok=True)
    except FileExistsError:
        raise ToolError("not_a_directory", f"A part of {ws.display(parent)} is a file, not a directory.") from None
    except OSError as err:
        _forget(made)
        raise ws.os_error(err, parent) from None
    created = not os.path.exists(full)  # a dangling symlink's target is created too
    try:
        fd = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as err:
        _forget(made)
        raise ws.os_error(err, full) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ToolError("not_regular", f"{ws.display(full)} is not a regular file (a device, FIFO or socket).")
        _make_room(fd, len(data), info.st_size)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.ftruncate(fd, len(data))
    except OSError as err:
        _forget(([os.path.realpath(full)] if created else []) + made)
        raise ws.os_error(err, full) from None
    finally:
        os.close(fd)
    return {"path": ws.display(full), "bytes_written": len(data)}


def _missing_parents(directory: str) -> list[str]:
    """The directories ``makedirs`` will create for ``directory``, deepest first."""
    missing = []
    while directory and not os.path.lexists(directory):
        missing.append(directory)
        directory = os.path.dirname(directory)
    return missing


def _make_room(fd: int, size: int, was: int) -> None:
    """Allocate ``size`` bytes for ``fd`` before writing (holes too); on failure give the file back its size ``was``.

    Where the filesystem cannot allocate (glibc's fallback then reads the write-only fd: EBADF), the
    write goes on unallocated, as a plain write would.
    """
    if size == 0:
        return
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as err:
        os.ftruncate(fd, was)  # fallocate may have grown the file before it stopped; the bytes there are the old ones
        if err.errno not in (errno.EBADF, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            raise


def _forget(paths: list[str]) -> None:
    """Remove what a failed write made: a file, then the directories it was to be in (deepest first)."""
    for path in paths:
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                os.rmdir(path)
            else:
                os.unlink(path)
        except OSError:
            pass


def _encode(text: str) -> bytes:
    """Round-trip bytes that edit_file decoded with surrogateescape; replace any other lone surrogate."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace")
