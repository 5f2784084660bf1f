"""The commands around sessions: serve the API, list sessions, build the image, sweep orphans, a scripted model."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from ..errors import ConfigError, CubicleError
from . import options, terminal
from .app import EXIT_INFRA, EXIT_USAGE, app, err_console, fail, image_app, load_settings, review_errors, with_sessions
from .remote import RemoteSessions, ServerOpt, remote_sessions

if TYPE_CHECKING:  # what the commands run is imported inside them: `cubicle --help` loads none of it
    from ..config import Settings
    from ..sandbox.backends import Backend
    from ..server.sessions import Expiry, Sessions
    from ..wire.policies import Edit
    from ..wire.sessionrecord import SessionRecord

TOKEN_MIN_CHARS = 32


@image_app.command("build")
def image_build(
    tag: Annotated[str | None, typer.Option(help="Image tag (default: CUBICLE_IMAGE).")] = None,
    base: Annotated[str | None, typer.Option(help="Base image (build argument BASE).")] = None,
    proxy_tag: Annotated[
        str | None, typer.Option(help="Egress proxy image tag (default: CUBICLE_PROXY_IMAGE).")
    ] = None,
) -> None:
    """Build the sandbox image and the egress proxy's (their Dockerfiles ship in the package), showing progress."""
    from ..sandbox.backends import open_backend

    settings = load_settings()
    try:
        backend = open_backend(settings)
        with contextlib.closing(backend):
            for target, proxy in ((tag or settings.image, False), (proxy_tag or settings.proxy_image, True)):
                with err_console.status(f"building {target}") as status:

                    def show(line: str, target: str = target, status: Any = status) -> None:
                        if line.startswith("Step "):
                            err_console.print(terminal.safe_text(line, "dim"))
                        status.update(Text.assemble(f"building {target}: ", terminal.safe_text(line[:100])))

                    image_id = backend.build_image(target, proxy, base, show)
                err_console.print(Text.assemble(("built", "green"), f" {target} {image_id[:19]}"))
    except CubicleError as err:
        raise fail(err, EXIT_INFRA) from None


@app.command()
def doctor() -> None:
    """What this machine gives Cubicle: the engine, its OCI runtimes (and which sessions may use), the images."""
    from ..sandbox.backends import open_backend

    settings = load_settings()
    try:
        with contextlib.closing(open_backend(settings)) as backend:
            checkup = backend.checkup()
    except CubicleError as err:
        raise fail(err, EXIT_INFRA) from None
    err_console.print(checkup.engine)
    for name in checkup.runtimes:
        allowed = "allowed" if name in settings.allowed_runtimes else "not in CUBICLE_ALLOWED_RUNTIMES"
        err_console.print(f"  runtime {name}: {allowed}" + (" (default)" if name == settings.limits.runtime else ""))
    for name, hint in checkup.lacking.items():
        err_console.print(Text.assemble(f"  runtime {name}: allowed, but the engine lacks it. ", (hint, "yellow")))
    for tag, missing in checkup.images.items():
        err_console.print(f"  image {tag}: present" if missing is None else f"  image {tag}: missing ({missing})")


def duration_s(text: str) -> float:
    """``--older-than``: a duration (90s, 30m, 12h, 7d, 2w); anything else is a usage error that shows the form."""
    from .. import config

    try:
        return config.duration_s(text)
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None


@dataclass(frozen=True)
class GcOptions:
    """What `cubicle gc` was given, as Typer reads it from these fields."""

    everything: Annotated[bool, typer.Option("--all", help="Remove every Cubicle container, live or not.")] = False
    older_than: Annotated[
        float | None,
        typer.Option(
            parser=duration_s,
            metavar="DURATION",
            help="Also remove the sessions that ended longer ago than this (90s, 30m, 12h, 7d, 2w, counted from "
            "their last event): record, events, layer and checkpoints. Running sessions are never touched.",
        ),
    ] = None
    include_unapplied: Annotated[
        bool,
        typer.Option(
            "--include-unapplied",
            help="With --older-than, remove sessions whose changes were never applied or discarded too "
            "(kept otherwise).",
        ),
    ] = False


