"""A chain of processes that each fork and exit within microseconds does not outlive its command.

Listing /proc and then killing what it lists misses such a chain: every pid listed is gone by the
time it is killed. The toolbox ends each command, when no other request runs a process, with
kill(-1), which the kernel makes atomic against fork.
"""

from __future__ import annotations

import asyncio
import platform

import pytest

from controller.sandbox import isolation as runtimes
from controller.sandbox.docker import DockerSandbox
from controller.wire.protocol import CommandResult, Failure
from tests.integration.helpers import call, sh

# A 231-byte static x86-64 program: setsid(), then forever fork with the parent exiting; about every
# 256 forks one link appends a byte to /workspace/tick. (Written for this test by our red-team.) A link whose fork
# fails (the pids limit, reached when tini reaps late) exits and ends the chain: 8192 forks between ticks made
# that a coin toss on a loaded machine, so the chain once never ticked at all.
CHAIN = (
    "7f454c4602010100000000000000000002003e0001000000780040000000000040000000000000000000000000000000"
    "000000004000380001000000000000000100000005000000000000000000000000004000000000000000400000000000"
    "e700000000000000e7000000000000000010000000000000b8700000000f054531e449ffc441f7c4ff0000007534b802"
    "000000488d3d3d000000be41040000baa40100000f0589c7b801000000488d3523000000ba010000000f05b803000000"
    "0f05b8390000000f054885c074b4b83c00000031ff0f052f776f726b73706163652f7469636b00"
)


@pytest.mark.solo  # a fork storm: it would slow every other test, and it waits on its own chain
@pytest.mark.skipif(platform.machine() != "x86_64", reason="the chain is an x86-64 program")
async def test_a_fork_chain_does_not_outlive_its_command(box: DockerSandbox) -> None:
    plant = f'python3 -c \'import os; open("/workspace/.chain", "wb").write(bytes.fromhex("{CHAIN}"))\''
    await sh(box, f"{plant}; chmod 755 /workspace/.chain")
    # Under gVisor's ptrace platform a fork takes a millisecond or more: its first tick may take seconds.
    command = (
        "/workspace/.chain & for _ in $(seq 300); do [ -e /workspace/tick ] && break; sleep 0.1; done; echo started"
    )
    started = await call(box, "run_command", command=command)
    tick = box.layer.upper / "tick"  # the agent's writes land in its layer
    if box.limits.runtime == runtimes.GVISOR and isinstance(started, Failure):
        # There each new address space is a host process of the sandbox's: the chain can use up its pids limit,
        # and then the whole sandbox dies. The call says so, and nothing of the chain runs on.
        assert started.kind == "sandbox_died", started
    else:
        assert isinstance(started, CommandResult) and started.stdout.text == "started\n", started
        assert tick.exists(), "the chain ran while its command did"
    await asyncio.sleep(3)
    # Looked at from inside, in one command (a command's end kills strays, so a second call would end a survivor
    # before it could be seen): the tick's size a second apart, and what runs. Not from the host: under gVisor the
    # host saw the size grow from 6 to 26 bytes, the same twice in CI, which points at data the sandbox wrote back
    # to the layer late rather than at a live chain (that would tick a different number each time).
    look = "s() { stat -c %s /workspace/tick 2>/dev/null || echo 0; }; a=$(s); sleep 1; echo $a $(s) $(ps -e --no-headers | wc -l)"
    before, after, running = (int(n) for n in (await sh(box, look)).stdout.text.split())
    assert after == before, f"the chain kept writing after its command returned ({before} then {after} bytes)"
    # tini, the toolbox (and its guardian where there is one), the shell, its $(...) subshell, ps, wc
    assert running <= 6 + runtimes.guarded(box.limits.runtime), running
