"""A Python client of the HTTP API: ``Client`` (blocking) and ``AsyncClient`` (asyncio), over httpx.

Both send what ``ROUTES`` builds and read the answers into the API's own models
(``SessionRecord``, ``Event``, ``Change``, ``ApplyResult``...; see ``wire``), so there is one
definition of every route, body and answer, the server's. Errors become the exception tree
(``controller.errors``) with the API's ``detail``: 401 ``AuthError``, 400 ``RepoError``, 403
``ForbiddenRepoError``, 404 ``NotFoundError``, 409 ``ConflictError`` (``ApplyConflictError`` with
its ``conflicts`` from apply and revert), 413 and 422 ``InvalidRequestError`` (its ``errors`` are the
API's list), 429 ``CapacityError``, 502 ``ModelError``, 503 ``SandboxError``, 507 ``StoreError``
(the server's own table, ``wire.statuses``); no answer at all is ``UnreachableError``, naming the URL.

Every answer is read by streaming, within ``answers``' bounds (64 MiB a body, 64 MiB an event): past them,
or for a compressed answer, ``AnswerTooLargeError`` names the server and nothing of the answer is used. And within
its deadlines (``deadlines=``, ``answers.Deadlines``: 120 s a body, 120 s an event, each checked as bytes arrive):
past them ``AnswerTooSlowError`` names the server, so a server dripping its answer cannot hold the caller for ever. Every
JSON a server sends (an answer, an error's body, an event) is parsed by ``answers.loads`` alone, which measures its
values and nesting first.

``events`` follows a session's Server-Sent Events and survives dropped connections: it reconnects
with ``Last-Event-ID`` set to the last event it yielded, so nothing is missed and nothing repeated,
and it ends when the server closes the stream with no turn running.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Generic, Literal, TypeVar

import httpx
from httpx_sse import ServerSentEvent, SSEError
from pydantic import BaseModel, Field, TypeAdapter

from . import answers
from .errors import (
    ApplyConflictError,
    AuthError,
    CubicleError,
    InvalidRequestError,
    MalformedAnswerError,
    UnreachableError,
)
from .wire.bodies import (
    MAX_INDEX,
    TRUNCATED_HEADER,
    UNLISTED_APPLIED_HEADER,
    UNLISTED_HEADER,
    Health,
    PushRequest,
    PushResult,
    RemoteRepo,
    RepoList,
    Review,
    ReviewComment,
    SessionPage,
    Transcript,
)
from .wire.changeset import ApplyResult, Change, Changes, Checkpoint, Conflict, RevertResult
from .wire.envspec import EnvironmentRequest
from .wire.events import EVENT_ADAPTER, Event
from .wire.policies import ContextPolicy
from .wire.sessionrecord import ApplyPolicy, SessionRecord
from .wire.statuses import ERROR_OF

__all__ = ["ROUTES", "AsyncClient", "Client", "Routes"]

DEFAULT_URL = "http://127.0.0.1:8750"
PATCH_TYPE = "text/x-patch"
"""The media type of a session's patch (``changes?format=patch``)."""
TOKEN_VARIABLE = "CUBICLE_API_TOKEN"
RECONNECTS = 8
"""Attempts in a row to reopen an event stream that dropped before ``events`` gives up (UnreachableError)."""
BACKOFF_S = (0.1, 0.2, 0.5, 1.0, 2.0)
"""Pauses before successive reconnects; the last repeats."""

T = TypeVar("T")
_CHANGES = TypeAdapter(Annotated[list[Change], Field(fail_fast=True)])
_CHECKPOINTS = TypeAdapter(Annotated[list[Checkpoint], Field(fail_fast=True)])
_CONFLICTS = TypeAdapter(Annotated[list[Conflict], Field(fail_fast=True)])
"""Lists an answer may hold by the thousand, read to their first problem: pydantic would otherwise describe each
of a million bad items (gigabytes) before the client could refuse them."""


@dataclass(frozen=True)
class Request(Generic[T]):
    """One API call: what to send, and how to read a successful answer's JSON into a model."""

    method: str
    path: str
    read: Callable[[Any], T]
    json: Any = None
    params: dict[str, Any] = field(default_factory=dict)
    headers: Callable[[T, httpx.Headers], T] | None = None
    """What the answer's headers add to the value read from its body, for the answers that carry some."""
    raw: str | None = None
    """The media type of an answer that is not JSON (its body is given to ``read`` as bytes), e.g. a patch."""


