"""What the tests' sandboxes are made with: who owns their repositories, whose they are, their limits."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from controller.wire.limits import Limits

# The uid that owns a test repository (when the tests run as root) and so the one commands run as.
AGENT_UID = 1000

# The owner instance on the containers the fixtures and the CLI subprocesses start; the session-end sweep looks
# at no others. One per worker of a parallel run: a controller starting sweeps the containers its instance's dead
# processes left, and a test that kills a run on purpose expects its leftovers to stay until it sweeps them itself.
TEST_INSTANCE = "cubicle-tests" + (f"-{worker}" if (worker := os.environ.get("PYTEST_XDIST_WORKER")) else "")

# Small, so that many sandboxes run side by side; the fixtures' default.
SANDBOX_LIMITS = Limits(memory_mb=512, pids=256, tmpfs_mb=64)

# The red-team battery's sandboxes (tests/security) also get one CPU.
SECURE_LIMITS = Limits(memory_mb=512, cpus=1.0, pids=256, tmpfs_mb=64)


def owned_dir(path: Path) -> Path:
    """Make ``path`` (and parents) a directory a session may use: not root's (chowned to AGENT_UID when we are root)."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        os.chown(path, AGENT_UID, AGENT_UID)
    return path


# The runtimes the security and fault batteries run under, each test once per runtime: runc, and gVisor's runsc,
# which CI installs and registers (.ci/docker-up). CUBICLE_TEST_RUNTIMES=runc leaves runsc out on a machine without it.
TEST_RUNTIMES = [
    name.strip() for name in os.environ.get("CUBICLE_TEST_RUNTIMES", "runc,runsc").split(",") if name.strip()
]


@pytest.fixture(params=TEST_RUNTIMES, name="sandbox_runtime")
def each_runtime(request: pytest.FixtureRequest) -> str:
    """``sandbox_runtime`` for a directory whose conftest imports this: each of its sandbox tests once per runtime."""
    return str(request.param)


def drop_other_runtimes(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave out the runtimes a test's ``runtimes`` mark does not name (``@pytest.mark.runtimes("runc")``): egress
    needs a network, which sandboxes under runsc do not have (tests/security/test_network.py checks the refusal)."""
    kept, dropped = [], []
    for item in items:
        mark = item.get_closest_marker("runtimes")
        callspec = getattr(item, "callspec", None)
        runtime = callspec.params.get("sandbox_runtime") if callspec else None
        (dropped if mark and runtime is not None and runtime not in mark.args else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


GVISOR_SLOWER = 4
"""How many times longer a deadline against a hang gives a sandbox under gVisor: each of its system calls costs the
Sentry tens of microseconds (128 MiB written to a tmpfs in 8 KiB steps took 2.9 s of the sandbox's one CPU under
runsc, 0.4 s under runc), and a busy machine stretches that again."""


def bound_s(seconds: float, runtime: str) -> float:
    """``seconds``, a deadline against a hang under runc, for a sandbox under ``runtime``: never a speed to meet."""
    return seconds * GVISOR_SLOWER if runtime == "runsc" else seconds
