"""For the client's tests: a `cubicle serve` subprocess, and a TCP relay in front of it whose connections a test can cut."""

from __future__ import annotations

import contextlib
import secrets
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from controller.agent.scripted import ScriptedServer, free_port
from tests.integration.api_helpers import serve_env, serve_subprocess
from tests.integration.controllers_helpers import stop
from tests.sandbox_defaults import TEST_INSTANCE


@dataclass(frozen=True)
class Served:
    """A running `cubicle serve`: its URL, token, the root sessions may use, and its environment."""

    url: str
    token: str
    root: Path
    env: dict[str, str]


@contextlib.contextmanager
def cubicle_serve(root: Path, model_server: ScriptedServer, **extra: str) -> Iterator[Served]:
    """`cubicle serve` as its own process on a free port, over the scripted model; stopped (SIGTERM) on exit."""
    token = secrets.token_hex(16)
    env = serve_env(model_server.url, token, root, TEST_INSTANCE)  # type: ignore[attr-defined]
    env |= {"CUBICLE_SSE_HEARTBEAT_S": "1", **extra}
    port = free_port()
    process = serve_subprocess(env, port)
    try:
        yield Served(f"http://127.0.0.1:{port}", token, root, env)
    finally:
        stop(process)


class Relay:
    """Forwards TCP connections from its own loopback port to ``target``; ``cut`` closes every open one.

    New connections are accepted after a cut as before, so a client can reconnect through it.
    ``connections`` counts the connections accepted so far.
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="relay").start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                downstream, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            with self._lock:
                self.connections += 1
                self._open += [downstream, upstream]
            for source, sink in ((downstream, upstream), (upstream, downstream)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def cut(self) -> int:
        """Close every connection open now, both sides; how many there were."""
        with self._lock:
            cut, self._open = self._open, []
        for sock in cut:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        return len(cut) // 2

    def close(self) -> None:
        self.listener.close()
        self.cut()
