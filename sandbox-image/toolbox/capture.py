"""Bounded output: a stream of any size is kept as its first and last bytes and a count of the rest.

The agent decides how much its commands print, so nothing here may grow with the stream:
memory stays within the cap plus one chunk, however many gigabytes go through.
"""

from __future__ import annotations

import collections


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
        """Fill the head first; the tail keeps whole chunks and drops the oldest once the rest still covers its cap."""
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
        """The text the model sees, with a marker saying how many bytes were left out between head and tail."""
        tail = b"".join(self.tail)[-self.tail_cap :] if self.tail_cap else b""
        omitted = self.total - len(self.head) - len(tail)
        text = decode(bytes(self.head))
        if omitted > 0:
            text += f"\n[... {omitted} bytes omitted ...]\n"
        text += decode(tail)
        return {"text": text, "total_bytes": self.total, "truncated": omitted > 0}


def decode(data: bytes) -> str:
    """Bytes shown to the model: invalid UTF-8 (or a character cut in half by a cap) becomes U+FFFD, never an error."""
    return data.decode("utf-8", errors="replace")
