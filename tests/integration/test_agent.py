"""The agent loop end to end: the real SDK over HTTP to the scripted server, a real Docker sandbox.

Each test registers its own scenario under a unique model name and asserts on the
requests the server recorded, i.e. on exactly what the loop sent to the model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from controller.events import SessionFinished, ToolResult
from tests.agent_harness import LIMITS, run_scenario, text, tool

__all__ = ["run_scenario"]


async def test_parallel_calls_answered_in_one_message_in_order(run_scenario: Callable[..., Any]) -> None:
    run = await run_scenario(
        [
            {
                "content": [
                    text("Looking."),
                    tool("read_file", path="README.md"),
                    tool("list_files", depth=1),
                    tool("read_file", path="src/app.py"),
                ]
            },
            {"content": [text("Done.")]},
        ]
    )
    assert run.outcome.reason == "end_turn"
    assert len(run.requests) == 2
    results = run.results(1)
    assert [r["tool_use_id"] for r in results] == [
        "toolu_scripted_000_01",
        "toolu_scripted_000_02",
        "toolu_scripted_000_03",
    ]
    assert (
        "# demo" in results[0]["content"] and "src/" in results[1]["content"] and "def total" in results[2]["content"]
    )
    assert not any(r.get("is_error") for r in results)
    assert run.requests[1]["messages"][1]["role"] == "assistant"
    assert [b["type"] for b in run.requests[1]["messages"][1]["content"]] == [
        "text",
        "tool_use",
        "tool_use",
        "tool_use",
    ]


async def test_writes_and_commands_run_in_order(run_scenario: Callable[..., Any]) -> None:
    run = await run_scenario(
        [
            {
                "content": [
                    tool("write_file", path="o.txt", content="1\n"),
                    tool("run_command", command="echo 2 >> o.txt"),
                    tool("edit_file", path="o.txt", old_string="2", new_string="3"),
                    tool("read_file", path="o.txt"),
                ]
            },
            {"content": [text("ok")]},
        ]
    )
    assert "1\t1\n     2\t3" in run.results(1)[3]["content"]


async def test_bad_calls_become_errors_and_the_session_goes_on(run_scenario: Callable[..., Any]) -> None:
    run = await run_scenario(
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


async def test_command_timeout_is_an_error_result(run_scenario: Callable[..., Any]) -> None:
    run = await run_scenario(
        [{"content": [tool("run_command", command="echo before; sleep 30", timeout_s=1)]}, {"content": [text("ok")]}]
    )
    (result,) = run.results(1)
    assert result["is_error"] is True
    assert "timed out" in result["content"] and "before" in result["content"]


async def test_max_tokens_inside_a_tool_use(run_scenario: Callable[..., Any]) -> None:
    partial = {"type": "tool_use", "name": "write_file", "raw_input": '{"path": "big.txt", "content": "aaaa'}
    run = await run_scenario(
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


async def test_max_tokens_in_text_asks_to_continue(run_scenario: Callable[..., Any]) -> None:
    run = await run_scenario(
        [{"content": [text("The answer is")], "stop_reason": "max_tokens"}, {"content": [text(" 42.")]}]
    )
    last = run.requests[1]["messages"][-1]
    assert last["role"] == "user" and "cut off" in last["content"][-1]["text"]
    assert run.outcome.reason == "end_turn"


async def test_pause_turn_continues(run_scenario: Callable[..., Any]) -> None:
    run = await run_scenario(
        [{"content": [text("Thinking...")], "stop_reason": "pause_turn"}, {"content": [text("Done.")]}]
    )
    assert len(run.requests) == 2 and run.requests[1]["messages"][-1]["role"] == "assistant"
    assert run.outcome.reason == "end_turn"


async def test_two_529s_then_success(run_scenario: Callable[..., Any]) -> None:
    overloaded = {"status": 529, "retry_after": 0.05}
    run = await run_scenario([{"content": [text("Made it.")], "errors": [overloaded, overloaded]}])
    assert len(run.requests) == 3
    assert run.outcome.reason == "end_turn"


async def test_retries_exhausted_end_the_session_with_a_clear_error(run_scenario: Callable[..., Any]) -> None:
    error = {"status": 500, "retry_after": 0.01, "type": "api_error", "message": "backend exploded"}
    run = await run_scenario([{"content": [text("never")], "errors": [error] * 5}], retries=2)
    assert run.outcome.reason == "error"
    assert "500" in run.outcome.detail and "backend exploded" in run.outcome.detail
    assert len(run.requests) == 3


async def test_malformed_tool_input_becomes_an_error_the_model_can_fix(run_scenario: Callable[..., Any]) -> None:
    broken = {"type": "tool_use", "name": "read_file", "raw_input": '{"path": }'}
    run = await run_scenario(
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


async def test_step_limit(run_scenario: Callable[..., Any]) -> None:
    loop = [{"content": [tool("list_files")]}] * 10
    run = await run_scenario(loop, limits=LIMITS.model_copy(update={"max_steps": 3}))
    assert run.outcome.reason == "max_steps" and len(run.requests) == 3
    finished = run.of_type(SessionFinished)[-1]
    assert finished.reason == "max_steps"
    assert run.convo.messages[-1]["role"] == "user"  # the last calls were answered: history stays valid


async def test_token_budget(run_scenario: Callable[..., Any]) -> None:
    loop = [{"content": [tool("list_files")], "input_tokens": 4000, "output_tokens": 100}] * 10
    run = await run_scenario(loop, limits=LIMITS.model_copy(update={"token_budget": 10_000}))
    assert run.outcome.reason == "token_budget" and len(run.requests) == 3
    assert run.of_type(SessionFinished)[-1].usage.total == 12_300


async def test_declined_approval(run_scenario: Callable[..., Any]) -> None:
    asked: list[str] = []

    async def deny(name: str, args: dict[str, Any]) -> bool:
        asked.append(name)
        return False

    run = await run_scenario(
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


async def test_model_sees_truncated_output_event_carries_all(run_scenario: Callable[..., Any]) -> None:
    limits = LIMITS.model_copy(update={"model_output_chars": 2000})
    run = await run_scenario(
        [{"content": [tool("run_command", command="seq 1 100000")]}, {"content": [text("ok")]}], limits=limits
    )
    (result,) = run.results(1)
    assert len(result["content"]) < 2000 + 100 and "characters omitted" in result["content"]
    assert result["content"].startswith("exit code 0") and result["content"].rstrip().endswith("</stdout>")
    event = run.of_type(ToolResult)[0]
    assert "\n50000\n" in event.output and event.output.count("\n") > 100000
    assert event.model_chars == len(result["content"])


async def test_prompt_caching_breakpoints(run_scenario: Callable[..., Any]) -> None:
    run = await run_scenario([{"content": [tool("list_files")]}, {"content": [text("ok")]}])
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
