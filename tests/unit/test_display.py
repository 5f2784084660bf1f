"""What the live terminal view shows of calls and results."""

from __future__ import annotations

import json

import pytest

from controller.display import JsonSink, preview, summarize_args
from controller.events import TextDelta


def test_result_preview_for_the_live_view() -> None:
    assert (
        preview("exit code 0 after 0.1s\n<stdout>\nLinux x86_64\n1000\n</stdout>\n")
        == "exit code 0 after 0.1s · Linux x86_64  (+1 lines)"
    )
    assert preview("Wrote 5 bytes to a.txt.") == "Wrote 5 bytes to a.txt."
    assert preview("") == ""
    assert summarize_args("write_file", {"path": "a.py", "content": "x" * 10}) == "a.py (10 chars)"
    assert summarize_args("run_command", {"command": "make\ntest", "timeout_s": 5}) == "make ⏎ test timeout_s=5"


async def test_json_events_are_ascii_so_a_terminal_shows_them_inert(capsys: pytest.CaptureFixture[str]) -> None:
    hostile = "\x1b]52;c;eA==\x07 \u009b2J \u202eevil \ud800"
    await JsonSink().emit(TextDelta(session_id="s", text=hostile))
    line = capsys.readouterr().out
    assert line.isascii() and "\x1b" not in line
    assert json.loads(line)["text"] == hostile
