"""Running `cubicle` as a user does (a subprocess), shared by the CLI's tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

SESSION_ID = re.compile(r"cli-[0-9a-f]{16}")


def environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without model or Cubicle settings, but for the test's data directory."""
    base = {
        k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CUBICLE_")) or k == "CUBICLE_DATA_DIR"
    }
    return {**base, **(extra or {})}


def cubicle(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "controller", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=environment(env),
        timeout=timeout,
    )


def tree(root: Path) -> dict[str, tuple[int, bytes | str]]:
    """Every entry under ``root`` (``.git`` included): its mode and its bytes, or a symlink's target."""
    found: dict[str, tuple[int, bytes | str]] = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        if path.is_symlink():
            found[str(path.relative_to(root))] = (st.st_mode, os.readlink(path))
        else:
            found[str(path.relative_to(root))] = (st.st_mode, path.read_bytes() if path.is_file() else b"")
    return found