def _model(model: type[BaseModel]) -> Callable[[Any], Any]:
    return model.model_validate


def _body(value: BaseModel | dict[str, Any] | None) -> dict[str, Any] | None:
    if value is None or isinstance(value, dict):
        return value
    return value.model_dump(mode="json", exclude_none=True)


class Routes:
    """Every route of ``/v1``, built once for both clients. Bodies are sent as given: the server validates them."""

    @staticmethod
    def create(
        repo: str | Path | RemoteRepo,
        task: str,
        *,
        model: str | None = None,
        limits: BaseModel | dict[str, Any] | None = None,
        context: ContextPolicy | dict[str, Any] | None = None,
        apply: ApplyPolicy | None = None,
        environment: EnvironmentRequest | dict[str, Any] | None = None,
    ) -> Request[SessionRecord]:
        body = {
            "repo": repo.model_dump(exclude_none=True) if isinstance(repo, RemoteRepo) else str(repo),
            "task": task,
            "model": model,
            "limits": _body(limits),
            "context": _body(context),
            "apply": apply,
            "environment": _body(environment),
        }
        sent = {name: value for name, value in body.items() if value is not None}
        return Request("POST", "/v1/sessions", _model(SessionRecord), json=sent)

    @staticmethod
    def get(session_id: str) -> Request[SessionRecord]:
        return Request("GET", f"/v1/sessions/{session_id}", _model(SessionRecord))

    @staticmethod
    def sessions(limit: int = 50, offset: int = 0) -> Request[SessionPage]:
        return Request("GET", "/v1/sessions", _model(SessionPage), params={"limit": limit, "offset": offset})

    @staticmethod
    def repos() -> Request[RepoList]:
        return Request("GET", "/v1/repos", _model(RepoList))

    @staticmethod
    def health() -> Request[Health]:
        return Request("GET", "/healthz", _model(Health))

    @staticmethod
    def follow_up(session_id: str, text: str) -> Request[SessionRecord]:
        return Request("POST", f"/v1/sessions/{session_id}/messages", _model(SessionRecord), json={"text": text})

    @staticmethod
    def comment(session_id: str, comments: Sequence[ReviewComment]) -> Request[SessionRecord]:
        body = Review(comments=list(comments)).model_dump(mode="json")
        return Request("POST", f"/v1/sessions/{session_id}/comments", _model(SessionRecord), json=body)

    @staticmethod
    def cancel(session_id: str) -> Request[SessionRecord]:
        return Request("POST", f"/v1/sessions/{session_id}/cancel", _model(SessionRecord))

    @staticmethod
    def compact(session_id: str) -> Request[SessionRecord]:
        return Request("POST", f"/v1/sessions/{session_id}/compact", _model(SessionRecord))

    @staticmethod
    def messages(session_id: str, view: Literal["stored", "model"] = "stored") -> Request[Transcript]:
        return Request("GET", f"/v1/sessions/{session_id}/messages", _model(Transcript), params={"view": view})

    @staticmethod
    def changes(session_id: str, diff: bool = False) -> Request[Changes]:
        params = {"diff": "true" if diff else "false"}
        path = f"/v1/sessions/{session_id}/changes"
        return Request(
            "GET", path, lambda body: Changes(_CHANGES.validate_python(body)), params=params, headers=_listing_bounds
        )

    @staticmethod
    def patch(session_id: str) -> Request[bytes]:
        path = f"/v1/sessions/{session_id}/changes"
        return Request("GET", path, bytes, params={"format": "patch"}, raw=PATCH_TYPE)

    @staticmethod
    def apply(
        session_id: str,
        force: Iterable[str] = (),
        include_ignored: bool = False,
        build_inputs: bool = False,
        paths: Iterable[str] | None = None,
        ids: Iterable[str] | None = None,
    ) -> Request[ApplyResult]:
        body: dict[str, Any] = {"force": list(force), "include_ignored": include_ignored, "build_inputs": build_inputs}
        if paths is not None:
            body["paths"] = list(paths)
        if ids is not None:
            body["ids"] = list(ids)
        return Request("POST", f"/v1/sessions/{session_id}/apply", _model(ApplyResult), json=body)

    @staticmethod
    def revert(session_id: str, force: Iterable[str] = ()) -> Request[RevertResult]:
        return Request("POST", f"/v1/sessions/{session_id}/revert", _model(RevertResult), json={"force": list(force)})

    @staticmethod
    def push(session_id: str, asked: PushRequest) -> Request[PushResult]:
        body = asked.model_dump(exclude_defaults=True)
        return Request("POST", f"/v1/sessions/{session_id}/push", _model(PushResult), json=body)

    @staticmethod
    def discard(session_id: str) -> Request[SessionRecord]:
        return Request("POST", f"/v1/sessions/{session_id}/discard", _model(SessionRecord))

    @staticmethod
    def checkpoints(session_id: str) -> Request[list[Checkpoint]]:
        return Request("GET", f"/v1/sessions/{session_id}/checkpoints", _CHECKPOINTS.validate_python)

    @staticmethod
    def rewind(session_id: str, turn: int) -> Request[SessionRecord]:
        return Request("POST", f"/v1/sessions/{session_id}/rewind", _model(SessionRecord), json={"turn": turn})

    @staticmethod
    def delete(session_id: str, purge: bool = False) -> Request[SessionRecord | None]:
        def read(data: Any) -> SessionRecord | None:
            return None if data is None else SessionRecord.model_validate(data)

        params = {"purge": "true" if purge else "false"}
        return Request("DELETE", f"/v1/sessions/{session_id}", read, params=params)

    @staticmethod
    def events_path(session_id: str) -> str:
        return f"/v1/sessions/{session_id}/events"


