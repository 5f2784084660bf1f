"""The agent loop with no container: the real SDK over HTTP to the scripted server, a MemorySandbox.

Each test registers its own scenario under a unique model name and asserts on the
requests the server recorded, i.e. on exactly what the loop sent to the model. The same
loop against a real Docker sandbox is in tests/integration/test_agent.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from controller.errors import SandboxError
from controller.testing import MemorySandbox, Reply
from controller.wire.events import ErrorEvent, SessionFinished, ToolResult
from controller.wire.protocol import Call, Outcome, OutputFeed
from tests.agent_harness import LIMITS, REPO_FILES, text, tool
from tests.eventually import eventually_async


async def test_bad_calls_become_errors_and_the_session_goes_on(run_in_memory: Callable[..., Any]) -> None:
    run = await run_in_memory(
        [
            {
                "content": [
                    tool("delete_everything", path="/"),
                    tool("read_file"),
                    tool("read_file", path="README.md", mode="rb"),
                    tool("read_file", path="README.md", offset="first"),
                ]
            },
            {"content": [text("Recovered.")]},
        ]
    )
    unknown, missing, extra, wrong = run.results(1)
    assert all(r["is_error"] is True for r in (unknown, missing, extra, wrong))
    assert "Unknown tool 'delete_everything'" in unknown["content"] and "read_file" in unknown["content"]
    assert "path: Field required" in missing["content"]
    assert "mode: not an argument of read_file" in extra["content"]
    assert "offset:" in wrong["content"] and "integer" in wrong["content"]
    assert run.outcome.reason == "end_turn"


async def test_command_timeout_is_an_error_result(run_in_memory: Callable[..., Any]) -> None:
    slow = {"echo before; sleep 30": Reply(stdout="before\n", seconds=30)}
    run = await run_in_memory(
        [{"content": [tool("run_command", command="echo before; sleep 30", timeout_s=1)]}, {"content": [text("ok")]}],
        commands=slow,
    )
    (result,) = run.results(1)
    assert result["is_error"] is True
    assert "timed out" in result["content"] and "before" in result["content"]


async def test_max_tokens_inside_a_tool_use(run_in_memory: Callable[..., Any]) -> None:
    partial = {"type": "tool_use", "name": "write_file", "raw_input": '{"path": "big.txt", "content": "aaaa'}
    run = await run_in_memory(
        [
            {"content": [text("Writing."), partial], "stop_reason": "max_tokens"},
            {"content": [tool("write_file", path="big.txt", content="aaaa")]},
            {"content": [text("Done in smaller steps.")]},
        ]
    )
    (cut,) = run.results(1)
    assert cut["is_error"] is True and "cut off" in cut["content"]
    assert run.outcome.reason == "end_turn" and len(run.requests) == 3
    assert not run.results(2)[0].get("is_error")


async def test_max_tokens_in_text_asks_to_continue(run_in_memory: Callable[..., Any]) -> None:
    run = await run_in_memory(
        [{"content": [text("The answer is")], "stop_reason": "max_tokens"}, {"content": [text(" 42.")]}]
    )
    last = run.requests[1]["messages"][-1]
    assert last["role"] == "user" and "cut off" in last["content"][-1]["text"]
    assert run.outcome.reason == "end_turn"


async def test_pause_turn_continues(run_in_memory: Callable[..., Any]) -> None:
    run = await run_in_memory(
        [{"content": [text("Thinking...")], "stop_reason": "pause_turn"}, {"content": [text("Done.")]}]
    )
    assert len(run.requests) == 2 and run.requests[1]["messages"][-1]["role"] == "assistant"
    assert run.outcome.reason == "end_turn"


async def test_two_529s_then_success(run_in_memory: Callable[..., Any]) -> None:
    overloaded = {"status": 529, "retry_after": 0.05}
    run = await run_in_memory([{"content": [text("Made it.")], "errors": [overloaded, overloaded]}])
    assert len(run.requests) == 3
    assert run.outcome.reason == "end_turn"


async def test_retries_exhausted_end_the_session_with_a_clear_error(run_in_memory: Callable[..., Any]) -> None:
    error = {"status": 500, "retry_after": 0.01, "type": "api_error", "message": "backend exploded"}
    run = await run_in_memory([{"content": [text("never")], "errors": [error] * 5}], retries=2)
    assert run.outcome.reason == "error"
    assert "500" in run.outcome.detail and "backend exploded" in run.outcome.detail
    assert len(run.requests) == 3


async def test_malformed_tool_input_becomes_an_error_the_model_can_fix(run_in_memory: Callable[..., Any]) -> None:
    broken = {"type": "tool_use", "name": "read_file", "raw_input": '{"path": }'}
    run = await run_in_memory(
        [{"content": [broken]}, {"content": [tool("read_file", path="README.md")]}, {"content": [text("ok")]}]
    )
    (result,) = run.results(1)
    assert (
        result["is_error"] is True
        and "could not be read" in result["content"]
        and "JSONDecodeError" in result["content"]
    )
    assert "cubicle_invalid_json" in run.requests[1]["messages"][1]["content"][0]["input"]  # history stays sendable
    assert "# demo" in run.results(2)[0]["content"]
    assert run.outcome.reason == "end_turn"


async def test_step_limit(run_in_memory: Callable[..., Any]) -> None:
    loop = [{"content": [tool("list_files")]}] * 10
    run = await run_in_memory(loop, limits=LIMITS.model_copy(update={"max_steps": 3}))
    assert run.outcome.reason == "max_steps" and len(run.requests) == 3
    finished = run.of_type(SessionFinished)[-1]
    assert finished.reason == "max_steps"
    assert run.convo.messages[-1]["role"] == "user"  # the last calls were answered: history stays valid


async def test_token_budget(run_in_memory: Callable[..., Any]) -> None:
    loop = [{"content": [tool("list_files")], "input_tokens": 4000, "output_tokens": 100}] * 10
    run = await run_in_memory(loop, limits=LIMITS.model_copy(update={"token_budget": 10_000}))
    assert run.outcome.reason == "token_budget" and len(run.requests) == 3
    assert run.of_type(SessionFinished)[-1].usage.total == 12_300


async def test_declined_approval(run_in_memory: Callable[..., Any]) -> None:
    asked: list[str] = []

    async def deny(name: str, args: dict[str, Any]) -> bool:
        asked.append(name)
        return False

    run = await run_in_memory(
        [
            {"content": [tool("read_file", path="README.md"), tool("run_command", command="rm -rf /workspace/src")]},
            {"content": [text("ok")]},
        ],
        approver=deny,
    )
    read, command = run.results(1)
    assert asked == ["run_command"]
    assert not read.get("is_error") and command["is_error"] is True and "declined" in command["content"]
    assert run.outcome.reason == "end_turn"


async def test_model_sees_truncated_output_event_carries_all(run_in_memory: Callable[..., Any]) -> None:
    limits = LIMITS.model_copy(update={"model_output_chars": 2000})
    seq = {"seq 1 100000": Reply(stdout="".join(f"{n}\n" for n in range(1, 100001)))}
    run = await run_in_memory(
        [{"content": [tool("run_command", command="seq 1 100000")]}, {"content": [text("ok")]}],
        limits=limits,
        commands=seq,
    )
    (result,) = run.results(1)
    assert len(result["content"]) < 2000 + 100 and "characters omitted" in result["content"]
    assert result["content"].startswith("exit code 0") and result["content"].rstrip().endswith("</stdout>")
    event = run.of_type(ToolResult)[0]
    assert "\n50000\n" in event.output and event.output.count("\n") > 100000
    assert event.model_chars == len(result["content"])


async def test_prompt_caching_breakpoints(run_in_memory: Callable[..., Any]) -> None:
    run = await run_in_memory([{"content": [tool("list_files")]}, {"content": [text("ok")]}])
    for request in run.requests:
        assert request["system"][-1]["cache_control"] == {"type": "ephemeral"}
        assert request["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
        assert [t["name"] for t in request["tools"]] == [
            "list_files",
            "read_file",
            "write_file",
            "edit_file",
            "search",
            "run_command",
        ]
        assert all(t["input_schema"]["additionalProperties"] is False for t in request["tools"])
    # the stored transcript keeps no cache markers: they are added per request
    assert "cache_control" not in str(run.convo.messages)


async def test_the_tools_results_read_as_the_model_expects(run_in_memory: Callable[..., Any]) -> None:
    run = await run_in_memory(
        [
            {
                "content": [
                    tool("list_files"),
                    tool("search", pattern="sum", glob="*.py"),
                    tool("search", pattern="nothing-matches-this"),
                    tool("edit_file", path="src/app.py", old_string="sum(items)", new_string="sum(items, 0)"),
                    tool("read_file", path="src/app.py", limit=1),
                    tool("read_file", path="missing.txt"),
                    tool("write_file", path="empty.txt", content=""),
                    tool("read_file", path="empty.txt"),
                ]
            },
            {"content": [text("ok")]},
        ]
    )
    listing, found, none, edited, head, missing, written, empty = (r["content"] for r in run.results(1))
    assert "dir" in listing and "src/" in listing and "README.md" in listing
    assert found == "src/app.py:2:    return sum(items)\n" and none == "No matches."
    assert edited == "Edited src/app.py: 1 replacement."
    assert head.startswith("     1\tdef total(items):") and "read on with offset=2" in head
    assert "missing.txt does not exist" in missing and run.results(1)[5]["is_error"] is True
    assert written == "Wrote 0 bytes to empty.txt." and empty == "(empty file)"


async def test_cancelling_the_turn_keeps_the_running_commands_output(run_in_memory: Callable[..., Any]) -> None:
    """Cancel while a command runs: the command's result (cancelled, with output) stays in the transcript."""
    sandbox = MemorySandbox(REPO_FILES, {"make test": Reply(stdout="3 passed so far\n", seconds=60)})
    turn = asyncio.create_task(
        run_in_memory([{"content": [tool("run_command", command="make test")]}], sandbox=sandbox)
    )
    await eventually_async(lambda: sandbox.calls, what="the command to start", timeout=10, interval=0.01)
    turn.cancel()
    run = await turn
    assert run.outcome.reason == "cancelled"
    (result,) = run.convo.messages[-1]["content"]
    assert result["is_error"] is True and "3 passed so far" in result["content"]
    assert run.of_type(SessionFinished)[-1].reason == "cancelled" and sandbox.stops == 1


