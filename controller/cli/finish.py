"""The end of ``cubicle run``: the changes are shown, then applied, kept, or asked about on a terminal."""

from __future__ import annotations

import contextlib
import sys
import termios
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import typer
from rich.console import Console
from rich.text import Text

from ..agent.loop import TurnOutcome
from ..config import Settings
from ..server.sessions import Sessions
from ..wire.changeset import ApplyResult, Change, Disposition
from ..wire.sessionrecord import Source
from ..workspace.manager import summarize
from . import review
from .app import EXIT_CONFLICT, EXIT_INTERRUPTED, review_errors, with_sessions
from .display import JsonSink


@dataclass(frozen=True)
class Ran:
    """What a run leaves for the review after it: the session, its (pinned) checkout, how the turn ended."""

    session_id: str
    repo: Path
    outcome: TurnOutcome
    source: Source | None = None
    """A session on a git remote: nothing is applied, its changes leave as a patch or a pushed branch."""


@dataclass(frozen=True)
class Choice:
    """What to do with a run's changes: apply (True), keep (False) or ask (None, on a terminal only)."""

    apply: bool | None
    include_ignored: bool
    interactive: bool


class ReviewTarget(Protocol):
    """Where a run's changes are read and applied: this machine's sessions, or a server's through the client."""

    @property
    def where(self) -> str:
        """What the printed commands need to reach the session: nothing here, ``--server URL`` for a server's."""
        ...

    def changes(self) -> list[Change]: ...

    def apply(self, include_ignored: bool, view: Any) -> ApplyResult:
        """Apply the changes; with --json (``view`` a JsonSink) the ``applied`` event follows the run's events."""
        ...


@dataclass(frozen=True)
class LocalReview:
    """The session in this machine's database (``CUBICLE_DATA_DIR``)."""

    settings: Settings
    session_id: str
    where: str = ""

    def changes(self) -> list[Change]:
        return with_sessions(self.settings, lambda s: s.layers.changes(self.session_id, diff=True))

    def apply(self, include_ignored: bool, view: Any) -> ApplyResult:
        async def apply(sessions: Sessions) -> ApplyResult:
            result = await sessions.layers.apply(self.session_id, include_ignored=include_ignored)
            if isinstance(view, JsonSink):
                for event in sessions.store.events_after(self.session_id, view.seq):
                    await view.emit(event)
            return result

        return with_sessions(self.settings, apply)


def after_turn(
    source: ReviewTarget, ran: Ran, choice: Choice, view: Any, console: Console, stopped: bool
) -> int | None:
    """Show what the turn changed, then apply, keep or ask; an exit code that replaces the turn's, or None."""
    session_id = ran.session_id
    with review_errors():
        changes = source.changes()
    console.print(review.change_list(changes, review.MAX_LISTED))
    ignored = choice.include_ignored and any(c.disposition == Disposition.IGNORED for c in changes)
    if not summarize(changes).files and not ignored:
        return None
    if ran.source is not None:
        console.print(review.how_to_take(session_id, ran.source, source.where))
        return None
    wanted = choice.apply
    if wanted and (ran.outcome.reason != "end_turn" or stopped):
        console.print(Text(f"Not applied: the turn ended with {ran.outcome.reason}, not end_turn.", "yellow"))
        wanted = False
    elif wanted is None and choice.interactive and not stopped:
        wanted = _ask_apply(console, ran, source.where)
    if not wanted:
        console.print(review.how_to_apply(session_id, source.where))
        return None
    _apply_after_run(source, ran, choice.include_ignored, view, console)
    return None


def _ask_apply(console: Console, ran: Ran, where: str) -> bool:
    """Ask y/n on the terminal (what was typed before the question does not answer it); Ctrl-C keeps the changes."""
    with contextlib.suppress(termios.error, OSError):
        termios.tcflush(sys.stdin.fileno(), termios.TCIFLUSH)
    question = Text.assemble("Apply these changes to ", review.path_text(str(ran.repo), "bold"), "? [y/N] ")
    while True:
        try:
            answer = console.input(question).strip().lower()
        except EOFError:
            console.print()
            return False
        except KeyboardInterrupt:
            console.print()
            console.print(review.how_to_apply(ran.session_id, where))
            raise typer.Exit(EXIT_INTERRUPTED) from None
        if answer in ("y", "yes"):
            return True
        if answer in ("", "n", "no"):
            return False
        console.print("Please answer y or n.", style="yellow")


def _apply_after_run(source: ReviewTarget, ran: Ran, include_ignored: bool, view: Any, console: Console) -> None:
    """Apply the run's changes (a conflict: exit 5); with --json the ``applied`` event follows the run's events."""
    try:
        with review_errors():
            result = source.apply(include_ignored, view)
    except typer.Exit as done:
        if done.exit_code == EXIT_CONFLICT:
            console.print(review.how_to_apply(ran.session_id, source.where))
        raise
    console.print(review.applied(ran.session_id, ran.repo, result))
