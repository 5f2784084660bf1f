"""Writing a whole answer: the toolbox's stdout may take less than it is given in one write.

Under gVisor the container's stdio is a host descriptor, and a write to it takes what the pipe
to the engine has room for and returns, even on a blocking descriptor (Linux's blocking pipe
writes wait until all is written). With ``python3 -u`` stdout is unbuffered, so one ``write``
is one system call: an answer longer than the room left would be cut short, and the controller
would wait for the rest of its line until its deadline.
"""

from __future__ import annotations

import select

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import IO


def write_all(out: IO[bytes], data: bytes) -> None:
    """Write all of ``data`` to ``out`` and flush it, however many writes that takes."""
    view = memoryview(data)
    while view:
        written = out.write(view)
        if written is None:  # a non-blocking descriptor with no room: wait for some
            select.select([], [out], [])
            continue
        view = view[written:]
    out.flush()
