"""MemorySandbox answers like the toolbox does, so loop tests without a container read true results."""

from __future__ import annotations

from controller.testing import MemorySandbox, Reply
from controller.wire import protocol
from controller.wire.protocol import CommandResult, EditResult, Failure, ListResult, ReadResult, SearchResult

FILES = {"a.txt": "one\ntwo\ntwo\n", "src/pkg/mod.py": "x = 1\n", "src/main.py": "import pkg\n"}


async def ask(box: MemorySandbox, op: str, **args: object) -> protocol.Outcome:
    return await box.call(protocol.call(op, **args), 5)


async def test_listing_descends_depth_levels() -> None:
    box = MemorySandbox(FILES)
    top = await ask(box, "list_files", depth=1)
    assert isinstance(top, ListResult) and [(e.path, e.type) for e in top.entries] == [
        ("a.txt", "file"),
        ("src", "dir"),
    ]
    deep = await ask(box, "list_files", path="src", depth=2)
    assert isinstance(deep, ListResult)
    assert [e.path for e in deep.entries] == ["src/main.py", "src/pkg", "src/pkg/mod.py"]


async def test_reading_pages_through_numbered_lines() -> None:
    box = MemorySandbox(FILES)
    page = await ask(box, "read_file", path="a.txt", offset=2, limit=1)
    assert isinstance(page, ReadResult) and page.content == "     2\ttwo" and page.truncated and page.size == 12


async def test_edits_must_be_unique_unless_all_are_replaced() -> None:
    box = MemorySandbox(FILES)
    ambiguous = await ask(box, "edit_file", path="a.txt", old_string="two", new_string="2")
    assert isinstance(ambiguous, Failure) and ambiguous.kind == "not_unique"
    missing = await ask(box, "edit_file", path="a.txt", old_string="three", new_string="3")
    assert isinstance(missing, Failure) and missing.kind == "not_found"
    done = await ask(box, "edit_file", path="a.txt", old_string="two", new_string="2", replace_all=True)
    assert isinstance(done, EditResult) and done.replacements == 2 and box.files["a.txt"] == "one\n2\n2\n"


async def test_search_is_limited_to_its_path() -> None:
    box = MemorySandbox(FILES)
    hits = await ask(box, "search", pattern=r"\w+ = 1", path="src")
    assert isinstance(hits, SearchResult) and hits.matches.text == "src/pkg/mod.py:1:x = 1\n" and hits.exit_code == 0


async def test_commands_come_from_the_table_and_are_never_run() -> None:
    box = MemorySandbox(commands={"make": Reply(stdout="built\n", exit_code=2)})
    made = await ask(box, "run_command", command="make")
    assert isinstance(made, CommandResult) and (made.exit_code, made.stdout.text) == (2, "built\n")
    unknown = await ask(box, "run_command", command="touch /tmp/should-not-exist")
    assert isinstance(unknown, CommandResult) and unknown.exit_code == 127
    assert [c.op for c in box.calls] == ["run_command", "run_command"]
