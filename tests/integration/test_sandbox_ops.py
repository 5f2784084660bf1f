"""Every toolbox operation through the real Docker sandbox: happy paths and the errors the model must read."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from controller.errors import SandboxError
from controller.sandbox import owners
from controller.sandbox.docker import DockerSandbox
from controller.wire.protocol import CommandResult, EditResult, ListResult, ReadResult, SearchResult, WriteResult
from tests.integration.helpers import call, expect, failure
from tests.sandbox_defaults import SANDBOX_LIMITS

# ----------------------------------------------------------------------------- list_files


async def test_list_files(sandbox: DockerSandbox) -> None:
    result = expect(await call(sandbox, "list_files"), ListResult)
    listed = {(e.path, e.type) for e in result.entries}
    assert {("README.md", "file"), ("src", "dir"), ("src/app.py", "file"), (".git", "dir")} <= listed
    assert not any(e.path.startswith(".git/") for e in result.entries)
    readme = next(e for e in result.entries if e.path == "README.md")
    assert readme.size == len("# demo\n")


async def test_list_files_depth_one(sandbox: DockerSandbox) -> None:
    result = expect(await call(sandbox, "list_files", depth=1), ListResult)
    assert "src/app.py" not in {e.path for e in result.entries}


async def test_list_files_missing_and_file(sandbox: DockerSandbox) -> None:
    failure(await call(sandbox, "list_files", path="nowhere"), "not_found")
    failure(await call(sandbox, "list_files", path="README.md"), "not_a_directory")


async def test_list_files_is_bounded(sandbox: DockerSandbox) -> None:
    await call(sandbox, "run_command", command="mkdir many && cd many && seq 1 3000 | xargs touch")
    result = expect(await call(sandbox, "list_files", path="many"), ListResult)
    assert result.truncated and len(result.entries) == 1000


# ----------------------------------------------------------------------------- read_file


async def test_read_file_numbers_lines(sandbox: DockerSandbox) -> None:
    result = expect(await call(sandbox, "read_file", path="src/app.py"), ReadResult)
    assert result.content == "     1\tdef total(items):\n     2\t    return sum(items)"
    assert (result.lines, result.truncated) == (2, False)


async def test_read_file_offset_and_limit(sandbox: DockerSandbox) -> None:
    await call(sandbox, "run_command", command="seq 1 100 > nums.txt")
    result = expect(await call(sandbox, "read_file", path="nums.txt", offset=10, limit=3), ReadResult)
    assert result.content.splitlines() == ["    10\t10", "    11\t11", "    12\t12"]
    assert result.truncated is True


async def test_read_file_errors(sandbox: DockerSandbox) -> None:
    missing = failure(await call(sandbox, "read_file", path="nope.txt"), "not_found")
    assert "nope.txt" in missing.message
    failure(await call(sandbox, "read_file", path="src"), "is_directory")


async def test_read_file_binary_fifo_and_devices(sandbox: DockerSandbox) -> None:
    await call(sandbox, "run_command", command="printf 'a\\0b' > bin; mkfifo pipe; ln -s /dev/zero zero")
    failure(await call(sandbox, "read_file", path="bin"), "binary")
    failure(await call(sandbox, "read_file", path="pipe"), "not_regular")
    failure(await call(sandbox, "read_file", path="zero"), "not_regular")


async def test_read_file_long_line_is_cut(sandbox: DockerSandbox) -> None:
    await call(sandbox, "run_command", command="head -c 5000000 /dev/zero | tr '\\0' x > long.txt")
    result = expect(await call(sandbox, "read_file", path="long.txt"), ReadResult)
    assert len(result.content) < 3000 and "[line truncated: 5000000 bytes]" in result.content


async def test_read_invalid_utf8_is_replaced(sandbox: DockerSandbox) -> None:
    await call(sandbox, "run_command", command="printf 'ok \\377 end\\n' > latin.txt")
    result = expect(await call(sandbox, "read_file", path="latin.txt"), ReadResult)
    assert "ok \ufffd end" in result.content


# ----------------------------------------------------------------------------- write_file


async def test_write_file_creates_parents(sandbox: DockerSandbox) -> None:
    result = expect(await call(sandbox, "write_file", path="deep/er/new.txt", content="héllo\n"), WriteResult)
    assert result.bytes_written == len("héllo\n".encode())
    assert (sandbox.layer.upper / "deep/er/new.txt").read_text() == "héllo\n"


async def test_write_file_errors(sandbox: DockerSandbox) -> None:
    failure(await call(sandbox, "write_file", path="src", content="x"), "is_directory")
    failure(await call(sandbox, "write_file", path="README.md/child", content="x"), "not_a_directory")


# ----------------------------------------------------------------------------- edit_file


async def test_edit_file_replaces_once(sandbox: DockerSandbox) -> None:
    result = expect(
        await call(sandbox, "edit_file", path="src/app.py", old_string="sum(items)", new_string="sum(items or [])"),
        EditResult,
    )
    assert result.replacements == 1
    assert "sum(items or [])" in (sandbox.layer.upper / "src/app.py").read_text()


async def test_edit_file_not_found_helps(sandbox: DockerSandbox) -> None:
    err = failure(
        await call(sandbox, "edit_file", path="src/app.py", old_string="def total(items):\n  return 0", new_string="x"),
        "not_found",
    )
    assert "line(s) 1" in err.message and "exactly" in err.message


async def test_edit_file_already_applied(sandbox: DockerSandbox) -> None:
    err = failure(
        await call(sandbox, "edit_file", path="src/app.py", old_string="gone", new_string="sum(items)"), "not_found"
    )
    assert "already" in err.message


async def test_edit_file_not_unique_then_replace_all(sandbox: DockerSandbox) -> None:
    await call(sandbox, "write_file", path="dup.txt", content="x = 1\ny = 2\nx = 1\n")
    err = failure(
        await call(sandbox, "edit_file", path="dup.txt", old_string="x = 1", new_string="x = 3"), "not_unique"
    )
    assert "2 times" in err.message and "1, 3" in err.message and "replace_all" in err.message
    result = expect(
        await call(sandbox, "edit_file", path="dup.txt", old_string="x = 1", new_string="x = 3", replace_all=True),
        EditResult,
    )
    assert result.replacements == 2
    assert (sandbox.layer.upper / "dup.txt").read_text() == "x = 3\ny = 2\nx = 3\n"


async def test_edit_file_missing_and_directory(sandbox: DockerSandbox) -> None:
    failure(await call(sandbox, "edit_file", path="nope.py", old_string="a", new_string="b"), "not_found")
    failure(await call(sandbox, "edit_file", path="src", old_string="a", new_string="b"), "is_directory")


# ----------------------------------------------------------------------------- search


async def test_search_finds_matches(sandbox: DockerSandbox) -> None:
    result = expect(await call(sandbox, "search", pattern=r"sum\(", glob="*.py"), SearchResult)
    assert result.exit_code == 0
    assert result.matches.text == "src/app.py:2:    return sum(items)\n"


async def test_search_no_match_and_errors(sandbox: DockerSandbox) -> None:
    none = expect(await call(sandbox, "search", pattern="zzz_not_here"), SearchResult)
    assert (none.exit_code, none.matches.text) == (1, "")
    failure(await call(sandbox, "search", pattern="x", path="missing"), "not_found")
    bad = failure(await call(sandbox, "search", pattern="(unclosed"), "search_failed")
    assert "regex" in bad.message.lower()


async def test_search_in_directory_and_file(sandbox: DockerSandbox) -> None:
    in_dir = expect(await call(sandbox, "search", pattern="demo", path="."), SearchResult)
    in_file = expect(await call(sandbox, "search", pattern="return", path="src/app.py"), SearchResult)
    assert "README.md:1:# demo" in in_dir.matches.text
    assert "2:    return" in in_file.matches.text


# ----------------------------------------------------------------------------- run_command


async def test_run_command_reports_everything(sandbox: DockerSandbox) -> None:
    started = time.monotonic()
    result = expect(await call(sandbox, "run_command", command="pwd; echo err >&2; exit 3"), CommandResult)
    round_trip = time.monotonic() - started
    assert result.stdout.text == "/workspace\n"
    assert result.stderr.text == "err\n"
    assert (result.exit_code, result.timed_out) == (3, False)
    assert 0 < result.duration_s <= round_trip, (result.duration_s, round_trip)  # seconds, measured inside the call


async def test_run_command_sees_repo_tools(sandbox: DockerSandbox) -> None:
    tools = "bash coreutils git rg python3 sed grep diff find ps"
    script = (
        "for t in bash git rg python3 sed grep diff find ps ls; do command -v $t >/dev/null || echo missing $t; done"
    )
    result = expect(await call(sandbox, "run_command", command=script), CommandResult)
    assert result.stdout.text == "", f"{tools}: {result.stdout.text}"


async def test_run_command_missing_binary(sandbox: DockerSandbox) -> None:
    result = expect(await call(sandbox, "run_command", command="definitely-not-a-command"), CommandResult)
    assert result.exit_code == 127 and "not found" in result.stderr.text


async def test_concurrent_calls_share_one_channel(sandbox: DockerSandbox) -> None:
    import asyncio

    slow = asyncio.create_task(call(sandbox, "run_command", command="sleep 1; echo slow"))
    fast = [await call(sandbox, "read_file", path="README.md") for _ in range(5)]
    assert all(isinstance(r, ReadResult) for r in fast)
    assert not slow.done()
    assert expect(await slow, CommandResult).stdout.text == "slow\n"


async def test_a_runtime_the_engine_lacks_says_how_to_get_it(
    make_repo: Callable[..., Path], sandbox_factory: Callable[..., DockerSandbox], docker_client: Any
) -> None:
    box = sandbox_factory(make_repo(), SANDBOX_LIMITS.model_copy(update={"runtime": "kata"}))
    with pytest.raises(SandboxError, match=r"The Docker engine has no runtime 'kata'.*daemon\.json"):
        await box.start()
    assert docker_client.containers.list(all=True, filters={"label": f"{owners.SESSION}={box.session_id}"}) == []