async def test_the_wall_clock_ends_the_turn_and_stops_the_sandbox(run_in_memory: Callable[..., Any]) -> None:
    limits = LIMITS.model_copy(update={"wall_clock_s": 1})
    run = await run_in_memory(
        [{"content": [tool("run_command", command="sleep 60")]}],
        limits=limits,
        commands={"sleep 60": Reply(seconds=60)},
    )
    assert run.outcome.reason == "timeout" and "longer than 1s" in run.outcome.detail
    assert run.convo.messages[-1]["content"][0]["is_error"] is True  # answered: the history stays sendable
    assert run.sandbox.stops == 1


class _BrokenSandbox(MemorySandbox):
    """A sandbox whose container cannot start, like a missing image or a stopped engine."""

    async def call(self, request: Call, timeout: float, on_output: OutputFeed | None = None) -> Outcome:
        raise SandboxError("the sandbox image is missing; run `cubicle image build`")


async def test_a_sandbox_that_cannot_start_ends_the_turn_with_its_reason(run_in_memory: Callable[..., Any]) -> None:
    run = await run_in_memory([{"content": [tool("list_files")]}], sandbox=_BrokenSandbox())
    assert run.outcome.reason == "error" and "cubicle image build" in run.outcome.detail
    (error,) = run.of_type(ErrorEvent)
    assert error.kind == "sandbox"
    assert "Interrupted before it returned a result" in run.convo.messages[-1]["content"][0]["content"]


