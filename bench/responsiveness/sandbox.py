"""The sandbox's rows: a cancel, an exit after closed output, a timeout, a kill from outside, a deadline, a stop, a
zombie beside a command, a child holding a command's pipes. One runc sandbox over a fresh workspace layer."""

from __future__ import annotations

import asyncio
import secrets
import time
from pathlib import Path
from typing import Any

from bench.measure import Sample
from bench.responsiveness.measured import Measured, repeat, timed, until
from bench.rows import make_repo, sandbox
from controller.sandbox import owners
from controller.sandbox.docker import DockerSandbox
from controller.wire import protocol
from controller.wire.protocol import CommandResult, Failure


async def run(box: DockerSandbox, command: str, timeout_s: int = 60, deadline: float = 90) -> Any:
    return await box.call(protocol.call("run_command", command=command, timeout_s=timeout_s), deadline)


async def durations(box: DockerSandbox, command: str, n: int) -> Sample:
    """The toolbox's own ``duration_s`` of ``command``, ``n`` times."""
    results = [await run(box, command) for _ in range(n)]
    assert all(isinstance(r, CommandResult) and r.exit_code == 0 for r in results), results
    return Sample([r.duration_s for r in results])


async def round_trips(box: DockerSandbox, command: str, n: int) -> Sample:
    return Sample([(await timed(lambda: run(box, command)))[0] for _ in range(n)])


async def _running(box: DockerSandbox, command: str) -> asyncio.Task[Any]:
    """Start ``command`` (after it touches a marker) and return once it runs; the call, as a task."""
    marker = f"started-{secrets.token_hex(3)}"
    task = asyncio.create_task(run(box, f"touch {marker}; {command}", timeout_s=120, deadline=150))
    await until((box.layer.upper / marker).exists, "the command starts")
    return task


async def cancel(box: DockerSandbox, n: int) -> Sample:
    """A running command's call cancelled (as a cancelled turn cancels it): until the call returns its answer."""
    values = []
    for _ in range(n):
        task = await _running(box, "sleep 60")
        took, outcome = await timed(lambda t=task: _cancelled(t))  # type: ignore[misc]
        assert isinstance(outcome, CommandResult) and outcome.cancelled, outcome
        values.append(took)
    return Sample(values)


async def _cancelled(task: asyncio.Task[Any]) -> Any:
    task.cancel()
    return await task


async def timeout_overshoot(box: DockerSandbox, n: int) -> Sample:
    """A TERM-ignoring loop with a 2 s timeout: how long past those 2 s its call answers."""
    values = []
    for _ in range(n):
        took, result = await timed(lambda: run(box, "trap '' TERM; while :; do :; done", timeout_s=2))
        assert isinstance(result, CommandResult) and result.timed_out, result
        values.append(took - 2)
    return Sample(values)


async def killed(box: DockerSandbox, client: Any, n: int) -> Sample:
    """The container killed from outside mid-call: from the kill until the call answers that the sandbox died."""
    values = []
    for _ in range(n):
        task = await _running(box, "sleep 60")
        container = box.container.id
        start = time.perf_counter()
        await asyncio.to_thread(client.api.kill, container)
        outcome = await task
        values.append(time.perf_counter() - start)
        assert isinstance(outcome, Failure) and outcome.kind == "sandbox_died", outcome
    return Sample(values)


def bare_kill(client: Any, image: str, n: int) -> Sample:
    """The baseline of a kill: a bare container running ``sleep``, from the kill until the engine reports its end."""
    values = []
    for _ in range(n):
        container = client.containers.run(image, ["sleep", "60"], detach=True, labels={owners.MANAGED: "bench"})
        try:
            start = time.perf_counter()
            container.kill()
            container.wait()
            values.append(time.perf_counter() - start)
        finally:
            container.remove(force=True)
    return Sample(values)


