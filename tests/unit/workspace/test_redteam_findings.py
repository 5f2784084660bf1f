"""Findings of an independent red-team of the workspace layer, each kept as a regression test.

Each test asserts the guarantee the finding broke: a symlink chain built over two applies,
a sparse file inflating checkpoints, a rewind of paths near PATH_MAX, non-UTF-8 names in
JSON, and a newline in a name forging rows of the changes list.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from rich.console import Console

from controller.cli import review
from controller.wire.changeset import Disposition
from controller.wire.events import AppliedEvent
from controller.workspace import apply, checkpoint, rewind, scan
from controller.workspace.checkpoints import MAX_PATH_BYTES, recover
from controller.workspace.manager import printable, shown
from tests.unit.workspace.overlay import Workspace


def _inside(repo: Path, path: Path) -> bool:
    real = Path(os.path.realpath(path))
    return real == repo or repo in real.parents


def test_a_symlink_chain_over_two_applies_cannot_leave_the_repository(ws: Workspace) -> None:
    """Alone, ``p -> q/../../outside`` reads as inside; once ``q -> ..`` lands (a later apply) it leads out.

    A ``..`` after a name is refused, so the first link never reaches the checkout.
    """
    ws.agent("ln -s q/../../outside/secret.txt docs/sub/p")  # textually docs/sub -> docs -> outside/secret.txt
    ws.stop()
    first = apply(ws.layer)
    assert first.applied == [] and [c.path for c in first.skipped] == ["docs/sub/p"]
    ws.restart()  # a later session (or a later turn with apply "on_finish")
    ws.agent("ln -s .. docs/sub/q")  # textually docs: inside, through no symlink
    ws.stop()
    apply(ws.layer)
    for link in ("docs/sub/p", "docs/sub/q"):
        path = ws.repo / link
        assert not path.is_symlink() or _inside(ws.repo.resolve(), path), f"{path} leads to {os.path.realpath(path)}"


def test_a_sparse_file_costs_a_checkpoint_nothing_and_is_never_applied(ws: Workspace) -> None:
    """A 200 MiB sparse file costs the agent one block; neither a checkpoint nor an apply writes it out."""
    ws.agent("truncate -s 200M big.bin; printf x >> big.bin")
    ws.stop()
    upper_blocks = os.stat(ws.layer.upper / "big.bin").st_blocks * 512
    checkpoint(ws.layer)
    stored = sum(os.stat(p).st_blocks * 512 for p in (ws.layer.checkpoints / "blobs").iterdir())
    assert stored <= 16 * max(upper_blocks, 1 << 20), f"upper holds {upper_blocks} bytes, checkpoint wrote {stored}"
    [change] = scan(ws.layer)
    assert change.disposition == Disposition.UNSAFE and "sparse" in change.reason
    assert apply(ws.layer).applied == [] and not (ws.repo / "big.bin").exists()


def test_rewinding_a_tree_near_path_max_loses_nothing_it_kept(ws: Workspace) -> None:
    """Rewind recreates entries by path: entries too long to come back are not kept (and never were in the
    checkpoint), everything else comes back, and the layer is whole at every instant."""
    name = "n" * 250
    deep = f"import os\nos.mkdir('lp'); os.chdir('lp')\nfor _ in range(20): os.mkdir('{name}'); os.chdir('{name}')\nopen('f', 'w').write('d')"
    ws.agent(f'echo work > work.txt; python3 -c "{deep}"')
    ws.stop()
    checkpoint(ws.layer)
    before = sorted(c.path for c in scan(ws.layer))
    rewind(ws.layer, 1)
    after = sorted(c.path for c in scan(ws.layer))
    assert "work.txt" in after
    assert after == [p for p in before if len(p.encode()) <= MAX_PATH_BYTES]
    assert not (ws.layer.root / "upper.rewind").exists() and not (ws.layer.root / "upper.old").exists()


def test_a_non_utf8_name_serializes_in_diffs_and_events(ws: Workspace) -> None:
    """GET .../changes?diff=true and the ``applied`` event carry the name escaped, never raw surrogates."""
    ws.agent("printf x > \"$(printf 'bad\\377')\"")
    ws.stop()
    [change] = scan(ws.layer)
    printable(change).model_dump_json()  # the API's changes?diff=true: 500
    result = apply(ws.layer)
    assert json.loads(printable(change).model_dump_json())["path"] == "bad\\xff"
    shown_paths = [shown(p) for p in result.applied]
    assert AppliedEvent(session_id="s1", apply=result.record or 0, paths=shown_paths, skipped=0).model_dump_json()


def test_a_newline_in_a_name_cannot_forge_rows_of_the_changes_list(ws: Workspace) -> None:
    """Names are shown inert and on one line: a newline is an escape, not a new row."""
    ws.agent("touch \"$(printf 'notes.txt\\n  D README.md\\n  M Makefile  held back: discarded')\"")
    ws.stop()
    console = Console(width=200, record=True, force_terminal=False)
    console.print(review.change_list(scan(ws.layer)))
    rows = console.export_text().splitlines()
    assert len(rows) == 2, rows  # the summary line and one row for one changed path


def test_a_rewind_killed_between_its_renames_is_recovered(ws: Workspace) -> None:
    """Without RENAME_EXCHANGE a rewind is two renames; a kill between them leaves ``upper.old`` and no ``upper``."""
    ws.agent("echo one > one.txt")
    ws.stop()
    checkpoint(ws.layer)
    os.rename(ws.layer.upper, ws.layer.root / "upper.old")  # where a kill after the first rename leaves it
    (ws.layer.root / "upper.rewind-dead").mkdir()  # and the staging tree of a rewind killed earlier
    recover(ws.layer)
    assert [c.path for c in scan(ws.layer)] == ["one.txt"]
    rewind(ws.layer, 1)
    assert sorted(p.name for p in ws.layer.root.iterdir() if p.name.startswith("upper")) == ["upper"]
    assert [c.path for c in scan(ws.layer)] == ["one.txt"]


def test_a_newline_in_a_symlink_target_cannot_forge_lines_of_the_diff_view(ws: Workspace) -> None:
    ws.agent("ln -s \"$(printf 'x)\\n── src/app.py (modified)\\n+import os')\" link")
    ws.stop()
    [change] = scan(ws.layer)
    console = Console(width=300, record=True, force_terminal=False)
    console.print(review.diff_view(change))
    rows = console.export_text().splitlines()
    assert len(rows) == 2 and "\\n── src/app.py" in rows[1], rows
