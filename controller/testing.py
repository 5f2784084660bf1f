"""Test doubles that ship with Cubicle, for its own tests and for yours.

``CubicleContainer`` is a testcontainers container: the controller image, the Docker socket,
a ready API. ``NoSandbox`` is a sandbox that refuses every call, for API tests that never
reach a tool. Nothing in Settings, the CLI or the API can select either; code passes them in.

Use ``CubicleContainer`` to test your own integration against a real Cubicle (the README has a complete,
tested example):

    with CubicleContainer(token="t", repo_roots=[repos_dir], scenario=scenario_file) as cubicle:
        client = httpx.Client(base_url=cubicle.url, headers=cubicle.auth_headers)

With ``scenario`` the container also runs the scripted model server on its own
loopback, so no API key or network is needed; without it, pass ``ANTHROPIC_API_KEY``
in ``env``. Repository roots are mounted at the same paths inside and outside,
because the Docker daemon resolves the sandbox's bind mounts on the host.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import httpx
from testcontainers.core.container import DockerContainer

from .owners import MANAGED
from .protocol import Failure, Outcome

DEFAULT_IMAGE = "cubicle-controller:latest"
PORT = 8750
SCRIPTED_PORT = 8123
SCENARIO_PATH = "/etc/cubicle/scenario.json"


class NoSandbox:
    """A sandbox that refuses every call: for tests that never reach a tool."""

    async def start(self) -> None:
        return None

    async def call(self, op: str, args: dict[str, Any], timeout: float) -> Outcome:
        return Failure(kind="unavailable", message="This test runs without a sandbox.")

    async def stop(self) -> None:
        return None


class CubicleContainer(DockerContainer):
    """The Cubicle controller in a container, started and waited for until ``/healthz`` answers."""

    def __init__(
        self,
        image: str = DEFAULT_IMAGE,
        *,
        token: str,
        repo_roots: list[Path],
        scenario: Path | None = None,
        instance: str = "testcontainers",
        env: dict[str, str] | None = None,
        docker_socket: str = "/var/run/docker.sock",
        startup_timeout_s: float = 60,
        **kwargs: Any,
    ) -> None:
        super().__init__(image, **kwargs)
        self.token = token
        self.startup_timeout_s = startup_timeout_s
        self.with_exposed_ports(PORT)
        self.with_volume_mapping(docker_socket, "/var/run/docker.sock", "rw")
        for root in repo_roots:
            self.with_volume_mapping(str(root), str(root), "rw")
        settings = {
            "CUBICLE_API_TOKEN": token,
            "CUBICLE_REPO_ROOTS": ",".join(map(str, repo_roots)),
            "CUBICLE_INSTANCE": instance,
        }
        if scenario is not None:
            self.with_volume_mapping(str(scenario.resolve()), SCENARIO_PATH, "ro")
            settings |= {"ANTHROPIC_BASE_URL": f"http://127.0.0.1:{SCRIPTED_PORT}", "ANTHROPIC_API_KEY": "scripted"}
            self.with_command(
                ["sh", "-c", f"cubicle scripted-server {SCENARIO_PATH} --port {SCRIPTED_PORT} & exec cubicle serve"]
            )
        for key, value in {**settings, **(env or {})}.items():
            self.with_env(key, value)
        self.with_kwargs(labels={f"{MANAGED}.controller": "true"}, init=True)

    @property
    def url(self) -> str:
        return f"http://{self.get_container_host_ip()}:{self.get_exposed_port(PORT)}"

    @property
    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def start(self) -> CubicleContainer:
        super().start()
        try:
            self._wait_healthy()
        except Exception:
            self.stop()
            raise
        return self

    def stop(self, force: bool = True, delete_volume: bool = True) -> None:
        """SIGTERM first, so the controller removes its sandboxes, then remove the container."""
        container = self._container
        if container is not None:
            with contextlib.suppress(Exception):  # removal below still runs
                container.stop(timeout=15)
        super().stop(force=force, delete_volume=delete_volume)

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        last: object = None
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError as err:
                last = err
            time.sleep(0.2)
        logs = self.get_wrapped_container().logs(tail=40).decode(errors="replace")
        raise TimeoutError(f"Cubicle did not answer /healthz within {self.startup_timeout_s}s ({last}). Logs:\n{logs}")
