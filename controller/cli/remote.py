"""``cubicle run --server URL``: the same run, on a remote ``cubicle serve``, through ``controller.client``.

The session is created by the API and its events, streamed back (reconnecting when the
connection drops), are fed to the same view a local run uses. Cancelling the run (Ctrl-C,
SIGTERM, SIGHUP) cancels the remote turn, and the view still shows its end. The changes are
then reviewed and applied through the API, as ``finish.after_turn`` does for a local run.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..errors import CubicleError
from . import terminal
from .app import EXIT_INFRA, EXIT_USAGE, fail

if TYPE_CHECKING:  # what a remote command runs (the HTTP client, the wire's models) is imported inside it
    from ..agent.loop import TurnOutcome
    from ..client import AsyncClient, Client
    from ..wire.bodies import PushRequest, PushResult, RemoteRepo, ReviewComment
    from ..wire.changeset import ApplyResult, Change, Changes, Checkpoint, RevertResult
    from ..wire.envspec import EnvironmentRequest
    from ..wire.events import SessionFinished
    from ..wire.sessionrecord import SessionRecord, Source
    from .display import JsonSink, LiveSink

ServerOpt = Annotated[
    str | None,
    typer.Option(
        metavar="URL",
        envvar="CUBICLE_SERVER",
        help="Work on this `cubicle serve` (token: CUBICLE_API_TOKEN) instead of this machine's database (an "
        "apply, revert or rewind then changes the server's files).",
    ),
]
LOCAL_ONLY = {
    "--approve": "the server runs the tools without a terminal to ask on",
    "--scenario": "the server's model is the server's (run `cubicle scripted-server` beside it for an offline one)",
}
"""Flags ``--server`` refuses, and why."""


@dataclass(frozen=True)
class Remote:
    """What a remote run asks the server for."""

    url: str
    token: str | None
    repo: str | RemoteRepo
    """A path on the server, or a git remote it fetches."""
    task: str
    model: str | None
    limits: dict[str, Any]
    environment: EnvironmentRequest | None


@dataclass(frozen=True)
class RemoteRun:
    session_id: str
    repo: str
    finished: SessionFinished | None
    source: Source | None = None


async def run_remote(remote: Remote, view: JsonSink | LiveSink) -> RemoteRun:
    """Start the session and show its events until its turn ends; a cancel of this task cancels the remote turn."""
    from ..client import AsyncClient

    async with AsyncClient(remote.url, remote.token) as client:
        record = await client.create(
            remote.repo, remote.task, model=remote.model, limits=remote.limits or None, environment=remote.environment
        )
        return await _turn(client, _session_id(record.id), record, 0, view)


async def continue_remote(
    url: str, token: str | None, session_id: str, said: str | ReviewComment, view: Any
) -> RemoteRun:
    """Begin the session's next turn on ``said`` (a message, or a review comment the server quotes the diff for) and
    show its events until it ends (as ``run_remote`` does)."""
    from ..client import AsyncClient
    from ..wire.bodies import ReviewComment

    async with AsyncClient(url, token) as client:
        last = 0
        async for event in client.events(session_id):  # what is stored; the stream ends as no turn runs
            last = event.seq
        if isinstance(said, ReviewComment):
            record = await client.comment(session_id, [said])
        else:
            record = await client.follow_up(session_id, said)
        return await _turn(client, session_id, record, last, view)


def _session_id(given: str) -> str:
    """A server's session id, which the CLI prints in commands to copy: one that is not an id is refused."""
    from ..workspace.layer import SESSION_ID

    if not SESSION_ID.fullmatch(given):
        raise CubicleError(f"The server answered a session id that is not one: {terminal.safe(given)[:80]!r}.")
    return given


async def _turn(client: AsyncClient, session_id: str, record: SessionRecord, after: int, view: Any) -> RemoteRun:
    import asyncio

    from ..wire.events import SessionFinished

    finished: SessionFinished | None = None
    last = after
    try:
        async for event in client.events(session_id, after=after):
            last = event.seq
            finished = event if isinstance(event, SessionFinished) else finished
            await view.emit(event)
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
        await client.cancel(session_id)
        async for event in client.events(session_id, after=last):  # the turn's end, as the server recorded it
            finished = event if isinstance(event, SessionFinished) else finished
            await view.emit(event)
    if finished is None:  # the stream ended without the turn's end (its process failed): the record says why
        stored = await client.get(session_id)
        if stored.finish_reason is not None:
            finished = SessionFinished(
                session_id=session_id,
                reason=stored.finish_reason,
                steps=stored.steps,
                usage=stored.usage,
                detail=stored.detail,
            )
    return RemoteRun(session_id, record.repo, finished, record.source)