ROUTES = Routes()


def error_of(response: httpx.Response) -> CubicleError:
    """The exception for an API answer that is not a success, carrying the API's ``detail``."""
    origin = _origin(response.request.url)
    body = _json_object(response, origin)
    detail = body.get("detail")
    code = response.status_code
    if code == 401:
        text = detail if isinstance(detail, str) else "a bearer token is required"
        return AuthError(f"The Cubicle API at {_origin(response.request.url)} refused the request (401): {text}")
    where = f"{response.request.method} {response.request.url.path}"
    if isinstance(detail, list):  # FastAPI's validation errors: [{loc, msg, type}, ...]
        problems = "; ".join(_problem(item) for item in detail)
        return InvalidRequestError(f"{where} was refused ({code}): {problems}", errors=detail, hint="")
    text = detail if isinstance(detail, str) else (response.text[:500] or response.reason_phrase)
    if code == 409 and body.get("conflicts"):
        error = ApplyConflictError(text, answers.model(_CONFLICTS.validate_python, body["conflicts"], origin))
        error.hint = ""  # the detail already ends with it
        return error
    kind = ERROR_OF.get(code)
    return kind(text, hint="") if kind else CubicleError(f"{where} failed ({code}): {text}", hint="")


def _json_object(response: httpx.Response, origin: str) -> dict[str, Any]:
    """The answer's body when it is a JSON object within the client's bounds, else an empty one (the status and the
    text's start then say what it is)."""
    try:
        body = answers.loads(response.content, origin)
    except CubicleError:
        return {}
    return body if isinstance(body, dict) else {}


def _problem(item: Any) -> str:
    if not isinstance(item, dict):
        return str(item)
    where = ".".join(str(part) for part in item.get("loc", []) if part != "body")
    return f"{where}: {item.get('msg', '')}" if where else str(item.get("msg", ""))


def _origin(url: httpx.URL) -> str:
    return f"{url.scheme}://{url.netloc.decode()}"


def _unreachable(url: str, err: httpx.TransportError) -> UnreachableError:
    what = "did not answer in time" if isinstance(err, httpx.TimeoutException) else f"could not be reached ({err})"
    return UnreachableError(f"The Cubicle API at {url} {what}.")


def _read(request: Request[T], response: httpx.Response, url: str) -> T:
    if not response.is_success:
        raise error_of(response)
    if request.raw is not None:
        kind = response.headers.get("content-type", "").partition(";")[0].strip()
        if kind != request.raw:
            raise MalformedAnswerError(f"The server at {url} answered {kind or 'no type'}, not {request.raw}.")
        return request.read(response.content)
    value = answers.model(request.read, answers.loads(response.content, url) if response.content else None, url)
    return request.headers(value, response.headers) if request.headers else value


def _listing_bounds(found: Changes, headers: httpx.Headers) -> Changes:
    """Where the server's walk stopped (the names limit) and how many changes its listing left out."""
    found.truncated_at = _count(headers.get(TRUNCATED_HEADER))
    found.unlisted = _count(headers.get(UNLISTED_HEADER)) or 0
    found.unlisted_applied = _count(headers.get(UNLISTED_APPLIED_HEADER)) or 0
    return found


def _count(value: str | None) -> int | None:
    return int(value) if value is not None and value.isascii() and value.isdigit() else None


