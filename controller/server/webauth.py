"""Who may use the API: the bearer token, the viewer's sign-in cookie with its page key, and the Origin and Host guards.

- **Bearer token.** With ``CUBICLE_API_TOKEN`` set, every ``/v1`` request carries it
  (``Authorization: Bearer``), or the viewer's cookie and page key together.
- **Sign-in by cookie.** The viewer asks for the token once (``POST /ui/login``) and gets a
  signed, expiring, HttpOnly, SameSite=Strict cookie and a page key derived from it. The key is
  needed because browsers send a host's cookies to all of its ports: a dev server on another
  port of 127.0.0.1 receives the cookie, but not the key, which the page keeps in its own
  origin's storage. The signature is keyed by the token, so changing the token signs every
  browser out. A sign-out revokes the cookie's nonce in the session database
  (``Revocations``, with its SQL here), so every controller on the database honours it and a
  restart does not forget it.
- **Origin.** A request that may change something (any method but GET, HEAD, OPTIONS) and is
  authenticated by the cookie must carry an ``Origin`` equal to the server's own: another port
  on the same host is another origin. Without a token, such a request with a foreign ``Origin``
  is refused too (a web page cannot post to the loopback API); clients that send no ``Origin``
  (the CLI, curl) are not browsers.
- **Host.** Without a token the API is served on loopback only (``loopback_host``, which the
  viewer's ``Guard`` applies to every request), so a DNS-rebound name cannot reach it.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import time
from collections.abc import Callable, Container

from fastapi import Request, status
from pydantic import SecretStr

from ..errors import RefusedError
from .store import Store

COOKIE = "cubicle_session"
KEY_HEADER = "x-cubicle-key"
KEY_PARAM = "key"
"""Where the page key goes when no header can (an EventSource's URL)."""
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def unauthorized() -> RefusedError:
    return RefusedError(
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
    """The nonces of signed-out cookies, kept in the session database (``store()``, its ``revoked_cookies``
    table): every controller on the database honours a sign-out, and a restart forgets none. Each lasts until
    its cookie would have expired."""

    def __init__(self, store: Callable[[], Store]) -> None:
        self._store = store

    def __contains__(self, nonce: object) -> bool:
        if not isinstance(nonce, str):
            return False
        return self._store().run("SELECT 1 FROM revoked_cookies WHERE nonce = ?", (nonce,)).fetchone() is not None

    def __len__(self) -> int:
        return int(self._store().run("SELECT COUNT(*) FROM revoked_cookies").fetchone()[0])

    def add(self, nonce: str, expires: float, now: float) -> None:
        """Remember ``nonce`` until ``expires``; forget the ones expired by ``now``."""
        store = self._store()
        with store.writing():
            store.run("DELETE FROM revoked_cookies WHERE expires <= ?", (now,))
            store.run("INSERT INTO revoked_cookies VALUES (?,?) ON CONFLICT (nonce) DO NOTHING", (nonce, expires))


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
    """Let the request through, or raise ``RefusedError`` (401 without credentials, 403 for a foreign origin)."""
    unsafe = request.method not in SAFE_METHODS
    if token is None:  # loopback only: the Host guard has run; a browser's foreign Origin is refused
        if unsafe and "origin" in request.headers and not same_origin(request):
            raise cross_origin(request)
        return
    if _bearer_matches(request, token):
        return  # a browser cannot send this header to another origin without a CORS preflight we never grant
    if not signed_in(request, token):
        raise unauthorized()
    if unsafe and not same_origin(request):
        raise cross_origin(request)


def authenticate_page(request: Request, token: SecretStr | None) -> None:
    """For a GET of a page that holds no data (the API's docs and their files): the bearer token, or a live sign-in
    cookie even without its key, which a browser opening the page by its address cannot send. Whatever the page
    then asks of ``/v1`` or the schema passes ``authenticate``, key and Origin included."""
    if token is None or _bearer_matches(request, token):
        return
    cookie = request.cookies.get(COOKIE)
    if cookie is None or not verify(token, cookie, time.time(), request.app.state.revoked):
        raise unauthorized()


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


def cross_origin(request: Request) -> RefusedError:
    given = request.headers.get("origin", "(none)")
    return RefusedError(
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
