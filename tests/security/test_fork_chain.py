"""A chain of processes that each fork and exit within microseconds does not outlive its command.

Listing /proc and then killing what it lists misses such a chain: every pid listed is gone by the
time it is killed. The toolbox ends each command, when no other request runs a process, with
kill(-1), which the kernel makes atomic against fork.
"""

from __future__ import annotations

import asyncio
import platform

import pytest

from controller.sandbox import DockerSandbox
from tests.integration.helpers import sh

# A 231-byte static x86-64 program: setsid(), then forever fork with the parent exiting; about every
# 8192 forks one link appends a byte to /workspace/tick. (Written for this test by our red-team.)
CHAIN = (
    "7f454c4602010100000000000000000002003e0001000000780040000000000040000000000000000000000000000000"
    "000000004000380001000000000000000100000005000000000000000000000000004000000000000000400000000000"
    "e700000000000000e7000000000000000010000000000000b8700000000f054531e449ffc441f7c4ff1f00007534b802"
    "000000488d3d3d000000be41040000baa40100000f0589c7b801000000488d3523000000ba010000000f05b803000000"
    "0f05b8390000000f054885c074b4b83c00000031ff0f052f776f726b73706163652f7469636b00"
)


@pytest.mark.solo  # a fork storm: it would slow every other test, and it waits on its own chain
@pytest.mark.skipif(platform.machine() != "x86_64", reason="the chain is an x86-64 program")
async def test_a_fork_chain_does_not_outlive_its_command(box: DockerSandbox) -> None:
    plant = f'python3 -c \'import os; open("/workspace/.chain", "wb").write(bytes.fromhex("{CHAIN}"))\''
    await sh(box, f"{plant}; chmod 755 /workspace/.chain")
    # Under gVisor's ptrace platform a fork takes a millisecond or more: its first tick may take seconds.
    started = await sh(
        box,
        "/workspace/.chain & for _ in $(seq 300); do [ -e /workspace/tick ] && break; sleep 0.1; done; echo started",
    )
    assert started.stdout.text == "started\n"
    tick = box.layer.upper / "tick"  # the agent's writes land in its layer
    assert tick.exists(), "the chain ran while its command did"
    await asyncio.sleep(0.5)
    size = tick.stat().st_size
    await asyncio.sleep(3)
    assert tick.stat().st_size == size, "the chain kept writing after its command returned"
    after = await sh(box, "ps -e --no-headers | wc -l")
    assert int(after.stdout.text) < 6, after