async def test_an_unknown_command_is_a_result_not_a_failure(run_in_memory: Callable[..., Any]) -> None:
    run = await run_in_memory(
        [{"content": [tool("run_command", command="frobnicate --all")]}, {"content": [text("ok")]}]
    )
    (result,) = run.results(1)
    assert "exit code 127" in result["content"] and "frobnicate: command not found" in result["content"]
    assert not result.get("is_error") and run.of_type(ToolResult)[0].exit_code == 127


async def test_a_workspace_past_its_names_limit_ends_the_turn_after_the_command(
    run_in_memory: Callable[..., Any],
) -> None:
    sandbox = MemorySandbox(dict(REPO_FILES), {"make": Reply(stdout="made")}, names=len(REPO_FILES) - 1)
    run = await run_in_memory(
        [{"content": [tool("read_file", path="src/app.py")]}, {"content": [tool("run_command", command="make")]}],
        sandbox=sandbox,
    )
    assert run.outcome.reason == "too_many_entries" and "entries" in run.outcome.detail
    (error,) = run.of_type(ErrorEvent)
    assert error.kind == "too_many_entries"
    last = run.convo.messages[-1]["content"]
    assert last[0]["type"] == "tool_result" and "made" in last[0]["content"]  # the command's own result is kept
    assert last[-1]["text"].startswith("[Cubicle, not the user] The turn was stopped")
    assert len(sandbox.calls) == 2  # the read before it did not count names; no model request after it
