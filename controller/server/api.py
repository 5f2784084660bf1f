"""The HTTP API (``/v1``): start sessions on a repository and follow them live.

Routes are thin; the work lives in ``sessions.Sessions``. Every route but ``/healthz``
needs the bearer token when one is configured (or the viewer's sign-in cookie with its page key), the
schema (``/openapi.json``) included; the docs page (``/docs``) and Swagger UI's files, which hold no data,
open with the token or the cookie alone, and the page sends the key with its requests. Swagger UI's files
come from a package, not a CDN. All errors pass through one handler
that maps the exception tree to a status code and a ``detail``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import html
import importlib
import importlib.resources
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, FastAPI, Header, Query, Request, Response, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sse_starlette import EventSourceResponse, ServerSentEvent

from .. import __version__
from ..agent.context import estimate_tokens
from ..config import Settings
from ..errors import (
    ApplyConflictError,
    ConflictError,
    CubicleError,
    NotFoundError,
    RefusedError,
)
from ..wire.bodies import (
    MAX_INDEX,
    TRUNCATED_HEADER,
    UNLISTED_APPLIED_HEADER,
    UNLISTED_HEADER,
    ApplyRequest,
    CreateSession,
    ErrorBody,
    FollowUp,
    Health,
    PushRequest,
    PushResult,
    RemoteRepo,
    RepoList,
    RevertRequest,
    Review,
    RewindRequest,
    SessionPage,
    Transcript,
)
from ..wire.changeset import ApplyResult, Change, Checkpoint, RevertResult
from ..wire.limits import Limits
from ..wire.sessionrecord import SessionRecord
from ..wire.statuses import status_of
from ..workspace import repos
from ..workspace.manager import printable, printable_conflict, shown
from . import comments, webauth, webui
from .feed import Batch
from .runtime import SandboxFactory
from .sessions import NewSession, Sessions, open_sessions

DESCRIPTION = """Start a coding agent on a repository and follow it live. Every tool call the agent makes
runs in a hardened Docker container of its own session.

When the server has a token (`CUBICLE_API_TOKEN`), every route but `/healthz` needs
`Authorization: Bearer <token>`: these docs and the schema too."""

DOCS_ASSETS: dict[str, str] = {
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui.css": "text/css",
    "favicon.png": "image/png",
}
"""Swagger UI's files, served from the fastapi-offline package, so the docs need no network."""


ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": text}
    for code, text in {
        400: "Malformed repository path",
        401: "Missing or wrong bearer token (or sign-in cookie)",
        403: "Repository outside the allowed roots or a system path; a cross-origin browser request",
        404: "No such session",
        409: "A turn is running, the repository overlaps a running session's, the checkout changed (conflicts), "
        "or the repository path no longer leads to the directory the session began on",
        413: "Request body too large",
        429: "Too many sessions running",
        507: "The session database cannot be written (disk full)",
        503: "Docker, the model API or the session database is not configured or not reachable",
    }.items()
}


# The dependencies are coroutines, though none of them awaits: FastAPI runs a plain function dependency in a
# worker thread, three thread hops a request that cost more than the route itself.
async def _sessions(request: Request) -> Sessions:
    sessions: Sessions = request.app.state.sessions
    return sessions


async def _settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


SessionsDep = Annotated[Sessions, Depends(_sessions)]
SettingsDep = Annotated[Settings, Depends(_settings)]
_bearer = HTTPBearer(auto_error=False)


async def _authorize(
    request: Request,
    settings: SettingsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],  # documents the scheme
) -> None:
    """The bearer token or the viewer's sign-in cookie (see ``webui``); none needed on loopback-only servers."""
    webauth.authenticate(request, settings.api_token)


router = APIRouter(prefix="/v1", dependencies=[Depends(_authorize)], responses=ERRORS)


@router.post("/sessions", status_code=status.HTTP_201_CREATED, response_model=SessionRecord)
async def create_session(body: CreateSession, sessions: SessionsDep, settings: SettingsDep) -> SessionRecord:
    """Start a session on a repository; the first turn runs in the background."""
    repo = _repo(body.repo, settings)
    asked: dict[str, Any] = body.limits.model_dump(exclude_none=True) if body.limits else {}
    limits = Limits.model_validate({**settings.limits.model_dump(), **asked}).clamp(settings.max_limits)
    context = None
    if body.context is not None:
        context = settings.context.model_copy(update=body.context.model_dump(exclude_none=True))
    new = NewSession(
        repo,
        body.task,
        body.model,
        limits,
        context,
        body.apply,
        environment=body.environment,
        network_asked="network" in asked,
    )
    return await sessions.create(new)


