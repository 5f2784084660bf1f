"""The commands on a session's workspace layer: changes, apply, revert, rewind, discard, checkpoints.

They work on any session of the database, the API's too, through ``Sessions.layers`` as the API
calls it, without starting a turn. Exit codes: 0 done; 2 an unknown session, checkpoint or
apply; 5 a conflict (paths listed, nothing written) or a turn of the session is running;
4 Docker or filesystem failure.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.text import Text

from . import terminal
from .app import EXIT_INFRA, EXIT_USAGE, app, fail, load_settings, review_errors, with_sessions
from .remote import RemoteSessions, ServerOpt, remote_sessions

if TYPE_CHECKING:  # what the commands run is imported inside them: `cubicle --help` loads none of it
    from ..server.layercommands import LayerCommands
    from ..wire.changeset import ApplyResult, Change, Changes

T = TypeVar("T")
SessionArg = Annotated[str, typer.Argument(metavar="ID", help="The session (`cubicle sessions` lists them).")]
ForceOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--force",
        metavar="PATH",
        help="Overwrite PATH (a directory: all under it) even though the checkout changed there since the session "
        "saw it; also accept the held-back definition (trusted: the environment's, a path git runs or reads, a CI "
        "definition) at exactly PATH (repeatable).",
    ),
]
PathsArg = Annotated[
    list[str] | None,
    typer.Argument(
        metavar="[PATH]...",
        help="Apply only these (a directory: all under it), each as `cubicle changes` shows it; the rest stays "
        "in the session for a later apply. A PATH that names no change is an error (exit 2), and nothing is "
        "written.",
    ),
]
IdsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--id",
        metavar="CHANGE_ID",
        help="Apply the change with this id (`cubicle changes ID --json` lists them; repeatable): an id means one "
        "change whatever its name prints as. With PATHs, both are applied.",
    ),
]
PatchOpt = Annotated[
    bool,
    typer.Option(
        "--patch",
        help="Print one binary-safe patch for `git apply` of exactly what a plain apply writes, made of the layer's "
        "bytes (binary files, modes, symlinks, deletions included); what apply holds back is listed in its `#` "
        "lines, each with the command that applies it.",
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
    import asyncio

    with review_errors():
        if server is None:
            return with_sessions(load_settings(), lambda sessions: op(sessions.layers))
        with remote_sessions(server) as client:
            return asyncio.run(op(RemoteSessions(client)))


@app.command()
def changes(
    session_id: SessionArg,
    diff: Annotated[
        bool,
        typer.Option(
            "--diff",
            help="Show each text file's unified diff. Piped (not a terminal), the output is a patch for `git apply` "
            "of only what a plain apply writes; what it holds back is listed in comment lines.",
        ),
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the changes as a JSON list (ASCII).")] = False,
    as_patch: PatchOpt = False,
    server: ServerOpt = None,
) -> None:
    """Show what a session changed in its workspace layer; the checkout has none of it until applied."""
    from ..wire import lookalike
    from ..workspace.manager import printable
    from . import patch, review

    if as_patch:
        _print_patch(session_id, server, diff or json_out)
        return
    found = _review(lambda s: s.changes(session_id, diff=True), server)
    if json_out:
        shown = [
            printable(c).model_dump(mode="json", exclude_none=True, exclude=None if diff else {"diff"}) for c in found
        ]
        print(json.dumps(shown, ensure_ascii=True, indent=2))
        _say_partial(found)
        return
    if diff and not sys.stdout.isatty():  # piped, to `git apply` say: only what a plain apply writes
        sys.stdout.buffer.write(patch.patch(session_id, found).encode("utf-8", "backslashreplace"))
        _say_partial(found)
        return
    out = terminal.console()
    out.print(review.change_list(found))
    alike = lookalike.twins(change.path for change in found) if diff else {}
    for change in found if diff else ():
        out.print(review.diff_view(change, alike.get(change.path)))


def _print_patch(session_id: str, server: str | None, other_view: bool) -> None:
    """The session's patch (``workspace.gitpatch``, made where the layer is), on stdout as the bytes it is."""
    if other_view:
        raise fail("--patch cannot be used with --diff or --json.", EXIT_USAGE)
    from . import patch

    made = _review(lambda s: s.patch(session_id), server)
    if not inert_patch(made):  # a server's answer: none of it reaches the terminal unless it is inert
        raise fail(
            "The patch holds characters a terminal obeys (or bytes that are not UTF-8), which a Cubicle patch never "
            "does: it was not printed. Check that the server is one you trust.",
            EXIT_INFRA,
        )
    if server is not None:  # judged again here by name, as the piped --diff is
        try:
            made = patch.served_patch(session_id, made.decode("utf-8")).encode("utf-8")
        except ValueError as err:
            raise fail(
                f"The server's patch was not printed: {err}. Check that the server is one you trust.", EXIT_INFRA
            ) from None
    sys.stdout.buffer.write(made)
    sys.stdout.buffer.flush()


