"""A fork or thread storm in one sandbox holds no more of the host's process ids than admission charged it, and
ends that sandbox at worst: a neighbour's commands go on (issue 44, item 4; the arithmetic and the admission are
tests/unit/server/test_hostpids.py). Under runsc, churn alone fills gVisor's host tasks up to the engine's limit."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from controller.sandbox.docker import DockerSandbox
from controller.sandbox.isolation import host_pids
from controller.server.hostpids import HostPids
from controller.wire.protocol import CommandResult, Failure
from tests.integration.cli_helpers import cubicle, environment
from tests.integration.helpers import call, sh
from tests.integration.pty_helpers import scenario_file
from tests.sandbox_defaults import SECURE_LIMITS

CHURN = "for i in $(seq 40); do (for j in $(seq 40); do /bin/true; done) & done; wait; echo churned"
THREADS = """
import threading, time
n = 0
try:
    while True:
        threading.Thread(target=time.sleep, args=(20,), daemon=True).start()
        n += 1
except RuntimeError:
    print("threads", n)
"""


def cgroup_pids(container_id: str) -> Path:
    """The container's pids cgroup (v1 with cgroupfs, else v2 under Docker's slice)."""
    for path in (
        Path("/sys/fs/cgroup/pids/docker") / container_id / "pids.current",
        Path("/sys/fs/cgroup/system.slice") / f"docker-{container_id}.scope" / "pids.current",
        Path("/sys/fs/cgroup/docker") / container_id / "pids.current",
    ):
        if path.exists():
            return path
    raise AssertionError(f"no pids cgroup found for container {container_id}")


class Sampler:
    """The most host tasks the container's cgroup held, sampled every few milliseconds in a thread."""

    def __init__(self, path: Path) -> None:
        self.path, self.peak, self._stop = path, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            try:
                self.peak = max(self.peak, int(self.path.read_text()))
            except (OSError, ValueError):  # the container died (runsc's storm ended it): its cgroup is gone
                return

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(5)
        return self.peak


def _met_its_bound(result: CommandResult) -> bool:
    """The storm's own shell could not fork past its pids limit: bash retries a refused fork, sleeping, and gives
    up when a child's exit interrupts that sleep (`fork: Interrupted system call`, exit 254). That is the limit
    doing its work inside the storm's sandbox, not a failure of the bound."""
    return result.exit_code != 0 and "fork: retry: Resource temporarily unavailable" in result.stderr.text


async def _neighbour_forks(neighbour: DockerSandbox, storm: asyncio.Task[object]) -> list[str]:
    """What the neighbour's forking commands printed while the storm ran (and once after)."""
    printed = []
    while True:
        result = await sh(neighbour, "for i in $(seq 20); do /bin/true; done; echo ok")
        printed.append(result.stdout.text)
        if storm.done():
            return printed


async def test_a_storm_holds_no_more_host_pids_than_charged_and_spares_the_neighbour(
    make_repo: Callable[..., Path], sandbox_factory: Callable[..., DockerSandbox]
) -> None:
    limits = SECURE_LIMITS.model_copy(update={"pids": 64})
    box = sandbox_factory(make_repo("storm"), limits)
    neighbour = sandbox_factory(make_repo("neighbour"), SECURE_LIMITS)
    await asyncio.gather(box.start(), neighbour.start())
    assert HostPids.of_host(0, host_pids).fits(box.limits, [neighbour.limits]), "the two would not be admitted together"
    assert box.container is not None
    sampler = Sampler(cgroup_pids(box.container.id))
    for command in (CHURN, f"python3 -c '{THREADS}'"):
        storm = asyncio.create_task(call(box, "run_command", command=command, timeout_s=90))
        printed = await _neighbour_forks(neighbour, storm)
        outcome = storm.result()
        assert set(printed) == {"ok\n"}, printed
        if isinstance(outcome, Failure):  # the storm met gVisor's host-task bound and ended its own sandbox
            assert box.limits.runtime == "runsc" and outcome.kind == "sandbox_died", outcome
        else:
            assert isinstance(outcome, CommandResult), outcome
            assert outcome.exit_code == 0 or _met_its_bound(outcome), outcome
    peak = sampler.stop()
    assert 0 < peak <= host_pids(box.limits), (peak, host_pids(box.limits))
    assert (await sh(box, "echo alive")).stdout.text == "alive\n"


def test_two_cubicle_runs_share_the_hosts_budget(tmp_path: Path, make_repo: Callable[..., Path]) -> None:
    """The red-team's repro: two `cubicle run` processes (their own data directories) of 256 pids under runc, each
    charged 320 against a budget of 400. While the first one's command runs, the second is refused, saying why."""
    settings = {
        "CUBICLE_HOST_PIDS_BUDGET": "400",
        "CUBICLE_LIMITS__PIDS": "256",
        "CUBICLE_HOST_PIDS_LEDGER": str(tmp_path / "ledger"),
    }
    waiting = {
        "name": "hold",
        "turns": [
            {"content": [{"type": "tool_use", "name": "run_command", "input": {"command": "echo holding; sleep 600"}}]},
            {"content": [{"type": "text", "text": "ok"}]},
        ],
    }
    first = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "controller",
            "run",
            str(make_repo("first")),
            "hold",
            "--json",
            "--scenario",
            scenario_file(tmp_path, waiting),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment({**settings, "CUBICLE_DATA_DIR": str(tmp_path / "a")}),
    )
    try:
        assert first.stdout is not None
        for line in first.stdout:  # until its command runs: its container is up
            if json.loads(line).get("type") == "command_output":
                break
        else:
            raise AssertionError(f"the first run ended: {first.wait()} {first.stderr.read() if first.stderr else ''}")
        second = cubicle(
            "run",
            str(make_repo("second")),
            "x",
            "--json",
            "--scenario",
            scenario_file(tmp_path, SCENARIO),
            env={**settings, "CUBICLE_DATA_DIR": str(tmp_path / "b")},
        )
        assert second.returncode == 4, second.stdout  # EXIT_INFRA: the 429 of a run
        assert "320 of the 400 host process ids" in second.stderr, second.stderr
        assert "another controller process" in second.stderr, second.stderr
    finally:
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=120)


SCENARIO = {"name": "second", "turns": [{"content": [{"type": "text", "text": "done"}]}]}