def _repo(asked: str | RemoteRepo, settings: Settings) -> Path | RemoteRepo:
    """A path resolved under the roots; a remote as asked (``CUBICLE_GIT_REMOTES`` admits it as it is fetched)."""
    if isinstance(asked, RemoteRepo):
        return asked
    return repos.resolve(asked, settings.repo_roots, settings.protected_paths)


@router.get("/sessions", response_model=SessionPage)
async def list_sessions(
    sessions: SessionsDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=MAX_INDEX)] = 0,
) -> SessionPage:
    """Sessions, newest first."""
    items, total = sessions.page(limit, offset)
    return SessionPage(items=items, total=total, limit=limit, offset=offset)


@router.get("/repos", response_model=RepoList)
async def list_repos(settings: SettingsDep) -> RepoList:
    """Repositories a session may be started on, as a form offers them (any path under the roots is accepted),
    and the prefix of the branches a session on a git remote may push."""
    found = await asyncio.to_thread(repos.listed, settings.repo_roots, settings.protected_paths)
    default = repos.preselected(found, settings.repo_roots, repos.own_checkout())
    roots = [str(root) for root in settings.repo_roots]
    return RepoList(roots=roots, repos=found, default=default, branch_prefix=settings.git_branch_prefix)


@router.get("/sessions/{session_id}", response_model=SessionRecord)
async def get_session(session_id: str, sessions: SessionsDep) -> SessionRecord:
    """Status, finish reason, usage, steps and timestamps of one session."""
    return sessions.get(session_id)


@router.get("/sessions/{session_id}/events", response_class=EventSourceResponse)
async def session_events(
    request: Request,
    session_id: str,
    sessions: SessionsDep,
    settings: SettingsDep,
    after: Annotated[
        int | None, Query(ge=0, le=MAX_INDEX, description="Replay events after this sequence number.")
    ] = None,
    last_event_id: Annotated[str | None, Header(description="Standard SSE resume header.")] = None,
) -> EventSourceResponse:
    """Server-Sent Events: replay from ``Last-Event-ID`` (or ``after``), then live; closes when no turn runs."""
    given = last_event_id or ""
    resume = int(given) if given.isascii() and given.isdigit() and len(given) <= 20 else 0
    batches = sessions.follow_batches(session_id, after if after is not None else min(resume, MAX_INDEX))
    allowed = webauth.still_let_in(request, settings.api_token)

    async def frames() -> AsyncIterator[bytes]:
        # The events read together go out in one write: with many followers, a write per event per follower
        # is most of what following costs the event loop that also runs the session.
        async with contextlib.aclosing(batches):
            async for batch in batches:
                if not allowed():
                    return  # signed out (or expired) since the stream began: it ends here, on every controller
                yield sse_frames(batch)

    return EventSourceResponse(frames(), ping=settings.sse_heartbeat_s)


def sse_frames(batch: Batch) -> bytes:
    """The batch as SSE frames, encoded once for every follower that got the same batch."""
    if batch.encoded is None:
        batch.encoded = b"".join(
            ServerSentEvent(data=e.model_dump_json(), event=e.type, id=str(e.seq)).encode() for e in batch
        )
    return batch.encoded


@router.get("/sessions/{session_id}/messages", response_model=Transcript, response_model_exclude_none=True)
async def get_messages(
    session_id: str,
    sessions: SessionsDep,
    view: Annotated[Literal["stored", "model"], Query(description="model: what the model is sent next.")] = "stored",
) -> Transcript:
    """The whole transcript as stored, or (view=model) the bounded view the model is sent, with its size."""
    if view == "stored":
        return Transcript(messages=sessions.transcript(session_id))
    shown, edits, policy = sessions.model_view(session_id)
    return Transcript(messages=shown, estimated_tokens=estimate_tokens(shown), window=policy.window, edits=edits)


@router.post("/sessions/{session_id}/compact", response_model=SessionRecord)
async def compact_session(session_id: str, sessions: SessionsDep) -> SessionRecord:
    """Summarize the session's older turns now (409 while a turn runs); the stored transcript stays whole."""
    return await sessions.compact(session_id)


