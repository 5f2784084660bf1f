"""A hostile Cubicle server for the client's tests: a real HTTP server on 127.0.0.1 whose routes answer with
whatever a test writes to the socket (a body of any size, a stream that never ends a line, a drip), one answer
per connection, in a thread of its own. No module of ours is patched: the client reads real bytes."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable

Handler = Callable[[asyncio.StreamWriter], Awaitable[None]]


def head(status: str, kind: str, extra: str = "") -> bytes:
    return f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nConnection: close\r\n{extra}\r\n".encode()


async def send_json(writer: asyncio.StreamWriter, value: object) -> None:
    await send(writer, "application/json", json.dumps(value).encode())


async def send(writer: asyncio.StreamWriter, kind: str, body: bytes) -> None:
    writer.write(head("200 OK", kind, f"Content-Length: {len(body)}\r\n") + body)
    await writer.drain()


class FakeServer:
    """A real HTTP server on 127.0.0.1 (asyncio streams, one answer per connection), in a thread of its own."""

    def __init__(self, routes: dict[str, Handler]) -> None:
        self.routes = routes
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        server = asyncio.run_coroutine_threadsafe(asyncio.start_server(self._serve, "127.0.0.1", 0), self.loop)
        self.server = server.result(10)
        self.port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._shut(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    async def _shut(self) -> None:
        """Stop listening and end every connection's handler (one may still be writing to a client that left),
        so that no task or socket outlives the loop."""
        self.server.close()
        handlers = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        await asyncio.sleep(0)  # the transports the handlers closed finish closing on the next turn of the loop

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await reader.readuntil(b"\r\n\r\n")
            path = request.split(b" ")[1].decode().split("?")[0]
            handler = self.routes.get(path)
            if handler is None:
                await send_json(writer, {"detail": "not here"})
            else:
                await handler(writer)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client stopped reading: what this test wants
        except asyncio.CancelledError:  # the server shuts down: what a gone client never read is dropped at once,
            writer.transport.abort()  # else its transport stays closing, with its socket, past the loop's end
            raise
        finally:
            writer.close()
