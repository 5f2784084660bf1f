"""The sweep against a real engine whose containers come and go while it runs (other sessions, other controllers)."""

from __future__ import annotations

import contextlib
import secrets
import threading
import time
from typing import Any

from docker.errors import DockerException

from controller.config import DEFAULT_IMAGE
from controller.sandbox import owners


def test_the_sweep_survives_containers_removed_while_it_lists(docker_client: Any) -> None:
    """The SDK's full listing inspects each container after listing them all; one removed in between failed it."""
    foreign = {owners.MANAGED: "true", owners.SESSION: "churn", owners.OWNER: f"elsewhere-{secrets.token_hex(3)}:1:1"}
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            with contextlib.suppress(DockerException):  # remove_session below may take it first
                made = docker_client.api.create_container(DEFAULT_IMAGE, ["true"], labels=foreign)
                docker_client.api.remove_container(made["Id"], force=True)

    worker = threading.Thread(target=churn)
    worker.start()
    try:
        deadline = time.monotonic() + 3
        sweeps = 0
        while time.monotonic() < deadline:
            result = owners.sweep(docker_client, "no-such-instance")
            assert result.removed == []  # another instance's containers are never ours to remove
            owners.remove_session(docker_client, "churn", wait_s=0.1)  # races the churn for the same containers
            sweeps += 1
    finally:
        stop.set()
        worker.join()
    assert sweeps > 5
