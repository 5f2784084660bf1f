"""``cubicle continue ID MESSAGE`` and ``cubicle show ID``: the next turn of a session, and what a session did.

``continue`` runs a follow-up turn of any session (``cubicle run``'s, the API's, an MCP one)
through the same driver and the same live view as ``cubicle run``, then offers the same
review and apply; ``--server URL`` does it on a ``cubicle serve`` through the Python client.
``show`` prints a session's events as the live view shows them (``--json``: one event a line),
from this machine's database or a server's; a turn running meanwhile is followed to its end.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..errors import NotFoundError
from . import options, terminal
from .app import EXIT_USAGE, app, fail, load_settings
from .remote import ServerOpt, api_token, ended, refuse_local_only, remote_sessions
from .run import (
    EXIT_CODES,
    ApplyOption,
    ApproveOption,
    IncludeIgnoredOption,
    JsonOption,
    ScenarioOption,
    _exit_codes,
    _scripted_endpoint,
    _stoppable,
    _summary,
    _turn_of,
    _view,
    local_sessions,
)

if TYPE_CHECKING:  # what the commands run is imported inside them: `cubicle --help` loads none of it
    from ..config import Settings
    from ..wire.bodies import ReviewComment
    from ..wire.changeset import Change
    from .display import JsonSink, LiveSink
    from .finish import Ran

SessionArg = Annotated[str, typer.Argument(metavar="ID", help="The session (`cubicle sessions` lists them).")]


@dataclass(frozen=True)
class ContinueOptions:
    """What `cubicle continue` was given, as Typer reads it from these fields."""

    session_id: SessionArg
    message: Annotated[str, typer.Argument(metavar="MESSAGE", help="What the agent should do next.")]
    on: Annotated[
        str | None,
        typer.Option(
            "--on",
            metavar="PATH[:LINE]",
            help="Make MESSAGE a review comment on this changed file (or this line of the session's version of it): "
            "the agent gets it with that part of the session's diff quoted, fenced and labelled as its own file "
            "content. The viewer comments on removed lines and sends several at once.",
        ),
    ] = None
    on_id: Annotated[
        str | None,
        typer.Option(
            "--on-id",
            metavar="CHANGE_ID[:LINE]",
            help="As --on, on the change with this id (`cubicle changes ID --json` lists them): one change whatever "
            "its name prints as.",
        ),
    ] = None
    json_events: JsonOption = False
    approve: ApproveOption = False
    apply: ApplyOption = None
    include_ignored: IncludeIgnoredOption = False
    scenario: ScenarioOption = None
    server: ServerOpt = None


@app.command(
    "continue",
    help="Run a follow-up turn of session ID on MESSAGE, with the same live view, review and apply as `cubicle "
    "run`. Exit codes as `cubicle run`'s; 5 also while a turn of the session runs elsewhere.",
)
@options.command(ContinueOptions)
def continue_(o: ContinueOptions) -> None:
    import asyncio

    from .finish import Choice, LocalReview, after_turn
    from .remote import RemoteReview

    if o.server is not None:
        refuse_local_only(o.approve, o.scenario)
    if o.approve and (o.json_events or not sys.stdin.isatty()):
        raise fail("--approve needs a terminal to ask on (and not --json).", EXIT_USAGE)
    console = terminal.console(stderr=o.json_events)
    signals: list[int] = []
    settings = load_settings()
    scripted = _scripted_endpoint(settings, o.scenario)
    with _exit_codes(signals), _unknown_is_usage(), scripted as effective, _view(o.json_events, console) as sink:
        ran = asyncio.run(_stoppable(_next_turn(effective, o, sink), signals))
    if not o.json_events and sink.finished is not None:
        console.print(_summary(ran.outcome, sink.finished, signals))
    code = 128 + signals[0] if signals else EXIT_CODES[ran.outcome.reason]
    choice = Choice(o.apply, o.include_ignored, interactive=sys.stdin.isatty() and not o.json_events)
    source = (
        LocalReview(settings, ran.session_id) if o.server is None else RemoteReview(o.server, api_token(), o.session_id)
    )
    with _exit_codes(signals):
        replaced = after_turn(source, ran, choice, sink, console, bool(signals))
    raise typer.Exit(replaced or code)


def comment_of(o: ContinueOptions, listed: list[Change]) -> ReviewComment | None:
    """The review comment ``--on PATH[:LINE]`` (or ``--on-id``) makes of the message, on the one listed change it
    means. PATH is read as ``cubicle apply`` reads one (its real name, as ``changes`` printed it, as the terminal
    showed it), and ``PATH:LINE`` also as a whole name (a file may be called ``x:1``): a given text that reads as
    two (changes or lines) is refused naming each with its id, one that reads as none is refused; nothing is sent.
    The comment carries the change's id, so the server quotes that change and no other."""
    from ..wire.bodies import ReviewComment
    from ..workspace.records import shown

    if o.on is not None and o.on_id is not None:
        raise fail("Give --on or --on-id, not both.", EXIT_USAGE)
    given = o.on if o.on is not None else o.on_id
    if given is None:
        return None
    meant = {(c.id, line): c for name, line in _readings(given) for c in _named(name, listed, by_id=o.on is None)}
    if len(meant) == 1 and o.on is not None:
        meant = _lookalikes(meant, listed)
    if len(meant) > 1:
        raise fail(_ambiguous_on(given, meant), EXIT_USAGE)
    if not meant:
        what = "with the id" if o.on is None else "at"
        raise fail(
            f"No changed file of this session is {what} {terminal.safe(given)!r}: nothing was sent. `cubicle changes "
            "ID` lists them (--json: with their ids).",
            EXIT_USAGE,
        )
    (_, line), change = next(iter(meant.items()))
    return ReviewComment(path=shown(change.path), id=change.id, line=line, text=o.message)


