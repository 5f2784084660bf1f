"""The host's process ids, bounded for all sandboxes together (issue 44, item 4): at the server's default settings
the sandboxes admitted at once never hold more than half of ``kernel.pid_max``, under any runtime and any limit a
request may ask for. No Docker: the sandboxes are counted as the engine would bound them."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from controller.config import Settings
from controller.errors import CapacityError, InvalidRequestError
from controller.sandbox.isolation import host_pids, process_limits
from controller.server.api import create_app
from controller.server.hostpids import HostPids, host_pid_max
from controller.testing import NoSandbox
from controller.wire.limits import Limits
from tests.sandbox_defaults import owned_dir

TOKEN = "unit-test-token"
RUNSC = Limits(runtime="runsc")


class Engine:
    """The sandboxes up at once, each with the pids limit the engine would give its container; a container's
    removal takes ``stop_s``."""

    def __init__(self, stop_s: float = 0.0) -> None:
        self.up: dict[str, int] = {}
        self.peak = 0
        self.stop_s = stop_s

    def sandbox(self, _repo: Path, session_id: str, limits: Limits) -> Counted:
        return Counted(self, session_id, process_limits(limits)[0])


class Counted(NoSandbox):
    def __init__(self, engine: Engine, session_id: str, pids: int) -> None:
        self.engine, self.session_id, self.pids = engine, session_id, pids

    async def start(self) -> None:
        self.engine.up[self.session_id] = self.pids
        self.engine.peak = max(self.engine.peak, sum(self.engine.up.values()))

    async def stop(self) -> None:
        if self.session_id in self.engine.up:
            await asyncio.sleep(self.engine.stop_s)
        self.engine.up.pop(self.session_id, None)


@pytest.fixture
def engine() -> Engine:
    return Engine()


@pytest.fixture
def client(tmp_path: Path, engine: Engine) -> Iterator[TestClient]:
    """A server at its default settings (limits, ceilings, concurrency, pids budget), but for where it runs."""
    with serving(tmp_path, engine) as c:
        yield c


@contextlib.contextmanager
def serving(tmp_path: Path, engine: Engine, **settings: Any) -> Iterator[TestClient]:
    owned_dir(tmp_path / "roots" / "project")
    (tmp_path / "sock").mkdir()
    config = Settings(
        api_key="unused",
        base_url="http://127.0.0.1:9",
        model_retries=0,
        api_token=TOKEN,
        repo_roots=[tmp_path / "roots"],
        data_dir=tmp_path / "data",
        docker_host=f"unix://{tmp_path}/sock/docker.sock",
        **settings,
    )
    app = create_app(config, sandbox_factory=engine.sandbox)
    with TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        yield c


def start(client: TestClient, repo: Path, limits: dict[str, Any]) -> Any:
    """A session, retried while the controller is full (a turn still running); its final answer."""
    deadline = time.monotonic() + 60
    while True:
        response = client.post("/v1/sessions", json={"task": "t", "repo": str(repo), "limits": limits})
        if response.status_code != 429 or time.monotonic() > deadline:
            return response
        time.sleep(0.05)


def ended(client: TestClient, session_id: str) -> None:
    """Until the session's turn has ended (its model cannot be reached)."""
    deadline = time.monotonic() + 60
    while client.get(f"/v1/sessions/{session_id}").json()["status"] == "running":
        assert time.monotonic() < deadline, "the turn did not end"
        time.sleep(0.05)


def test_a_runsc_session_at_the_ceiling_is_refused_not_admitted(client: TestClient, engine: Engine) -> None:
    """runsc at the server's ceiling of 4,096 pids is an engine limit of 32,768: alone past half of pid_max."""
    budget = host_pid_max() // 2
    repo = owned_dir(Path(client.app.state.settings.repo_roots[0]) / "project" / "ceiling")  # type: ignore[attr-defined]
    response = start(client, repo, {"runtime": "runsc", "pids": 4096})
    if budget < 4096 * 8:
        assert response.status_code == 422, response.text
        assert "this host gives all its Cubicle sandboxes together" in response.json()["detail"]
    assert engine.peak <= budget


