"""``cubicle continue ID TEXT --on PATH[:LINE]``: the comment goes on the one change the user named, by its id."""

from __future__ import annotations

import os

import pytest
import typer

from controller.cli.turns import ContinueOptions, comment_of
from controller.wire.changeset import Change, FileType, Kind


def _listed(*paths: str) -> list[Change]:
    return [Change(path=p, kind=Kind.ADDED, type=FileType.FILE) for p in paths]


def _on(on: str | None = None, on_id: str | None = None) -> ContinueOptions:
    return ContinueOptions(session_id="s", message="why?", on=on, on_id=on_id)


def _refused(o: ContinueOptions, listed: list[Change]) -> None:
    with pytest.raises(typer.Exit) as raised:
        comment_of(o, listed)
    assert raised.value.exit_code == 2


def test_a_tab_and_its_spelling_written_out_are_refused_as_two_then_chosen_by_id() -> None:
    tab, spelled = listed = _listed("a\tb.txt", "a\\tb.txt")
    _refused(_on("a\\tb.txt:1"), listed)  # the terminal's spelling of one, the real name of the other
    comment = comment_of(_on("a\\\\tb.txt:1"), listed)  # as `changes` printed the literal one: only it
    assert comment is not None and (comment.id, comment.line) == (spelled.id, 1)
    comment = comment_of(_on(on_id=f"{tab.id}:3"), listed)
    assert comment is not None and (comment.id, comment.line, comment.path) == (tab.id, 3, "a\tb.txt")


def test_a_byte_and_the_c1_control_of_its_number_each_mean_their_own_file() -> None:
    byte, control = listed = _listed(os.fsdecode(b"n\x9b.txt"), "n\x9b.txt")
    assert (comment := comment_of(_on("n\\x9b.txt"), listed)) is not None and comment.id == byte.id
    assert (comment := comment_of(_on("n\\u009b.txt"), listed)) is not None and comment.id == control.id


def test_a_colon_that_could_start_a_line_or_belong_to_the_name_is_refused() -> None:
    plain, colon = listed = _listed("x", "x:1")
    _refused(_on("x:1"), listed)
    assert (comment := comment_of(_on("x:1"), [colon])) is not None and (comment.id, comment.line) == (colon.id, None)
    assert (comment := comment_of(_on("x:1"), [plain])) is not None and (comment.id, comment.line) == (plain.id, 1)


def test_a_name_or_id_of_no_change_is_refused_and_on_with_on_id_too() -> None:
    listed = _listed("made.txt")
    _refused(_on("nowhere.txt:1"), listed)
    _refused(_on(on_id="0" * 32), listed)
    _refused(_on("made.txt", on_id=listed[0].id), listed)
    assert comment_of(_on(), listed) is None


def test_a_comment_on_a_name_that_looks_like_another_is_refused_and_its_id_picks_it() -> None:
    nfc, nfd = listed = _listed("caf\u00e9.py", "cafe\u0301.py")
    _refused(_on("caf\u00e9.py:2"), listed)
    _refused(_on("cafe\\u0301.py"), listed)  # the terminal's spelling still looks like the other to a reader
    comment = comment_of(_on(on_id=f"{nfd.id}:2"), listed)
    assert comment is not None and (comment.id, comment.line) == (nfd.id, 2)
    assert (comment := comment_of(_on("caf\u00e9.py"), [nfc])) is not None and comment.id == nfc.id
