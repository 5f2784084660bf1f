"""How the terminal shows a session's workspace: its changes, their diffs, an apply's conflicts.

The layer holds the agent's bytes: file names with escape sequences or non-UTF-8 bytes,
diffs of hostile content. Every such string becomes a ``Text`` here through
``workspaces.shown`` (bytes a terminal cannot encode become ``\\xNN``) and then
``terminal.safe_text`` (controls become highlighted escapes); only the styles are ours.
"""

from __future__ import annotations

import re
from pathlib import Path

from rich.console import Group, RenderableType
from rich.text import Text

from ..wire import lookalike
from ..wire.changeset import ApplyResult, Change, Conflict, Disposition, FileType, Kind
from ..wire.events import ChangeSummary
from ..wire.sessionrecord import Source
from ..workspace.checkout import applied_mode
from ..workspace.manager import shown, summarize
from . import terminal
from .display import plural

_BREAKS = re.compile(r"([\n\t])")
MAX_LISTED = 50
"""At most this many changed paths are listed after a run; ``cubicle changes`` lists them all."""
MARKS = {Kind.ADDED: ("A", "green"), Kind.MODIFIED: ("M", "yellow"), Kind.DELETED: ("D", "red")}
DIFF_STYLES = {"+": "green", "-": "red", "@": "cyan"}
MAX_ALIKE = 3
"""Look-alikes a change's row names; the rest are counted."""


def path_text(path: str, style: str = "", strict: bool = False) -> Text:
    """A path from the layer, shown inert and on one line: a newline or tab in a name is an escape, not a new row;
    what a reader could not see (spaces at a name's ends, a name not in NFC) is spelled out (``lookalike``), and
    with ``strict`` (a name that looks like another's) every character past ASCII is."""
    return name_text(shown(path), style, strict)


def name_text(printed: str, style: str = "", strict: bool = False) -> Text:
    """``path_text`` of a name already printed (``shown``): a diff's header, say."""
    out = Text(style=style)
    for piece, made in lookalike.parts(printed, strict):
        if made:
            out.append(piece, terminal.ESCAPE_STYLE)
            continue
        for part in _BREAKS.split(piece):
            if part in ("\n", "\t"):
                out.append(terminal.escape(part), terminal.ESCAPE_STYLE)
            else:
                out.append_text(terminal.safe_text(part))
    return out


def summary_line(summary: ChangeSummary) -> Text:
    """``3 files changed (2 added, 1 modified) · +12 -1 · 1 held back``."""
    if not summary.files and not summary.held_back and summary.truncated_at is None and not summary.unlisted:
        return Text("no changes to the files")
    kinds = [
        f"{n} {name}"
        for n, name in ((summary.added, "added"), (summary.modified, "modified"), (summary.deleted, "deleted"))
        if n
    ]
    line = Text(f"{plural(summary.files, 'file')} changed")
    if kinds:
        line.append(f" ({', '.join(kinds)})")
    line.append(" · ").append(f"+{summary.lines_added:,}", "green").append(" ")
    line.append(f"−{summary.lines_removed:,}", "red")
    if summary.held_back:
        line.append(f" · {summary.held_back:,} held back (not applied)", "yellow")
    if summary.build_inputs:
        line.append(
            f"\n  {plural(summary.build_inputs, 'path')} in the environment's build context, which its Dockerfile "
            "copies whole: the next environment build runs this repository's files as root. Review them, then "
            "apply them with --build-inputs.",
            "yellow",
        )
    bounded = _bounded_note(summary)
    if bounded:
        line.append(*bounded)
    return line


def _bounded_note(summary: ChangeSummary) -> tuple[str, str] | None:
    """What a bounded walk or listing left out, with its style: a truncated layer, or changes not listed."""
    if summary.truncated_at is not None:
        return (
            f" · truncated at {summary.truncated_at:,} entries: the layer holds more than the session may "
            "(names), so it can be rewound or discarded, never applied",
            "bold red",
        )
    if not summary.unlisted:
        return None
    if summary.unlisted_applied:
        writes, style = f"apply writes {summary.unlisted_applied:,} of them (unseen here)", "bold red"
    else:
        writes, style = "apply writes none of them (with --include-ignored or --build-inputs it may)", "yellow"
    return (
        f"\n  and {plural(summary.unlisted, 'more change')} not listed (a listing is bounded; what apply "
        f"writes comes first): {writes}. If that is not wanted, rewind or discard the session.",
        style,
    )


