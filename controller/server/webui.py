"""The browser viewer's server side: its page and assets, sign-in by cookie, and the guards of every request.

The viewer is one page (``controller/ui/static``: plain ES modules, no build step, nothing
fetched from elsewhere) that talks to ``/v1`` like any other client. What keeps a browser from
being turned against the API:

- **Sign-in by cookie.** With a token configured, the page asks for it once (``POST /ui/login``)
  and gets a signed, expiring, HttpOnly, SameSite=Strict cookie and a page key derived from it;
  ``/v1`` accepts the two together in place of the bearer token. The key is needed because
  browsers send a host's cookies to all of its ports: a dev server on another port of
  127.0.0.1 receives the cookie, but not the key, which the page keeps in its own origin's
  storage. The signature is keyed by the token, so changing the token signs every browser out.
  ``POST /ui/logout`` revokes the cookie it is sent with, in the session store, so every controller
  on the database honours it and a restart does not forget it.
- **Origin.** A request that may change something (any method but GET, HEAD, OPTIONS) and is
  authenticated by the cookie must carry an ``Origin`` equal to the server's own: another port
  on the same host is another origin, so a dev server on the user's machine cannot apply changes.
  Without a token, such a request with a foreign ``Origin`` is refused too (a web page cannot
  post to the loopback API); clients that send no ``Origin`` (the CLI, curl) are not browsers.
- **Host.** Without a token the API is served on loopback only, and a request whose ``Host`` is
  not a loopback name or address is refused: a DNS-rebound name cannot reach it.
- **Headers.** Every response carries a strict Content-Security-Policy (scripts, styles and
  connections from this server only, no inline script, no framing), ``nosniff`` and
  ``no-referrer``. Swagger UI's page (``/docs``) needs its inline script, so it gets the rest.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import importlib.resources
import ipaddress
import secrets
import time
from collections.abc import Awaitable, Callable, Container, MutableMapping
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request, Response, status
from fastapi.responses import JSONResponse, RedirectResponse
from pydantic import BaseModel, Field, SecretStr

from ..config import Settings
from ..errors import NotFoundError

if TYPE_CHECKING:
    from .store import Store

COOKIE = "cubicle_session"
KEY_HEADER = "x-cubicle-key"
KEY_PARAM = "key"
"""Where the page key goes when no header can (an EventSource's URL)."""
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'"
)
DOCS_CSP = "frame-ancestors 'none'"
"""Swagger UI's page starts itself with an inline script; it keeps the framing and other guards."""
MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}