async def deadline(box: DockerSandbox, n: int) -> Sample:
    """A call whose toolbox stays silent past the controller's 1 s deadline: until the call answers so."""
    values = []
    for _ in range(n):
        took, outcome = await timed(lambda: run(box, "sleep 60", deadline=1.0))
        assert isinstance(outcome, Failure) and outcome.kind == "deadline", outcome
        values.append(took)
    return Sample(values)


async def stop(box: DockerSandbox, n: int) -> Sample:
    """``stop`` of a sandbox that left a process in the background, until its container is removed."""
    values = []
    for _ in range(n):
        await run(box, "sleep 100 & echo")
        values.append((await timed(box.stop))[0])
    return Sample(values)


def bare_remove(client: Any, image: str, n: int) -> Sample:
    """The baseline of a stop: ``docker rm -f`` of a bare container running ``sleep``."""
    values = []
    for _ in range(n):
        container = client.containers.run(image, ["sleep", "100"], detach=True, labels={owners.MANAGED: "bench"})
        start = time.perf_counter()
        container.remove(force=True)
        values.append(time.perf_counter() - start)
    return Sample(values)


ZOMBIE = 'python3 -c "import os,time\nif os.fork() == 0:\n    os.setsid(); os._exit(0)\ntime.sleep(5)"'
"""Leaves an unreaped child outside every command's group for 5 s: a sweep that counted it as killed would spin."""


async def beside_a_zombie(box: DockerSandbox, n: int) -> Sample:
    """``true``'s duration while another command's zombie child exists."""
    parent = asyncio.create_task(run(box, ZOMBIE))
    await run(box, "for _ in $(seq 100); do ps -eo stat | grep -q '^Z' && break; sleep 0.05; done")
    sample = await durations(box, "true", n)
    await parent
    return sample


async def rows(client: Any, image: str, root: Path, quick: bool) -> list[Measured]:
    """Every sandbox row, in one runc sandbox."""
    n = repeat(quick)
    box = sandbox(client, image, make_repo(root, "responsiveness"))
    await box.start()
    try:
        true = await round_trips(box, "true", 3 * n)
        measured = [
            Measured(
                "sandbox.cancel",
                "a running command cancelled, until its answer",
                await cancel(box, n),
                'run_command("true")',
                true,
                1.0,
            ),
            Measured(
                "sandbox.closed_output_exit",
                "a command that closes its output, then exits 10 ms later (its duration, measured in the toolbox)",
                await durations(box, "exec >&- 2>&-; sleep 0.01", 3 * n),
                "sleep 0.01 (duration)",
                await durations(box, "sleep 0.01", 3 * n),
                0.040,
            ),
            Measured(
                "sandbox.timeout_overshoot",
                "a TERM-ignoring loop: past its 2 s timeout, until its answer",
                await timeout_overshoot(box, max(2, n // 2)),
                "",
                None,
                4.0,
            ),
            Measured(
                "sandbox.pipe_holder",
                "a command whose background child holds its pipes",
                await round_trips(box, "sleep 901 &\necho launched", n),
                "echo launched",
                await round_trips(box, "echo launched", n),
                3.0,
            ),
            Measured(
                "sandbox.beside_zombie",
                "true beside another command's zombie (duration, in the toolbox)",
                await beside_a_zombie(box, n),
                "true (duration)",
                await durations(box, "true", n),
                0.5,
            ),
            Measured(
                "sandbox.killed",
                "the container killed mid-call, until the call's answer",
                await killed(box, client, n),
                "a bare container: kill until the engine reports it",
                await asyncio.to_thread(bare_kill, client, image, n),
                5.0,
            ),
            Measured(
                "sandbox.deadline",
                "a silent toolbox, 1 s deadline: until the call's answer",
                await deadline(box, max(2, n // 2)),
                "",
                None,
                3.0,
            ),
            Measured(
                "sandbox.stop",
                "stop, with a process left in the background: until the container is gone",
                await stop(box, n),
                "docker rm -f of a bare container",
                await asyncio.to_thread(bare_remove, client, image, n),
                2.0,
            ),
        ]
    finally:
        await box.stop()
    return measured
