"""``CubicleContainer``: a real Cubicle controller in a container, for integration tests (yours and ours).

It needs the ``testing`` extra (``pip install 'cubicle[testing]'``: testcontainers).

Use ``CubicleContainer`` to test your own integration against a real Cubicle (docs/guides/testing.md has a complete,
tested example):

    with CubicleContainer(token="t", repo_roots=[repos_dir], scenario=scenario_file) as cubicle:
        with cubicle.client() as client:  # a controller.client.Client for this container
            record = client.wait(client.create(repo, "task").id)

With ``scenario`` the container also runs the scripted model server on its own
loopback, so no API key or network is needed; without it, pass ``ANTHROPIC_API_KEY``
in ``env``. Repository roots, and the data directory (a temporary one unless
``data_dir`` names one), are mounted at the same paths inside and outside, because
the Docker daemon resolves the sandbox's mounts (its workspace overlay) on the host.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from testcontainers.core.container import DockerContainer

from ..client import AsyncClient, Client
from ..sandbox.owners import MANAGED

DEFAULT_IMAGE = "cubicle-controller:latest"
PORT = 8750
SCRIPTED_PORT = 8123
SCENARIO_PATH = "/etc/cubicle/scenario.json"


class CubicleContainer(DockerContainer):
    """The Cubicle controller in a container, started and waited for until ``/healthz`` answers.

    The repository roots and the data directory are mounted at the same paths inside as
    outside: the engine resolves the sandboxes' overlay volumes (the repository below, the
    session's layer in the data directory above) on the host. Without ``data_dir`` a fresh
    temporary directory is used and removed on ``stop`` (as far as this process may: the
    controller runs as root in its container, and the layers it leaves belong to root).
    """

    def __init__(
        self,
        image: str = DEFAULT_IMAGE,
        *,
        token: str,
        repo_roots: list[Path],
        data_dir: Path | None = None,
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
        self._own_data_dir = data_dir is None
        self.data_dir = self._mount_data_dir(data_dir)
        settings = {
            "CUBICLE_API_TOKEN": token,
            "CUBICLE_REPO_ROOTS": ",".join(map(str, repo_roots)),
            "CUBICLE_DATA_DIR": str(self.data_dir),
            "CUBICLE_INSTANCE": instance,
        }
        if scenario is not None:
            settings |= self._serve_scenario(scenario)
        for key, value in {**settings, **(env or {})}.items():
            self.with_env(key, value)
        self.with_kwargs(labels={f"{MANAGED}.controller": "true"}, init=True)

    def _mount_data_dir(self, data_dir: Path | None) -> Path:
        """The data directory (a fresh temporary one unless given), mounted at its own path: the engine resolves the
        sandboxes' overlay volumes, whose layers live there, on the host."""
        path = Path(tempfile.mkdtemp(prefix="cubicle-data-")) if data_dir is None else data_dir.absolute()
        path.mkdir(parents=True, exist_ok=True)
        # rslave: the layers' filesystems (disk quotas) that a helper container mounts on the host show here too
        self.with_volume_mapping(str(path), str(path), "rw,rslave")
        return path

    def _serve_scenario(self, scenario: Path) -> dict[str, str]:
        """Run the scripted model server beside the controller, on the container's own loopback, so a test needs no
        API key or network; the variables that point the controller at it."""
        self.with_volume_mapping(str(scenario.resolve()), SCENARIO_PATH, "ro")
        self.with_command(
            ["sh", "-c", f"cubicle scripted-server {SCENARIO_PATH} --port {SCRIPTED_PORT} & exec cubicle serve"]
        )
        return {"ANTHROPIC_BASE_URL": f"http://127.0.0.1:{SCRIPTED_PORT}", "ANTHROPIC_API_KEY": "scripted"}

    @property
    def url(self) -> str:
        return f"http://{self.get_container_host_ip()}:{self.get_exposed_port(PORT)}"

    @property
    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def client(self, **options: Any) -> Client:
        """A ``controller.client.Client`` of this container's API, with its token (close it, or use it in ``with``)."""
        return Client(self.url, self.token, **options)

    def async_client(self, **options: Any) -> AsyncClient:
        """The same as an ``AsyncClient``."""
        return AsyncClient(self.url, self.token, **options)

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
        if self._own_data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

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
