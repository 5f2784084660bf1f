"""Workspace modules that would run inside the toolbox if it ever imported from the workspace.

Plant them in a repository, let the toolbox start and work, then ``markers(repo)`` lists each one
that ran (it should be none): tests/security/test_toolbox_takeover.py, tests/integration/test_toolbox_image.py.
"""

from __future__ import annotations

from pathlib import Path

SHADOWED = ["selectors", "json", "threading", "subprocess", "signal", "collections", "contextlib", "stat", "typing"]


def plant_shadow_modules(repo: Path) -> None:
    """Stdlib-shadowing modules that drop a marker file into the repository when anything imports them."""
    for name in SHADOWED:
        (repo / f"{name}.py").write_text(f"open('/workspace/HIJACKED-{name}', 'w').write('toolbox code ran')\n")
    (repo / "sitecustomize.py").write_text("open('/workspace/HIJACKED-sitecustomize', 'w').write('x')\n")
    (repo / "usercustomize.py").write_text("open('/workspace/HIJACKED-usercustomize', 'w').write('x')\n")


def markers(repo: Path) -> list[str]:
    """The marker files found: the names of the planted modules that something imported."""
    return sorted(p.name for p in repo.glob("HIJACKED-*"))
