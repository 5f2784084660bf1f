"""The toolbox's file operations on real files in a temporary workspace, without a container.

The toolbox resolves every path inside its container, whose filesystem is the boundary: an
absolute path or ``..`` reaches outside the workspace root, and symlinks are followed. These
tests pin that down as it is, together with what the operations do refuse (NUL bytes,
directories, FIFOs and devices, binary reads, oversized edits), and check every answer
against the controller's own result models, so both sides of the wire agree.

Never call search or run_command here: when a command ends, the toolbox kills every process
its uid may signal (kill(-1) and a sweep of /proc), which is right in a container and a
disaster on the host.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from toolbox.edits import edit_file
from toolbox.errors import ToolError
from toolbox.files import list_files, read_file, write_file
from toolbox.limits import (
    MAX_EDIT_FILE_BYTES,
    MAX_LINE_CHARS,
    MAX_LIST_ENTRIES,
    MAX_READ_BYTES,
    MAX_SCAN_BYTES,
)
from toolbox.workspace import Workspace

from controller.wire.protocol import EditResult, ListResult, ReadResult, WriteResult
from tests.tmpfs import small_tmpfs


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "ws").mkdir()
    return tmp_path / "ws"


@pytest.fixture
def ws(root: Path) -> Workspace:
    return Workspace(str(root))


def fails(kind: str, op: Any, ws: Workspace, **args: Any) -> str:
    """Run ``op`` expecting a ToolError of ``kind``; its message, for the model-facing wording."""
    with pytest.raises(ToolError) as caught:
        op(ws, args)
    assert caught.value.kind == kind, caught.value.message
    return caught.value.message


# ----------------------------------------------------------------------------- paths


def test_relative_paths_resolve_under_the_root_and_show_relative(ws: Workspace, root: Path) -> None:
    assert ws.resolve("src/app.py") == f"{root}/src/app.py"
    assert ws.resolve("./src//x/../app.py") == f"{root}/src/app.py"
    assert ws.display(ws.resolve("src/app.py")) == "src/app.py"
    assert ws.display(ws.resolve(".")) == "." == ws.display(ws.resolve(""))


def test_absolute_paths_and_dotdot_leave_the_root_and_show_absolute(ws: Workspace, root: Path) -> None:
    """The container is the boundary, not the workspace: such paths are resolved, not refused."""
    assert ws.resolve("/etc/hostname") == "/etc/hostname"
    assert ws.resolve("../outside.txt") == f"{root.parent}/outside.txt"
    assert ws.resolve("../" * 50 + "etc") == "/etc"
    assert ws.display(ws.resolve("../outside.txt")) == f"{root.parent}/outside.txt"
    # a sibling whose name merely starts with the root's is not under it
    assert ws.display(f"{root}-other/x") == f"{root}-other/x"


def test_an_absolute_path_inside_the_root_shows_relative(ws: Workspace, root: Path) -> None:
    assert ws.display(ws.resolve(f"{root}/a/b")) == "a/b"


def test_nul_bytes_are_refused_by_every_file_operation(ws: Workspace) -> None:
    for op, extra in (
        (list_files, {}),
        (read_file, {}),
        (write_file, {"content": "x"}),
        (edit_file, {"old_string": "a", "new_string": "b"}),
    ):
        assert fails("invalid_path", op, ws, path="a\x00b", **extra) == "The path contains a NUL byte."


def test_the_root_must_be_absolute_and_is_normalised(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="absolute"):
        Workspace("workspace")
    assert Workspace(f"{tmp_path}/ws/").root == f"{tmp_path}/ws"


# ----------------------------------------------------------------------------- list_files


def make_tree(root: Path) -> None:
    (root / "src" / "pkg" / "deep").mkdir(parents=True)
    (root / "src" / "app.py").write_text("print(1)\n")
    (root / "src" / "pkg" / "deep" / "x.txt").write_text("x")
    (root / ".git" / "objects").mkdir(parents=True)
    (root / "README.md").write_text("# demo\n")
    (root / "to-root").symlink_to("/")
    (root / "loop").symlink_to("loop")
    os.mkfifo(root / "fifo")


def test_list_files_two_levels_sorted_with_types_and_sizes(ws: Workspace, root: Path) -> None:
    make_tree(root)
    result = list_files(ws, {})
    ListResult.model_validate(result)
    assert result == {
        "entries": [
            {"path": ".git", "type": "dir", "size": 0},
            {"path": "README.md", "type": "file", "size": 7},
            {"path": "fifo", "type": "other", "size": 0},
            {"path": "loop", "type": "symlink", "size": 0},
            {"path": "src", "type": "dir", "size": 0},
            {"path": "src/app.py", "type": "file", "size": 9},
            {"path": "src/pkg", "type": "dir", "size": 0},
            {"path": "to-root", "type": "symlink", "size": 0},
        ],
        "truncated": False,
    }


def test_list_files_depth_and_subdirectory_never_enter_git_or_follow_links(ws: Workspace, root: Path) -> None:
    make_tree(root)
    paths = [e["path"] for e in list_files(ws, {"depth": 10})["entries"]]
    assert "src/pkg/deep/x.txt" in paths
    assert not [p for p in paths if p.startswith((".git/", "to-root/"))]
    assert [e["path"] for e in list_files(ws, {"path": "src/pkg", "depth": 1})["entries"]] == ["src/pkg/deep"]


def test_list_files_outside_the_root_shows_absolute_paths(ws: Workspace, root: Path) -> None:
    (root.parent / "sibling").mkdir()
    (root.parent / "sibling" / "f").write_text("")
    result = list_files(ws, {"path": "../sibling"})
    assert result["entries"] == [{"path": f"{root.parent}/sibling/f", "type": "file", "size": 0}]


def test_list_files_is_bounded(ws: Workspace, root: Path) -> None:
    many = root / "many"
    many.mkdir()
    for i in range(MAX_LIST_ENTRIES + 5):
        (many / f"f{i:05d}").touch()
    result = list_files(ws, {"path": "many"})
    assert result["truncated"] is True
    assert len(result["entries"]) == MAX_LIST_ENTRIES


def test_list_files_shows_names_that_are_not_utf8(ws: Workspace, root: Path) -> None:
    os.close(os.open(os.fsencode(root) + b"/caf\xe9.txt", os.O_CREAT | os.O_WRONLY, 0o644))
    (entry,) = list_files(ws, {})["entries"]
    assert entry["path"] == "caf\ufffd.txt"


def test_list_files_errors(ws: Workspace, root: Path) -> None:
    (root / "f.txt").write_text("x")
    assert "Use read_file on it" in fails("not_a_directory", list_files, ws, path="f.txt")
    assert fails("not_found", list_files, ws, path="nowhere") == (
        "nowhere does not exist. List the directory to see what is there."
    )


# ----------------------------------------------------------------------------- read_file


def test_read_file_numbers_lines_and_reports_size(ws: Workspace, root: Path) -> None:
    (root / "a.txt").write_bytes(b"one\r\ntwo\n\nfour")
    result = read_file(ws, {"path": "a.txt"})
    ReadResult.model_validate(result)
    assert result == {
        "content": "     1\tone\n     2\ttwo\n     3\t\n     4\tfour",
        "first_line": 1,
        "lines": 4,
        "truncated": False,
        "size": 14,
    }


def test_read_file_offset_and_limit(ws: Workspace, root: Path) -> None:
    (root / "a.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    page = read_file(ws, {"path": "a.txt", "offset": 4, "limit": 3})
    assert page["content"] == "     4\tline 4\n     5\tline 5\n     6\tline 6"
    assert (page["first_line"], page["lines"], page["truncated"]) == (4, 3, True)
    last = read_file(ws, {"path": "a.txt", "offset": 9, "limit": 5})
    assert (last["lines"], last["truncated"]) == (2, False)
    assert read_file(ws, {"path": "a.txt", "offset": 0})["first_line"] == 1  # clamped to the first line
    message = fails("out_of_range", read_file, ws, path="a.txt", offset=11)
    assert message == "offset 11 is past the end of a.txt, which has 10 lines."


def test_read_file_empty_file_is_empty_at_any_offset(ws: Workspace, root: Path) -> None:
    (root / "empty").write_bytes(b"")
    assert read_file(ws, {"path": "empty", "offset": 5})["content"] == ""


def test_read_file_cuts_long_lines_and_says_how_long(ws: Workspace, root: Path) -> None:
    (root / "long.txt").write_text("a" * (MAX_LINE_CHARS + 1) + "\n" + "b" * 100_000 + "\nshort\n")
    lines = read_file(ws, {"path": "long.txt"})["content"].split("\n")
    assert lines[0] == f"     1\t{'a' * MAX_LINE_CHARS} [line truncated: {MAX_LINE_CHARS + 2} bytes]"
    assert lines[1] == f"     2\t{'b' * MAX_LINE_CHARS} [line truncated: 100001 bytes]"
    assert lines[2] == "     3\tshort"


def test_read_file_stops_at_its_byte_budget(ws: Workspace, root: Path) -> None:
    (root / "wide.txt").write_text(("w" * MAX_LINE_CHARS + "\n") * 500)
    result = read_file(ws, {"path": "wide.txt"})
    assert result["truncated"] is True
    assert result["lines"] == -(-MAX_READ_BYTES // MAX_LINE_CHARS)


def test_read_file_scans_a_bounded_prefix_of_one_endless_line(ws: Workspace, root: Path) -> None:
    """A sparse file of one line longer than the scan budget: shown cut, and nothing past it."""
    with open(root / "huge", "wb") as f:
        f.write(b"x" * 8192)  # no NUL in the first 8 KiB, so it is not taken for binary
        f.truncate(MAX_SCAN_BYTES + (1 << 20))
    first = read_file(ws, {"path": "huge"})
    assert first["truncated"] is True and first["lines"] == 1
    assert first["content"].endswith(f" [line truncated: {MAX_SCAN_BYTES} bytes]")
    assert "use run_command with sed" in fails("too_large", read_file, ws, path="huge", offset=2)


def test_read_file_replaces_invalid_utf8(ws: Workspace, root: Path) -> None:
    (root / "latin1.txt").write_bytes(b"caf\xe9\n")
    assert read_file(ws, {"path": "latin1.txt"})["content"] == "     1\tcaf\ufffd"


def test_read_file_refuses_binary_directories_fifos_and_missing_files(ws: Workspace, root: Path) -> None:
    (root / "blob").write_bytes(b"\x7fELF\x00\x01" * 10)
    (root / "dir").mkdir()
    os.mkfifo(root / "fifo")  # opened without blocking, though nothing writes to it
    assert fails("binary", read_file, ws, path="blob") == (
        "blob looks binary (60 bytes). Inspect it with run_command, e.g. `xxd | head`."
    )
    assert fails("is_directory", read_file, ws, path="dir") == "dir is a directory, not a file. Use list_files on it."
    assert fails("not_regular", read_file, ws, path="fifo") == (
        "fifo is not a regular file (a device, FIFO or socket)."
    )
    assert fails("not_regular", read_file, ws, path="/dev/null").startswith("/dev/null is not a regular file")
    fails("not_found", read_file, ws, path="missing.txt")
    assert fails("not_a_directory", read_file, ws, path="dir/../blob/x") == "A part of blob/x is not a directory."


def test_read_file_follows_symlinks_and_reports_loops(ws: Workspace, root: Path) -> None:
    (root.parent / "outside.txt").write_text("beyond\n")
    (root / "link").symlink_to(root.parent / "outside.txt")
    (root / "loop").symlink_to("loop")
    assert read_file(ws, {"path": "link"})["content"] == "     1\tbeyond"
    assert fails("symlink_loop", read_file, ws, path="loop") == "loop is a symlink loop."


# ----------------------------------------------------------------------------- write_file


def test_write_file_creates_parents_and_counts_utf8_bytes(ws: Workspace, root: Path) -> None:
    result = write_file(ws, {"path": "a/b/c.txt", "content": "héllo\n"})
    WriteResult.model_validate(result)
    assert result == {"path": "a/b/c.txt", "bytes_written": 7}
    assert (root / "a" / "b" / "c.txt").read_bytes() == "héllo\n".encode()


def test_write_file_overwrites_whole_files(ws: Workspace, root: Path) -> None:
    (root / "f").write_text("a much longer original text\n")
    write_file(ws, {"path": "f", "content": "short"})
    assert (root / "f").read_text() == "short"


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs (mounting needs root, as CI runs): room for what the tests write first, not for more."""
    if os.geteuid() != 0:
        pytest.fail("this test mounts a small tmpfs and needs root (CI runs as root)")
    with small_tmpfs(tmp_path / "small", "256k") as point:
        yield point