def counts(change: Change) -> tuple[int, int]:
    """Lines added and removed by one change (0, 0 for binary and oversized files)."""
    one = summarize([change.model_copy(update={"disposition": Disposition.APPLY})])
    return one.lines_added, one.lines_removed


def change_row(change: Change, alike: list[str] | None = None) -> Text:
    """One line per path: its mark, the path, lines added and removed, and what it is when not a plain text file;
    when it looks like others (``alike``: ``lookalike.twins``), every name spelled out and how to pick this one."""
    mark, style = MARKS[change.kind]
    row = Text.assemble(("  " + mark + " ", style), path_text(change.path, strict=bool(alike)))
    if change.renamed_from is not None:
        row.append(" (from ").append_text(path_text(change.renamed_from)).append(")")
    if change.target is not None:
        row.append(" → ").append_text(path_text(change.target))
    note = mode_note(change)
    if note:
        row.append(f" ({note})", "magenta")
    added, removed = counts(change)
    if added or removed:
        row.append(" ").append(f"+{added}", "green").append(" ").append(f"−{removed}", "red")
    elif change.binary:
        row.append(f" (binary, {plural(change.size, 'byte')})", "dim")
    if change.disposition != Disposition.APPLY:
        row.append(f"  held back: {change.disposition.value}", "yellow")
        if change.reason and change.disposition != Disposition.BUILD_INPUT:  # the summary line says why, once
            row.append(" (", "yellow").append_text(terminal.safe_text(change.reason, "yellow")).append(")", "yellow")
    if alike:
        row.append_text(looks_like(change, alike))
    return row


def looks_like(change: Change, alike: list[str]) -> Text:
    """The mark of a change whose name looks like others': which, spelled out, and the id that selects it (a name
    would be refused)."""
    mark = Text("  looks like ", "bold red")
    for at, other in enumerate(alike[:MAX_ALIKE]):
        mark.append(", " if at else "", "bold red").append_text(path_text(other, strict=True))
    if len(alike) > MAX_ALIKE:
        mark.append(f" and {len(alike) - MAX_ALIKE} more", "bold red")
    return mark.append(f" (select it with --id {change.id})", "bold red")


def mode_note(change: Change) -> str:
    """The mode, when the change sets one worth a look: a new mode of an entry the checkout has, or an executable
    new file; and the mode apply will write when it differs (``applied_mode``). Empty otherwise."""
    if change.kind == Kind.DELETED or change.type == FileType.SYMLINK:
        return ""
    applied = applied_mode(change.mode, change.previous_mode)
    executable = change.type == FileType.FILE and bool(change.mode & 0o111)
    if change.previous_mode is not None and change.previous_mode != change.mode:
        note = f"mode {change.previous_mode:o} → {change.mode:o}"
    elif applied != change.mode or (change.previous_mode is None and executable):
        note = f"mode {change.mode:o}"
    else:
        return ""
    return note if applied == change.mode else f"{note}, applied as {applied:o}"


def change_list(changes: list[Change], limit: int | None = None) -> RenderableType:
    """The summary line, then one row per changed path (the first ``limit`` of them, the rest counted)."""
    rows = [summary_line(summarize(changes))]
    listed = changes if limit is None else changes[:limit]
    alike = lookalike.twins(change.path for change in changes)
    rows.extend(change_row(change, alike.get(change.path)) for change in listed)
    if len(listed) < len(changes):
        rows.append(Text(f"  … and {plural(len(changes) - len(listed), 'more path')}", "dim"))
    return Group(*rows)


