"""The Docker engine restarts under a running session: every call returns, the session ends recorded, work resumes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from controller.config import Settings
from controller.sandbox import engine
from tests.agent_harness import text, tool
from tests.eventually import eventually, eventually_async
from tests.integration.helpers import container_running


def _restart_dockerd() -> None:
    """Stop the running dockerd and start it again with the same command line (or via systemd)."""
    if (
        Path("/run/systemd/system").exists()
        and subprocess.run(["systemctl", "is-active", "--quiet", "docker"]).returncode == 0
    ):
        subprocess.run(["systemctl", "restart", "docker"], check=True)
        return
    pid = int(subprocess.run(["pidof", "dockerd"], capture_output=True, text=True, check=True).stdout.split()[0])
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    os.kill(pid, signal.SIGTERM)
    eventually(lambda: not Path(f"/proc/{pid}").exists(), what="dockerd exits on SIGTERM", timeout=60)
    launch = 'setsid nohup "$@" >> /var/log/cubicle-dockerd-restarted.log 2>&1 < /dev/null &'
    subprocess.run(["sh", "-c", launch, "sh", *(a.decode() for a in argv)], check=True)


def _wait_for_engine(timeout: float = 60) -> None:
    eventually(
        lambda: subprocess.run(["docker", "info"], capture_output=True).returncode == 0,
        what="dockerd comes back",
        timeout=timeout,
        interval=0.2,
    )


@pytest.mark.disruptive
async def test_dockerd_restart_mid_session(run_scenario: Any, docker_client: Any) -> None:
    if os.geteuid() != 0:
        pytest.skip("restarting the Docker engine needs root")

    async def restart_when_busy() -> None:
        await eventually_async(
            lambda: asyncio.to_thread(container_running, docker_client, "sleep 88"),
            what="the sandbox runs `sleep 88`",
            timeout=30,
        )
        await asyncio.to_thread(_restart_dockerd)

    restarter = asyncio.create_task(restart_when_busy())
    turns = [
        {"content": [tool("run_command", command="sleep 88")]},
        {"content": [tool("run_command", command="echo after")], "delay_s": 1},
        {"content": [text("ok")]},
    ]
    run = await asyncio.wait_for(run_scenario(turns), 300)  # a bound against a hang, not a speed
    await restarter
    await asyncio.to_thread(_wait_for_engine)
    assert run.outcome.reason in ("end_turn", "error"), run.outcome
    first = run.results(1)[0]
    assert first["is_error"] is True
    if run.outcome.reason == "error":
        assert run.outcome.detail
    fresh = engine.connect(Settings().docker_host)
    assert fresh.ping()
    fresh.close()
    docker_client.close()  # drop pooled connections to the old engine; the client reconnects on next use