def test_a_write_or_edit_with_no_room_leaves_the_file_as_it_was(full_disk: Path) -> None:
    ws = Workspace(str(full_disk))
    (full_disk / "keep.txt").write_text("original\n")
    big = "x" * (1 << 20)
    assert "disk quota" in fails("disk_full", write_file, ws, path="keep.txt", content=big)
    assert (full_disk / "keep.txt").read_text() == "original\n"
    fails("disk_full", edit_file, ws, path="keep.txt", old_string="original", new_string=big)
    assert (full_disk / "keep.txt").read_text() == "original\n"
    fails("disk_full", write_file, ws, path="new.txt", content=big)
    fails("disk_full", write_file, ws, path="a/b/new.txt", content=big)
    (full_disk / "link").symlink_to("target.txt")
    fails("disk_full", write_file, ws, path="link", content=big)
    assert sorted(os.listdir(full_disk)) == ["keep.txt", "link"], "what the failed calls created is gone again"
    assert write_file(ws, {"path": "keep.txt", "content": "fits"})["bytes_written"] == 4
    assert (full_disk / "keep.txt").read_text() == "fits"


def test_write_file_new_files_are_0644_before_the_umask(ws: Workspace, root: Path) -> None:
    old = os.umask(0)
    try:
        write_file(ws, {"path": "new", "content": ""})
    finally:
        os.umask(old)
    assert (root / "new").stat().st_mode & 0o777 == 0o644


