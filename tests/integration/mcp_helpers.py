"""`cubicle mcp REPO` spoken to line by line over its pipes (raw JSON-RPC, no client library), and its record."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from controller.server.store import Store
from tests.integration.cli_helpers import environment
from tests.integration.pty_helpers import owned_by

INIT = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw-test", "version": "0"}}


class Raw:
    """`cubicle mcp REPO` as a subprocess spoken to line by line; stderr goes to a file read while it runs."""

    def __init__(self, repo: Path, data: Path, instance: str) -> None:
        self.data, self.instance = data, instance
        self.errlog = data.parent / f"{instance}-stderr.log"
        self._err = self.errlog.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "controller", "mcp", str(repo)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            env=environment({"CUBICLE_DATA_DIR": str(data), "CUBICLE_INSTANCE": instance}),
        )
        self._buffer = b""
        self.replies: dict[Any, dict[str, Any]] = {}

    def send_bytes(self, line: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + b"\n")
        self.process.stdin.flush()

    def send(self, message: dict[str, Any]) -> None:
        self.send_bytes(json.dumps({"jsonrpc": "2.0", **message}).encode())

    def call(self, request_id: int, name: str, arguments: dict[str, Any]) -> None:
        self.send({"id": request_id, "method": "tools/call", "params": {"name": name, "arguments": arguments}})

    def line(self, timeout: float) -> dict[str, Any] | None:
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([self.process.stdout], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                return None
            chunk = os.read(self.process.stdout.fileno(), 1 << 20)
            if not chunk:
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return dict(json.loads(line))

    def reply(self, request_id: int, timeout: float = 60) -> dict[str, Any] | None:
        """The reply to ``request_id``; replies to other requests read meanwhile are kept for their turn."""
        deadline = time.monotonic() + timeout
        while request_id not in self.replies:
            message = self.line(max(0.0, deadline - time.monotonic()))
            if message is None:
                return None
            if "id" in message:
                self.replies[message["id"]] = message
        return self.replies.pop(request_id)

    def initialize(self) -> None:
        self.send({"id": 0, "method": "initialize", "params": INIT})
        reply = self.reply(0)
        assert reply is not None and reply["result"]["serverInfo"]["name"] == "cubicle"
        self.send({"method": "notifications/initialized"})

    def session_id(self, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for word in self.errlog.read_text(errors="replace").split():
                if word.startswith("mcp-"):
                    return word
            time.sleep(0.005)
        raise AssertionError(f"no session id on stderr: {self.errlog.read_text(errors='replace')}")

    def disconnect(self, timeout: float = 60) -> int:
        assert self.process.stdin is not None
        if not self.process.stdin.closed:
            self.process.stdin.close()
        return self.process.wait(timeout)

    def stderr(self) -> str:
        return self.errlog.read_text(errors="replace")

    def kill(self) -> None:
        """Disconnect as a client does (the server cleans up), then kill it if it has not gone."""
        if self.process.poll() is None:
            try:
                self.disconnect(30)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait(30)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None and not stream.closed:
                with suppress(BrokenPipeError):
                    stream.close()
        self._err.close()


@contextmanager
def raw_server(repo: Path, data: Path, instance: str, docker_client: Any) -> Iterator[Raw]:
    server = Raw(repo, data, instance)
    try:
        yield server
    finally:
        server.kill()
        for container in owned_by(docker_client, instance):
            docker_client.containers.get(container).remove(force=True)
        for volume in docker_client.volumes.list(filters={"label": "org.cubicle.managed=true"}):
            if (volume.attrs.get("Labels") or {}).get("org.cubicle.owner", "").startswith(instance + ":"):
                volume.remove(force=True)


def events(data: Path, session_id: str) -> list[Any]:
    store = Store(data / "cubicle.db")
    try:
        return list(store.events_after(session_id, 0, limit=100_000))
    finally:
        store.close()


def status(data: Path, session_id: str) -> str:
    store = Store(data / "cubicle.db")
    try:
        record = store.get(session_id)
        assert record is not None
        return str(record.status)
    finally:
        store.close()
