"""Conflicts by content: a file rewritten with the bytes the session saw is no conflict; a real edit still is.

The checkout is a real git repository (the content ids of its tracked files come from its
``.git/index``); the user's side runs git and writes files as the owner would.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from controller.workspace import apply, contents, revert
from controller.workspace.baseline import blobs_file
from tests.unit.workspace.overlay import OWNER, Workspace, chown_tree


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=User", "-c", "user.email=user@example.com", "-c", "safe.directory=*", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def commit_and_restart(ws: Workspace) -> Workspace:
    """``ws`` with its checkout committed to git (files older than the index, as in a checkout worked on earlier),
    and the session started again over it."""
    git(ws.repo, "init", "-q", "-b", "main")
    past = time.time() - 60
    for path in ws.repo.rglob("*"):
        os.utime(path, (past, past), follow_symlinks=False)
    git(ws.repo, "add", "-A")
    git(ws.repo, "commit", "-qm", "start")
    chown_tree(ws.repo, OWNER)
    ws.restart()
    return ws


@pytest.fixture
def tracked(ws: Workspace) -> Workspace:
    shutil.rmtree(ws.repo / ".git")
    return commit_and_restart(ws)


def touch(repo: Path) -> None:
    os.utime(repo / "src/app.py")


def rewrite_same_bytes(repo: Path) -> None:
    data = (repo / "src/app.py").read_bytes()
    (repo / "src/app.py").unlink()
    (repo / "src/app.py").write_bytes(data)  # a new inode, a new mtime, the same bytes


def edit_then_git_checkout(repo: Path) -> None:
    (repo / "src/app.py").write_text("the user's experiment\n")
    git(repo, "checkout", "--", "src/app.py")


@pytest.mark.parametrize("undo", [touch, rewrite_same_bytes, edit_then_git_checkout])
def test_a_file_holding_what_the_session_saw_applies_cleanly(tracked: Workspace, undo: Callable[[Path], None]) -> None:
    ws = tracked
    ws.agent("printf 'def total(items):\\n    return sum(items, 0)\\n' > src/app.py; echo n > new.txt")
    ws.stop()
    undo(ws.repo)
    result = apply(ws.layer)
    assert result.conflicts == [] and sorted(result.applied) == ["new.txt", "src/app.py"]
    assert (ws.repo / "src/app.py").read_text() == "def total(items):\n    return sum(items, 0)\n"


def test_a_dirty_file_stashed_and_popped_applies_cleanly(tracked: Workspace) -> None:
    """A file the user had changed before the session (not what the index holds) is known by a hash taken at start."""
    ws = tracked
    (ws.repo / "README.md").write_text("# dirty before the session\n")
    ws.restart()
    ws.agent("echo '# the agent' > README.md")
    ws.stop()
    git(ws.repo, "stash", "-q")
    git(ws.repo, "stash", "pop", "-q")
    assert apply(ws.layer).applied == ["README.md"]


def test_a_real_edit_still_conflicts(tracked: Workspace) -> None:
    ws = tracked
    ws.agent("echo agent > src/app.py")
    ws.stop()
    (ws.repo / "src/app.py").write_text("the user's edit\n")
    result = apply(ws.layer)
    assert [c.path for c in result.conflicts] == ["src/app.py"] and result.applied == []
    assert (ws.repo / "src/app.py").read_text() == "the user's edit\n"


def test_a_mode_change_with_the_same_bytes_still_conflicts(tracked: Workspace) -> None:
    ws = tracked
    ws.agent("echo agent > src/app.py")
    ws.stop()
    os.chmod(ws.repo / "src/app.py", 0o755)
    assert [c.path for c in apply(ws.layer).conflicts] == ["src/app.py"]


def test_revert_after_an_edit_undone_by_hand_restores_the_original(tracked: Workspace) -> None:
    ws = tracked
    original = (ws.repo / "src/app.py").read_bytes()
    ws.agent("echo agent > src/app.py")
    ws.stop()
    assert apply(ws.layer).applied == ["src/app.py"]
    (ws.repo / "src/app.py").write_text("the user tries something\n")
    (ws.repo / "src/app.py").write_text("agent\n")  # ...and undoes it by hand
    result = revert(ws.layer)
    assert result.conflicts == [] and result.reverted == ["src/app.py"]
    assert (ws.repo / "src/app.py").read_bytes() == original


def test_revert_still_refuses_what_the_user_changed_since_the_apply(tracked: Workspace) -> None:
    ws = tracked
    ws.agent("echo agent > src/app.py")
    ws.stop()
    assert apply(ws.layer).applied == ["src/app.py"]
    (ws.repo / "src/app.py").write_text("the user's change\n")
    assert [c.path for c in revert(ws.layer).conflicts] == ["src/app.py"]


def test_the_index_vouches_for_tracked_files_and_its_ids_are_gits(tracked: Workspace) -> None:
    ws = tracked
    blobs = json.loads(blobs_file(ws.layer.baseline_file).read_text())
    for rel in ("src/app.py", "README.md", "data.bin"):
        assert blobs[rel] == git(ws.repo, "hash-object", rel).strip(), rel
    root = os.open(ws.repo, os.O_RDONLY | os.O_DIRECTORY)
    try:
        index = contents.read_index(root)
        assert index is not None and set(index.entries) >= {"src/app.py", "README.md", "docs/sub/b.txt"}
        app = os.stat(ws.repo / "src/app.py")
        assert index.blob("src/app.py", app) == blobs["src/app.py"]
        os.utime(ws.repo / "src/app.py")  # its stat no longer matches the entry: the index vouches no more
        assert index.blob("src/app.py", os.stat(ws.repo / "src/app.py")) is None
    finally:
        os.close(root)


@pytest.mark.parametrize(
    "index",
    [b"", b"DIRC\x00\x00\x00\x09", b"DIRC\x00\x00\x00\x02\xff\xff\xff\xff" + b"\x00" * 64, b"not an index at all"],
    ids=["empty", "unknown-version", "truncated", "garbage"],
)
def test_an_index_that_cannot_be_read_is_no_source_and_files_are_hashed(tracked: Workspace, index: bytes) -> None:
    ws = tracked
    (ws.repo / ".git/index").write_bytes(index)
    ws.restart()
    blobs = json.loads(blobs_file(ws.layer.baseline_file).read_text())
    assert blobs["src/app.py"] == git(ws.repo, "hash-object", "src/app.py").strip()


def test_an_index_that_is_a_symlink_is_not_followed(tracked: Workspace, tmp_path: Path) -> None:
    ws = tracked
    (ws.repo / ".git/index").rename(tmp_path / "index")
    (ws.repo / ".git/index").symlink_to(tmp_path / "index")
    root = os.open(ws.repo, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert contents.read_index(root) is None
    finally:
        os.close(root)


def test_a_file_past_the_hashing_budget_is_judged_by_its_metadata(ws: Workspace) -> None:
    """Without an index and over ``MAX_HASHED_FILE``, a file has no content id: a touch conflicts, as before."""
    big = ws.repo / "big.bin"
    big.write_bytes(b"x" * (contents.MAX_HASHED_FILE + 1))
    chown_tree(ws.repo, OWNER)
    ws.restart()
    ws.agent("echo small > big.bin")
    ws.stop()
    os.utime(big)
    assert [c.path for c in apply(ws.layer).conflicts] == ["big.bin"]


def test_a_version_4_index_whose_names_grow_without_end_is_refused_not_followed() -> None:
    """Each v4 entry's name is the last one's plus more: without a bound, a small crafted index makes names whose
    total is quadratic in its size."""
    entry = b"\0" * 24 + (0o100644).to_bytes(4, "big") + b"\0" * 12 + b"\0" * 20 + (1).to_bytes(2, "big")
    body = b"".join(entry + b"\x00" + b"a" * 200 + b"\0" for _ in range(100))  # strip 0: each name 200 bytes longer
    data = b"DIRC" + (4).to_bytes(4, "big") + (100).to_bytes(4, "big") + body + b"\0" * 20
    with pytest.raises(ValueError, match="names more than a path can be"):
        list(contents._entries(data))


def test_a_file_git_cleans_on_commit_is_judged_by_its_own_bytes(ws: Workspace) -> None:
    """The index's id is of the cleaned bytes (LF here, for a file checked out with CRLF): a user who converts the
    file to LF has changed it, though its bytes now hash to the index's id."""
    shutil.rmtree(ws.repo / ".git")
    (ws.repo / ".gitattributes").write_text("*.txt text eol=crlf\n")
    (ws.repo / "notes.txt").write_bytes(b"one\r\ntwo\r\n")
    commit_and_restart(ws)
    ws.agent("printf 'agent\\r\\n' > notes.txt")
    ws.stop()
    (ws.repo / "notes.txt").write_bytes(b"one\ntwo\n")  # the user's dos2unix
    assert (
        git(ws.repo, "hash-object", "--no-filters", "notes.txt").strip()
        == git(ws.repo, "ls-files", "-s", "notes.txt").split()[1]
    )  # the raw LF bytes are what the index holds
    assert [c.path for c in apply(ws.layer).conflicts] == ["notes.txt"]