def test_write_file_round_trips_surrogate_escapes_and_replaces_other_surrogates(ws: Workspace, root: Path) -> None:
    assert write_file(ws, {"path": "esc", "content": "caf\udce9"})["bytes_written"] == 4
    assert (root / "esc").read_bytes() == b"caf\xe9"
    write_file(ws, {"path": "lone", "content": "a\ud800b"})
    assert (root / "lone").read_bytes() == b"a?b"


def test_write_file_follows_symlinks_even_out_of_the_root(ws: Workspace, root: Path) -> None:
    """Nothing is refused for pointing outside the workspace: in the image, that is still the container."""
    (root / "out").symlink_to(root.parent / "target.txt")
    assert write_file(ws, {"path": "out", "content": "through"}) == {"path": "out", "bytes_written": 7}
    assert (root.parent / "target.txt").read_text() == "through"
    assert (root / "out").is_symlink()
    assert write_file(ws, {"path": "../direct.txt", "content": "x"})["path"] == f"{root.parent}/direct.txt"


def test_write_file_refuses_what_is_not_a_regular_file(ws: Workspace, root: Path) -> None:
    (root / "file").write_text("x")
    (root / "dir").mkdir()
    os.mkfifo(root / "fifo")
    assert fails("not_a_directory", write_file, ws, path="file/child.txt", content="x") == (
        "A part of file is a file, not a directory."
    )
    assert fails("is_directory", write_file, ws, path="dir", content="x").startswith("dir is a directory")
    # O_NONBLOCK: a FIFO with no reader fails at once (ENXIO) instead of hanging the request
    assert fails("os_error", write_file, ws, path="fifo", content="x") == "fifo: No such device or address"
    assert fails("not_regular", write_file, ws, path="/dev/null", content="x").startswith("/dev/null is not")
    # deeper under a file, makedirs meets ENOTDIR rather than EEXIST: the generic wording
    assert fails("not_a_directory", write_file, ws, path="file/x/y", content="x") == (
        "A part of file/x is not a directory."
    )