@router.post("/sessions/{session_id}/messages", status_code=status.HTTP_202_ACCEPTED, response_model=SessionRecord)
async def post_message(session_id: str, body: FollowUp, sessions: SessionsDep) -> SessionRecord:
    """A follow-up turn in the same conversation (409 while a turn runs); continues interrupted sessions."""
    return await sessions.follow_up(session_id, body.text)


@router.post("/sessions/{session_id}/comments", status_code=status.HTTP_202_ACCEPTED, response_model=SessionRecord)
async def post_comments(session_id: str, body: Review, sessions: SessionsDep) -> SessionRecord:
    """Review comments on the session's diff, sent as one follow-up (409 while a turn runs).

    Each comment names a path as the changes list it and, optionally, a line; the message quotes that line's
    hunk from the session's own diff, fenced and labelled as the agent's file content (data, not instructions),
    after the comment's text. A path with no change is a 404, a line outside the diff a 422: nothing is sent.
    """
    if sessions.get(session_id).status == "running":  # follow_up refuses too; this spares the listing
        raise ConflictError(f"Session {session_id} is running a turn; send the review when it has ended.")
    listing = await sessions.layers.changes(session_id, diff=True)
    text = comments.message(listing, body.comments)
    return await sessions.follow_up(session_id, text)


@router.post("/sessions/{session_id}/cancel", response_model=SessionRecord)
async def cancel_session(session_id: str, sessions: SessionsDep) -> SessionRecord:
    """Stop the running turn within two seconds and kill any running command."""
    return await sessions.cancel(session_id)


@router.delete("/sessions/{session_id}", response_model=SessionRecord, responses={204: {"description": "Purged"}})
async def delete_session(
    session_id: str, sessions: SessionsDep, purge: Annotated[bool, Query(description="Also delete the record.")] = False
) -> Any:
    """Remove the session's container; keep its record unless ``purge``."""
    record = await sessions.delete(session_id, purge)
    return record if record is not None else Response(status_code=status.HTTP_204_NO_CONTENT)


PATCH_TYPE = "text/x-patch"


@router.get(
    "/sessions/{session_id}/changes",
    response_model=list[Change],
    response_model_exclude_none=True,
    responses={200: {"content": {PATCH_TYPE: {"schema": {"type": "string", "format": "binary"}}}}},
)
async def get_changes(
    session_id: str,
    sessions: SessionsDep,
    response: Response,
    diff: Annotated[bool, Query(description="Add a bounded unified diff to each text file.")] = False,
    format: Annotated[
        Literal["json", "patch"],
        Query(description="``json``: the listing; ``patch``: a binary-safe patch for ``git apply`` (text/x-patch)."),
    ] = "json",
) -> Any:
    """What the session changed in its workspace layer, path by path; the checkout has none of it until applied.

    With ``format=patch``, the answer is instead one patch (``text/x-patch``) of exactly what a plain apply writes,
    made of the layer's bytes in git's extended format for ``git apply``: text as unified diffs, other files as
    ``GIT binary patch``, modes, symlinks, deletions; what apply holds back (or would stop at: a path changed in the
    checkout) is listed in ``#`` lines before the first diff, each with the command that applies it. Past 32 MiB,
    413 and no patch.

    ``disposition`` says what apply does with each path: ``apply``; ``ignored`` (only with
    include_ignored); ``discarded`` (under .git) and ``unsafe`` (devices, FIFOs, sockets, links
    leaving the repository) never. When the layer holds more entries than the session's ``names`` limit,
    the list stops there and the header ``Cubicle-Truncated-At`` gives the limit: such a layer is never applied.
    A listing carries at most the server's ``listing_entries`` changes and 16 MiB, what a plain apply writes first;
    the header ``Cubicle-Unlisted`` counts those left out (apply judges them too), ``Cubicle-Unlisted-Applied`` how
    many of them an apply writes.
    """
    if format == "patch":
        return Response(await sessions.layers.patch(session_id), media_type=PATCH_TYPE)
    found = await sessions.layers.changes(session_id, diff)
    if found.truncated_at is not None:
        response.headers[TRUNCATED_HEADER] = str(found.truncated_at)
    if found.unlisted:
        response.headers[UNLISTED_HEADER] = str(found.unlisted)
        response.headers[UNLISTED_APPLIED_HEADER] = str(found.unlisted_applied)
    return [printable(change) for change in found]


