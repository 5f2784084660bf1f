"""Timeouts kill whole process groups, and output stays bounded.

What a command leaves running when it ends (children, daemons, double forks): tests/security/test_processes.py.
"""

from __future__ import annotations

import re

from controller.agent.output import truncate_middle
from controller.sandbox.docker import DockerSandbox
from controller.wire.protocol import PingResult
from tests.integration.helpers import call, expect, sh


async def _leftovers(box: DockerSandbox, *names: str) -> list[str]:
    ps = await sh(box, "ps -eo pid,pgid,stat,args --no-headers")
    return [line for line in ps.stdout.text.splitlines() if any(n in line for n in names) and "ps -eo" not in line]


async def test_timeout_kills_background_children(sandbox: DockerSandbox) -> None:
    """How long past its timeout a command ends is a benchmark row (bench/responsiveness.py)."""
    result = await sh(sandbox, "sleep 1000 & sleep 1001; wait", timeout_s=2)
    assert result.timed_out is True
    assert await _leftovers(sandbox, "sleep 100") == []


async def test_timeout_kills_term_ignoring_loop(sandbox: DockerSandbox) -> None:
    result = await sh(sandbox, "trap '' TERM; while :; do :; done", timeout_s=2)
    assert result.timed_out is True and result.exit_code == 128 + 9
    assert await _leftovers(sandbox, "while", "trap") == []


async def test_one_gigabyte_of_output_is_bounded(sandbox: DockerSandbox) -> None:
    ping = expect(await call(sandbox, "ping"), PingResult)
    result = await sh(sandbox, "head -c 1000000000 /dev/zero | tr '\\0' 'y'", timeout_s=120)
    assert result.stdout.total_bytes == 1_000_000_000 and result.stdout.truncated
    assert result.stdout.text.startswith("yyyy") and result.stdout.text.endswith("yyyy")
    omitted = int(re.search(r"\[\.\.\. (\d+) bytes omitted", result.stdout.text).group(1))  # type: ignore[union-attr]
    assert omitted == 1_000_000_000 - (1 << 20)
    model_view = truncate_middle(result.stdout.text, 16384)
    assert len(model_view) < 16384 + 100
    hwm = await sh(sandbox, f"grep VmHWM /proc/{ping.pid}/status")
    peak_kb = int(hwm.stdout.text.split()[1])
    assert peak_kb < 60 * 1024, f"toolbox peak RSS {peak_kb} kB"


async def test_binary_output_is_replaced_not_fatal(sandbox: DockerSandbox) -> None:
    result = await sh(sandbox, "head -c 200000 /dev/urandom")
    assert result.exit_code == 0 and result.stdout.total_bytes == 200000
    assert "\ufffd" in result.stdout.text


async def test_closed_output_does_not_end_the_command(sandbox: DockerSandbox) -> None:
    result = await sh(sandbox, "echo early; exec >&- 2>&-; sleep 1; touch finished", timeout_s=10)
    assert result.stdout.text == "early\n" and result.exit_code == 0 and not result.timed_out
    assert result.duration_s >= 1
    assert (sandbox.layer.upper / "finished").exists()