# ----------------------------------------------------------------------------- edit_file

SOURCE = "def a():\n    return 1\n\ndef b():\n    return 1\n"


def test_edit_file_replaces_a_unique_string(ws: Workspace, root: Path) -> None:
    (root / "m.py").write_text(SOURCE)
    result = edit_file(
        ws, {"path": "m.py", "old_string": "def b():\n    return 1", "new_string": "def b():\n    return 2"}
    )
    EditResult.model_validate(result)
    assert result == {"path": "m.py", "replacements": 1}
    assert (root / "m.py").read_text() == "def a():\n    return 1\n\ndef b():\n    return 2\n"


def test_edit_file_ambiguous_says_where_and_changes_nothing(ws: Workspace, root: Path) -> None:
    (root / "m.py").write_text(SOURCE)
    message = fails("not_unique", edit_file, ws, path="m.py", old_string="return 1", new_string="return 3")
    assert message == (
        "old_string occurs 2 times in m.py (at line(s) 2, 5). Include more surrounding lines so it matches "
        "exactly once, or set replace_all to true to change every occurrence."
    )
    assert (root / "m.py").read_text() == SOURCE


def test_edit_file_ambiguous_lists_at_most_ten_places(ws: Workspace, root: Path) -> None:
    (root / "x").write_text("x\n" * 30)
    message = fails("not_unique", edit_file, ws, path="x", old_string="x", new_string="y")
    assert "occurs 30 times in x (at line(s) 1, 2, 3, 4, 5, 6, 7, 8, 9, 10)." in message