@app.command(
    help="Remove sandbox containers, volumes and networks whose controller process is gone, the layers of purged "
    "sessions, the setup trees no session's layer sits on, the git remotes' trees no session works on, the "
    "commits purged sessions kept pinned, mirrors no session used for CUBICLE_GIT_MIRROR_IDLE (the rest are "
    "compacted), what unfinished git work left, and environment images no container uses (the newest of each "
    "repository stays); with --older-than, old ended sessions too."
)
@options.command(GcOptions)
def gc(o: GcOptions) -> None:
    from ..environment import build as environment_image
    from ..sandbox.backends import open_backend
    from ..server.sessions import Sessions

    settings = load_settings()
    try:
        backend = open_backend(settings)
    except CubicleError as err:
        raise fail(err, EXIT_INFRA) from None
    with contextlib.closing(backend):
        try:
            result = asyncio.run(backend.sweep(everything=o.everything))
            for name in result.removed:
                print(f"removed {name}")
            print(f"{len(result.removed)} removed, {len(result.kept)} kept")
            if o.older_than is not None:
                _expire(settings, o.older_than, o.include_unapplied)
            else:  # what killed processes left: their sessions interrupted, their layers' filesystems unmounted
                with_sessions(settings, Sessions.start)
        except CubicleError as err:
            raise fail(err, EXIT_INFRA) from None
        for tag in environment_image.sweep(backend.builder()):
            print(f"removed the environment image {tag}")
        _sweep_disk(settings, backend)


def _sweep_disk(settings: Settings, backend: Backend) -> None:
    """Remove the layers of purged sessions, the setup trees no session's layer sits on, and what the git directory
    need not keep (``origins.sweep``)."""
    from ..environment.setups import Setups
    from ..server import origins
    from ..server.store import open_store
    from ..workspace.manager import Workspaces

    clear = backend.clear_as_root
    store = open_store(settings)
    try:
        layers = Workspaces(settings.data_dir, clear, backend.disks()).sweep(
            lambda session_id: store.get(session_id) is not None
        )
        trees = origins.sweep(settings, store.repos(), lambda session_id: store.get(session_id) is not None)
    finally:
        store.close()
    for line in trees:
        print(line)
    for session_id in layers:
        print(f"removed the workspace layer of purged session {terminal.safe(session_id)}")
    for key in Setups(settings.data_dir, clear).sweep(settings.data_dir / "workspaces"):
        print(f"removed the setup tree {key[:12]}, which no session uses")


def _expire(settings: Settings, age_s: float, include_unapplied: bool) -> None:
    """``gc --older-than``: purge the sessions that ended before the age, and say which were kept and why."""
    from .display import plural

    async def expire(sessions: Sessions) -> Expiry:
        await sessions.start()  # a session a killed process left "running" is interrupted: it can age out too
        return await sessions.expire(age_s, include_unapplied)

    expiry = with_sessions(settings, expire)
    now = time.time()
    for session_id, last in expiry.removed:
        print(f"removed the session {terminal.safe(session_id)} (last active {_ago(now - last)} ago)")
    for session_id, pending in expiry.kept:
        what = "its layer could not be read" if pending < 0 else f"{plural(pending, 'change')} not applied"
        print(
            f"kept the session {terminal.safe(session_id)}: {what} (apply or discard them, or add --include-unapplied)"
        )
    print(f"{plural(len(expiry.removed), 'old session')} removed, {len(expiry.kept)} kept for their changes")


