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


def comment_of(o: ContinueOptions) -> ReviewComment | None:
    """The review comment ``--on PATH[:LINE]`` makes of the message: a line when PATH ends in ``:`` and digits."""
    from ..wire.bodies import ReviewComment

    if o.on is None:
        return None
    path, _, line = o.on.rpartition(":")
    if path and line.isdigit() and int(line) > 0:
        return ReviewComment(path=path, line=int(line), text=o.message)
    return ReviewComment(path=o.on, text=o.message)


async def _next_turn(settings: Settings, o: ContinueOptions, view: JsonSink | LiveSink) -> Ran:
    from .finish import Ran
    from .remote import continue_remote

    if o.server is not None:
        comment = comment_of(o)
        said: str | ReviewComment = o.message if comment is None else comment
        done = await continue_remote(o.server, api_token(), o.session_id, said, view)
        return Ran(done.session_id, Path(done.repo), ended(done))
    return await _continue_here(settings, o, view)


async def _continue_here(settings: Settings, o: ContinueOptions, view: JsonSink | LiveSink) -> Ran:
    """The turn in this process, on this machine's database, driven as ``cubicle run`` drives its own."""
    from ..server import comments
    from .display import LiveSink
    from .finish import Ran

    async with local_sessions(settings) as sessions:
        record = sessions.get(o.session_id)
        await sessions.runtime.ensure_image(record.limits.network)
        approver = view.approve if o.approve and isinstance(view, LiveSink) else None
        text, comment = o.message, comment_of(o)
        if comment is not None:  # quoted from the session's own diff, as the API's /comments does
            listing = await sessions.layers.changes(o.session_id, diff=True)
            text = comments.message(listing, [comment])
        await sessions.follow_up(o.session_id, text, view=view, approver=approver)
        live = sessions.loaded(o.session_id)
        assert live is not None and live.task is not None  # follow_up begins the turn
        return Ran(o.session_id, Path(record.repo), await _turn_of(live, o.session_id))


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
