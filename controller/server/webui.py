"""The browser viewer's server side: its page and assets, its sign-in routes, and the headers of every response.

The viewer is one page (``controller/ui/static``: plain ES modules, no build step, nothing
fetched from elsewhere) that talks to ``/v1`` like any other client. Who may use the API
(the token, the sign-in cookie and its page key, the Origin and Host rules) is ``webauth``'s;
this module serves the page, signs a browser in and out with ``webauth``'s cookie, and its
``Guard`` refuses a non-loopback Host in loopback mode and gives every response a strict
Content-Security-Policy (scripts, styles and connections from this server only, no inline
script, no framing), ``nosniff`` and ``no-referrer``. Swagger UI's page (``/docs``) gets the same
policy but for inline styles, which Swagger UI sets.
"""

from __future__ import annotations

import functools
import importlib.resources
import secrets
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import APIRouter, Request, Response, status
from fastapi.responses import JSONResponse, RedirectResponse
from pydantic import BaseModel, Field

from ..config import Settings
from ..errors import NotFoundError, RefusedError
from .webauth import (
    COOKIE,
    Revocations,
    cross_origin,
    issue,
    loopback_host,
    page_key,
    revoke,
    same_origin,
    signed_in,
    verify,
)

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'"
)
DOCS_CSP = CSP.replace("style-src 'self'", "style-src 'self' 'unsafe-inline'")
"""Swagger UI's page: its scripts are files (the viewer's ``docs.js`` starts it), but Swagger UI sets inline styles."""
MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".txt": "text/plain; charset=utf-8",  # the licence of a vendored file, served beside it
}


class Guard:
    """ASGI middleware: the Host guard of loopback mode, and the security headers of every response."""

    def __init__(self, app: Any, settings: Settings) -> None:
        self.app = app
        self.loopback_only = settings.api_token is None

    async def __call__(self, scope: MutableMapping[str, Any], receive: Callable[[], Awaitable[Any]], send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        if self.loopback_only and not loopback_host(headers.get(b"host", b"").decode("latin-1")):
            refusal = JSONResponse(
                {
                    "detail": "Without CUBICLE_API_TOKEN this server answers only to a loopback Host "
                    "(localhost, 127.0.0.1, [::1]): set a token to serve other names."
                },
                status_code=status.HTTP_421_MISDIRECTED_REQUEST,
            )
            await refusal(scope, receive, _secured(send, CSP))
            return
        policy = DOCS_CSP if scope.get("path", "").startswith("/docs") else CSP
        await self.app(scope, receive, _secured(send, policy))


def _secured(send: Any, policy: str) -> Callable[[MutableMapping[str, Any]], Awaitable[None]]:
    extra = [
        (b"content-security-policy", policy.encode()),
        (b"x-content-type-options", b"nosniff"),
        (b"referrer-policy", b"no-referrer"),
        (b"x-frame-options", b"DENY"),
        (b"cross-origin-opener-policy", b"same-origin"),
    ]

    async def secured(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            message["headers"] = [*message.get("headers", []), *extra]
        await send(message)

    return secured


# ----------------------------------------------------------------------------- the page and sign-in

router = APIRouter(include_in_schema=False)


class SignIn(BaseModel):
    token: str = Field(max_length=4096)


class SignedIn(BaseModel):
    key: str = Field(description="Send it as X-Cubicle-Key (or ?key= where a header cannot go) with the cookie.")


class AuthState(BaseModel):
    mode: str = Field(description="token: sign in with the API token; loopback: no sign-in (loopback only).")
    signed_in: bool


@router.get("/")
async def root() -> RedirectResponse:
    return RedirectResponse("/ui/", status_code=status.HTTP_307_TEMPORARY_REDIRECT)


@router.get("/ui")
async def ui_bare() -> RedirectResponse:
    return RedirectResponse("/ui/", status_code=status.HTTP_307_TEMPORARY_REDIRECT)


@router.get("/ui/")
async def page() -> Response:
    """The viewer's one page; it holds no data (that comes from ``/v1``), so it is served to anyone."""
    return _static_response("index.html")


@router.get("/ui/assets/{name}")
async def asset(name: str) -> Response:
    return _static_response(name)


@router.get("/ui/auth", response_model=AuthState)
async def auth_state(request: Request) -> AuthState:
    settings: Settings = request.app.state.settings
    if settings.api_token is None:
        return AuthState(mode="loopback", signed_in=True)
    return AuthState(mode="token", signed_in=signed_in(request, settings.api_token))


@router.post("/ui/login", response_model=SignedIn)
async def login(body: SignIn, request: Request) -> Response:
    """Exchange the API token for the sign-in cookie and the page key that must go with it (same origin only)."""
    settings: Settings = request.app.state.settings
    if "origin" in request.headers and not same_origin(request):
        raise cross_origin(request)
    if settings.api_token is None:
        return JSONResponse(SignedIn(key="").model_dump())  # nothing to sign in to
    if not secrets.compare_digest(body.token.encode(), settings.api_token.get_secret_value().encode()):
        raise RefusedError(status.HTTP_401_UNAUTHORIZED, "That is not this server's API token.")
    lifetime = settings.ui_session_hours * 3600
    cookie = issue(settings.api_token, lifetime, time.time())
    response = JSONResponse(SignedIn(key=page_key(settings.api_token, cookie)).model_dump())
    response.set_cookie(
        COOKIE,
        cookie,
        max_age=int(lifetime),
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


@router.post("/ui/logout", status_code=status.HTTP_204_NO_CONTENT)
async def logout(request: Request) -> Response:
    if "origin" in request.headers and not same_origin(request):
        raise cross_origin(request)
    settings: Settings = request.app.state.settings
    cookie = request.cookies.get(COOKIE)
    now = time.time()
    # Only a cookie this server signed is remembered: anyone may post here, and forged nonces would
    # otherwise fill memory and push real revocations out of the bounded list.
    if (
        cookie is not None
        and settings.api_token is not None
        and verify(settings.api_token, cookie, now, request.app.state.revoked)
    ):
        revoke(cookie, now, request.app.state.revoked)
    response = Response(status_code=status.HTTP_204_NO_CONTENT)
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return response


def _static_response(name: str) -> Response:
    files = _static_files()
    if name not in files:
        raise NotFoundError(f"No viewer asset {name!r}.")
    media_type = MEDIA_TYPES[name[name.rfind(".") :]]
    return Response(files[name], media_type=media_type, headers={"Cache-Control": "no-cache"})


@functools.cache
def _static_files() -> dict[str, bytes]:
    """The viewer's files by name, read once: only plain files with a known suffix, nothing below them."""
    folder = importlib.resources.files("controller") / "ui" / "static"
    return {
        entry.name: entry.read_bytes()
        for entry in folder.iterdir()
        if entry.is_file() and "." in entry.name and entry.name[entry.name.rfind(".") :] in MEDIA_TYPES
    }


def install(app: Any) -> None:
    """Add the viewer's routes and the state its guards keep to ``app``."""
    app.state.revoked = Revocations(lambda: app.state.sessions.store)
    app.include_router(router)