def inert_patch(patch: bytes) -> bool:
    """Whether ``patch`` is UTF-8 text a terminal only draws (a ``\\r\\n`` line ending aside), as every patch
    ``workspace.gitpatch`` makes is: names C-quoted, binary files in base85, text only of drawn characters."""
    try:
        text = patch.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return terminal.safe(text) == text.replace("\r\n", "\n")


def _say_partial(found: Changes) -> None:
    """When the listing is partial, say so on stderr: beside a list or a patch, never in it."""
    from ..workspace.manager import summarize
    from . import review

    if found.truncated_at is not None or found.unlisted:
        print(terminal.safe(review.summary_line(summarize(found)).plain.strip()), file=sys.stderr)


@app.command("apply")
def apply_command(
    session_id: SessionArg,
    paths: PathsArg = None,
    ids: IdsOpt = None,
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
    from . import review

    async def apply(sessions: LayerCommands | RemoteSessions) -> tuple[ApplyResult, Path]:
        listed = await sessions.changes(session_id) if paths or force else []
        named, chosen = as_selected(paths, listed) if paths else (None, None)
        if ids:
            chosen = [*(chosen or ()), *ids]
        forced = [as_printed(name, listed) for name in force or ()]
        result = await sessions.apply(session_id, forced, include_ignored, build_inputs, named, chosen)
        return result, Path(sessions.get(session_id).repo)

    result, repo = _review(apply, server)
    terminal.console().print(review.applied(session_id, repo, result))


def as_selected(paths: list[str], listed: list[Change]) -> tuple[list[str] | None, list[str] | None]:
    """``paths`` as the apply is sent them: a PATH that names one listed change, in any spelling (its real name,
    as ``cubicle changes`` printed it, as the terminal showed it), becomes that change's id; any other goes as given
    (a directory above changes, or a name of none: the apply judges it, refusing one that reads as two). A PATH
    whose spellings point at different changes is refused, naming them, and nothing is written."""
    spelled = [(change, spellings(change)) for change in listed]
    named: list[str] = []
    ids: list[str] = []
    for path in paths:
        one = _id_named(path, spelled)
        if one:
            _unlike(path, one, spelled)
            ids.append(one)
        else:
            named.append(path)
    return named or None, ids or None


def _id_named(path: str, spelled: list[tuple[Change, tuple[str, str, str]]]) -> str | None:
    """The id of the one change ``path`` spells; None when it names a directory above changes, or none; refused
    when its spellings point at different changes."""
    meant = {frozenset(c.id for c, forms in spelled if _at_or_under(forms[at], path)) for at in range(3)}
    meant.discard(frozenset())
    if len(meant) > 1:
        raise fail(_ambiguous(path, spelled, meant), EXIT_USAGE)
    exact = [c.id for c, forms in spelled if path in forms]
    return exact[0] if len(exact) == 1 and meant == {frozenset(exact)} else None


def _unlike(path: str, chosen: str, spelled: list[tuple[Change, tuple[str, str, str]]]) -> None:
    """Refuse ``path``, which names the change ``chosen`` (an id), when another change's name looks like its
    (``selection.lookalikes``): the user may have reviewed that one, and only an id says which was meant."""
    from ..workspace.selection import lookalikes

    listed = [change for change, _ in spelled]
    meant = lookalikes(next(c.path for c in listed if c.id == chosen), listed)
    if len(meant) > 1:
        raise fail(_ambiguous(path, spelled, {frozenset(c.id for hits in meant.values() for c in hits)}), EXIT_USAGE)


def as_printed(name: str, listed: list[Change]) -> str:
    """A ``--force`` name as the apply reads it: one listed change's in any spelling (the terminal's ``\\x1b``
    too) becomes its printed name; any other goes as given. One whose spellings mean two changes is refused."""
    from ..workspace.records import shown

    meant = {c.path for c in listed if name in spellings(c)}
    if len(meant) > 1:
        listed_ids = [c for c in listed if c.path in meant]
        raise fail(
            _ambiguous(name, [(c, spellings(c)) for c in listed_ids], {frozenset(c.id for c in listed_ids)}),
            EXIT_USAGE,
        )
    return shown(meant.pop()) if meant else name


def spellings(change: Change) -> tuple[str, str, str]:
    """A listed change's real name, printed name and terminal name."""
    from ..workspace.records import shown
    from . import review

    return change.path, shown(change.path), review.path_text(change.path).plain


def _at_or_under(name: str, given: str) -> bool:
    root = given.rstrip("/") or given
    return name == root or name.startswith(root + "/")


def _ambiguous(path: str, spelled: list[tuple[Change, tuple[str, str, str]]], meant: set[frozenset[str]]) -> str:
    from ..wire.lookalike import spelled as spelled_out

    ids = sorted({i for group in meant for i in group})
    names = {c.id: spelled_out(forms[1], strict=True) for c, forms in spelled}
    listed = "; ".join(f"{terminal.safe(names[i])} (--id {i})" for i in ids[:6])
    return (
        f"{terminal.safe(path)} could mean different changes: {listed}{' …' if len(ids) > 6 else ''}. Nothing was "
        "written: select the one you mean with --id CHANGE_ID."
    )


@app.command()
def revert(session_id: SessionArg, force: RevertForceOpt = None, server: ServerOpt = None) -> None:
    """Restore the checkout, byte for byte, to how it was before the session's newest apply not yet reverted."""
    from . import review
    from .display import plural

    result = _review(lambda s: s.revert(session_id, force), server)
    out = terminal.console()
    restored = plural(len(result.reverted) + result.more_reverted, "path")
    out.print(Text.assemble(("reverted", "green"), f" apply {result.record}: {restored} restored"))
    for path in result.reverted:
        out.print(Text.assemble("  ", review.path_text(path)))
    if result.more_reverted:
        out.print(Text(f"  … and {plural(result.more_reverted, 'more path')}", "dim"))


BranchOpt = Annotated[
    str, typer.Option("--branch", metavar="NAME", help="The branch to make at the remote (under cubicle/).")
]
MessageOpt = Annotated[
    str | None, typer.Option("--message", "-m", help="The commit's message (default: the task's first line).")
]
PushForceOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--force",
        metavar="PATH",
        help="Include this held-back path (a CI definition, the environment's definition), by its exact path "
        "(repeatable).",
    ),
]
LeaseOpt = Annotated[
    bool,
    typer.Option(
        "--force-with-lease", help="Replace the branch if it exists and still names what a fetch just found there."
    ),
]


