"""The docs' testcontainers example (docs/guides/testing.md), run exactly as written, so it cannot rot."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.config import Settings
from tests.integration.helpers import doc_example
from tests.sandbox_defaults import AGENT_UID, owned_dir

PAGE, HEADING = "docs/guides/testing.md", "# Testing your integration against Cubicle"


@pytest.fixture
def user(tmp_path: Path) -> Iterator[tuple[list[str], Path]]:
    """Who runs the example, and where: under root (as CI runs), an ordinary user who may use Docker.

    Root would make the example's repository root's own, and sessions refuse those. The
    user's directory lies outside pytest's private (0700) temporary tree.
    """
    if os.geteuid() != 0:
        yield [], tmp_path
        return
    base = Path(tempfile.mkdtemp(prefix="cubicle-readme-"))
    os.chmod(base, 0o755)
    socket = Settings().docker_host.removeprefix("unix://")
    groups = str(os.stat(socket).st_gid) if os.path.exists(socket) else "0"
    yield ["setpriv", f"--reuid={AGENT_UID}", f"--regid={AGENT_UID}", f"--groups={groups}"], owned_dir(base / "home")
    shutil.rmtree(base, ignore_errors=True)


def test_the_readme_example_runs(controller_image: str, user: tuple[list[str], Path]) -> None:
    prefix, home = user
    script = home / "readme_example.py"
    script.write_text(doc_example(PAGE, HEADING))
    env = {**os.environ, "TESTCONTAINERS_RYUK_DISABLED": "true", "HOME": str(home)}
    done = subprocess.run(
        [*prefix, sys.executable, str(script)], cwd=home, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert "tool result: exit code 0 after" in done.stdout and "| 5" in done.stdout, done.stdout
    assert "status: idle | finish: end_turn | answer: cart.total([2, 3]) is 5." in done.stdout, done.stdout