@router.post("/sessions/{session_id}/apply", response_model=ApplyResult)
async def apply_changes(session_id: str, body: ApplyRequest, sessions: SessionsDep) -> ApplyResult:
    """Copy the changes into the checkout (409 while a turn runs, or with ``conflicts``: nothing was written)."""
    result = await sessions.layers.apply(
        session_id, body.force, body.include_ignored, body.build_inputs, body.paths, body.ids
    )
    return result.model_copy(
        update={"applied": [shown(p) for p in result.applied], "skipped": [printable(c) for c in result.skipped]}
    )


@router.post("/sessions/{session_id}/revert", response_model=RevertResult)
async def revert_changes(session_id: str, sessions: SessionsDep, body: RevertRequest | None = None) -> RevertResult:
    """Restore the checkout, byte for byte, to how it was before the newest apply not yet reverted."""
    result = await sessions.layers.revert(session_id, (body or RevertRequest()).force)
    return result.model_copy(update={"reverted": [shown(p) for p in result.reverted]})


@router.post("/sessions/{session_id}/push", response_model=PushResult)
async def push_changes(session_id: str, body: PushRequest, sessions: SessionsDep) -> PushResult:
    """Push the changes of a session on a git remote to a new branch there: one commit on the session's commit, of
    what a plain apply would write (held-back paths only when named in ``force``), by the server's
    CUBICLE_GIT_AUTHOR, with the server's credentials. An existing branch is replaced only with
    ``force_with_lease`` (409 otherwise); a session on a local checkout is refused (422). The layer is kept."""
    return await sessions.layers.push(session_id, body)


@router.post("/sessions/{session_id}/discard", response_model=SessionRecord)
async def discard_changes(session_id: str, sessions: SessionsDep) -> SessionRecord:
    """Drop the session's workspace layer and its checkpoints; what was applied stays in the checkout."""
    return await sessions.layers.discard(session_id)


@router.get("/sessions/{session_id}/checkpoints", response_model=list[Checkpoint])
async def list_checkpoints(session_id: str, sessions: SessionsDep) -> list[Checkpoint]:
    """The layer's checkpoints, one per turn, oldest first."""
    return await sessions.layers.checkpoints(session_id)


@router.post("/sessions/{session_id}/rewind", response_model=SessionRecord)
async def rewind_changes(session_id: str, body: RewindRequest, sessions: SessionsDep) -> SessionRecord:
    """Return the layer's files to the end of turn ``turn`` (the checkout is untouched; later checkpoints go)."""
    return await sessions.layers.rewind(session_id, body.turn)