def _readings(given: str) -> list[tuple[str, int | None]]:
    """What ``given`` may mean: the whole of it a name, and (when it ends in ``:`` and a line number) the part
    before the last colon a name with that line."""
    from ..wire.bodies import MAX_INDEX

    readings: list[tuple[str, int | None]] = [(given, None)]
    name, _, line = given.rpartition(":")
    if name and line.isascii() and line.isdigit() and 0 < int(line) <= MAX_INDEX:
        readings.append((name, int(line)))
    return readings


def _named(name: str, listed: list[Change], by_id: bool) -> list[Change]:
    """The listed changes ``name`` is, as an id or in any spelling of a path."""
    from .workspace import spellings

    return [c for c in listed if (c.id == name if by_id else name in spellings(c))]


def _lookalikes(
    meant: dict[tuple[str, int | None], Change], listed: list[Change]
) -> dict[tuple[str, int | None], Change]:
    """The one change (and line) a name means, with every other change whose name looks like its
    (``selection.lookalikes``), at that line: a comment on a look-alike is refused as one on a twin is."""
    from ..workspace.selection import lookalikes

    ((_, line), change), *_ = meant.items()
    alike = [c for hits in lookalikes(change.path, listed).values() for c in hits]
    return meant | {(c.id, line): c for c in alike}


def _ambiguous_on(given: str, meant: dict[tuple[str, int | None], Change]) -> str:
    from .review import path_text

    readings = [
        f"{path_text(c.path, strict=True).plain}{'' if line is None else f' line {line}'} (--on-id {c.id}{'' if line is None else f':{line}'})"
        for (_, line), c in list(meant.items())[:6]
    ]
    return (
        f"{terminal.safe(given)} could mean {len(meant)} different things: {'; or '.join(readings)}. Nothing was "
        "sent: say which with --on-id."
    )


async def _next_turn(settings: Settings, o: ContinueOptions, view: JsonSink | LiveSink) -> Ran:
    from .finish import Ran
    from .remote import continue_remote

    if o.server is not None:
        comment = (
            comment_of(o, _remote_listing(o.server, o.session_id)) if o.on is not None or o.on_id is not None else None
        )
        said: str | ReviewComment = o.message if comment is None else comment
        done = await continue_remote(o.server, api_token(), o.session_id, said, view)
        return Ran(done.session_id, Path(done.repo), ended(done), done.source)
    return await _continue_here(settings, o, view)


def _remote_listing(url: str, session_id: str) -> list[Change]:
    """The server's listing of the session's changes, with real names (what ``--on`` is read against)."""
    from .remote import real_listing

    with remote_sessions(url) as client:
        return real_listing(client.changes(session_id))


async def _continue_here(settings: Settings, o: ContinueOptions, view: JsonSink | LiveSink) -> Ran:
    """The turn in this process, on this machine's database, driven as ``cubicle run`` drives its own."""
    from ..server import comments
    from .display import LiveSink
    from .finish import Ran

    async with local_sessions(settings) as sessions:
        record = sessions.get(o.session_id)
        await sessions.runtime.ensure_image(record.limits.network)
        approver = view.approve if o.approve and isinstance(view, LiveSink) else None
        text = o.message
        if o.on is not None or o.on_id is not None:  # quoted from the session's own diff, as the API's /comments does
            listing = await sessions.layers.changes(o.session_id, diff=True)
            comment = comment_of(o, listing)
            text = text if comment is None else comments.message(listing, [comment])
        await sessions.follow_up(o.session_id, text, view=view, approver=approver)
        live = sessions.loaded(o.session_id)
        assert live is not None and live.task is not None  # follow_up begins the turn
        return Ran(o.session_id, Path(record.repo), await _turn_of(live, o.session_id), record.source)


@app.command()
def show(session_id: SessionArg, json_events: JsonOption = False, server: ServerOpt = None) -> None:
    """Print a session's events as the live view shows them (--json: one JSON event per line); a turn that runs
    meanwhile is followed to its end."""
    import asyncio

    console = terminal.console(stderr=json_events)
    signals: list[int] = []
    with _exit_codes(signals), _unknown_is_usage(), _view(json_events, console) as sink:
        if server is not None:
            _show_remote(server, session_id, sink)
        else:
            asyncio.run(_show_here(load_settings(), session_id, sink))


@contextlib.contextmanager
def _unknown_is_usage() -> Iterator[None]:
    """An unknown session is a usage error (exit 2), as the workspace commands make it."""
    try:
        yield
    except NotFoundError as err:
        raise fail(err, EXIT_USAGE) from None


async def _show_here(settings: Settings, session_id: str, view: Any) -> None:
    from ..server.sessions import open_sessions

    async with open_sessions(settings) as sessions:
        sessions.get(session_id)  # an unknown session is an error that names it
        async for event in sessions.follow(session_id, 0):
            await view.emit(event)


def _show_remote(url: str, session_id: str, view: Any) -> None:
    import asyncio

    with remote_sessions(url) as client:
        for event in client.events(session_id):
            asyncio.run(view.emit(event))
