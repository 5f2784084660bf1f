"""What the live terminal view shows of calls and results."""

from __future__ import annotations

from controller.display import preview, summarize_args


def test_result_preview_for_the_live_view() -> None:
    assert (
        preview("exit code 0 after 0.1s\n<stdout>\nLinux x86_64\n1000\n</stdout>\n")
        == "exit code 0 after 0.1s · Linux x86_64  (+1 lines)"
    )
    assert preview("Wrote 5 bytes to a.txt.") == "Wrote 5 bytes to a.txt."
    assert preview("") == ""
    assert summarize_args("write_file", {"path": "a.py", "content": "x" * 10}) == "a.py (10 chars)"
    assert summarize_args("run_command", {"command": "make\ntest", "timeout_s": 5}) == "make ⏎ test timeout_s=5"
