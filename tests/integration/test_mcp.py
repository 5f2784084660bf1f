"""`cubicle mcp REPO` driven by the official MCP client of the same SDK (`stdio_client` + `ClientSession`).

The server runs as a user would start it (a subprocess of `python -m controller mcp`) against a
real engine; the session it records is then read back through the store and `cubicle changes`.
"""

from __future__ import annotations

import json
import re
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from controller.agent import tools
from controller.server import served
from controller.server.store import Store
from tests.eventually import eventually
from tests.integration.cli_helpers import cubicle, environment
from tests.integration.helpers import doc_example
from tests.integration.mcp_helpers import Raw, raw_server
from tests.integration.pty_helpers import owned_by


@asynccontextmanager
async def mcp_session(
    repo: Path, data: Path, instance: str, *flags: str, log: Path | None = None
) -> AsyncIterator[ClientSession]:
    """An initialized MCP client session on `cubicle mcp REPO`; leaving it closes stdin as MCP clients do."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "controller", "mcp", str(repo), *flags],
        env=environment({"CUBICLE_DATA_DIR": str(data), "CUBICLE_INSTANCE": instance}),
    )
    with (log or data.parent / "mcp-stderr.log").open("w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session


def only_session(data: Path) -> Any:
    store = Store(data / "cubicle.db")
    try:
        (record,) = store.with_status("running") or store.with_status("idle") or store.with_status("failed")
        return record, store.events_after(record.id, 0, limit=10_000)
    finally:
        store.close()


def text(result: Any) -> str:
    (block,) = result.content
    return str(block.text)


async def test_the_official_client_calls_every_tool_in_one_sandbox_and_the_changes_are_kept(
    tmp_path: Path, make_repo: Callable[..., Path], docker_client: Any
) -> None:
    repo = make_repo()
    before = {p: p.read_bytes() for p in repo.rglob("*") if p.is_file()}
    data, instance = tmp_path / "data", "mcp-tools-test"
    async with mcp_session(repo, data, instance) as client:
        listed = (await client.list_tools()).tools
        assert [
            {"name": t.name, "description": t.description, "input_schema": t.input_schema} for t in listed
        ] == tools.definitions()
        assert {t.name: t.annotations.read_only_hint for t in listed if t.annotations} == {
            name: tools.is_read_only(name) for name in tools.TOOLS
        }

        listing = await client.call_tool("list_files", {"path": "."})
        assert not listing.is_error and "README.md" in text(listing) and "src/" in text(listing)
        read = await client.call_tool("read_file", {"path": "README.md"})
        assert (read.is_error, text(read)) == (False, "     1\t# demo")
        wrote = await client.call_tool("write_file", {"path": "notes/new.txt", "content": "from mcp\n"})
        assert (wrote.is_error, text(wrote)) == (False, "Wrote 9 bytes to notes/new.txt.")
        edited = await client.call_tool(
            "edit_file", {"path": "src/app.py", "old_string": "sum(items)", "new_string": "sum(items) + 0"}
        )
        assert (edited.is_error, text(edited)) == (False, "Edited src/app.py: 1 replacement.")
        found = await client.call_tool("search", {"pattern": "def total"})
        assert not found.is_error and "src/app.py:1:def total(items):" in text(found)
        ran = await client.call_tool("run_command", {"command": "cat notes/new.txt; id -u; ls /workspace"})
        assert not ran.is_error and text(ran).startswith("exit code 0 after")
        assert "from mcp\n1000\n" in text(ran)

        missing = await client.call_tool("read_file", {"path": "nope.txt"})
        assert missing.is_error and text(missing) == "nope.txt does not exist. List the directory to see what is there."
        invalid = await client.call_tool("read_file", {"pth": "README.md"})
        assert invalid.is_error and text(invalid).startswith("Invalid arguments for read_file: path: Field required")
        unknown = await client.call_tool("format_disk", {})
        assert unknown.is_error and text(unknown).startswith("Unknown tool 'format_disk'.")
        failed = await client.call_tool("run_command", {"command": "echo oops >&2; exit 3"})
        assert not failed.is_error and text(failed).startswith("exit code 3") and "<stderr>\noops" in text(failed)

        slow = await client.call_tool("run_command", {"command": "sleep 60 & sleep 61; echo never", "timeout_s": 1})
        assert slow.is_error and re.match(r"timed out after \d+\.\ds", text(slow)), text(slow)  # 1 s and the kill
        assert "the command and its children were killed" in text(slow)
        after = await client.call_tool("run_command", {"command": "ps -eo args"})
        assert "sleep" not in text(after)

        with anyio.move_on_after(1.5):  # the client abandons the call: it sends notifications/cancelled
            await client.call_tool("run_command", {"command": "sleep 62 & sleep 63"})
        await anyio.sleep(0.5)
        assert "sleep" not in text(await client.call_tool("run_command", {"command": "ps -eo args"}))

        record, _ = only_session(data)
        assert record.status == "running" and record.id.startswith("mcp-")
        assert len(owned_by(docker_client, instance)) == 1
    assert owned_by(docker_client, instance) == []

    record, events = only_session(data)
    assert record.status == "idle"
    kinds = [e.type for e in events]
    assert kinds[:2] == ["session_started", "status"] and kinds[-2:] == ["changes", "session_finished"]
    calls = [e for e in events if e.type == "tool_call"]
    results = {e.id: e for e in events if e.type == "tool_result"}
    assert len(calls) == len(results) == 14
    cancelled = results[calls[-2].id]
    assert cancelled.is_error and "cancelled after" in cancelled.output
    assert events[-1].detail == "the MCP client disconnected after 14 tool calls"

    assert {p: p.read_bytes() for p in repo.rglob("*") if p.is_file()} == before  # the checkout is untouched
    changes = cubicle("changes", record.id, env={"CUBICLE_DATA_DIR": str(data)})
    assert changes.returncode == 0, changes.stderr
    assert "notes/new.txt" in changes.stdout and "src/app.py" in changes.stdout
    applied = cubicle("apply", record.id, env={"CUBICLE_DATA_DIR": str(data)})
    assert applied.returncode == 0, applied.stderr
    assert (repo / "notes" / "new.txt").read_text() == "from mcp\n"
    assert (repo / "src" / "app.py").read_text() == "def total(items):\n    return sum(items) + 0\n"


async def test_the_layer_is_checkpointed_every_fifty_calls(tmp_path: Path, make_repo: Callable[..., Path]) -> None:
    data = tmp_path / "data"
    async with mcp_session(make_repo(), data, "mcp-checkpoint-test") as client:
        await client.call_tool("write_file", {"path": "a.txt", "content": "a"})
        for _ in range(served.CHECKPOINT_EVERY - 1):
            await client.call_tool("read_file", {"path": "a.txt"})
        _, events = only_session(data)
        checkpoints = [e for e in events if e.type == "changes"]
        assert [(c.checkpoint, c.summary.files) for c in checkpoints] == [(1, 1)]
    _, events = only_session(data)
    assert [e.checkpoint for e in events if e.type == "changes"] == [1, 2]


async def test_a_failed_setup_fails_every_call_with_its_output(tmp_path: Path, make_repo: Callable[..., Path]) -> None:
    data = tmp_path / "data"
    async with mcp_session(make_repo(), data, "mcp-setup-test", "--setup", "echo broken-setup >&2; exit 3") as client:
        for _ in range(2):
            result = await client.call_tool("read_file", {"path": "README.md"})
            assert result.is_error
            assert text(result).startswith("The sandbox's environment could not be prepared, so no tool can run:")
            assert "broken-setup" in text(result)
    record, events = only_session(data)
    assert record.status == "failed" and "broken-setup" in record.detail
    assert [e.kind for e in events if e.type == "error"] == ["setup"]


def _sleeping(server: Raw, data: Path, docker_client: Any) -> None:
    """The server initialized, with a `sleep 300` running in its one container."""
    server.initialize()
    server.call(1, "run_command", {"command": "sleep 300"})
    eventually(lambda: [e for e in only_session(data)[1] if e.type == "tool_call"], what="the call is recorded")
    eventually(lambda: len(owned_by(docker_client, server.instance)) == 1, what="its one container runs")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_ends_the_session_and_removes_the_container(
    tmp_path: Path, make_repo: Callable[..., Path], docker_client: Any, signum: int
) -> None:
    data, instance = tmp_path / "data", f"mcp-signal-test-{signum}"
    with raw_server(make_repo(), data, instance, docker_client) as server:
        _sleeping(server, data, docker_client)
        server.process.send_signal(signum)
        assert server.process.wait(30) == 128 + signum, server.stderr()
    assert owned_by(docker_client, instance) == []
    record, events = only_session(data)
    assert record.status == "idle"
    assert events[-1].type == "session_finished"
    assert events[-1].detail == f"stopped by {signal.Signals(signum).name} after 1 tool calls"
    (result,) = [e for e in events if e.type == "tool_result"]
    assert result.is_error and "cancelled after" in result.output


def test_a_sigterm_right_after_the_client_closes_stdin_does_not_cut_the_clean_up_short(
    tmp_path: Path, make_repo: Callable[..., Path], docker_client: Any
) -> None:
    """MCP clients close stdin, then send SIGTERM if the server is still there a moment later."""
    data, instance = tmp_path / "data", "mcp-close-then-term-test"
    with raw_server(make_repo(), data, instance, docker_client) as server:
        _sleeping(server, data, docker_client)
        assert server.process.stdin is not None
        server.process.stdin.close()
        # The signal comes once the server has seen the close and begun its clean-up (its `changes` event; the
        # container's removal comes after it), as a client's would a moment later on any machine's load.
        deadline = time.monotonic() + 30
        while not [e for e in only_session(data)[1] if e.type == "changes"] and time.monotonic() < deadline:
            time.sleep(0.01)
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(30) in (0, 143), server.stderr()
        assert "Traceback" not in server.stderr()
    assert owned_by(docker_client, instance) == []
    record, events = only_session(data)
    assert record.status == "idle"
    assert [e.type for e in events[-2:]] == ["changes", "session_finished"]
    assert events[-1].detail == "the MCP client disconnected after 1 tool calls"


def test_a_bad_repository_is_a_usage_error_and_stdout_stays_empty(
    tmp_path: Path, make_repo: Callable[..., Path]
) -> None:
    missing = cubicle("mcp", str(tmp_path / "nowhere"), env={"CUBICLE_DATA_DIR": str(tmp_path / "data")})
    assert (missing.returncode, missing.stdout) == (2, "")
    assert "does not exist" in " ".join(missing.stderr.split())
    rooted = cubicle("mcp", str(make_repo("rooted", uid=0)), env={"CUBICLE_DATA_DIR": str(tmp_path / "data")})
    assert (rooted.returncode, rooted.stdout) == (2, "")
    assert "is owned by root" in " ".join(rooted.stderr.split())


async def test_the_readme_configuration_starts_a_working_server(
    tmp_path: Path, make_repo: Callable[..., Path], docker_client: Any
) -> None:
    """The README's `mcpServers` entry, as a client would run it: `cubicle` from PATH, HOME's data directory."""
    (entry,) = json.loads(doc_example("docs/guides/mcp.md", "# MCP server (`cubicle mcp`)", "json"))[
        "mcpServers"
    ].values()
    repo = make_repo("home/you/code/shop")
    home = repo.parents[1]
    args = [arg.replace("/home/you", str(home)) for arg in entry["args"]]
    assert entry["command"] == "cubicle" and args[:2] == ["mcp", str(repo)]
    bin_dir = str(Path(sys.executable).parent)  # where `pip install` put the `cubicle` script
    env = {"HOME": str(home), "PATH": f"{bin_dir}:/usr/bin:/bin", "CUBICLE_INSTANCE": "mcp-readme-test"}
    params = StdioServerParameters(command=entry["command"], args=args, env=env)
    with (tmp_path / "stderr.log").open("w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            assert len((await client.list_tools()).tools) == 6
            assert text(await client.call_tool("read_file", {"path": "README.md"})) == "     1\t# demo"
    assert owned_by(docker_client, "mcp-readme-test") == []
    assert list((home / ".local" / "share" / "cubicle" / "workspaces").iterdir())


async def test_an_idle_container_is_removed_and_the_next_call_starts_one(
    tmp_path: Path, make_repo: Callable[..., Path], docker_client: Any
) -> None:
    """CUBICLE_IDLE_TIMEOUT_S applies as between the API's turns: files stay (the layer), the container goes."""
    data, instance = tmp_path / "data", "mcp-idle-test"
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "controller", "mcp", str(make_repo())],
        env=environment({"CUBICLE_DATA_DIR": str(data), "CUBICLE_INSTANCE": instance, "CUBICLE_IDLE_TIMEOUT_S": "1"}),
    )
    with (tmp_path / "stderr.log").open("w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            await client.call_tool("write_file", {"path": "kept.txt", "content": "still here\n"})
            (first,) = owned_by(docker_client, instance)
            deadline = time.monotonic() + 30
            while owned_by(docker_client, instance) and time.monotonic() < deadline:
                await anyio.sleep(0.2)
            assert owned_by(docker_client, instance) == []
            again = await client.call_tool("run_command", {"command": "cat kept.txt"})
            assert not again.is_error and "still here" in text(again)
            (second,) = owned_by(docker_client, instance)
            assert second != first
    assert owned_by(docker_client, instance) == []


async def test_a_commands_output_reaches_the_client_as_progress_while_it_runs(
    tmp_path: Path, make_repo: Callable[..., Path], docker_client: Any
) -> None:
    """The official client's progress callback hears each line (the last line of each piece, escapes spelled out)
    while the command runs (after its first step the command waits until the client has heard it); the result is
    the model's usual text, and the record keeps the command_output events."""
    data = tmp_path / "data"
    instance = "mcp-progress-test"
    heard: list[tuple[float, float, str | None]] = []
    step = "printf 'step %s \\033[31m\\343\\205\\244\\n'"  # U+3164
    command = (
        f"{step} 1; for _ in $(seq 600); do [ -e /tmp/heard ] && break; sleep 0.05; done; [ -e /tmp/heard ] && "
        f"for i in 2 3 4; do {step} $i; sleep 0.3; done"
    )

    async def progress(done: float, total: float | None, message: str | None) -> None:
        if not heard:  # the first step: tell the command, which waits for it
            (container,) = await anyio.to_thread.run_sync(owned_by, docker_client, instance)
            await anyio.to_thread.run_sync(lambda: docker_client.containers.get(container).exec_run("touch /tmp/heard"))
        heard.append((time.monotonic(), done, message))

    async with mcp_session(make_repo(), data, instance) as client:
        result = await client.call_tool("run_command", {"command": command}, progress_callback=progress)
    assert not result.is_error and text(result).count("step") == 4, text(result)
    assert len(heard) >= 2, heard
    assert [done for _, done, _ in heard] == sorted(done for _, done, _ in heard)
    assert all(message and message.startswith("step ") and "\\x1b[31m\\u3164" in message for *_, message in heard)
    _, events = only_session(data)
    kinds = [e.type for e in events if e.type in ("tool_call", "command_output", "tool_result")]
    assert kinds[0] == "tool_call" and kinds[-1] == "tool_result" and set(kinds[1:-1]) == {"command_output"}
