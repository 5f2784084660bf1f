"""A command ends when its process exits, even one that closed its output first.

How soon the toolbox notices that exit (at once, not at its next poll: item 18's bound is 40 ms for any ``true``) is a
benchmark row, bench/responsiveness.py; a test on a shared machine can only say that it ends.
"""

from __future__ import annotations

from controller.sandbox.docker import DockerSandbox
from tests.integration.helpers import sh


async def test_exit_after_closing_output_ends_the_command(sandbox: DockerSandbox) -> None:
    """The command closes its pipes, then exits 10 ms later: nothing but the exit itself can wake the toolbox."""
    runs = [await sh(sandbox, "exec >&- 2>&-; sleep 0.01; touch exited") for _ in range(5)]
    assert all(r.exit_code == 0 and not r.timed_out for r in runs), runs
    assert (sandbox.layer.upper / "exited").is_file()
