"""Overlay semantics the contract names, each through the real kernel: scan, apply, then revert byte for byte.

``rm -rf d; mkdir d``, a directory rename, mode-only changes, a hardlinked pair, an empty
directory, and a file replaced by a directory and back (and the reverse).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable

import pytest

from controller.workspace import apply, revert, scan
from tests.unit.workspace.overlay import REPO_FILES, Workspace, snapshot


def files(ws: Workspace) -> dict[str, str]:
    """Regular files outside .git with their text; directories as "<dir>"."""
    found = {}
    for rel, (kind, *_rest) in snapshot(ws.repo).items():
        if rel == ".git" or rel.startswith(".git/"):
            continue
        found[rel] = "<dir>" if kind == stat.S_IFDIR else (ws.repo / rel).read_text(errors="replace")
    return found


def unchanged_except(changed: dict[str, str | None] | None = None) -> dict[str, str]:
    """The checkout as it began, with ``changed`` paths replaced (None: gone, with everything below)."""
    expected = {rel: text for rel, text in REPO_FILES.items() if not rel.startswith(".git/")}
    for rel in {str(os.path.dirname(r)) for r in expected} - {""}:
        while rel:
            expected[rel] = "<dir>"
            rel = os.path.dirname(rel)
    for rel, text in (changed or {}).items():
        for key in [k for k in expected if k == rel or k.startswith(rel + "/")]:
            del expected[key]
        if text is not None:
            expected[rel] = text
    return expected


def mode(ws: Workspace, rel: str) -> int:
    return stat.S_IMODE((ws.repo / rel).lstat().st_mode)


CASES: dict[str, tuple[str, Callable[[Workspace], None]]] = {}


def case(script: str) -> Callable[[Callable[[Workspace], None]], Callable[[Workspace], None]]:
    def register(check: Callable[[Workspace], None]) -> Callable[[Workspace], None]:
        CASES[check.__name__] = (script, check)
        return check

    return register


@case("rm -rf docs; mkdir docs")
def emptied_and_recreated(ws: Workspace) -> None:
    assert files(ws) == unchanged_except({"docs": "<dir>"})


@case("mv docs documents")
def directory_renamed(ws: Workspace) -> None:
    moved = {"documents": "<dir>", "documents/a.txt": "a\n", "documents/sub": "<dir>", "documents/sub/b.txt": "b\n"}
    assert files(ws) == unchanged_except({"docs": None, **moved})


@case("chmod 755 src/util.py; chmod 700 docs/sub")
def mode_only(ws: Workspace) -> None:
    assert files(ws) == unchanged_except()
    assert (mode(ws, "src/util.py"), mode(ws, "docs/sub")) == (0o755, 0o700)


@case("echo pair > a; ln a b; ln README.md hard")
def hardlinked_pair(ws: Workspace) -> None:
    assert files(ws) == unchanged_except({"a": "pair\n", "b": "pair\n", "hard": "# demo\n"})
    # Each name is a file of its own in the checkout: writing one never changes the other.
    inodes = {rel: (ws.repo / rel).stat() for rel in ("a", "b", "hard", "README.md")}
    assert len({st.st_ino for st in inodes.values()}) == 4 and all(st.st_nlink == 1 for st in inodes.values())


@case("mkdir -p empty/deeper")
def empty_directory(ws: Workspace) -> None:
    assert files(ws) == unchanged_except({"empty": "<dir>", "empty/deeper": "<dir>"})


@case("rm README.md; mkdir README.md; echo in > README.md/x; rm -rf README.md; echo '# back' > README.md")
def file_to_directory_and_back(ws: Workspace) -> None:
    assert files(ws) == unchanged_except({"README.md": "# back\n"})
    assert mode(ws, "README.md") == 0o644


@case("rm -rf old; echo f > old; rm old; mkdir old; echo n > old/new.txt")
def directory_to_file_and_back(ws: Workspace) -> None:
    assert files(ws) == unchanged_except({"old": "<dir>", "old/new.txt": "n\n"})


@pytest.mark.parametrize("name", list(CASES))
def test_overlay_semantics_apply_and_revert(ws: Workspace, name: str) -> None:
    script, check = CASES[name]
    before = snapshot(ws.repo)
    ws.agent(script)
    ws.stop()
    assert scan(ws.layer), "the layer shows the change"
    result = apply(ws.layer)
    assert result.conflicts == [] and result.applied
    check(ws)
    assert scan(ws.layer) == [] or {c.type.value for c in scan(ws.layer)} == {"dir"}  # at most kept merge dirs
    assert revert(ws.layer).conflicts == []
    assert snapshot(ws.repo) == before


def test_a_file_replaced_by_a_directory_and_back_with_the_same_bytes_is_no_change(ws: Workspace) -> None:
    ws.agent("rm README.md; mkdir README.md; rmdir README.md; printf '# demo\\n' > README.md; chmod 644 README.md")
    ws.stop()
    assert scan(ws.layer) == []
