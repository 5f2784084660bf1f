"""A command's output as it runs: sent to the controller in pieces while the command goes on.

Only when the request asks for it (``live_output``: the most bytes to send). The pieces are
what the pipes gave, stdout and stderr in the order they came, each pipe decoded on its own
and incrementally, so a character is never split between two pieces. They are gathered for
at most ``WINDOW_S`` or ``BATCH`` bytes, so a command that prints a byte at a time costs the
controller a line every 50 ms, not one a byte. Past the limit one last piece says so
(``truncated``) and nothing more is sent; what the model gets (the command's answer) is
unchanged.
"""

from __future__ import annotations

import codecs

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

WINDOW_S = 0.05
"""Longest a piece waits for more output before it is sent."""
BATCH = 8192
"""Bytes gathered that are sent at once, whatever the window."""


class Live:
    """One command's live output: ``feed`` what each pipe gives, ``due`` says when to ``flush``, ``finish`` at the
    end. ``send(text, truncated)`` writes one piece."""

    def __init__(self, send: Callable[[str, bool], None], limit: int) -> None:
        self._send = send
        self._left = limit
        self._decoders: dict[int, codecs.IncrementalDecoder] = {}
        self._parts: list[str] = []
        self._size = 0
        self._since = 0.0
        self._done = False

    def feed(self, fd: int, data: bytes, now: float) -> None:
        """Take what pipe ``fd`` gave; sends at once when the batch is full or the limit is reached."""
        if self._done:
            return
        cut = len(data) > self._left  # output that ends exactly at the limit is whole: the next byte is the cut
        if cut:
            data = data[: self._left]
        self._left -= len(data)
        decoder = self._decoders.get(fd)
        if decoder is None:
            decoder = self._decoders[fd] = codecs.getincrementaldecoder("utf-8")("replace")
        self._add(decoder.decode(data, final=cut), now)
        if cut:
            self._done = True
            self.flush(truncated=True)
        elif self._size >= BATCH:
            self.flush()

    def due(self) -> float | None:
        """When the gathered output must go out (a monotonic time), or None when nothing waits."""
        return self._since + WINDOW_S if self._parts else None

    def flush(self, truncated: bool = False) -> None:
        """Send what was gathered (and the truncation, once); nothing is sent for nothing."""
        if self._parts or truncated:
            text = "".join(self._parts)
            self._parts, self._size, self._since = [], 0, 0.0
            self._send(text, truncated)

    def finish(self, now: float) -> None:
        """The command ended: a character its output cut in half becomes U+FFFD, and the rest is sent."""
        if self._done:
            return
        self._done = True
        for decoder in self._decoders.values():
            self._add(decoder.decode(b"", final=True), now)
        self.flush()

    def _add(self, text: str, now: float) -> None:
        if text:
            if not self._parts:
                self._since = now
            self._parts.append(text)
            self._size += len(text)