class _Cursor:
    """Where an event stream stands: the last event yielded, and how many reconnects in a row have failed.

    Events at or below the last sequence number yielded are dropped, so a stream reopened by
    ``Last-Event-ID`` never repeats one.
    """

    def __init__(self, url: str, session_id: str, after: int) -> None:
        self.url = url
        self.path = ROUTES.events_path(session_id)
        self.last = after
        self.failures = 0
        self.opened = False

    def headers(self) -> dict[str, str]:
        return {"Last-Event-ID": str(self.last), "Accept": "text/event-stream", "Cache-Control": "no-store"}

    def check(self, response: httpx.Response) -> None:
        """A stream that opened (the body is read first when it is an error)."""
        if not response.is_success:
            raise error_of(response)
        self.opened = True

    def accept(self, sse: ServerSentEvent) -> Event | None:
        if not sse.data:
            return None
        event = answers.model(EVENT_ADAPTER.validate_python, answers.loads(sse.data, self.url), self.url)
        if event.seq <= self.last:
            return None
        self.last = event.seq
        self.failures = 0
        return event

    def dropped(self, err: Exception) -> float:
        """The stream broke: the pause before reopening it, or UnreachableError once that has failed too often."""
        self.failures += 1
        if isinstance(err, httpx.TransportError) and (not self.opened or self.failures > RECONNECTS):
            raise _unreachable(self.url, err) from None
        if self.failures > RECONNECTS:
            raise UnreachableError(f"The event stream of {self.url}{self.path} kept breaking: {err}") from None
        return BACKOFF_S[min(self.failures, len(BACKOFF_S)) - 1]

    def closed(self, record: SessionRecord) -> float | None:
        """The server closed the stream: None when the turn is over, else the pause before reopening it.

        The server closes it only when no turn runs, so a session still ``running`` means the close came
        from in between (a proxy). A turn run by another process (a ``cubicle run``) is not streamed live
        by this server: after RECONNECTS such closes in a row the stream ends.
        """
        if record.status != "running":
            return None
        self.failures += 1
        if self.failures > RECONNECTS:
            return None
        return BACKOFF_S[min(self.failures, len(BACKOFF_S)) - 1]


def _token(token: str | None) -> dict[str, str]:
    """The headers of every request: the bearer token, and no compression asked for (``answers``)."""
    token = token if token is not None else os.environ.get(TOKEN_VARIABLE)
    return {**answers.IDENTITY, **({"Authorization": f"Bearer {token}"} if token else {})}


STREAM_ERRORS = (httpx.TransportError, SSEError)


