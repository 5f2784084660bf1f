"""Names a reader cannot tell apart (red team, issue 44 again): each is spelled out where it hides something, and
two whose skeletons match are found, so a review can mark them and a selection by name refuse them."""

from __future__ import annotations

import pytest

from controller.wire.lookalike import parts, skeleton, spelled, twins

NFC, NFD = "caf\u00e9.py", "cafe\u0301.py"
CYRILLIC = "n\u043etes"  # a Cyrillic o
PAIRS = [
    (NFC, NFD),
    ("build.sh", "build.sh "),
    ("build.sh", " build.sh"),
    ("notes", CYRILLIC),
    ("Hello", "\u0397ello"),  # a Greek capital eta
    ("README", "readme"),
    ("x", "\uff58"),  # a fullwidth x: NFKC
    ("src/a.py", "src\u3000/a.py"),  # an ideographic space ending a folder's name
]


@pytest.mark.parametrize(("one", "other"), PAIRS)
def test_names_that_print_alike_have_one_skeleton(one: str, other: str) -> None:
    assert one != other and skeleton(one) == skeleton(other)


@pytest.mark.parametrize(("one", "other"), [("notes", "notes2"), ("a b", "ab"), ("a/b", "a b"), ("日本", "中国")])
def test_names_that_read_differently_do_not(one: str, other: str) -> None:
    assert skeleton(one) != skeleton(other)


def test_what_a_reader_cannot_see_is_spelled_out_and_ordinary_names_stay_readable() -> None:
    assert spelled(NFD) == "cafe\\u0301.py" and spelled(NFC) == NFC  # composed: the accent is seen as it is
    assert spelled("build.sh ") == "build.sh\\x20" and spelled("\tx/ y") == "\\tx/\\x20y"
    assert spelled("a b") == "a b"  # a space inside a name is seen
    assert spelled(CYRILLIC) == "n\\u043etes"  # a Cyrillic o among Latin letters
    for name in ("заметки", "日本語/ファイル", "मराठी.txt", "naïve", "Ελληνικά"):  # one script each, NFC
        assert spelled(name) == name
    assert parts("x/b ") == [("x/b", False), ("\\x20", True)]


def test_strict_spelling_tells_every_look_alike_apart() -> None:
    names = [n for pair in PAIRS for n in pair]
    strict = [spelled(n, strict=True) for n in names]
    assert len(set(strict)) == len(set(names)) and all(s.isascii() for s in strict)
    assert spelled(NFC, strict=True) == "caf\\u00e9.py"


def test_twins_are_the_changes_whose_name_or_folder_looks_like_another() -> None:
    found = twins([NFC, NFD, "build.sh", "build.sh ", "notes", f"{CYRILLIC}/payload.sh", "ok.txt", "src/a", "src/b"])
    assert found == {
        NFC: [NFD],
        NFD: [NFC],
        "build.sh": ["build.sh "],
        "build.sh ": ["build.sh"],
        "notes": [CYRILLIC],
        f"{CYRILLIC}/payload.sh": ["notes"],
    }