async def _docs_reader(
    request: Request,
    settings: SettingsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    """The bearer token, or a live sign-in cookie without its key: the docs page and Swagger UI's files hold no
    data, and a browser that opens /docs cannot send the key (the page then sends it with every request)."""
    webauth.authenticate_page(request, settings.api_token)


docs_router = APIRouter(include_in_schema=False)


@docs_router.get("/openapi.json", dependencies=[Depends(_authorize)])
async def openapi_schema(request: Request) -> JSONResponse:
    return JSONResponse(request.app.openapi())


@docs_router.get("/docs", response_class=HTMLResponse, dependencies=[Depends(_docs_reader)])
async def swagger_ui(request: Request) -> HTMLResponse:
    """Swagger UI, started by the viewer's ``docs.js`` (no inline script): it sends the page key, so a signed-in
    browser's "Try it out" passes the same checks as the viewer's own requests."""
    root = html.escape(request.scope.get("root_path", ""), quote=True)
    title = html.escape(f"{request.app.title} API")
    return HTMLResponse(
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<link rel="stylesheet" href="{root}/docs/assets/swagger-ui.css">'
        f'<link rel="icon" href="{root}/docs/assets/favicon.png"><title>{title}</title></head>\n'
        f'<body><div id="swagger-ui" data-openapi="{root}/openapi.json"></div>\n'
        f'<script src="{root}/docs/assets/swagger-ui-bundle.js"></script>\n'
        f'<script src="{root}/ui/assets/docs.js"></script></body></html>\n'
    )


@docs_router.get("/docs/assets/{name}", dependencies=[Depends(_docs_reader)])
async def docs_asset(name: str) -> Response:
    if name not in DOCS_ASSETS:
        raise NotFoundError(f"No docs asset {name!r}.")
    return Response(_asset(name), media_type=DOCS_ASSETS[name], headers={"Cache-Control": "max-age=86400"})


@functools.cache
def _asset(name: str) -> bytes:
    return (importlib.resources.files("fastapi_offline") / "static" / name).read_bytes()


class BodyLimit:
    """Refuse request bodies over ``limit`` bytes with 413, whether or not they declare a length.

    The body is read here (never more than ``limit`` + one chunk) and replayed to the app.
    """

    def __init__(self, app: Any, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: MutableMapping[str, Any], receive: Callable[[], Awaitable[Any]], send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await _too_large(self.limit)(scope, receive, send)
            return
        body = bytearray()
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.limit:
                await _too_large(self.limit)(scope, receive, send)
                return
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        await self.app(scope, replay, send)


def _too_large(limit: int) -> JSONResponse:
    return JSONResponse({"detail": f"The request body is larger than {limit} bytes."}, status_code=413)


def _lifespan(
    settings: Settings, sandbox_factory: SandboxFactory | None
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """Sessions (over one store and one runtime) live as long as the app: recovered at start, stopped at the end."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with open_sessions(settings, sandbox_factory, start=True) as sessions:
            app.state.sessions = sessions
            # The model SDK takes seconds to import; imported on the event loop by the first turn, it would stall
            # every other request, and the lease renewals with them. A thread imports it now instead.
            preload = asyncio.create_task(
                asyncio.to_thread(importlib.import_module, "controller.agent.anthropic_model")
            )
            preload.add_done_callback(lambda t: t.cancelled() or t.exception())
            retention = asyncio.create_task(_retain(sessions, settings.retention_s)) if settings.retention_s else None
            try:
                yield
            finally:
                if retention is not None:
                    retention.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await retention

    return lifespan


log = logging.getLogger(__name__)
RETENTION_EVERY_S = 3600.0


async def _retain(sessions: Sessions, age_s: float) -> None:
    """``CUBICLE_RETENTION``: at start and every hour, remove the ended sessions older than ``age_s``."""
    while True:
        try:
            expiry = await sessions.expire(age_s)
            if expiry.removed:
                log.info("retention: removed %d sessions older than %.0f s", len(expiry.removed), age_s)
        except Exception:  # one failed sweep (a full disk, the engine away) must not end the next ones
            log.exception("retention: removing old sessions failed")
        await asyncio.sleep(RETENTION_EVERY_S)


def _handle_errors(app: FastAPI) -> None:
    """The one mapping from errors to status codes and a ``detail``."""

    @app.exception_handler(CubicleError)
    async def cubicle_error(request: Request, err: CubicleError) -> JSONResponse:
        code = status_of(err)
        body: dict[str, Any] = {"detail": str(err)}
        if isinstance(err, ApplyConflictError):
            body["conflicts"] = [printable_conflict(c).model_dump() for c in err.conflicts]
        return JSONResponse(body, status_code=code)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, err: RequestValidationError) -> JSONResponse:
        """Like FastAPI's 422, minus the echoed input: it may be huge or not encodable (a lone surrogate)."""
        detail = [
            {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")} for e in err.errors()
        ]
        return JSONResponse({"detail": detail}, status_code=422)

    @app.exception_handler(RefusedError)
    async def refused(request: Request, err: RefusedError) -> JSONResponse:
        return JSONResponse({"detail": err.detail}, status_code=err.status_code, headers=err.headers)


def create_app(settings: Settings, sandbox_factory: SandboxFactory | None = None) -> FastAPI:
    """The API for ``settings``; tests pass their own settings and, without Docker, their own sandbox factory."""
    app = FastAPI(
        title="Cubicle",
        version=__version__,
        lifespan=_lifespan(settings, sandbox_factory),
        description=DESCRIPTION,
        openapi_url=None,
        docs_url=None,
        redoc_url=None,  # served by docs_router, behind the token
    )
    app.state.settings = settings
    app.include_router(router)
    app.include_router(docs_router)
    webui.install(app)

    @app.get("/healthz", response_model=Health)
    async def healthz(request: Request) -> Health:
        """Liveness: answers without auth and without touching Docker; 503 while the database does not answer
        (a controller cut off from a shared database can serve nothing)."""
        sessions = await _sessions(request)
        sessions.store.now()
        return Health(status="ok", version=__version__, running_sessions=sessions.running_count)

    _handle_errors(app)
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    app.add_middleware(webui.Guard, settings=settings)  # outermost: the Host guard runs before anything else
    return app