def test_edit_file_replace_all_counts(ws: Workspace, root: Path) -> None:
    (root / "m.py").write_text(SOURCE)
    result = edit_file(ws, {"path": "m.py", "old_string": "return 1", "new_string": "return 0", "replace_all": True})
    assert result == {"path": "m.py", "replacements": 2}
    assert (root / "m.py").read_text() == SOURCE.replace("return 1", "return 0")


def test_edit_file_missing_points_at_the_first_line(ws: Workspace, root: Path) -> None:
    (root / "m.py").write_text(SOURCE)
    message = fails("not_found", edit_file, ws, path="m.py", old_string="\n  return 1\n  pass", new_string="z")
    assert message == (
        "old_string was not found in m.py. It must match the file exactly, including whitespace and indentation. "
        "Its first line appears at line(s) 2, 5; read those lines and copy them exactly."
    )
    message = fails("not_found", edit_file, ws, path="m.py", old_string="nowhere", new_string="z")
    assert message.endswith("Read the file first and copy the text you want to change.")


def test_edit_file_missing_but_already_applied(ws: Workspace, root: Path) -> None:
    (root / "m.py").write_text(SOURCE)
    message = fails("not_found", edit_file, ws, path="m.py", old_string="def c():", new_string="def b():")
    assert "but new_string already is: the edit may already be applied" in message


def test_edit_file_refuses_empty_and_no_op_edits(ws: Workspace, root: Path) -> None:
    (root / "m.py").write_text(SOURCE)
    assert "use write_file" in fails("invalid_edit", edit_file, ws, path="m.py", old_string="", new_string="x")
    assert "nothing would change" in fails("invalid_edit", edit_file, ws, path="m.py", old_string="a", new_string="a")


def test_edit_file_keeps_bytes_that_are_not_utf8(ws: Workspace, root: Path) -> None:
    (root / "mixed").write_bytes(b"caf\xe9 = 1\nname = 'x'\n\xff\xfe end\n")
    edit_file(ws, {"path": "mixed", "old_string": "'x'", "new_string": "'y'"})
    assert (root / "mixed").read_bytes() == b"caf\xe9 = 1\nname = 'y'\n\xff\xfe end\n"


def test_edit_file_refuses_huge_files_directories_and_missing_files(ws: Workspace, root: Path) -> None:
    with open(root / "huge", "wb") as f:
        f.truncate(MAX_EDIT_FILE_BYTES + 1)
    (root / "dir").mkdir()
    message = fails("too_large", edit_file, ws, path="huge", old_string="a", new_string="b")
    assert message == f"huge is larger than {MAX_EDIT_FILE_BYTES} bytes; edit it with run_command."
    fails("is_directory", edit_file, ws, path="dir", old_string="a", new_string="b")
    fails("not_found", edit_file, ws, path="nope", old_string="a", new_string="b")