class Client:
    """The API, blocking. ``token`` defaults to ``CUBICLE_API_TOKEN``; use it as a context manager, or ``close`` it."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        token: str | None = None,
        *,
        timeout: float = 60,
        transport: httpx.BaseTransport | None = None,
        deadlines: answers.Deadlines = answers.DEADLINES,
    ) -> None:
        self.url = url.rstrip("/")
        self.deadlines = deadlines
        self._http = httpx.Client(base_url=self.url, headers=_token(token), timeout=timeout, transport=transport)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def send(self, request: Request[T]) -> T:
        try:
            with self._http.stream(request.method, request.path, json=request.json, params=request.params) as streamed:
                response = answers.read(streamed, self.url, self.deadlines.answer_s)
        except httpx.TransportError as err:
            raise _unreachable(self.url, err) from None
        return _read(request, response, self.url)

    def create(
        self,
        repo: str | Path | RemoteRepo,
        task: str,
        *,
        model: str | None = None,
        limits: BaseModel | dict[str, Any] | None = None,
        context: ContextPolicy | dict[str, Any] | None = None,
        apply: ApplyPolicy | None = None,
        environment: EnvironmentRequest | dict[str, Any] | None = None,
    ) -> SessionRecord:
        """Start a session on ``repo`` (a path on the server, or a ``RemoteRepo`` it fetches); its first turn runs at
        once."""
        return self.send(
            ROUTES.create(repo, task, model=model, limits=limits, context=context, apply=apply, environment=environment)
        )

    def get(self, session_id: str) -> SessionRecord:
        return self.send(ROUTES.get(session_id))

    def sessions(self, limit: int = 50, offset: int = 0) -> SessionPage:
        return self.send(ROUTES.sessions(limit, offset))

    def repos(self) -> RepoList:
        return self.send(ROUTES.repos())

    def health(self) -> Health:
        return self.send(ROUTES.health())

    def follow_up(self, session_id: str, text: str) -> SessionRecord:
        return self.send(ROUTES.follow_up(session_id, text))

    def comment(self, session_id: str, comments: Sequence[ReviewComment]) -> SessionRecord:
        """Review comments on the session's diff, sent as its next turn (the server quotes the diff itself)."""
        return self.send(ROUTES.comment(session_id, comments))

    def cancel(self, session_id: str) -> SessionRecord:
        return self.send(ROUTES.cancel(session_id))

    def compact(self, session_id: str) -> SessionRecord:
        return self.send(ROUTES.compact(session_id))

    def messages(self, session_id: str, view: Literal["stored", "model"] = "stored") -> Transcript:
        return self.send(ROUTES.messages(session_id, view))

    def changes(self, session_id: str, diff: bool = False) -> Changes:
        """The session's changes; ``truncated_at`` and ``unlisted`` say what the listing does not hold."""
        return self.send(ROUTES.changes(session_id, diff))

    def patch(self, session_id: str) -> bytes:
        """The session's changes as a binary-safe patch for ``git apply`` of exactly what a plain ``apply`` writes
        (held-back changes listed in its ``#`` lines); InvalidRequestError past the server's bound (32 MiB)."""
        return self.send(ROUTES.patch(session_id))

    def apply(
        self,
        session_id: str,
        force: Iterable[str] = (),
        include_ignored: bool = False,
        build_inputs: bool = False,
        paths: Iterable[str] | None = None,
        ids: Iterable[str] | None = None,
    ) -> ApplyResult:
        """Apply the changes (only ``paths``, each as the changes list it, and ``ids``, if given);
        ApplyConflictError writes nothing."""
        return self.send(ROUTES.apply(session_id, force, include_ignored, build_inputs, paths, ids))

    def revert(self, session_id: str, force: Iterable[str] = ()) -> RevertResult:
        return self.send(ROUTES.revert(session_id, force))

    def push(self, session_id: str, asked: PushRequest) -> PushResult:
        """Push a remote session's changes to a new branch at its remote (``PushRequest``: branch, message, force,
        force_with_lease)."""
        return self.send(ROUTES.push(session_id, asked))

    def discard(self, session_id: str) -> SessionRecord:
        return self.send(ROUTES.discard(session_id))

    def checkpoints(self, session_id: str) -> list[Checkpoint]:
        return self.send(ROUTES.checkpoints(session_id))

    def rewind(self, session_id: str, turn: int) -> SessionRecord:
        return self.send(ROUTES.rewind(session_id, turn))

    def delete(self, session_id: str, purge: bool = False) -> SessionRecord | None:
        return self.send(ROUTES.delete(session_id, purge))

    def events(self, session_id: str, after: int = 0) -> Iterator[Event]:
        """The session's events after ``after``, then live; reconnects when dropped; ends with the turn."""
        cursor = _Cursor(self.url, session_id, after)
        while True:
            try:
                with self._http.stream("GET", cursor.path, headers=cursor.headers()) as response:
                    if not response.is_success:
                        response = answers.read(response, self.url, self.deadlines.answer_s)
                    cursor.check(response)
                    for sse in answers.events(response, self.url, self.deadlines.event_s):
                        event = cursor.accept(sse)
                        if event is not None:
                            yield event
                pause = cursor.closed(self.get(session_id))
                if pause is None:
                    return
            except (*STREAM_ERRORS, UnreachableError) as err:
                pause = cursor.dropped(err)
            time.sleep(pause)

    def wait(self, session_id: str) -> SessionRecord:
        """Until no turn of the session runs (over dropped connections too); then its record."""
        for _ in self.events(session_id, after=MAX_INDEX):
            pass
        return self.get(session_id)


