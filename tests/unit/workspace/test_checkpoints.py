"""Checkpoints keep the upper layer per turn; rewind puts it back exactly."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from controller.errors import LayerInUseError, LayerMissingError, TooManyEntriesError
from controller.workspace import apply, checkpoint, discard, revert, rewind, scan
from controller.workspace import layer as layers
from controller.workspace.checkpoints import read_manifest
from tests.unit.workspace.overlay import Workspace, snapshot


def upper_state(ws: Workspace) -> dict[str, tuple[object, ...]]:
    """The upper tree with its overlay markers: whiteouts show as char devices, xattrs listed."""
    tree = snapshot(ws.layer.upper)
    marks = {}
    for rel in tree:
        path = ws.layer.upper / rel
        if not path.is_symlink():
            marks[rel] = sorted((a, os.getxattr(path, a)) for a in os.listxattr(path) if a.startswith("user."))
    return {rel: (*entry, tuple(marks.get(rel, []))) for rel, entry in tree.items()}


def test_rewind_returns_the_upper_to_a_checkpoint_exactly(ws: Workspace) -> None:
    ws.agent("echo one > new.txt; rm -rf docs; mkdir docs; echo d > docs/d.txt; rm old/gone.txt; chmod 700 src")
    ws.stop()
    assert checkpoint(ws.layer) == 1
    turn1 = upper_state(ws)
    assert any(entry[0] == stat.S_IFCHR for entry in turn1.values())  # the whiteout is kept
    assert ("user.overlay.opaque", b"y") in turn1["docs"][5]
    ws.agent("echo two > new.txt; echo more > more.txt; rm -rf docs; rm README.md; chmod 4755 src/app.py")
    ws.stop()
    assert checkpoint(ws.layer) == 2
    rewind(ws.layer, 1)
    assert upper_state(ws) == turn1
    assert sorted(p.name for p in ws.layer.checkpoints.iterdir()) == ["1.json", "blobs"]
    result = apply(ws.layer)
    assert sorted(result.applied) == [
        "docs/a.txt",
        "docs/d.txt",
        "docs/sub",
        "docs/sub/b.txt",
        "new.txt",
        "old/gone.txt",
        "src",
    ]
    assert (ws.repo / "new.txt").read_text() == "one\n" and (ws.repo / "README.md").exists()
    assert not (ws.repo / "more.txt").exists()


def test_unchanged_files_are_not_copied_again_and_blobs_never_share_the_live_inode(ws: Workspace) -> None:
    ws.agent("echo keep > keep.txt; echo edit > edit.txt")
    ws.stop()
    checkpoint(ws.layer)
    ws.agent("echo edited >> edit.txt")
    ws.stop()
    checkpoint(ws.layer)
    blobs = ws.layer.checkpoints / "blobs"
    first, second = (manifest(ws, n) for n in (1, 2))
    assert first["keep.txt"] == second["keep.txt"] and first["edit.txt"] != second["edit.txt"]
    assert len(list(blobs.iterdir())) == 3
    assert all(os.stat(b).st_ino != os.stat(ws.layer.upper / "keep.txt").st_ino for b in blobs.iterdir())
    ws.agent("echo in-place >> keep.txt")  # written through the live inode: the checkpoints must not see it
    ws.stop()
    assert (blobs / second["keep.txt"]).read_text() == "keep\n"
    checkpoint(ws.layer)
    assert (blobs / manifest(ws, 3)["keep.txt"]).read_text() == "keep\nin-place\n"
    rewind(ws.layer, 1)
    assert len(list(blobs.iterdir())) == 2  # blobs only later checkpoints used are gone


def manifest(ws: Workspace, number: int) -> dict[str, str]:
    """Each file's blob name in checkpoint ``number``."""
    return {e[0]: e[7] for e in read_manifest(ws.layer.checkpoints / f"{number}.json") if e[1] == "f"}


def test_rewind_to_an_unknown_checkpoint_raises(ws: Workspace) -> None:
    with pytest.raises(LayerMissingError):
        rewind(ws.layer, 7)


def test_rewind_after_an_apply_lists_only_what_still_differs(ws: Workspace) -> None:
    ws.agent("echo one > new.txt")
    ws.stop()
    checkpoint(ws.layer)
    apply(ws.layer)
    rewind(ws.layer, 1)
    assert scan(ws.layer) == []  # new.txt is in the checkout now, identical


def test_discard_removes_the_layer_and_the_kernels_work_dir(ws: Workspace) -> None:
    ws.agent("rm README.md; mkdir -p locked/in; echo x > locked/in/f; chmod 000 locked/in locked")
    ws.stop()
    checkpoint(ws.layer)
    work = Path(ws.layer.work / "work")
    assert work.exists() and stat.S_IMODE(os.stat(work).st_mode) == 0
    assert discard(ws.layer) == []
    assert not ws.layer.root.exists()


def test_the_upper_is_not_rewritten_while_mounted(ws: Workspace) -> None:
    ws.agent("echo one > new.txt")
    checkpoint(ws.layer)  # reading a mounted upper is fine
    with pytest.raises(LayerInUseError):
        rewind(ws.layer, 1)
    with pytest.raises(LayerInUseError):
        apply(ws.layer)
    ws.stop()
    assert apply(ws.layer).applied == ["new.txt"]
    ws.agent("true")  # mounted again: revert (which rewrites the directories apply kept) and set_setup refuse too
    with pytest.raises(LayerInUseError):
        revert(ws.layer)
    with pytest.raises(LayerInUseError):
        layers.set_setup(ws.layer, ws.base / "setup-tree")
    ws.stop()
    assert revert(ws.layer).reverted == ["new.txt"]


def test_a_hostile_depth_and_locked_directories_cost_no_recursion(ws: Workspace) -> None:
    ws.agent(
        'i=0; while [ $i -lt 1200 ]; do mkdir d; cd d; i=$((i+1)); done; echo x > f; cd /; chmod 000 "$OLDPWD" || true'
    )
    ws.stop()
    found = {c.path: c for c in scan(ws.layer)}
    deepest = max((p for p in found if p.startswith("d/")), key=len)
    assert found[deepest].disposition.value == "unsafe" and deepest.count("/") < 300
    with pytest.raises(TooManyEntriesError):  # no walk reads that deep, so nothing there is kept unseen
        checkpoint(ws.layer)
    ws.restart()  # the deep tree goes with its layer
    ws.agent("mkdir -p locked/in; chmod 000 locked/in locked")
    ws.stop()
    checkpoint(ws.layer)
    rewind(ws.layer, 1)
    assert (ws.layer.upper / "locked").exists()
    assert discard(ws.layer) == [] and not ws.layer.root.exists()
