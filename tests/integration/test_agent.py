"""The agent loop end to end: the real SDK over HTTP to the scripted server, a real Docker sandbox.

Each test registers its own scenario under a unique model name and asserts on the
requests the server recorded, i.e. on exactly what the loop sent to the model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.agent_harness import text, tool


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
