"""No thread outlives its command: not even one whose thread group's leader already exited (a `Z` leader)."""

from __future__ import annotations

import asyncio

from controller.sandbox import isolation as runtimes
from controller.sandbox.docker import DockerSandbox
from controller.wire.protocol import CommandResult
from tests.integration.helpers import call, expect, sh

# setsid leaves the command's group; the main thread then ends with the raw exit syscall, so
# /proc/PID/stat shows the leader as a zombie while the writer thread keeps running.
ZOMBIE_LEADER = """
import ctypes, platform, threading, time
def tick():
    while True:
        with open("/workspace/tick.txt", "a") as f:
            f.write("tick\\n")
        time.sleep(0.02)
threading.Thread(target=tick).start()
time.sleep(0.1)
ctypes.CDLL(None).syscall({"x86_64": 60, "aarch64": 93}[platform.machine()], 0)
"""


async def test_a_thread_whose_leader_exited_stops_with_its_command(box: DockerSandbox) -> None:
    """gVisor's /proc does not show a leader whose own thread exited as a zombie (Linux's does): there the shape
    is only a live thread beside its leader."""
    zombie = box.limits.runtime != runtimes.GVISOR
    await call(box, "write_file", path="leader.py", content=ZOMBIE_LEADER)
    started = await sh(
        box,
        "setsid python3 leader.py > /dev/null 2>&1 < /dev/null & "
        # wait (a busy machine may take a while) for the shape: a zombie leader, a live thread that wrote a tick
        "for _ in $(seq 100); do ps -eLo stat,comm --no-headers | grep ' python3$' > shape; "
        f"[ -s tick.txt ] && {'grep -q ^Z shape &&' if zombie else ''} [ $(wc -l < shape) -ge 2 ] && break; "
        "sleep 0.1; done; rm shape; ps -eLo stat,comm --no-headers | grep ' python3$'",
    )
    states = [line.split()[0][0] for line in started.stdout.text.splitlines()]
    assert ("Z" in states or not zombie) and len(states) >= 2, started.stdout.text  # a (zombie) leader, a live thread
    tick = box.layer.upper / "tick.txt"  # the agent's writes land in its layer
    size = tick.stat().st_size
    assert size > 0
    await asyncio.sleep(0.5)  # 25 ticks if the thread were alive
    assert tick.stat().st_size == size, "the thread kept writing after its command returned"
    assert "leader.py" not in (await sh(box, "ps -eLo args")).stdout.text  # no thread of it is left


ZOMBIE_PARENT = """import os, time
if os.fork() == 0:
    os.setsid(); os._exit(0)
for _ in range(2400):
    if os.path.exists("/tmp/done"):
        break
    time.sleep(0.05)
"""
"""Forks a child that leaves its group and exits, and never reaps it: a zombie, until /tmp/done (or two minutes)."""


async def test_a_true_zombie_does_not_keep_the_sweep_spinning(box: DockerSandbox) -> None:
    """A zombie with no live thread is its parent's to reap; killing it again and again would stall every command.

    Another command's process keeps an unreaped child that left its group (setsid, then exit), so
    that zombie stays outside every active group while commands end around it. A sweep that
    counted it as killed would repeat its 200 passes (at least 1 s) at the end of each command: how long a command
    takes to end beside such a zombie is a benchmark row (bench/responsiveness.py); here it must end, and cleanly.
    """
    parent = asyncio.create_task(call(box, "run_command", command=f"python3 -c '{ZOMBIE_PARENT}'", timeout_s=150))
    # Wait for that zombie by name: another process's exit can leave a zombie for an instant (until tini or the
    # toolbox reaps it), and a wait for any `Z` once ended on such a one, before the parent had forked.
    zombies = await sh(  # a bound against a hang: a minute for the parent to start and fork on a busy machine
        box,
        "for _ in $(seq 1200); do ps -eo stat,args | grep -q '^Zs *\\[python3\\] <defunct>$' && break; sleep 0.05;"
        " done; ps -eo stat,args",
        90,
    )
    assert "Zs   [python3] <defunct>" in zombies.stdout.text.splitlines(), zombies
    ended = await sh(box, "true")
    assert (ended.exit_code, ended.timed_out) == (0, False), ended
    await sh(box, "touch /tmp/done")  # the parent may end now, and its zombie with it
    assert expect(await parent, CommandResult).exit_code == 0
