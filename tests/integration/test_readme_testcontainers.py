"""The README's testcontainers example, run exactly as written, so it cannot rot."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
HEADING = "### Testing your integration against Cubicle"


def readme_example() -> str:
    """The first fenced python block under HEADING (and before the next heading)."""
    text = README.read_text()
    section = text[text.index(HEADING) + len(HEADING) :]
    section = re.split(r"^#{1,3} ", section, maxsplit=1, flags=re.MULTILINE)[0]
    match = re.search(r"^```python\n(.*?)^```$", section, flags=re.MULTILINE | re.DOTALL)
    assert match, f"no python block under {HEADING!r} in README.md"
    return match.group(1)


def test_the_readme_example_runs(controller_image: str, tmp_path: Path) -> None:
    script = tmp_path / "readme_example.py"
    script.write_text(readme_example())
    env = {**os.environ, "TESTCONTAINERS_RYUK_DISABLED": "true"}
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert "tool result: exit code 0 after" in done.stdout and "| 5" in done.stdout, done.stdout
    assert "status: idle | finish: end_turn | answer: cart.total([2, 3]) is 5." in done.stdout, done.stdout