def _full_commit(value: str | None) -> str | None:
    if value is not None and not re.fullmatch(r"[0-9a-f]{40}", value):
        raise typer.BadParameter("a full commit id: 40 lowercase hexadecimal digits")
    return value


ExpectOpt = Annotated[
    str | None,
    typer.Option(
        "--expect",
        metavar="COMMIT",
        callback=_full_commit,
        help="Replace the branch only if it still names COMMIT (say, the commit your last push printed); implies "
        "--force-with-lease, and tells your own last push from someone else's after it.",
    ),
]


@app.command()
def push(
    session_id: SessionArg,
    branch: BranchOpt,
    message: MessageOpt = None,
    force: PushForceOpt = None,
    force_with_lease: LeaseOpt = False,
    expect: ExpectOpt = None,
    server: ServerOpt = None,
) -> None:
    """Push the changes of a session on a git remote to a new branch there: one commit on the session's commit, of
    what a plain apply would write, with the server's credentials (never the sandbox's)."""
    from ..wire.bodies import PushRequest

    lease = force_with_lease or expect is not None
    asked = PushRequest(branch=branch, message=message, force=force or [], force_with_lease=lease, expected=expect)
    result = _review(lambda s: s.push(session_id, asked, typed=True), server)
    out = terminal.console()
    out.print(
        Text.assemble(
            ("pushed", "green"),
            f" {result.written} path(s) as {result.commit[:12]} on ",
            terminal.safe_text(result.branch, "bold"),
            " at ",
            terminal.safe_text(result.url),
            f" ({result.status})",
        )
    )
    for line in result.left:
        out.print(Text.assemble("  left out: ", terminal.safe_text(line, "dim")))


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