@dataclass(frozen=True)
class RemoteReview:
    """A remote session's changes, read and applied through the API (see ``finish.Review``)."""

    url: str
    token: str | None
    session_id: str

    @property
    def where(self) -> str:
        return f" --server {shlex.quote(self.url)}"

    def changes(self) -> list[Change]:
        from ..client import Client

        with Client(self.url, self.token) as client:
            return real_listing(client.changes(self.session_id, diff=True))

    def apply(self, include_ignored: bool, view: Any) -> ApplyResult:
        import asyncio

        from ..client import Client
        from .display import JsonSink

        with Client(self.url, self.token) as client:
            result = client.apply(self.session_id, include_ignored=include_ignored)
            if isinstance(view, JsonSink):
                for event in client.events(self.session_id, after=view.seq):
                    asyncio.run(view.emit(event))
            return real_result(result)


class RemoteSessions:
    """The session commands ``Sessions`` answers (get, page) and its ``layers`` (changes, apply, revert, rewind,
    discard, checkpoints), answered by a ``cubicle serve`` through the client: what ``--server`` (or
    ``CUBICLE_SERVER``) gives the CLI."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def get(self, session_id: str) -> SessionRecord:
        return self.client.get(session_id)

    def page(self, limit: int, offset: int) -> tuple[list[SessionRecord], int]:
        found = self.client.sessions(limit, offset)
        return found.items, found.total

    async def changes(self, session_id: str, diff: bool = False) -> Changes:
        return real_listing(self.client.changes(session_id, diff))

    async def patch(self, session_id: str) -> bytes:
        return self.client.patch(session_id)

    async def apply(
        self,
        session_id: str,
        force: list[str] | None = None,
        include_ignored: bool = False,
        build_inputs: bool = False,
        paths: list[str] | None = None,
        ids: list[str] | None = None,
    ) -> ApplyResult:
        return real_result(self.client.apply(session_id, force or (), include_ignored, build_inputs, paths, ids))

    async def revert(self, session_id: str, force: list[str] | None = None) -> RevertResult:
        result = self.client.revert(session_id, force or ())
        return result.model_copy(update={"reverted": [_real(p) for p in result.reverted]})

    async def rewind(self, session_id: str, turn: int) -> SessionRecord:
        return self.client.rewind(session_id, turn)

    async def push(self, session_id: str, asked: PushRequest, typed: bool = False) -> PushResult:
        del typed  # the server admits its remotes by its own rule
        return self.client.push(session_id, asked)

    async def discard(self, session_id: str) -> SessionRecord:
        return self.client.discard(session_id)

    async def checkpoints(self, session_id: str) -> list[Checkpoint]:
        return self.client.checkpoints(session_id)


def _real(name: str) -> str:
    """A name as a server printed it (``records.shown``), real again: the CLI prints every name itself, once."""
    from ..workspace.records import unshown

    return unshown(name) or name


def _real_change(change: Change) -> Change:
    names = {"path": change.path, "target": change.target, "renamed_from": change.renamed_from}
    return change.model_copy(update={k: _real(v) for k, v in names.items() if v is not None})


def real_listing(found: Changes) -> Changes:
    """A server's listing with real names, as a local one holds them (ids and counts as the server sent them)."""
    from ..wire.changeset import Changes

    out = Changes(_real_change(change) for change in found)
    out.truncated_at, out.unlisted, out.unlisted_applied = found.truncated_at, found.unlisted, found.unlisted_applied
    return out


def real_result(result: ApplyResult) -> ApplyResult:
    return result.model_copy(
        update={"applied": [_real(p) for p in result.applied], "skipped": [_real_change(c) for c in result.skipped]}
    )


def api_token() -> str | None:
    """The server's token, from ``CUBICLE_API_TOKEN`` (none when it is unset or empty)."""
    return os.environ.get("CUBICLE_API_TOKEN") or None


def remote_sessions(url: str) -> Client:
    """The client of ``url``, with the token from ``CUBICLE_API_TOKEN``."""
    from ..client import Client

    return Client(url, api_token())


def refuse_local_only(approve: bool, scenario: str | None) -> None:
    """``--server`` with a flag only a local turn can honour: a usage error that says why."""
    given = [flag for flag, on in {"--approve": approve, "--scenario": scenario is not None}.items() if on]
    if given:
        raise fail(f"{given[0]} cannot be used with --server: {LOCAL_ONLY[given[0]]}.", EXIT_USAGE)


def ended(done: RemoteRun) -> TurnOutcome:
    """How a remote turn ended; one whose end the server never recorded is an infrastructure error."""
    from ..agent.loop import TurnOutcome

    if done.finished is None:
        raise fail(f"session {done.session_id} ended without recording how its turn ended", EXIT_INFRA)
    return TurnOutcome(done.finished.reason, done.finished.detail)
