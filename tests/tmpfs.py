"""A small tmpfs mounted for a test (mounting needs root, as CI runs): a filesystem that fills up at once."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def small_tmpfs(point: Path, size: str) -> Iterator[Path]:
    """Mount a tmpfs of ``size`` (``256k``, ``2m``) on the new directory ``point``; unmount it after."""
    point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point)], check=True)
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], check=True)
