"""Docker's attach stream as a ``channel.ToolboxStream``: the Docker launcher's framing of the toolbox's stdio.

Docker multiplexes a non-TTY attach stream into frames: an 8-byte header (stream type,
three zero bytes, big-endian payload size) and the payload. Type 1 is the toolbox's
stdout, type 2 its stderr; what is written goes to its stdin unframed. The stream reads
on the event loop, with no thread.
"""

from __future__ import annotations

import asyncio
import socket
import struct

_HEADER = struct.Struct(">BxxxI")
_STDERR = 2


class AttachStream:
    """The frames of one attached, already-upgraded socket (the stream owns it from now on)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    @classmethod
    async def open(cls, sock: socket.socket) -> AttachStream:
        sock.setblocking(False)
        reader, writer = await asyncio.open_connection(sock=sock, limit=1 << 20)
        return cls(reader, writer)

    async def receive(self) -> tuple[bool, bytes]:
        """The next frame's payload, True when it is stdout's; IncompleteReadError (an EOFError) at the end."""
        kind, size = _HEADER.unpack(await self._reader.readexactly(_HEADER.size))
        return kind != _STDERR, await self._reader.readexactly(size)

    def write(self, data: bytes) -> None:
        self._writer.write(data)

    async def drain(self) -> None:
        await self._writer.drain()

    def close(self) -> None:
        self._writer.close()
