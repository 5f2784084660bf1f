"""A walk's child does not import again what the program's script imported (the ``cubicle`` command is a script)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

HEAVY = """import os
with open(os.environ["IMPORTS_LOG"], "a") as log:
    log.write(f"{os.getpid()}\\n")


def main() -> None:
    pass
"""

SCRIPT = """import os
from heavy import main  # as pip's wrapper of the cubicle command does: from controller.cli import main

if __name__ == "__main__":
    from controller.workspace.offload import Offload

    walks = Offload()
    print(" ".join(str(walks.run(os.getpid)) for _ in range(3)))
"""


def test_a_scripts_imports_are_loaded_once_in_the_fork_server_not_in_each_walk(tmp_path: Path) -> None:
    (tmp_path / "heavy.py").write_text(HEAVY)
    (tmp_path / "script.py").write_text(SCRIPT)
    log = tmp_path / "imports.log"
    env = {**os.environ, "IMPORTS_LOG": str(log), "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    done = subprocess.run(
        [sys.executable, str(tmp_path / "script.py")], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    children = set(done.stdout.split())
    importers = log.read_text().split()
    assert len(children) == 3 and not children & set(importers), (children, importers)
    assert len(importers) == 2  # the program itself, and the fork server once for every walk
