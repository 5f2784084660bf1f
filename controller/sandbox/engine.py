"""The Docker engine: one endpoint (``Settings.docker_host``), and the one place a client to it is made.

Every Docker client in Cubicle — sandboxes, the orphan sweep, ``cubicle image build``,
``cubicle gc``, the benchmark — comes from ``connect``, so they all talk to the same
engine, and a missing engine always reads the same: what is wrong and how to start it.
Plain ``unix://`` and ``tcp://`` endpoints work; TLS is not configured here, because the
sandbox's attach stream needs a plain socket (see ``sandbox.raw_socket``).
"""

from __future__ import annotations

import threading
from typing import Any

import docker
from docker.errors import DockerException

from ..errors import DockerUnavailableError


def connect(host: str, timeout: float = 120) -> Any:
    """A docker client for ``host``, checked with a ping; blocking."""
    try:
        client = docker.DockerClient(base_url=host, timeout=timeout)
        client.ping()
    except DockerException as err:
        raise DockerUnavailableError(f"Docker is not reachable at {host}: {err}.") from None
    return client


class Engine:
    """One engine's client, made on first use and then shared, so a controller can start before Docker answers."""

    def __init__(self, host: str) -> None:
        self.host = host
        self._client: Any = None
        self._lock = threading.Lock()  # first use comes from worker threads, several sandboxes at once

    def client(self) -> Any:
        """The shared client, connecting now if this is the first use; blocking, so call it off the event loop."""
        with self._lock:
            if self._client is None:
                self._client = connect(self.host)
            return self._client

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()