class AsyncClient:
    """The API for asyncio, method for method like ``Client``."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        token: str | None = None,
        *,
        timeout: float = 60,
        transport: httpx.AsyncBaseTransport | None = None,
        deadlines: answers.Deadlines = answers.DEADLINES,
    ) -> None:
        self.url = url.rstrip("/")
        self.deadlines = deadlines
        self._http = httpx.AsyncClient(base_url=self.url, headers=_token(token), timeout=timeout, transport=transport)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def send(self, request: Request[T]) -> T:
        try:
            async with self._http.stream(
                request.method, request.path, json=request.json, params=request.params
            ) as streamed:
                response = await answers.aread(streamed, self.url, self.deadlines.answer_s)
        except httpx.TransportError as err:
            raise _unreachable(self.url, err) from None
        return _read(request, response, self.url)

    async def create(
        self,
        repo: str | Path | RemoteRepo,
        task: str,
        *,
        model: str | None = None,
        limits: BaseModel | dict[str, Any] | None = None,
        context: ContextPolicy | dict[str, Any] | None = None,
        apply: ApplyPolicy | None = None,
        environment: EnvironmentRequest | dict[str, Any] | None = None,
    ) -> SessionRecord:
        """Start a session on ``repo`` (a path on the server, or a ``RemoteRepo`` it fetches); its first turn runs at
        once."""
        return await self.send(
            ROUTES.create(repo, task, model=model, limits=limits, context=context, apply=apply, environment=environment)
        )

    async def get(self, session_id: str) -> SessionRecord:
        return await self.send(ROUTES.get(session_id))

    async def sessions(self, limit: int = 50, offset: int = 0) -> SessionPage:
        return await self.send(ROUTES.sessions(limit, offset))

    async def repos(self) -> RepoList:
        return await self.send(ROUTES.repos())

    async def health(self) -> Health:
        return await self.send(ROUTES.health())

    async def follow_up(self, session_id: str, text: str) -> SessionRecord:
        return await self.send(ROUTES.follow_up(session_id, text))

    async def comment(self, session_id: str, comments: Sequence[ReviewComment]) -> SessionRecord:
        """Review comments on the session's diff, sent as its next turn (the server quotes the diff itself)."""
        return await self.send(ROUTES.comment(session_id, comments))

    async def cancel(self, session_id: str) -> SessionRecord:
        return await self.send(ROUTES.cancel(session_id))

    async def compact(self, session_id: str) -> SessionRecord:
        return await self.send(ROUTES.compact(session_id))

    async def messages(self, session_id: str, view: Literal["stored", "model"] = "stored") -> Transcript:
        return await self.send(ROUTES.messages(session_id, view))

    async def changes(self, session_id: str, diff: bool = False) -> Changes:
        """The session's changes; ``truncated_at`` and ``unlisted`` say what the listing does not hold."""
        return await self.send(ROUTES.changes(session_id, diff))

    async def patch(self, session_id: str) -> bytes:
        """The session's changes as a binary-safe patch (see ``Client.patch``)."""
        return await self.send(ROUTES.patch(session_id))

    async def apply(
        self,
        session_id: str,
        force: Iterable[str] = (),
        include_ignored: bool = False,
        build_inputs: bool = False,
        paths: Iterable[str] | None = None,
        ids: Iterable[str] | None = None,
    ) -> ApplyResult:
        return await self.send(ROUTES.apply(session_id, force, include_ignored, build_inputs, paths, ids))

    async def revert(self, session_id: str, force: Iterable[str] = ()) -> RevertResult:
        return await self.send(ROUTES.revert(session_id, force))

    async def push(self, session_id: str, asked: PushRequest) -> PushResult:
        return await self.send(ROUTES.push(session_id, asked))

    async def discard(self, session_id: str) -> SessionRecord:
        return await self.send(ROUTES.discard(session_id))

    async def checkpoints(self, session_id: str) -> list[Checkpoint]:
        return await self.send(ROUTES.checkpoints(session_id))

    async def rewind(self, session_id: str, turn: int) -> SessionRecord:
        return await self.send(ROUTES.rewind(session_id, turn))

    async def delete(self, session_id: str, purge: bool = False) -> SessionRecord | None:
        return await self.send(ROUTES.delete(session_id, purge))

    async def events(self, session_id: str, after: int = 0) -> AsyncIterator[Event]:
        """The session's events after ``after``, then live; reconnects when dropped; ends with the turn."""
        cursor = _Cursor(self.url, session_id, after)
        while True:
            try:
                async with self._http.stream("GET", cursor.path, headers=cursor.headers()) as response:
                    if not response.is_success:
                        response = await answers.aread(response, self.url, self.deadlines.answer_s)
                    cursor.check(response)
                    async for sse in answers.aevents(response, self.url, self.deadlines.event_s):
                        event = cursor.accept(sse)
                        if event is not None:
                            yield event
                pause = cursor.closed(await self.get(session_id))
                if pause is None:
                    return
            except (*STREAM_ERRORS, UnreachableError) as err:
                pause = cursor.dropped(err)
            await asyncio.sleep(pause)

    async def wait(self, session_id: str) -> SessionRecord:
        """Until no turn of the session runs (over dropped connections too); then its record."""
        async for _ in self.events(session_id, after=MAX_INDEX):
            pass
        return await self.get(session_id)
