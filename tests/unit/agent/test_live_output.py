"""A command's live output: coalesced into few events, capped with a last one that says so, all before its result."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from controller.agent.liveoutput import BATCH_CHARS, EVERY_S, LiveOutput, LiveView
from controller.testing import Reply
from controller.wire.events import CommandOutput, ListSink, ToolCall, ToolResult
from controller.wire.protocol import RunCommandOptions
from tests.agent_harness import LIMITS, text, tool


def outputs(sink: ListSink) -> list[CommandOutput]:
    return [e for e in sink.events if isinstance(e, CommandOutput)]


async def test_a_chatty_command_costs_an_event_a_window_and_the_first_piece_goes_at_once() -> None:
    sink = ListSink()
    live = LiveOutput(sink, "s", "call_1", LiveView(1 << 20))
    started = time.monotonic()
    live.feed("first\n", False)
    await asyncio.sleep(0.01)
    assert [e.text for e in outputs(sink)] == ["first\n"]  # after a quiet spell: not held for the window
    pieces = [f"line {n}\n" for n in range(300)]
    for piece in pieces:  # 300 pieces over ~0.3 s
        live.feed(piece, False)
        await asyncio.sleep(0.001)
    await live.close()
    elapsed = time.monotonic() - started
    events = outputs(sink)
    assert "".join(e.text for e in events) == "first\n" + "".join(pieces)
    assert len(events) <= elapsed / EVERY_S + 2, (len(events), elapsed)
    assert not any(e.truncated for e in events) and {e.tool_use_id for e in events} == {"call_1"}


async def test_a_full_batch_is_not_held_for_the_window() -> None:
    sink = ListSink()
    live = LiveOutput(sink, "s", "c", LiveView(1 << 20))
    live.feed("a", False)
    await asyncio.sleep(0)
    live.feed("x" * BATCH_CHARS, False)
    await asyncio.sleep(0.01)  # far less than the window
    assert "".join(e.text for e in outputs(sink)) == "a" + "x" * BATCH_CHARS
    await live.close()


async def test_past_the_cap_the_last_event_says_so_and_nothing_follows() -> None:
    sink = ListSink()
    live = LiveOutput(sink, "s", "c", LiveView(10))
    live.feed("12345", False)
    live.feed("6789abcdef", False)
    live.feed("never shown", False)
    await live.close()
    events = outputs(sink)
    assert "".join(e.text for e in events) == "123456789a"
    assert events[-1].truncated and not any(e.truncated for e in events[:-1])


async def test_the_toolboxs_own_cut_is_passed_on() -> None:
    sink = ListSink()
    live = LiveOutput(sink, "s", "c", LiveView(100))
    live.feed("cut here", True)
    live.feed("more", False)
    await live.close()
    assert [(e.text, e.truncated) for e in outputs(sink)] == [("cut here", True)]


async def test_a_watcher_that_fails_does_not_stop_the_output() -> None:
    sink, seen = ListSink(), []

    async def watch(event: CommandOutput) -> None:
        seen.append(event.text)
        raise ConnectionError("the client went")

    live = LiveOutput(sink, "s", "c", LiveView(100, watch))
    live.feed("a", False)
    await asyncio.sleep(0.01)
    live.feed("b", False)
    await live.close()
    assert seen == ["a", "b"] and "".join(e.text for e in outputs(sink)) == "ab"


async def test_in_the_loop_output_comes_between_the_call_and_its_result(run_in_memory: Callable[..., Any]) -> None:
    turns = [{"content": [tool("run_command", command="make")]}, {"content": [text("done")]}]
    run = await run_in_memory(turns, commands={"make": Reply(stdout="built\n", stderr="warned\n", seconds=0.05)})
    kinds = [type(e).__name__ for e in run.events if isinstance(e, ToolCall | CommandOutput | ToolResult)]
    assert kinds == ["ToolCall", "CommandOutput", "ToolResult"]
    (output,) = run.of_type(CommandOutput)
    assert output.text == "built\nwarned\n" and output.tool_use_id == run.of_type(ToolCall)[0].id
    (request,) = run.sandbox.calls
    assert isinstance(request.args, RunCommandOptions) and request.args.live_output == LIMITS.live_output_bytes


async def test_live_output_switched_off_asks_the_toolbox_for_none(run_in_memory: Callable[..., Any]) -> None:
    turns = [{"content": [tool("run_command", command="make")]}, {"content": [text("done")]}]
    limits = LIMITS.model_copy(update={"live_output_bytes": 0})
    run = await run_in_memory(turns, limits=limits, commands={"make": Reply(stdout="built\n")})
    assert run.of_type(CommandOutput) == []
    (request,) = run.sandbox.calls
    assert request.args.live_output == 0
    assert "built" in run.of_type(ToolResult)[0].output  # the model's result is the same


async def test_after_its_brisk_events_a_trickle_is_emitted_once_a_second() -> None:
    """A command trickling a byte at a time costs ten events a second at first, then one a second."""
    sink = ListSink()
    live = LiveOutput(sink, "s", "c", LiveView(1 << 20, brisk=2))
    started = time.monotonic()
    while time.monotonic() - started < 1.6:
        live.feed("x", False)
        await asyncio.sleep(0.01)
    await live.close()
    events = outputs(sink)
    assert "".join(e.text for e in events) == "x" * sum(len(e.text) for e in events)
    assert 3 <= len(events) <= 5, len(events)  # two brisk, then about one a second (and the rest at the close)
