"""The terminal's view of a session's changes: counts, rows and diffs, with the agent's bytes shown inert."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import typer
from rich.console import Console, RenderableType

from controller.cli import review
from controller.wire import inert
from controller.wire.changeset import ApplyResult, Change, Conflict, Disposition, FileType, Kind
from controller.wire.events import ChangeSummary


def _shown(renderable: RenderableType) -> str:
    console = Console(width=200, color_system="truecolor", force_terminal=True)
    with console.capture() as captured:
        console.print(renderable)
    return captured.get()


def _plain(renderable: RenderableType) -> str:
    console = Console(width=200, color_system=None)
    with console.capture() as captured:
        console.print(renderable)
    return captured.get()


def test_the_summary_counts_files_lines_and_what_is_held_back() -> None:
    summary = ChangeSummary(files=3, added=2, modified=1, lines_added=12, lines_removed=1, held_back=2)
    assert _plain(review.summary_line(summary)).strip() == (
        "3 files changed (2 added, 1 modified) · +12 −1 · 2 held back (not applied)"
    )
    assert _plain(review.summary_line(ChangeSummary())).strip() == "no changes to the files"


def test_a_hostile_path_and_diff_reach_the_terminal_inert() -> None:
    name = "evil\x1b]0;PWNED\x07" + os.fsdecode(b"\xff") + ".txt"
    diff = f"--- /dev/null\n+++ b/{name}\n@@ -0,0 +1 @@\n+\x1b]52;c;eA==\x07 \u202eevil\r\n"
    change = Change(path=name, kind=Kind.ADDED, type=FileType.FILE, size=20, diff=diff)
    out = _shown(review.change_list([change])) + _shown(review.diff_view(change))
    out += _shown(review.conflict_list([Conflict(path=name, reason="changed \x1b[2J")]))
    for raw in ("\x1b]", "\x07", "\u202e", "\r"):
        assert raw not in out
    assert "evil\\x1b]0;PWNED\\x07\\xff.txt" in _plain(review.change_row(change))
    assert "+1 −0" in _plain(review.change_row(change))


def test_a_held_back_change_says_why() -> None:
    change = Change(
        path=".git/hooks/post-checkout",
        kind=Kind.ADDED,
        type=FileType.FILE,
        disposition=Disposition.DISCARDED,
        reason="under .git",
        diff="--- /dev/null\n+++ b/.git/hooks/post-checkout\n@@ -0,0 +1 @@\n+x\n",
    )
    row = _plain(review.change_row(change))
    assert "A .git/hooks/post-checkout +1 −0  held back: discarded (under .git)" in row


def test_a_long_list_is_cut_and_counted() -> None:
    changes = [Change(path=f"f{i}", kind=Kind.ADDED, type=FileType.FILE) for i in range(60)]
    shown = _plain(review.change_list(changes, review.MAX_LISTED))
    assert "f49" in shown and "f50" not in shown and "… and 10 more paths" in shown


def test_a_mode_worth_a_look_is_shown_with_what_apply_writes() -> None:
    def row(**fields: object) -> str:
        return _plain(review.change_row(Change(path="p", type=FileType.FILE, **fields))).strip()  # type: ignore[arg-type]

    assert row(kind=Kind.MODIFIED, mode=0o666, previous_mode=0o644) == "M p (mode 644 → 666, applied as 644)"
    assert row(kind=Kind.MODIFIED, mode=0o755, previous_mode=0o644) == "M p (mode 644 → 755)"
    assert row(kind=Kind.MODIFIED, mode=0o666, previous_mode=0o664) == "M p (mode 664 → 666, applied as 664)"
    assert row(kind=Kind.ADDED, mode=0o755) == "A p (mode 755)"
    assert row(kind=Kind.ADDED, mode=0o4777) == "A p (mode 4777, applied as 755)"
    assert row(kind=Kind.ADDED, mode=0o644) == "A p"
    assert row(kind=Kind.MODIFIED, mode=0o644, previous_mode=0o644) == "M p"
    assert row(kind=Kind.MODIFIED, mode=0o4755, previous_mode=0o4755) == "M p (mode 4755, applied as 755)"
    shared = Change(path="tmp", kind=Kind.MODIFIED, type=FileType.DIR, mode=0o777, previous_mode=0o1777)
    assert _plain(review.change_row(shared)).strip() == "M tmp (mode 1777 → 777, applied as 1777)"


def test_a_line_of_the_file_that_starts_with_plus_plus_is_counted_and_drawn_as_added() -> None:
    """Red-team finding: ``++__import__("os").system(...)`` appended to a Python file (it runs) counted +0 and
    was drawn bold like the ``+++`` line that names the file."""
    diff = "--- a/src/app.py\n+++ b/src/app.py\n@@ -1 +1,2 @@\n x = 1\n+++__import__('os').system('id')\n"
    change = Change(path="src/app.py", kind=Kind.MODIFIED, type=FileType.FILE, diff=diff)
    assert "M src/app.py +1 −0" in _plain(review.change_row(change))
    shown = _shown(review.diff_view(change))
    added = next(line for line in shown.splitlines() if "system" in line)
    header = next(line for line in shown.splitlines() if "b/src/app.py" in line)
    assert "\x1b[1m" in header and "\x1b[1m" not in added, "drawn as the header that names the file"
    assert "\x1b[32m" in added, "green, as every added line"


def test_changes_a_bounded_listing_left_out_are_counted_with_what_apply_does_with_them() -> None:
    shown = _plain(review.summary_line(ChangeSummary(files=2, added=2, unlisted=120_000)))
    assert "2 files changed" in shown and "and 120,000 more changes not listed" in shown
    assert "apply writes none of them" in shown
    assert "no changes" not in _plain(review.summary_line(ChangeSummary(unlisted=3)))


def test_a_bounded_apply_or_listing_says_how_many_it_wrote_and_how_many_unseen() -> None:
    unseen = _plain(review.summary_line(ChangeSummary(files=2, unlisted=5, unlisted_applied=4)))
    assert "apply writes 4 of them (unseen here)" in unseen
    result = ApplyResult(applied=["a"], more_applied=9, skipped=[], record=1)
    shown = _plain(review.applied("s_1", Path("/repo"), result))
    assert "applied 10 paths to /repo" in shown and "… and 9 more paths" in shown


def test_on_a_terminal_a_held_back_change_shows_its_diff_marked_and_names_print_unlike() -> None:
    hook = Change(
        path=".github/workflows/ci.yml",
        kind=Kind.ADDED,
        type=FileType.FILE,
        size=9,
        diff="+on: push\n",
        disposition=Disposition.TRUSTED,
        reason="a CI definition (GitHub Actions workflows)",
    )
    assert "held back: trusted" in _plain(review.diff_view(hook)) and "+on: push" in _plain(review.diff_view(hook))
    twins = [Change(path=p, kind=Kind.ADDED, type=FileType.FILE) for p in ("a" + os.fsdecode(b"\xff"), "a\\xff")]
    assert [review.path_text(c.path).plain for c in twins] == ["a\\xff", "a\\\\xff"]


def test_a_c1_control_and_the_byte_of_the_same_number_print_unlike_and_select_their_own_change() -> None:
    from controller.cli.workspace import as_selected

    byte, control = (
        Change(path=p, kind=Kind.ADDED, type=FileType.FILE) for p in (os.fsdecode(b"n\x9b.txt"), "n\x9b.txt")
    )
    assert [review.path_text(c.path).plain for c in (byte, control)] == ["n\\x9b.txt", "n\\u009b.txt"]
    assert as_selected(["n\\x9b.txt"], [byte, control]) == (None, [byte.id])
    assert as_selected(["n\\u009b.txt"], [byte, control]) == (None, [control.id])
    assert inert.escape(os.fsdecode(b"\xa0")) == "\\xa0" and inert.escape("\u00a0") == "\\u00a0"


def test_names_that_print_alike_are_spelled_out_marked_and_refused_by_name() -> None:
    from controller.cli.workspace import as_selected

    nfc, nfd, space, plain, cyrillic = listed = [
        Change(path=p, kind=Kind.ADDED, type=FileType.FILE, size=2, diff=f"--- /dev/null\n+++ {p}\n@@ -0,0 +1 @@\n+x\n")
        for p in ("caf\u00e9.py", "cafe\u0301.py", "build.sh ", "notes", "n\u043etes")
    ]
    assert [review.path_text(c.path).plain for c in listed] == [
        "caf\u00e9.py",  # an ordinary accented name stays readable
        "cafe\\u0301.py",
        "build.sh\\x20",
        "notes",
        "n\\u043etes",
    ]
    rows = _plain(review.change_list([*listed, Change(path="build.sh", kind=Kind.ADDED, type=FileType.FILE)]))
    assert f"caf\\u00e9.py +1 −0  looks like cafe\\u0301.py (select it with --id {nfc.id})" in rows
    assert f"notes +1 −0  looks like n\\u043etes (select it with --id {plain.id})" in rows
    assert f"build.sh\\x20 +1 −0  looks like build.sh (select it with --id {space.id})" in rows
    head = _plain(review.diff_view(nfd, ["caf\u00e9.py"]))
    assert "── cafe\\u0301.py (added)  looks like caf\\u00e9.py" in head and "+++ cafe\\u0301.py" in head
    assert "applied 1 path" in _plain(review.applied("s", Path("/r"), ApplyResult(applied=[nfd.path])))
    assert "  cafe\\u0301.py" in _plain(review.applied("s", Path("/r"), ApplyResult(applied=[nfd.path])))
    for given in ("cafe\u0301.py", "caf\u00e9.py", "cafe\\u0301.py", "notes", "n\u043etes"):
        with pytest.raises(typer.Exit):
            as_selected([given], listed)
    assert as_selected(["ok"], listed) == (["ok"], None)
    assert cyrillic.id != plain.id
