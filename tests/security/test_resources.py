"""Resource attacks: each is contained, the sandbox answers next, a neighbour and the controller stay responsive."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from controller.agent.scripted import serve_in_thread
from controller.config import Settings
from controller.sandbox import isolation as runtimes
from controller.sandbox.docker import DockerSandbox
from controller.server.api import create_app
from controller.wire.protocol import CommandResult, Failure, ListResult
from tests.integration.helpers import call, sh
from tests.sandbox_defaults import SECURE_LIMITS, bound_s


@pytest.fixture
def health_url(tmp_path: Path) -> Iterator[str]:
    settings = Settings(api_token="t", repo_roots=[tmp_path], data_dir=tmp_path / "data")
    with serve_in_thread(create_app(settings)) as url:
        yield url + "/healthz"


@pytest.fixture
async def neighbour(
    make_repo: Callable[..., Path], sandbox_factory: Callable[..., DockerSandbox]
) -> AsyncIterator[DockerSandbox]:
    other = sandbox_factory(make_repo("neighbour"), SECURE_LIMITS)
    await other.start()
    yield other


ATTACKS = {
    "fork bomb": "bomb() { bomb | bomb & }; bomb; sleep 6",
    "memory bomb": "python3 -c 'x = []\nwhile True: x.append(bytearray(64 << 20))'",
    "tmpfs filled": "dd if=/dev/zero of=/tmp/fill bs=1M count=200 2>/dev/null; echo tmp=$?; "
    "dd if=/dev/zero of=$HOME/fill bs=1M count=200 2>/dev/null; echo home=$?",
    "many small files": "mkdir -p many && cd many && python3 -c \"import os\nfor i in range(1000000): open(str(i), 'w').close()\"",
    "cpu spinners": "for i in $(seq 16); do (while :; do :; done) & done; sleep 6",
}
ENDS_ITSELF = {"tmpfs filled"}
"""The attacks that end on their own; the others run until their 5 s timeout (or an OOM kill) ends them. These get a
deadline against a hang instead: filling both tmpfs mounts in 8 KiB writes (``head -c``) took 2.9 s of the sandbox's
one CPU under gVisor, and a busy machine made that more than 5 s, so the fill writes a MiB at a time."""


@pytest.mark.solo  # its attacks load the machine: the other workers' tests would feel them
@pytest.mark.parametrize("attack", list(ATTACKS))
async def test_attack_is_contained(box: DockerSandbox, neighbour: DockerSandbox, health_url: str, attack: str) -> None:
    """How fast /healthz answers meanwhile is a benchmark row (bench/responsiveness.py), not this test's."""
    timeout_s = int(bound_s(30, box.limits.runtime)) if attack in ENDS_ITSELF else 5
    running = asyncio.create_task(call(box, "run_command", command=ATTACKS[attack], timeout_s=timeout_s))
    health, neighbour_results = [], []
    async with httpx.AsyncClient() as http:
        while True:  # sample at least once, even when the attack ends quickly (an OOM kill)
            health.append((await http.get(health_url, timeout=60)).status_code)
            neighbour_results.append(await sh(neighbour, "echo ok"))
            if running.done():
                break
            await asyncio.sleep(0.2)
    await running
    assert set(health) == {200}, f"/healthz answered {health} during the {attack}"
    assert all(r.stdout.text == "ok\n" for r in neighbour_results)
    after = await sh(box, "echo alive; ps -e --no-headers | wc -l")
    assert after.stdout.text.startswith("alive\n") and int(after.stdout.text.split()[1]) < 10
    if attack == "tmpfs filled":
        filled = running.result()
        assert isinstance(filled, CommandResult) and not filled.timed_out, filled
        assert "tmp=1" in filled.stdout.text and "home=1" in filled.stdout.text, filled
    if attack == "many small files":
        listing = await call(box, "list_files", path="many")
        assert isinstance(listing, ListResult) and listing.truncated and len(listing.entries) == 1000


async def test_memory_limit_kills_the_hog_not_the_toolbox(box: DockerSandbox, docker_client: Any) -> None:
    """Under runc the kernel's OOM killer takes the command (its score is raised); gVisor has no OOM killer of its
    own, so there the host's takes the whole sandbox: the call says so, and a fresh one serves the next."""
    await sh(box, "echo kept > kept.txt")
    result = await call(box, "run_command", command="python3 -c 'x = bytearray(900 << 20); print(len(x))'")
    if box.limits.runtime == runtimes.GVISOR:
        assert isinstance(result, Failure) and result.kind == "sandbox_died" and "memory" in result.message, result
        assert (await sh(box, "cat kept.txt")).stdout.text == "kept\n" and box.restarts == 1
    else:
        assert isinstance(result, CommandResult) and result.exit_code == 137 and result.stdout.text == ""
        assert (await sh(box, "echo alive")).stdout.text == "alive\n" and box.restarts == 0
    stats = docker_client.api.inspect_container(box.container.id)["HostConfig"]
    assert stats["Memory"] == 512 << 20


FORK_UNTIL_REFUSED = """
import os
n = 0
try:
    while True:
        if os.fork() == 0:
            os.execv("/bin/sleep", ["sleep", "30"])  # small: the limit met is the pids one, not memory
        n += 1
except OSError as err:
    print(n, err.errno)
"""


async def test_forks_stop_at_the_pids_limit_and_the_session_goes_on(box: DockerSandbox) -> None:
    """The session's pids limit refuses the fork past it (EAGAIN), and the same sandbox answers next. Under runsc
    that count is gVisor's (RLIMIT_NPROC of the agent's uid), and the engine's limit bounds gVisor's own host tasks
    (isolation.GVISOR_HOST_TASKS_PER_PID): a fork bomb may reach that bound first and end its own sandbox, and the
    next call gets a fresh one on the same workspace. Either way the session goes on."""
    outcome = await call(box, "run_command", command=f"python3 -c '{FORK_UNTIL_REFUSED}'", timeout_s=30)
    if isinstance(outcome, Failure):  # gVisor's own bound met first: only under runsc
        assert box.limits.runtime == "runsc" and outcome.kind == "sandbox_died", outcome
    else:
        assert isinstance(outcome, CommandResult)
        forked, errno = (int(word) for word in outcome.stdout.text.split())
        assert errno == 11 and box.limits.pids - 32 < forked < box.limits.pids, outcome
    alive = await sh(box, "echo alive")
    assert alive.stdout.text == "alive\n"
    assert box.restarts == 0 or box.limits.runtime == "runsc"