def test_sessions_admitted_together_stay_within_half_of_pid_max(client: TestClient, engine: Engine) -> None:
    """Ten default runsc sessions one after another (eight reached pid_max before): every one starts, idle ones'
    containers make room, and the engine's pids limits of the containers up at once never pass the budget."""
    budget = host_pid_max() // 2
    roots = Path(client.app.state.settings.repo_roots[0])  # type: ignore[attr-defined]
    for n in range(10):
        response = start(client, owned_dir(roots / "project" / f"r{n}"), {"runtime": "runsc"})
        assert response.status_code == 201, response.text
        time.sleep(0.05)
    assert 0 < engine.peak <= budget, (engine.peak, budget)


def test_a_container_being_removed_still_counts(tmp_path: Path) -> None:
    """Idle sessions forgotten by their timer are removed in the background: until a removal returns (three seconds
    here), its pids are still the host's to count, and the sessions started meanwhile wait or are refused."""
    engine = Engine(stop_s=3.0)
    budget = host_pid_max() // 2
    with serving(tmp_path, engine, idle_timeout_s=0.2) as client:
        roots = Path(client.app.state.settings.repo_roots[0])  # type: ignore[attr-defined]
        for n in range(10):
            response = start(client, owned_dir(roots / "project" / f"r{n}"), {"runtime": "runsc"})
            assert response.status_code == 201, response.text
            ended(client, response.json()["id"])
            time.sleep(0.3)  # its idle timer has fired: its container's removal has begun
    assert 0 < engine.peak <= budget, (engine.peak, budget)


def test_the_budget_arithmetic(tmp_path: Path) -> None:
    """Half of pid_max by default; a session charged its engine limit (runsc 8x), its proxy's and its setup's."""
    (tmp_path / "pid_max").write_text("32768\n")
    pids = HostPids.of_host(0, host_pids, tmp_path / "pid_max")
    assert pids.total == 16_384 and HostPids.of_host(1000, host_pids, tmp_path / "pid_max").total == 1000
    assert host_pid_max(tmp_path / "missing") == 32_768
    assert pids.fits(RUNSC, [RUNSC] * 3) and not pids.fits(RUNSC, [RUNSC] * 4)  # 4 x 4,096 fill it
    assert pids.fits(Limits(), [Limits()] * 27) and not pids.fits(Limits(), [Limits()] * 28)  # runc: 512 + 64
    with pytest.raises(InvalidRequestError, match=r"may hold 32,768 of the host's process ids.*together 16,384"):
        pids.refuse_alone(Limits(runtime="runsc", pids=4096))
    pids.refuse_alone(Limits(runtime="runsc", pids=2048))
    with pytest.raises(CapacityError, match="may hold 16,384 of the 16,384 host process ids"):
        pids.refuse(RUNSC, [RUNSC] * 4)


def test_any_request_under_the_default_ceilings_fits_half_of_a_small_pid_max(tmp_path: Path) -> None:
    """What a request may ask is clamped to the ceilings; what passes them alone is refused before anything."""
    (tmp_path / "pid_max").write_text("32768")
    pids = HostPids.of_host(0, host_pids, tmp_path / "pid_max")
    ceiling = Settings(api_key="x").max_limits.pids
    for runtime in ("runc", "runsc", "crun"):
        for asked in (16, 512, ceiling):
            limits = Limits(runtime=runtime, pids=asked)
            try:
                pids.refuse_alone(limits)
            except InvalidRequestError:
                continue
            assert pids.fits(limits, [])


def test_a_runtime_whose_kernel_is_not_the_hosts_is_charged_as_gvisor() -> None:
    """gVisor registered under another name than runsc (or any runtime but runc and crun) is charged 8 times its
    pids, whatever engine limit it gets: what such a runtime keeps on the host is its own."""
    for runtime in ("gvisor", "runsc-kvm", "kata"):
        assert host_pids(Limits(runtime=runtime, pids=512)) >= 512 * 8, runtime
    assert host_pids(Limits(runtime="crun", pids=512)) == host_pids(Limits(pids=512)) == 512 + 64
