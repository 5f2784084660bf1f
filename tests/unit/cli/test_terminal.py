"""controller.cli.terminal: untrusted text reaches the terminal only as characters that are drawn, never acted on."""

from __future__ import annotations

import io
import itertools
import json
import logging
import unicodedata
from pathlib import Path

from rich.console import Console
from rich.text import Text

from controller.cli import terminal
from controller.wire import inert

HOSTILE = (
    "clip\x1b]52;c;cHduZWQ=\x07 title\x1b]0;PWNED\x1b\\ link\x1b]8;;http://evil\x1b\\x\x1b]8;;\x1b\\ "
    "csi\x1b[2J\x1b[8mhidden\x1b[0m c1\x9b31m\x9d0;t\x9c nel\x85 back\x08\x08 cr\rEVIL bidi\u202eevil\u202c "
    "iso\u2066x\u2069 zw\u200bx bom\ufeff ls\u2028ps\u2029 nul\x00 del\x7f surrogate\ud800 tag\U000e0041"
)


def _hidden(char: str) -> bool:
    return char not in "\n\t" and unicodedata.category(char) in {"Cc", "Cf", "Cs", "Zl", "Zp"}


def test_every_control_format_and_bidi_character_is_spelled_out() -> None:
    shown = terminal.safe_text(HOSTILE + "\nsecond\tline").plain
    assert not [c for c in shown if _hidden(c)]
    for spelled in (
        "\\x1b]52;c;",
        "\\x07",
        "\\u009b31m",
        "\\u0085",
        "\\x08",
        "\\rEVIL",
        "\\u202e",
        "\\u2066",
        "\\u200b",
    ):
        assert spelled in shown
    assert "\\ufeff" in shown and "\\u2028" in shown and "\\x00" in shown and "\\x7f" in shown
    assert "\\ud800" in shown and "\\U000e0041" in shown
    assert shown.endswith("\nsecond\tline")  # newline and tab are kept
    assert terminal.safe(HOSTILE) == shown.split("\nsecond")[0]
    assert terminal.safe("windows\r\nline") == "windows\nline"  # a CRLF line ending overwrites nothing


def test_printed_through_rich_no_sequence_of_the_text_reaches_the_terminal() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, color_system="truecolor", width=300)
    console.print(terminal.safe_text("[conceal]secret[/conceal] [link=http://evil]x[/link] :smile: " + HOSTILE))
    written = out.getvalue()
    assert "\x1b]" not in written and "\x9b" not in written and "\x07" not in written and "\x08" not in written
    assert "\x1b[8m" not in written and "\x1b[2J" not in written  # no conceal, no clear screen
    assert "[conceal]secret[/conceal]" in written and ":smile:" in written  # markup and emoji codes are text
    assert "\x1b[7m\\x1b" in written  # the escape is shown, highlighted


def test_visible_counts_space_runs_and_spells_tabs_and_look_alike_spaces() -> None:
    command = terminal.visible("git status" + " " * 170 + "; echo pwned > f")
    assert command.plain == "git status⟨170 spaces⟩; echo pwned > f"
    assert terminal.visible(" ls\t-la\u00a0x ").plain == "⟨1 space⟩ls\\t-la\\u00a0x⟨1 space⟩"
    assert terminal.visible("a b  c").plain == "a b⟨2 spaces⟩c"
    assert terminal.visible("rm\u202e-rf").plain == "rm\\u202e-rf"
    assert terminal.visible("échec 中文").plain == "échec 中文"
    content = terminal.visible("    x = 1  # two spaces" + " " * 9 + "y ", indent=True, run=8)
    assert content.plain == "    x = 1  # two spaces⟨9 spaces⟩y⟨1 space⟩"
    assert terminal.visible("   ", indent=True, run=8).plain == "⟨3 spaces⟩"
    assert isinstance(command, Text) and any(span.style == terminal.ESCAPE_STYLE for span in command.spans)


def test_log_records_are_made_safe() -> None:
    record = logging.LogRecord("x", logging.WARNING, "f", 1, "tool said %s", ("\x1b]0;PWNED\x07",), None)
    assert terminal.SafeFormatter("%(message)s").format(record) == "tool said \\x1b]0;PWNED\\x07"


def test_a_console_outlives_its_terminal() -> None:
    class Gone(io.StringIO):
        def write(self, text: str) -> int:
            raise OSError(5, "Input/output error")

    stream = terminal.TolerantStream(Gone())
    console = Console(file=stream)
    console.print("still fine")  # no exception: the session goes on to clean up


def test_one_table_names_every_character_the_terminal_and_the_viewer_spell_out() -> None:
    """Red-team finding: variation selectors and other default-ignorable code points in a name reached the
    terminal raw (``setup.py`` + U+FE0F looks like ``setup.py``). The table is shared with the viewer."""
    table = json.loads((Path(terminal.__file__).parents[1] / "ui" / "static" / "invisible.json").read_text())["ranges"]
    assert all(first <= last for first, last in table)
    assert all(before[1] < after[0] for before, after in itertools.pairwise(table)), "sorted, apart"
    categories = {"Cc", "Cf", "Cs", "Zl", "Zp"}
    missing = [
        f"U+{code:04X}"
        for code in range(0x110000)
        if chr(code) not in "\t\n" and unicodedata.category(chr(code)) in categories and not inert.hidden(chr(code))
    ]
    assert missing == [], "controls, format characters and separators of this Python's Unicode"
    for char in "\ufe0f\ufe00\U000e0100\U000e01ef\U000e0001\u180e\u2061\u3164\u115f\u034f\u2800":
        assert inert.hidden(char), f"U+{ord(char):04X}"
    assert terminal.safe("setup.py\ufe0f") == "setup.py\\ufe0f"
    assert not inert.hidden("\t") and not inert.hidden("é") and not inert.hidden("\u00a0")
