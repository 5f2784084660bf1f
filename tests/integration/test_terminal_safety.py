"""What reaches the user's terminal: `cubicle run` under a real pty, driven by hostile scenarios and real Docker."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.eventually import eventually
from tests.integration.pty_helpers import Terminal, owned_by, scenario_file

ESC = "\x1b"
# Every escape sequence Rich writes for this view: SGR styles, cursor hide/show, erase line, cursor up.
RICH_OWN = re.compile(r"\x1b\[(?:[0-9;]*m|\?25[lh]|2K|[0-9]*A)")
# The styles the view uses: reset, bold, dim, reverse, red, green, yellow, cyan. Never 8 (conceal).
RICH_SGR = {"", "0", "1", "2", "7", "31", "32", "33", "36"}

HOSTILE_TEXT = (
    f"clipboard {ESC}]52;c;cHduZWQ=\a title {ESC}]0;PWNED-TITLE{ESC}\\ "
    f"link {ESC}]8;;http://evil.example{ESC}\\click{ESC}]8;;{ESC}\\ "
    f"clear {ESC}[2J{ESC}[H conceal {ESC}[8mHIDDEN{ESC}[0m c1 \u009b2J\u009d0;C1-TITLE\u009c "
    "safe\rOVERWRITE back\b\b\bBS bidi \u202eevil\u202c \u2066iso\u2069 [conceal]MARKUP[/conceal]\n"
)
# The same attack from inside the sandbox: OSC 52, OSC 0, OSC 8, CSI, UTF-8 C1 CSI, CR, BS, RLO.
HOSTILE_COMMAND = (
    r"printf '\033]52;c;cHduZWQ=\a\033]0;PWNED-TITLE\a\033]8;;http://evil.example\033\\x\n'; "
    r"printf 'ok\rOVERWRITE \033[2J\033[8mHIDDEN \302\2332J back\b\bBS \342\200\256evil\n'; exit 3"
)


def _assert_terminal_safe(raw: bytes) -> str:
    """Nothing in ``raw`` acts on a terminal but Rich's own styling; returns the text with Rich's sequences removed."""
    shown = raw.decode("utf-8")
    for sequence in re.findall(r"\x1b\[([0-9;]*)m", shown):
        assert set(sequence.split(";")) <= RICH_SGR, f"an SGR the view does not use: {sequence!r}"
    text = RICH_OWN.sub("", shown)
    assert ESC not in text, f"an escape sequence reached the terminal: {text[text.index(ESC) - 40 :][:120]!r}"
    assert "\a" not in text and "\b" not in text
    assert "\rOVERWRITE" not in text and "\rEVIL" not in text
    leaked = {c for c in text if c not in "\r\n" and unicodedata.category(c) in {"Cc", "Cf", "Cs", "Zl", "Zp"}}
    assert not leaked, f"hidden characters reached the terminal: {sorted(map(hex, map(ord, leaked)))}"
    return text


def test_model_text_tool_input_and_command_output_reach_the_terminal_inert(
    tmp_path: Path, make_repo: Callable[..., Path]
) -> None:
    hostile = {
        "name": "hostile",
        "turns": [
            {
                "content": [
                    {"type": "text", "text": HOSTILE_TEXT},
                    {"type": "tool_use", "name": "run_command", "input": {"command": HOSTILE_COMMAND}},
                    {
                        "type": "tool_use",
                        "name": "read_file",
                        "input": {"path": f"{ESC}]0;PWNED-TITLE\a\u202eREADME.md"},
                    },
                    {"type": "tool_use", "name": f"evil{ESC}]52;c;eA==\a", "input": {}},
                ]
            },
            {"content": [{"type": "text", "text": "done\u009b31m"}]},
        ],
    }
    term = Terminal("run", str(make_repo()), "x", "--scenario", scenario_file(tmp_path, hostile))
    try:
        assert term.wait(120) == 0, term.text
        text = _assert_terminal_safe(bytes(term.raw))
    finally:
        term.close()
    # What the attacker sent is shown, spelled out, not dropped.
    for spelled in ("\\x1b]52;c;cHduZWQ=\\x07", "\\x1b[2J", "\\u009b2J", "\\rOVERWRITE", "\\x08", "\\u202eevil"):
        assert spelled in text, spelled
    assert "[conceal]MARKUP[/conceal]" in text and "done\\u009b31m" in text
    assert "✗ exit 3" in text  # and the failed command is not a ✓


def test_an_error_message_quoting_the_model_api_is_inert(tmp_path: Path, make_repo: Callable[..., Path]) -> None:
    refusing = {
        "name": "refusing",
        "turns": [{"errors": [{"status": 400, "type": "invalid_request_error", "message": HOSTILE_TEXT}]}],
    }
    term = Terminal("run", str(make_repo()), "x", "--scenario", scenario_file(tmp_path, refusing))
    try:
        assert term.wait(120) == 4, term.text
        text = _assert_terminal_safe(bytes(term.raw))
    finally:
        term.close()
    assert "The model API answered 400" in text and "\\x1b]52;c;cHduZWQ=" in text


def _one_call_each(*calls: dict[str, Any]) -> dict[str, Any]:
    turns = [{"content": [{"type": "tool_use", **call}]} for call in calls]
    return {"name": "approve", "turns": [*turns, {"content": [{"type": "text", "text": "finished"}]}]}


def test_the_approval_prompt_shows_what_will_run_whole(
    tmp_path: Path, make_repo: Callable[..., Path], docker_client: Any
) -> None:
    repo = make_repo()
    content = "".join(f"print({i})\n" for i in range(100))
    calls = _one_call_each(
        {"name": "run_command", "input": {"command": "git status" + " " * 170 + "; echo pwned > f"}},
        {"name": "run_command", "input": {"command": "echo [conceal]SECRET[/conceal] > g"}},
        {"name": "write_file", "input": {"path": "big.py", "content": content}},
        {"name": "edit_file", "input": {"path": "README.md", "old_string": "# demo\n", "new_string": "# owned\n"}},
    )
    term = Terminal("run", str(repo), "x", "--approve", "--scenario", scenario_file(tmp_path, calls), cols=80)
    try:
        shown = term.expect("Allow run_command? [y/N] ")
        assert "$ git status⟨170 spaces⟩; echo pwned > f" in shown
        term.send(b"n\n")
        term.expect("The user declined")
        shown = term.expect("Allow run_command? [y/N] ")
        assert "$ echo [conceal]SECRET[/conceal] > g" in shown
        term.send(b"y\n")
        shown = term.expect("Allow write_file? [y/N] ")
        assert "big.py (100 lines, 990 characters)" in shown and "60 more lines not shown" in shown
        assert " 1 print(0)" in shown and "40 print(39)" in shown and "print(40)" not in shown
        term.send(b"y\n")
        shown = term.expect("Allow edit_file? [y/N] ")
        assert "- # demo" in shown and "+ # owned" in shown
        term.send(b"n\n")
        shown = term.expect("[y/N]")  # the run's end: apply what was allowed? (a long path wraps the line)
        assert "Apply these changes" in shown and "g" in shown and "big.py" in shown
        term.send(b"y\n")
        assert term.wait(120) == 0, term.text
        _assert_terminal_safe(bytes(term.raw))
    finally:
        term.close()
    assert not (repo / "f").exists()
    assert (repo / "g").read_text() == "[conceal]SECRET[/conceal]\n"
    assert (repo / "big.py").read_text() == content
    assert (repo / "README.md").read_text() == "# demo\n"


def test_ctrl_c_at_the_approval_prompt_exits_and_removes_the_container(
    tmp_path: Path, make_repo: Callable[..., Path], docker_client: Any
) -> None:
    """How soon it exits is a benchmark row (bench/responsiveness.py); the 30 s here is a bound against a hang."""
    instance = "ctrl-c-prompt-test"
    calls = _one_call_each({"name": "run_command", "input": {"command": "echo hi"}})
    term = Terminal(
        "run",
        str(make_repo()),
        "x",
        "--approve",
        "--scenario",
        scenario_file(tmp_path, calls),
        env={"CUBICLE_INSTANCE": instance},
    )
    try:
        term.expect("Allow run_command? [y/N] ")
        eventually(lambda: owned_by(docker_client, instance), what="the sandbox starts while the prompt is shown")
        term.send(b"\x03")  # Ctrl-C, typed at the terminal: the line discipline sends SIGINT
        code = term.wait(30)
    finally:
        term.close()
    assert code == 130, term.text
    assert owned_by(docker_client, instance) == [], term.text
    assert "cancelled" in term.text


def test_closing_the_terminal_cleans_up_like_ctrl_c(
    tmp_path: Path, make_repo: Callable[..., Path], docker_client: Any
) -> None:
    instance = "hangup-test"
    long = _one_call_each({"name": "run_command", "input": {"command": "sleep 300", "timeout_s": 600}})
    term = Terminal(
        "run",
        str(make_repo()),
        "x",
        "--command-timeout",
        "600",
        "--scenario",
        scenario_file(tmp_path, long),
        env={"CUBICLE_INSTANCE": instance},
    )
    try:
        term.expect("▸ run_command sleep 300")
        eventually(lambda: owned_by(docker_client, instance), what="the sandbox runs the command")
        term.hang_up()  # the kernel sends SIGHUP, and every later write to the terminal fails
        code = term.process.wait(timeout=30)
    finally:
        term.close()
    assert code == 129
    assert owned_by(docker_client, instance) == []
