"""Run `cubicle` under a real pseudo-terminal, as a person at a terminal would, and read what reaches it."""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import termios
from pathlib import Path
from typing import Any

from tests.eventually import eventually
from tests.integration.cli_helpers import environment

# The sequences Rich itself writes (SGR styles, cursor show/hide, erase line, cursor up): stripped to read the text.
RICH_CSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")


def _take_terminal() -> None:
    """In the child, after setsid: make the pty its controlling terminal, so Ctrl-C typed there sends SIGINT."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    """``python -m controller ARGS`` with stdin, stdout and stderr on a pty of a fixed size.

    Its ``CUBICLE_*`` environment is its own: none of ours, and a fresh data directory
    (the session database and workspace layers), removed on ``close``.
    """

    def __init__(self, *args: str, env: dict[str, str] | None = None, cols: int = 100, rows: int = 40) -> None:
        # the CLI tests' environment (the tests' owner instance), without what would shape the terminal's output
        base = {k: v for k, v in environment().items() if k not in ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR")}
        self.data_dir = tempfile.mkdtemp(prefix="cubicle-pty-")
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "controller", *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env={**base, "TERM": "xterm-256color", "CUBICLE_DATA_DIR": self.data_dir, **(env or {})},
            start_new_session=True,
            preexec_fn=_take_terminal,
        )
        os.close(slave)
        self.master = master
        self.raw = bytearray()
        self._closed = False
        self._mark = 0

    @property
    def text(self) -> str:
        """What was written so far, with Rich's own CSI sequences removed."""
        return RICH_CSI.sub(b"", bytes(self.raw)).decode("utf-8", "replace")

    def _read(self, timeout: float) -> bool:
        if self._closed:
            return False
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return True
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # EIO: every process holding the pty's other side has closed it
            chunk = b""
        if not chunk:
            self._closed = True
            return False
        self.raw += chunk
        return True

    def expect(self, needle: str, timeout: float = 60) -> str:
        """Wait until ``needle`` appears in :attr:`text` after the previous match; the text up to its end since then."""
        shown = eventually(
            self._more,
            until=lambda text: needle in text[self._mark :] or self._closed,
            what=f"{needle!r} appears on the terminal",
            timeout=timeout,
            interval=0,
        )
        found = shown.find(needle, self._mark)
        if found < 0:
            raise AssertionError(f"the terminal closed before {needle!r} appeared; it shows:\n{shown[-3000:]}")
        start, self._mark = self._mark, found + len(needle)
        return shown[start : self._mark]

    def send(self, data: bytes) -> None:
        os.write(self.master, data)

    def signal(self, signum: signal.Signals) -> None:
        self.process.send_signal(signum)

    def wait(self, timeout: float = 60) -> int:
        """Read until the process exits and its pty closes; the exit status (negative: killed by a signal)."""
        try:
            eventually(
                self._more,
                until=lambda _: self._finished(),
                what="the process exits and its terminal has nothing more to read",
                timeout=timeout,
                interval=0,
            )
        except AssertionError:
            self.process.kill()
            self.process.wait()  # reaped here: a Popen left unwaited warns from its finalizer, in a later test
            raise
        return self.process.wait(timeout=timeout)

    def _more(self) -> str:
        """What the terminal shows after waiting up to 0.2 s for more output."""
        self._read(0.2)
        return self.text

    def _finished(self) -> bool:
        """The pty closed, or the process exited and left nothing unread."""
        return self._closed or (self.process.poll() is not None and not select.select([self.master], [], [], 0)[0])

    def hang_up(self) -> None:
        """Close the terminal, as closing its window does: the kernel sends SIGHUP and later writes fail."""
        if self.master >= 0:
            os.close(self.master)
            self.master = -1
            self._closed = True

    def close(self) -> None:
        """End the process (SIGTERM first, so a failed test leaves no container behind) and the terminal."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.hang_up()
        shutil.rmtree(self.data_dir, ignore_errors=True)


def scenario_file(tmp_path: Path, data: dict[str, Any]) -> str:
    path = tmp_path / f"{data['name']}.json"
    path.write_text(json.dumps(data))
    return str(path)


def owned_by(client: Any, instance: str) -> list[str]:
    """The ids of every Cubicle container (running or not) whose owner label names ``instance``.

    One list call (sparse: no inspect per container), so a container of another test being
    removed meanwhile cannot make it fail with 404.
    """
    listed = client.containers.list(all=True, sparse=True, filters={"label": "org.cubicle.managed=true"})
    return [
        c.id for c in listed if (c.attrs.get("Labels") or {}).get("org.cubicle.owner", "").startswith(instance + ":")
    ]
