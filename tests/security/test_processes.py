"""Processes and time: nothing the agent starts outlives its command, its timeout, a cancel or the session."""

from __future__ import annotations

import asyncio

import pytest

from controller.sandbox.docker import DockerSandbox
from tests.eventually import eventually_async
from tests.integration.helpers import call, sh

ESCAPES = {
    "background child": "sleep 901 &",
    "setsid daemon": "setsid sleep 902 > /dev/null 2>&1 < /dev/null &",
    "nohup daemon": "nohup sleep 903 > /dev/null 2>&1 &",
    "double fork": "( ( sleep 904 & ) & )",
    "python daemon": 'python3 -c "import os,time\nif os.fork(): os._exit(0)\nos.setsid()\nif os.fork(): os._exit(0)\ntime.sleep(905)" &',
    "term ignorer": "(trap '' TERM HUP; exec sleep 906) &",
}


async def _ours(box: DockerSandbox) -> list[str]:
    ps = await sh(box, "ps -eo pid,stat,args --no-headers")
    return [
        line for line in ps.stdout.text.splitlines() if "sleep 9" in line or (" Z" in line and "ps -eo" not in line)
    ]


@pytest.mark.parametrize("escape", list(ESCAPES))
async def test_nothing_outlives_its_command(box: DockerSandbox, escape: str) -> None:
    """Every child sleeps far past the 30 s timeout: had one holding the command's pipes kept it waiting, the
    command would have timed out. How soon it ends is a benchmark row (bench/responsiveness.py)."""
    result = await sh(box, ESCAPES[escape] + "\necho launched", timeout_s=30)
    assert (result.stdout.text, result.timed_out, result.exit_code) == ("launched\n", False, 0)
    assert await _ours(box) == []


@pytest.mark.parametrize("escape", ["setsid daemon", "double fork", "term ignorer"])
async def test_nothing_outlives_a_timeout(box: DockerSandbox, escape: str) -> None:
    result = await sh(box, ESCAPES[escape] + "\nsleep 60", timeout_s=1)
    assert result.timed_out
    assert await _ours(box) == []


async def test_zombies_are_reaped(box: DockerSandbox) -> None:
    await sh(box, 'python3 -c "import os,time\nfor _ in range(20):\n    os.fork() or os._exit(0)\ntime.sleep(0.5)"')
    assert "Z" not in [
        line.split()[1][0] for line in (await sh(box, "ps -eo pid,stat --no-headers")).stdout.text.splitlines()
    ]


async def test_daemon_writing_into_the_repo_stops_with_its_command_and_with_the_session(box: DockerSandbox) -> None:
    tick = box.layer.upper / "tick.txt"  # the agent's writes land in its layer
    await sh(
        box,
        "setsid sh -c 'while :; do date +%s%N >> tick.txt; sleep 0.1; done' > /dev/null 2>&1 < /dev/null & "
        "for _ in $(seq 100); do [ -s tick.txt ] && break; sleep 0.1; done",  # it has begun writing
    )
    size = tick.stat().st_size
    await asyncio.sleep(1)
    assert tick.stat().st_size == size, "the daemon kept writing after its command returned"
    pending = asyncio.create_task(
        call(box, "run_command", command="while :; do date >> tick.txt; sleep 0.1; done", timeout_s=60)
    )
    await eventually_async(lambda: tick.stat().st_size > size, what="the loop writes")
    await box.stop()
    pending.cancel()
    size = tick.stat().st_size
    await asyncio.sleep(1)
    assert tick.stat().st_size == size, "the loop kept writing after the session ended"


@pytest.mark.parametrize("at_once", [3, 6])
async def test_concurrent_commands_that_start_many_processes(box: DockerSandbox, at_once: int) -> None:
    """Each command's sweep spares the others' processes, however they interleave: none of them is killed and
    the sandbox lives (under runsc three at once once ended it); afterwards nothing of theirs is left."""
    loop = "for j in $(seq 30); do /bin/true; done; echo done"
    results = await asyncio.gather(*(sh(box, loop) for _ in range(at_once)))
    assert [(r.exit_code, r.stdout.text) for r in results] == [(0, "done\n")] * at_once
    assert await _ours(box) == []