def diff_view(change: Change, alike: list[str] | None = None) -> RenderableType:
    """A change's unified diff, each line coloured by its first character, its content shown inert; its names
    spelled out as its row's are (``alike``: the names it looks like)."""
    head = Text.assemble(
        ("── ", "dim"), path_text(change.path, "bold", bool(alike)), (f" ({change.kind.value})", "dim")
    )
    if change.disposition != Disposition.APPLY:  # its diff is shown, and it is not what a plain apply writes
        head.append(f"  held back: {change.disposition.value}", "yellow")
    if alike:
        head.append_text(looks_like(change, alike))
    if change.diff is None:
        if change.type.value != "file":  # a symlink's target is the agent's bytes too: one inert line
            target = Text.assemble(" → ", path_text(change.target)) if change.target else Text()
            return Group(head, Text.assemble(("   (", "dim"), (change.type.value, "dim"), target, (")", "dim")))
        what = f"{'binary' if change.binary else 'too large to diff'}, {plural(change.size, 'byte')}"
        return Group(head, terminal.safe_text(f"   ({what})", "dim"))
    lines = [head]
    for number, line in enumerate(change.diff.removesuffix("\n").split("\n")):
        # Only the first two lines name the files: a line of the file that starts with "++" is an added line.
        if number < 2 and line[:4] in ("--- ", "+++ "):
            lines.append(Text.assemble(line[:4], name_text(line[4:], strict=bool(alike)), style="bold"))
            continue
        lines.append(terminal.safe_text(line, "bold" if number < 2 else DIFF_STYLES.get(line[:1], "")))
    return Group(*lines)


def conflict_list(conflicts: list[Conflict]) -> RenderableType:
    """Each path the checkout changed under, and why it conflicts."""
    return Group(
        *(Text.assemble("  ", path_text(c.path, "bold"), ": ", terminal.safe_text(c.reason)) for c in conflicts)
    )


def applied(session_id: str, repo: Path, result: ApplyResult) -> RenderableType:
    session_id = terminal.safe(session_id)  # a server's answer: shown inert like everything else it sends
    """What an apply wrote (and its number, to revert it), and what it held back."""
    rows = [
        Text.assemble(
            ("applied", "green"),
            f" {plural(len(result.applied) + result.more_applied, 'path')} to ",
            path_text(str(repo)),
            f" (apply {result.record}; undo it with `cubicle revert {session_id}`)" if result.record else "",
        )
    ]
    rows.extend(Text.assemble("  ", path_text(path)) for path in result.applied)
    if result.more_applied:
        rows.append(Text(f"  … and {plural(result.more_applied, 'more path')}", "dim"))
    if result.skipped:
        rows.append(Text(f"{plural(len(result.skipped) + result.more_skipped, 'path')} held back:", "yellow"))
        rows.extend(change_row(change) for change in result.skipped)
        if result.more_skipped:
            rows.append(Text(f"  … and {plural(result.more_skipped, 'more path')}", "dim"))
    return Group(*rows)


def how_to_take(session_id: str, source: Source, where: str = "") -> RenderableType:
    """What to run next after a turn on a git remote: nothing is applied, so the changes leave as a patch or a
    pushed branch."""
    session_id, where = terminal.safe(session_id), terminal.safe(where)
    return Group(
        Text.assemble(
            "The changes are kept in session ", (session_id, "bold"), " on ", terminal.safe_text(source.short()), "."
        ),
        *(
            Text.assemble(f"  {what:<8} ", (command, "bold"))
            for what, command in (
                ("review:", f"cubicle changes {session_id} --diff{where}"),
                ("patch:", f"cubicle changes {session_id} --patch{where} > {session_id}.patch"),
                ("push:", f"cubicle push {session_id} --branch cubicle/NAME{where}"),
                ("drop:", f"cubicle discard {session_id}{where}"),
            )
        ),
    )


def how_to_apply(session_id: str, where: str = "") -> RenderableType:
    """What to run next when the changes were kept: one command per line, so none is wrapped apart; ``where`` (a
    ``--server URL``) makes them reach the server the session is on."""
    session_id, where = terminal.safe(session_id), terminal.safe(where)
    return Group(
        Text.assemble("The changes are kept in session ", (session_id, "bold"), "; the checkout is untouched."),
        *(
            Text.assemble(f"  {what:<8} ", (command, "bold"))
            for what, command in (
                ("review:", f"cubicle changes {session_id} --diff{where}"),
                ("apply:", f"cubicle apply {session_id}{where}"),
                ("drop:", f"cubicle discard {session_id}{where}"),
            )
        ),
    )
