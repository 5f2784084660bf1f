"""Workspace tests run the real kernel: a real overlay mount (``mount -t overlay``), real files.

Mounting needs root, as CI runs; these tests fail (not skip) without it, because a layer
tested only on hand-made upper directories would miss what the kernel actually writes.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.workspace import layer as layers
from tests.unit.workspace.overlay import Workspace


@pytest.fixture
def ws() -> Iterator[Workspace]:
    if os.geteuid() != 0:
        pytest.fail("workspace tests mount overlayfs and need root (CI runs as root); run them with sudo")
    base = Path(tempfile.mkdtemp(prefix="cubicle-ws-"))
    os.chmod(base, 0o755)  # the agent (uid 1000) must reach the mount point
    workspace = Workspace(base)
    yield workspace
    workspace.stop()
    layers.discard(workspace.layer)
    shutil.rmtree(base)
