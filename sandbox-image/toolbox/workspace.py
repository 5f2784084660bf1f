"""Where the model's paths point: resolved against one workspace root, shown relative to it.

The root is /workspace in the image and any directory in the unit tests, which is why it
is an object rather than a constant. Paths are not confined to the root: an absolute path
or ``..`` reaches the rest of the container, whose filesystem is the boundary, and a
symlink is followed inside the container, so one to "/" points at the container's root,
never the host's.
"""

from __future__ import annotations

import errno
import os
import stat

from .errors import ToolError

_OS_ERRORS = {
    errno.ENOENT: ("not_found", "{} does not exist. List the directory to see what is there."),
    errno.EACCES: ("permission_denied", "Permission denied: {}."),
    errno.ENOTDIR: ("not_a_directory", "A part of {} is not a directory."),
    errno.EISDIR: ("is_directory", "{} is a directory, not a file. Use list_files on it."),
    errno.EROFS: ("read_only", "{} is on a read-only filesystem and cannot be changed."),
    errno.ENAMETOOLONG: ("name_too_long", "The path {} is too long."),
    errno.ELOOP: ("symlink_loop", "{} is a symlink loop."),
    errno.ENOSPC: (
        "disk_full",
        "No space left for {}: the workspace's disk quota (its size or its number of files) is used up. "
        "Delete files that are no longer needed (deleting always works), then try again.",
    ),
}
_OS_ERRORS[errno.EDQUOT] = _OS_ERRORS[errno.ENOSPC]


class Workspace:
    """The directory relative paths start from, and that answers show paths relative to."""

    def __init__(self, root: str) -> None:
        if not os.path.isabs(root):
            raise ValueError(f"the workspace root must be an absolute path, not {root!r}")
        self.root = os.path.normpath(root)

    def resolve(self, path: str) -> str:
        """The absolute, normalised path; a NUL byte is refused here, where the model can read why."""
        if "\x00" in path:
            raise ToolError("invalid_path", "The path contains a NUL byte.")
        return os.path.normpath(os.path.join(self.root, path))

    def display(self, full: str) -> str:
        """How a path is shown: relative under the root, "." for the root itself, absolute elsewhere."""
        if full == self.root:
            return "."
        if full.startswith(self.root + "/"):
            return full[len(self.root) + 1 :]
        return full

    def os_error(self, err: OSError, full: str) -> ToolError:
        """An OSError as a ToolError whose message names the path as the model gave it and says what to do."""
        shown = self.display(full)
        known = _OS_ERRORS.get(err.errno or 0)
        if known is None:
            return ToolError("os_error", f"{shown}: {err.strerror or err}")
        return ToolError(known[0], known[1].format(shown))

    def open_regular(self, full: str, flags: int) -> int:
        """Open without blocking on FIFOs and refuse anything that is not a regular file."""
        return self.open_regular_sized(full, flags)[0]

    def open_regular_sized(self, full: str, flags: int) -> tuple[int, int]:
        """``open_regular``, and the file's size when it was opened."""
        try:
            fd = os.open(full, flags | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as err:
            raise self.os_error(err, full) from None
        info = os.fstat(fd)
        mode = info.st_mode
        if stat.S_ISREG(mode):  # O_NONBLOCK changes nothing for a regular file: it is left set (two calls fewer)
            return fd, info.st_size
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise ToolError("is_directory", f"{self.display(full)} is a directory, not a file. Use list_files on it.")
        raise ToolError("not_regular", f"{self.display(full)} is not a regular file (a device, FIFO or socket).")