class Refused(Exception):
    """A request the guards turn away: ``status`` and a ``detail`` the caller can act on."""

    def __init__(self, status_code: int, detail: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status_code = status_code
        self.detail = detail
        self.headers = headers or {}


def unauthorized() -> Refused:
    return Refused(
        status.HTTP_401_UNAUTHORIZED,
        "A valid bearer token (or the viewer's sign-in cookie with its key) is required.",
        {"WWW-Authenticate": "Bearer"},
    )


# ----------------------------------------------------------------------------- the cookie


def _key(token: SecretStr) -> bytes:
    return hmac.new(token.get_secret_value().encode(), b"cubicle viewer sign-in v1", hashlib.sha256).digest()


def issue(token: SecretStr, lifetime_s: float, now: float) -> str:
    """A cookie value: ``EXPIRES.NONCE.MAC``, the MAC keyed by the API token."""
    body = f"{int(now + lifetime_s)}.{secrets.token_urlsafe(16)}"
    return f"{body}.{hmac.new(_key(token), body.encode(), hashlib.sha256).hexdigest()}"


def _parse(value: str) -> tuple[int, str, str] | None:
    expires, _, rest = value.partition(".")
    nonce, _, mac = rest.partition(".")
    if not (expires.isascii() and expires.isdigit() and 0 < len(expires) <= 12 and nonce and mac):
        return None
    return int(expires), nonce, mac


def verify(token: SecretStr, value: str, now: float, revoked: Container[str]) -> bool:
    """Whether ``value`` is a cookie this token signed, not expired and not revoked."""
    parsed = _parse(value)
    if parsed is None:
        return False
    expires, nonce, mac = parsed
    expected = hmac.new(_key(token), f"{expires}.{nonce}".encode(), hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected.encode(), mac.encode()) and expires > now and nonce not in revoked


def page_key(token: SecretStr, value: str) -> str:
    """The key that goes with a sign-in cookie: the page keeps it in its own origin's storage and sends it.

    Browsers send cookies to every port of a host, so a server on another port of 127.0.0.1
    receives the cookie; it never sees this key (web storage is kept per origin, port included),
    and the cookie is worth nothing without it.
    """
    parsed = _parse(value)
    nonce = parsed[1] if parsed is not None else ""
    return hmac.new(_key(token), f"page key {nonce}".encode(), hashlib.sha256).hexdigest()


def signed_in(request: Request, token: SecretStr) -> bool:
    """Whether the request carries a live sign-in cookie and its page key (header, or ``key`` for EventSource)."""
    cookie = request.cookies.get(COOKIE)
    if cookie is None or not verify(token, cookie, time.time(), request.app.state.revoked):
        return False
    given = request.headers.get(KEY_HEADER) or request.query_params.get(KEY_PARAM) or ""
    return hmac.compare_digest(given.encode(), page_key(token, cookie).encode())


class Revocations:
    """The nonces of signed-out cookies, kept in the session store (``store()``): every controller on the
    database honours a sign-out, and a restart forgets none. Each lasts until its cookie would have expired."""

    def __init__(self, store: Callable[[], Store]) -> None:
        self._store = store

    def __contains__(self, nonce: object) -> bool:
        return isinstance(nonce, str) and self._store().cookie_revoked(nonce)

    def __len__(self) -> int:
        return self._store().revoked_cookies()

    def add(self, nonce: str, expires: float, now: float) -> None:
        self._store().revoke_cookie(nonce, expires, now)


def revoke(value: str, now: float, revoked: Revocations) -> None:
    """Remember ``value``'s nonce until it would expire anyway (call it for a cookie ``verify`` accepted)."""
    parsed = _parse(value)
    if parsed is not None:
        revoked.add(parsed[1], parsed[0], now)


# ----------------------------------------------------------------------------- the guards


def own_origin(request: Request) -> str:
    """The origin this request was sent to: its scheme and its ``Host`` header."""
    return f"{request.url.scheme}://{request.headers.get('host', '')}".lower()


def same_origin(request: Request) -> bool:
    origin = request.headers.get("origin")
    return origin is not None and origin.lower() == own_origin(request)


def authenticate(request: Request, token: SecretStr | None) -> None:
    """Let the request through, or raise ``Refused`` (401 without credentials, 403 for a foreign origin)."""
    unsafe = request.method not in SAFE_METHODS
    if token is None:  # loopback only: the Host guard has run; a browser's foreign Origin is refused
        if unsafe and "origin" in request.headers and not same_origin(request):
            raise _cross_origin(request)
        return
    if _bearer_matches(request, token):
        return  # a browser cannot send this header to another origin without a CORS preflight we never grant
    if not signed_in(request, token):
        raise unauthorized()
    if unsafe and not same_origin(request):
        raise _cross_origin(request)


RECHECK_S = 1.0
"""How often a long response authenticated by cookie asks the store again whether it was signed out."""


def still_let_in(request: Request, token: SecretStr | None) -> Callable[[], bool]:
    """For a long response (an event stream) that ``authenticate`` let through: whether its request would
    still be. The bearer token, or none in loopback mode, always is; a sign-in cookie can be signed out, on
    any controller, or expire meanwhile. The store is asked at most every ``RECHECK_S`` (a viewer's stream
    writes up to fifty times a second); a store that cannot answer counts as a no, and a no is final."""
    if token is None or _bearer_matches(request, token):
        return lambda: True
    checked_at, allowed = time.monotonic(), True

    def check() -> bool:
        nonlocal checked_at, allowed
        if allowed and time.monotonic() - checked_at >= RECHECK_S:
            checked_at = time.monotonic()
            try:
                allowed = signed_in(request, token)
            except Exception:  # noqa: BLE001 - the database gone mid-stream: end it cleanly, refuse rather than guess
                allowed = False
        return allowed

    return check


def _bearer_matches(request: Request, token: SecretStr) -> bool:
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and secrets.compare_digest(given.encode(), token.get_secret_value().encode())


def _cross_origin(request: Request) -> Refused:
    given = request.headers.get("origin", "(none)")
    return Refused(
        status.HTTP_403_FORBIDDEN,
        f"Refused a cross-origin request: Origin {given!r} is not this server's ({own_origin(request)}).",
    )


def loopback_host(host: str) -> bool:
    """Whether a ``Host`` header names this machine's loopback: ``localhost``, 127.0.0.0/8 or ::1, any port."""
    name = host.strip().lower()
    if name.startswith("["):
        name = name[1 : name.find("]")] if "]" in name else ""
    elif name.count(":") == 1:
        name = name.partition(":")[0]
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


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
                {"detail": "Without CUBICLE_API_TOKEN this server answers only to a loopback Host "
                 "(localhost, 127.0.0.1, [::1]): set a token to serve other names."},
                status_code=status.HTTP_421_MISDIRECTED_REQUEST,
            )  # fmt: skip
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
        raise _cross_origin(request)
    if settings.api_token is None:
        return JSONResponse(SignedIn(key="").model_dump())  # nothing to sign in to
    if not secrets.compare_digest(body.token.encode(), settings.api_token.get_secret_value().encode()):
        raise Refused(status.HTTP_401_UNAUTHORIZED, "That is not this server's API token.")
    lifetime = settings.ui_session_hours * 3600
    cookie = issue(settings.api_token, lifetime, time.time())
    response = JSONResponse(SignedIn(key=page_key(settings.api_token, cookie)).model_dump())
    response.set_cookie(
        COOKIE, cookie, max_age=int(lifetime), path="/", httponly=True, samesite="strict",
        secure=request.url.scheme == "https",
    )  # fmt: skip
    return response


@router.post("/ui/logout", status_code=status.HTTP_204_NO_CONTENT)
async def logout(request: Request) -> Response:
    if "origin" in request.headers and not same_origin(request):
        raise _cross_origin(request)
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
