"""The toolbox's search without ripgrep (an environment image may lack it), on real files, without a container.

The expected lines are what ripgrep printed for the same trees in the sandbox image (the
arguments the toolbox gives it), so a session's search reads the same with or without it.
Every test here runs with a PATH that holds no ``rg`` (the toolbox looks for it on its own PATH):
the ripgrep path runs a process, and the toolbox's process sweep must never run on the host.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from toolbox import search as search_module
from toolbox.errors import ToolError
from toolbox.search import LONG_LINE, glob_regex, search
from toolbox.workspace import Workspace

from controller.wire.protocol import SearchResult


@pytest.fixture(autouse=True)
def no_ripgrep(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    monkeypatch.setenv("PATH", str(tmp_path_factory.mktemp("no-rg")))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    for rel, data in {
        "src/a.py": b"hello world\nfoo\nhello again\n",
        ".hidden/x": b"hello\n",
        "node_modules/y.py": b"hello\n",
        ".env": b"hello\n",
        ".gitignore": b"node_modules\n",
        "long.txt": b"hello" + b"x" * 400 + b"\n",
        "bin.dat": b"hello\x00bin",
        ".git/HEAD": b"hello\n",
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


@pytest.fixture
def ws(root: Path) -> Workspace:
    return Workspace(str(root))


def found(ws: Workspace, **args: Any) -> dict[str, Any]:
    result = search(ws, {"pattern": "hello", **args})
    SearchResult.model_validate(result)
    return result


def lines(result: dict[str, Any]) -> list[str]:
    return str(result["matches"]["text"]).splitlines()


LONG = "long.txt:1:hello" + "x" * 295 + LONG_LINE.decode()


def test_the_root_skips_hidden_ignored_and_binary_files_like_ripgrep(ws: Workspace) -> None:
    result = found(ws)
    assert lines(result) == [LONG, "src/a.py:1:hello world", "src/a.py:3:hello again"]
    assert (result["exit_code"], result["timed_out"], result["errors"]) == (0, False, "")


def test_a_directory_shows_paths_from_the_root(ws: Workspace) -> None:
    assert lines(found(ws, path="src")) == ["src/a.py:1:hello world", "src/a.py:3:hello again"]


def test_a_single_file_shows_line_numbers_only(ws: Workspace) -> None:
    assert lines(found(ws, path="src/a.py")) == ["1:hello world", "3:hello again"]


def test_a_hidden_directory_named_explicitly_is_searched(ws: Workspace) -> None:
    assert lines(found(ws, path=".hidden")) == [".hidden/x:1:hello"]


def test_an_absolute_path_shows_absolute_paths(ws: Workspace, root: Path) -> None:
    assert lines(found(ws, path=str(root / "src"))) == ["src/a.py:1:hello world", "src/a.py:3:hello again"]
    outside = root.parent / "elsewhere"
    outside.mkdir()
    (outside / "f.txt").write_text("hello\n")
    assert lines(found(ws, path=str(outside))) == [f"{outside}/f.txt:1:hello"]


@pytest.mark.parametrize(
    ("glob", "expected"),
    [
        ("*.py", ["src/a.py:1:hello world", "src/a.py:3:hello again"]),
        ("src/*.py", ["src/a.py:1:hello world", "src/a.py:3:hello again"]),
        ("!src", [LONG]),
        ("*.md", []),
    ],
)
def test_globs(ws: Workspace, glob: str, expected: list[str]) -> None:
    assert lines(found(ws, glob=glob)) == expected


def test_a_binary_file_named_explicitly_says_it_matches(ws: Workspace) -> None:
    assert lines(found(ws, path="bin.dat")) == ['binary file matches (found "\\0" byte around offset 5)']


def test_no_match_is_exit_1_and_a_bad_regex_is_the_models_error(ws: Workspace) -> None:
    result = search(ws, {"pattern": "zzz"})
    assert (result["exit_code"], result["matches"]["text"]) == (1, "")
    with pytest.raises(ToolError) as caught:
        search(ws, {"pattern": "("})
    assert caught.value.kind == "search_failed" and "regex parse error" in caught.value.message


def test_a_missing_path_is_not_found(ws: Workspace) -> None:
    with pytest.raises(ToolError) as caught:
        search(ws, {"pattern": "x", "path": "nope"})
    assert caught.value.kind == "not_found"


def test_at_most_100_matches_per_file_and_the_output_is_capped(ws: Workspace, root: Path) -> None:
    (root / "many.txt").write_text("hello\n" * 500)
    assert len(lines(found(ws, path="many.txt"))) == 100
    result = found(ws, path="many.txt", max_output=200)
    assert result["matches"]["truncated"] and result["matches"]["total_bytes"] == sum(
        len(f"{n}:hello\n") for n in range(1, 101)
    )


def test_an_endless_line_costs_a_bounded_read(ws: Workspace, root: Path) -> None:
    (root / "endless.txt").write_bytes(b"hello" + b"y" * (3 << 20) + b"\nsecond hello\n")
    assert lines(found(ws, path="endless.txt")) == ["1:hello" + "y" * 295 + LONG_LINE.decode(), "2:second hello"]


def test_non_utf8_bytes_are_matched_and_shown_replaced(ws: Workspace, root: Path) -> None:
    (root / "latin.txt").write_bytes(b"caf\xe9 hello\n")
    result = found(ws, path="latin.txt")
    assert result["matches"]["text"] == "1:caf\ufffd hello\n"


def test_symlinks_fifos_and_git_are_not_searched(ws: Workspace, root: Path) -> None:
    outside = root.parent / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("hello secret\n")
    (root / "to-outside").symlink_to(outside)
    (root / "secret-link").symlink_to(outside / "secret.txt")
    os.mkfifo(root / "fifo")
    assert "secret" not in str(found(ws)["matches"]["text"])
    assert ".git" not in str(found(ws)["matches"]["text"])


def test_nested_ignore_files_and_negations(ws: Workspace, root: Path) -> None:
    (root / "pkg" / "build").mkdir(parents=True)
    (root / "pkg" / "build" / "out.txt").write_text("hello\n")
    (root / "pkg" / "keep.log").write_text("hello\n")
    (root / "pkg" / "drop.log").write_text("hello\n")
    (root / "pkg" / ".ignore").write_text("/build/\n*.log\n!keep.log\n")
    assert lines(found(ws, path="pkg")) == ["pkg/keep.log:1:hello"]


def test_the_deadline_stops_the_search(ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search_module, "SEARCH_TIMEOUT_S", -1.0)
    result = found(ws)
    assert result["timed_out"] and result["exit_code"] == 1


def test_glob_translation() -> None:
    import re

    assert re.fullmatch(glob_regex("**/*.py"), "a/b/c.py") and re.fullmatch(glob_regex("**/*.py"), "c.py")
    assert not re.fullmatch(glob_regex("*.py"), "a/c.py")
    assert re.fullmatch(glob_regex("a/**"), "a/b/c")
    assert re.fullmatch(glob_regex("[!a]?.txt"), "bc.txt") and not re.fullmatch(glob_regex("[!a]?.txt"), "ac.txt")
    assert re.fullmatch(glob_regex("a+b(c).txt"), "a+b(c).txt")