def _ago(seconds: float) -> str:
    from .display import plural

    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            return plural(int(seconds // size), unit)
    return plural(int(seconds), "second")


def _warn(message: str) -> None:
    err_console.print(Text.assemble(("warning:", "yellow"), " ", terminal.safe_text(message)))


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Address to bind (default: CUBICLE_HOST, 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default: CUBICLE_PORT, 8750).")] = None,
) -> None:
    """Serve the HTTP API (/v1) with uvicorn."""
    import uvicorn

    from ..server import accesslog
    from ..server.api import create_app

    settings = load_settings()
    bind = host or settings.host
    _check_token(settings, bind)
    _check_repo_roots(settings)
    _check_backend(settings)
    uvicorn.run(
        create_app(settings), host=bind, port=port or settings.port, log_level="info", log_config=accesslog.log_config()
    )


def _check_token(settings: Settings, bind: str) -> None:
    """No token is a usage error past loopback; a short one, a warning."""
    if settings.api_token is None and not _is_loopback(bind):
        raise fail(
            f"Refusing to serve on {bind} without CUBICLE_API_TOKEN: the API can start containers on this host. "
            "Set a token, or bind 127.0.0.1.",
            EXIT_USAGE,
        )
    if settings.api_token is not None and len(settings.api_token.get_secret_value()) < TOKEN_MIN_CHARS:
        _warn(
            f"CUBICLE_API_TOKEN has only {len(settings.api_token.get_secret_value())} characters; use at least "
            f"{TOKEN_MIN_CHARS} random ones, e.g. from `python -c 'import secrets; print(secrets.token_urlsafe(32))'`."
        )


def _check_repo_roots(settings: Settings) -> None:
    """A repository root that is not a directory is a usage error; none at all, a warning."""
    for root in settings.repo_roots:
        if not root.is_dir():
            what = "is not a directory" if root.exists() else "does not exist"
            raise fail(
                f"CUBICLE_REPO_ROOTS: {root} {what}; list directories that exist "
                '(comma-separated, or a JSON list such as ["/srv/repos"]).',
                EXIT_USAGE,
            )
    if not settings.repo_roots:
        _warn("CUBICLE_REPO_ROOTS is empty, so every session will be refused.")


def _check_backend(settings: Settings) -> None:
    """A backend that cannot run is a usage error now, not a failed startup."""
    from ..sandbox.backends import open_backend

    try:
        open_backend(settings).close()
    except ConfigError as err:
        raise fail(str(err), EXIT_USAGE) from None


@app.command()
def sessions(
    limit: Annotated[int, typer.Option(help="How many, newest first.")] = 20,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print one JSON array of the sessions as the API reports them (ASCII).")
    ] = False,
    server: ServerOpt = None,
) -> None:
    """List the sessions (the API's and `cubicle run`'s) from the database, newest first."""
    from rich.table import Table

    from ..wire.sessionrecord import SessionRecord
    from .display import plural

    records, total = _page(limit, server)
    if json_out:
        public = set(SessionRecord.model_fields)
        print(json.dumps([r.model_dump(mode="json", include=public) for r in records], ensure_ascii=True, indent=2))
        return
    out = terminal.console()
    table = Table(
        "updated", "status", "finish", "unapplied", "steps", "tokens", "repo", "task", title=plural(total, "session")
    )
    # The id is what every other command takes, so it is never cut short.
    table.add_column("id", no_wrap=True, min_width=max((len(r.id) for r in records), default=2))
    table.columns.insert(0, table.columns.pop())
    for r in records:
        task = r.task if not out.is_terminal or len(r.task) <= 40 else r.task[:39] + "…"  # piped: whole
        updated = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.updated_at))
        unapplied = "" if r.unapplied is None else f"{r.unapplied:,}"  # counted at turn ends and applies only
        tokens = f"{r.usage.total:,}"
        repo = r.source.short() if r.source else r.repo
        cells = (r.id, updated, r.status, r.finish_reason or "", unapplied, str(r.steps), tokens, repo, task)
        table.add_row(*(terminal.safe_text(cell) for cell in cells))
    out.print(table)


def _page(limit: int, server: str | None) -> tuple[list[SessionRecord], int]:
    """The newest sessions, from this machine's database or (``server``) a ``cubicle serve``'s."""
    from ..server.store import open_store

    if server is not None:
        with review_errors(), remote_sessions(server) as client:
            return RemoteSessions(client).page(limit, 0)
    store = open_store(load_settings())
    try:
        found, total = store.page(limit, 0)
    finally:
        store.close()
    return list(found), total


@app.command()
def compact(
    session_id: Annotated[str, typer.Argument(metavar="ID", help="The session (`cubicle sessions` lists them).")],
    server: ServerOpt = None,
) -> None:
    """Summarize a session's older turns now, as the API's POST /compact does; the stored transcript stays whole.

    Exit codes: 0 done (or nothing old enough to summarize) · 2 unknown session or no API key ·
    5 a turn of the session is running · 4 the model API failed.
    """

    async def run(sessions: Sessions) -> tuple[int, Edit | None]:
        before = len(sessions.store.edits(session_id))
        await sessions.compact(session_id)
        edits = sessions.store.edits(session_id)
        return len(edits) - before, edits[-1] if edits else None

    with review_errors():
        added, edit = with_sessions(load_settings(), run) if server is None else _compact_remote(server, session_id)
    if not added or edit is None:
        print("nothing to compact: the session has no older turns to summarize")
        return
    line = (
        f"{edit.kind}: messages before {edit.upto} summarized · ~{edit.tokens_before:,} → ~{edit.tokens_after:,} tokens"
    )
    terminal.console().print(terminal.safe_text(line))


def _compact_remote(url: str, session_id: str) -> tuple[int, Edit | None]:
    """``compact --server``: the server compacts; its edits, read before and after, say what it did."""
    with remote_sessions(url) as client:
        before = client.messages(session_id, "model").edits or []
        client.compact(session_id)
        after = client.messages(session_id, "model").edits or []
    return len(after) - len(before), after[-1] if after else None


@app.command("scripted-server")
def scripted_server(
    scenarios: Annotated[
        list[str],
        typer.Argument(metavar="SCENARIO...", help="Scenario files (or names shipped in controller/scenarios)."),
    ],
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to bind.")] = 8123,
) -> None:
    """Serve a scripted Anthropic-compatible model for tests and offline demos."""
    from ..agent import scripted

    scripted.run(scenarios, host, port)
