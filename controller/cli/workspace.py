"""The commands on a session's workspace layer: changes, apply, revert, rewind, discard, checkpoints.

They work on any session of the database, the API's too, through ``Sessions.layers`` as the API
calls it, without starting a turn. Exit codes: 0 done; 2 an unknown session, checkpoint or
apply; 5 a conflict (paths listed, nothing written) or a turn of the session is running;
4 Docker or filesystem failure.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.text import Text

from ..server.layercommands import LayerCommands
from ..wire.changeset import ApplyResult, Change
from ..workspace.manager import printable, summarize
from . import review, terminal
from .app import EXIT_USAGE, app, fail, load_settings, review_errors, with_sessions
from .display import plural
from .remote import RemoteSessions, ServerOpt, remote_sessions

T = TypeVar("T")
SessionArg = Annotated[str, typer.Argument(metavar="ID", help="The session (`cubicle sessions` lists them).")]
ForceOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--force",
        metavar="PATH",
        help="Overwrite PATH (a directory: all under it) even though the checkout changed there since the session "
        "saw it; also accept the environment's definition file at exactly PATH (repeatable).",
    ),
]
RevertForceOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--force",
        metavar="PATH",
        help="Restore PATH (a directory: all under it) even though you changed it since the apply (repeatable).",
    ),
]


def _review(op: Callable[[LayerCommands | RemoteSessions], Coroutine[Any, Any, T]], server: str | None) -> T:
    """``op`` on this machine's database, or (``server``) on a ``cubicle serve``'s through the client."""
    with review_errors():
        if server is None:
            return with_sessions(load_settings(), lambda sessions: op(sessions.layers))
        with remote_sessions(server) as client:
            return asyncio.run(op(RemoteSessions(client)))


@app.command()
def changes(
    session_id: SessionArg,
    diff: Annotated[bool, typer.Option("--diff", help="Show each text file's unified diff.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the changes as a JSON list (ASCII).")] = False,
    server: ServerOpt = None,
) -> None:
    """Show what a session changed in its workspace layer; the checkout has none of it until applied."""
    found = _review(lambda s: s.changes(session_id, diff=True), server)
    if json_out:
        shown = [
            printable(c).model_dump(mode="json", exclude_none=True, exclude=None if diff else {"diff"}) for c in found
        ]
        print(json.dumps(shown, ensure_ascii=True, indent=2))
        if found.truncated_at is not None or found.unlisted:  # the list is partial: say so beside it, never in it
            print(terminal.safe(review.summary_line(summarize(found)).plain.strip()), file=sys.stderr)
        return
    out = terminal.console()
    out.print(review.change_list(found))
    for change in found if diff else ():
        out.print(review.diff_view(change))


@app.command("apply")
def apply_command(
    session_id: SessionArg,
    paths: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[PATH]...",
            help="Apply only these (a directory: all under it), each as `cubicle changes` shows it; the rest stays "
            "in the session for a later apply. A PATH that names no change is an error (exit 2), and nothing is "
            "written.",
        ),
    ] = None,
    force: ForceOpt = None,
    include_ignored: Annotated[
        bool, typer.Option("--include-ignored", help="Also apply paths the repository's ignore rules match.")
    ] = False,
    build_inputs: Annotated[
        bool,
        typer.Option(
            "--build-inputs",
            help="Also apply the paths of the build context the environment's Dockerfile copies whole "
            "(build_input in the review): the next environment build runs them as root.",
        ),
    ] = False,
    server: ServerOpt = None,
) -> None:
    """Copy a session's changes into its checkout (all or nothing: a conflict writes nothing, exit 5). With
    --server, the checkout is the server's: the repository as the server sees it."""

    async def apply(sessions: LayerCommands | RemoteSessions) -> tuple[ApplyResult, Path]:
        named = None if not paths else as_listed(paths, await sessions.changes(session_id))
        result = await sessions.apply(session_id, force, include_ignored, build_inputs, named)
        return result, Path(sessions.get(session_id).repo)

    result, repo = _review(apply, server)
    terminal.console().print(review.applied(session_id, repo, result))


def as_listed(paths: list[str], listed: list[Change]) -> list[str]:
    """Each of ``paths`` as the session's changes name it: a listed name as it is; else one typed as the review
    printed it (its hidden characters spelled out, ``\\x1b``) becomes the listed one, unless two print alike (then
    it is refused: the user could not have meant one of them); anything else goes as given (the apply judges it)."""
    names = {change.path for change in listed}
    printed: dict[str, list[str]] = {}
    for name in names:
        printed.setdefault(review.path_text(name).plain, []).append(name)
    found = []
    for path in paths:
        alike = printed.get(path, [])
        if path in names or not alike:
            found.append(path)
        elif len(alike) == 1:
            found.append(alike[0])
        else:
            raise fail(
                f"{terminal.safe(path)} names {len(alike)} changes that print alike: give the exact name", EXIT_USAGE
            )
    return found


@app.command()
def revert(session_id: SessionArg, force: RevertForceOpt = None, server: ServerOpt = None) -> None:
    """Restore the checkout, byte for byte, to how it was before the session's newest apply not yet reverted."""
    result = _review(lambda s: s.revert(session_id, force), server)
    out = terminal.console()
    restored = plural(len(result.reverted) + result.more_reverted, "path")
    out.print(Text.assemble(("reverted", "green"), f" apply {result.record}: {restored} restored"))
    for path in result.reverted:
        out.print(Text.assemble("  ", review.path_text(path)))
    if result.more_reverted:
        out.print(Text(f"  … and {plural(result.more_reverted, 'more path')}", "dim"))


@app.command()
def discard(session_id: SessionArg, server: ServerOpt = None) -> None:
    """Drop a session's workspace layer and checkpoints; what was applied stays in the checkout."""
    _review(lambda s: s.discard(session_id), server)
    terminal.console().print(Text.assemble(("discarded", "green"), f" the changes of {session_id}"))


@app.command()
def rewind(
    session_id: SessionArg,
    turn: Annotated[
        int, typer.Argument(min=1, metavar="TURN", help="The checkpoint (end of that turn) to return the files to.")
    ],
    server: ServerOpt = None,
) -> None:
    """Return a session's files to how they were at the end of turn TURN (the checkout is untouched)."""
    _review(lambda s: s.rewind(session_id, turn), server)
    terminal.console().print(
        Text.assemble(("rewound", "green"), f" {session_id} to the end of turn {turn}; later changes are gone")
    )


@app.command()
def checkpoints(session_id: SessionArg, server: ServerOpt = None) -> None:
    """List a session's checkpoints, one per turn (`cubicle rewind ID TURN` returns to one)."""
    found = _review(lambda s: s.checkpoints(session_id), server)
    out = terminal.console()
    for point in found:
        out.print(f"turn {point.turn}  {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(point.created_at))}")
    if not found:
        out.print("no checkpoints yet")
