"""Git remotes: which http(s) URLs a session may be made on, and the one address its fetch is pinned to.

A controller that fetches a URL a client names is a door into whatever the controller reaches: its loopback, the
cloud's metadata service, the private network behind it. So a URL goes through three steps, each refusing with a
reason the person can act on:

``parse_remote``
    One spelling per URL, or a ``RemoteURLError``: http or https only (never ``file://``, ``ssh://``, ``git://``,
    git's ``ext::`` helpers, scp-like ``host:path`` or a local path), no credentials (they go in the server's
    credentials file), no query or fragment, no dot-segments or encoded slashes and backslashes (a server that
    decodes them would serve another path than the one matched), no control characters or spaces, and a host
    that is a DNS name (IDNA-encoded, lower-case), a dotted-quad IPv4 address or a bracketed IPv6 one: the
    decimal, octal, hex and short spellings of IPv4 (``2130706433``, ``0177.0.0.1``, ``0x7f.1``, ``127.1``) and
    IPv4-mapped IPv6 are refused, since resolvers read them as addresses a pattern never named.
``parse_pattern``
    The operator's ``CUBICLE_GIT_REMOTES`` entries, ``https://git.example.com/team/*``: scheme, host, port and
    path are matched apart. The host is exact, or ``*.`` and a domain of two labels or more, where ``*`` is one
    DNS label as in a TLS certificate (``*.example.com`` is neither ``example.com`` nor ``a.b.example.com``). The
    port is exact (the scheme's when none is written). The path is shell-style, one segment at a time: ``*`` and
    ``?`` never cross a ``/`` (``team/*`` is ``team/app.git``, never ``team/sub/app.git``), and a whole segment
    ``**`` (once per pattern) is one or more segments (``team/**`` is both). Paths match case-sensitively, the
    scheme and host in any case.
``admit``
    The URL must match a pattern (an empty list admits nothing; ``None`` admits any URL, for a CLI user's own
    typing), and every address its host resolves to must be public (``network.SPECIAL``) unless a pattern that
    matches it names the host exactly, not through ``*``. The answer carries the address checked, which the
    fetch pins (git's ``http.curloptResolve``), so a second lookup cannot answer differently.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Iterable, Sequence
from fnmatch import fnmatchcase
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..errors import RemoteRefusedError, RemoteURLError
from .network import is_ip, is_special

DEFAULT_PORTS: dict[str, int] = {"http": 80, "https": 443}
MAX_URL = 2048
"""The longest URL or pattern taken, in characters."""
MAX_HOST = 253
SHOWN = 200
"""How much of a refused URL an error shows."""

Resolver = Callable[[str, int], Iterable[str]]
"""A host and port to the addresses they resolve to, most preferred first (``lookup`` is the system's)."""

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
_HELPER = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*::")
_USERINFO = re.compile(r"^([^/]*?//)?[^/]*@")
_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_NAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_DOTTED_QUAD = re.compile(rf"{_OCTET}(?:\.{_OCTET}){{3}}")
_NUMERIC = re.compile(r"0x[0-9a-f]*|[0-9]+")
"""A last label a resolver reads as (part of) an IPv4 address: ``127.1``, ``0x7f.1``, ``2130706433``."""
_PORT = re.compile(r"[0-9]{1,5}")
_PCHAR = re.compile(r"(?:[A-Za-z0-9._~!$&'()*+,;=:@-]|%[0-9A-Fa-f]{2})+")
_GLOB_PCHAR = re.compile(r"(?:[A-Za-z0-9._~!$&'()*+,;=:@?\[\]-]|%[0-9A-Fa-f]{2})+")
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_DEVIATIONS = frozenset("\u00df\u03c2")
"""Letters IDNA 2003 (Python's codec) maps and IDNA 2008 keeps (ß, final sigma): their hosts are refused."""


# ----------------------------------------------------------------------------- the URL


class GitRemote(BaseModel):
    """A git remote as ``parse_remote`` spells it; built from text (``GitRemote.model_validate(URL)``) or from these
    fields, which are checked again by spelling them as a URL and parsing that."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    scheme: Literal["http", "https"]
    host: str = Field(description="Lower-case, IDNA-encoded, no trailing dot; an IPv6 address without brackets.")
    port: int = Field(description="As written, else the scheme's default.")
    path: str = Field(description="From its first /, percent-encoding normalised; never a trailing /.")

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, value: Any) -> Any:
        return _fields(value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _spelled_once(self) -> GitRemote:
        """Fields given apart are held to the same rules as text: they must be what their own URL parses to."""
        if _fields(self.url) != self.model_dump():
            raise ValueError(f"{self.url!r} is not the normal spelling of this remote")
        return self

    @property
    def url(self) -> str:
        """The URL git is given: no credentials, the port only when it is not the scheme's."""
        return f"{self.scheme}://{_netloc(self.host, self.port, self.scheme)}{self.path}"

    @property
    def display(self) -> str:
        """For lists and logs: ``host[:port]/path``, with ``http://`` in front when the fetch is not encrypted.
        The host stays in its ``xn--`` form, since a Unicode host can pass for another."""
        short = f"{_netloc(self.host, self.port, self.scheme)}{self.path}"
        return short if self.scheme == "https" else f"http://{short}"

    @property
    def literal_ip(self) -> bool:
        """Whether the host is an IP address (nothing to resolve, nothing to pin)."""
        return is_ip(self.host)

    def __str__(self) -> str:
        return self.url


def parse_remote(text: str) -> GitRemote:
    """``text`` as a ``GitRemote``; a ``RemoteURLError`` naming the URL (without credentials) and what is wrong."""
    return GitRemote.model_validate(_fields(text))


def _fields(text: str) -> dict[str, Any]:
    try:
        scheme, authority, path = _split(text, glob=False)
        host, port = _host_and_port(authority, scheme)
        return {"scheme": scheme, "host": host, "port": port, "path": _path(path, glob=False)}
    except _Wrong as err:
        raise RemoteURLError(f"The remote {_shown(text)} is refused: {err}.") from None


class _Wrong(ValueError):
    """What is wrong with a URL or a pattern, in words that follow "is refused: "."""


def _shown(text: object) -> str:
    """``text`` as an error may show it: quoted and escaped, cut short, and never with its credentials."""
    text = str(text)
    cut = text[:SHOWN] + ("..." if len(text) > SHOWN else "")
    return repr(_USERINFO.sub(lambda m: f"{m.group(1) or ''}***@", cut))


def _split(text: str, glob: bool) -> tuple[str, str, str]:
    """``text`` as its scheme, authority and path, with the checks that come before reading any of them. In a
    pattern (``glob``) a ``?`` is the path's wildcard, not a query."""
    if not isinstance(text, str):
        raise _Wrong("it is not text")
    if len(text) > MAX_URL:
        raise _Wrong(f"it is longer than {MAX_URL} characters")
    match = _SCHEME.match(text)
    if match is None or match.group(1).lower() not in DEFAULT_PORTS:
        raise _Wrong("a pattern starts with http:// or https://" if glob else _refused_form(text))
    if any(c.isspace() or not c.isprintable() for c in text):
        raise _Wrong("it holds a space or a control character")
    if "\\" in text:
        raise _Wrong("it holds a backslash, which some parsers read as /")
    rest = text[match.end() :]
    if "#" in rest or ("?" in rest and not glob):
        raise _Wrong("it has a query (?) or a fragment (#), which name no repository")
    authority, slash, path = rest.partition("/")
    if "@" in authority:
        raise _Wrong(
            "it carries credentials (user@ or user:password@); they go in the server's credentials file "
            "(CUBICLE_GIT_CREDENTIALS), never in the URL"
        )
    return match.group(1).lower(), authority, slash + path


def _refused_form(text: str) -> str:
    """Why ``text``, which does not start with http:// or https://, is no remote Cubicle fetches."""
    scheme = _SCHEME.match(text)
    if scheme is not None:
        return f"only http and https remotes are fetched, not {scheme.group(1).lower()}://"
    if text.lower().startswith(("http:", "https:")):
        return "an http or https URL starts with two slashes after its scheme (https://HOST/PATH)"
    if _HELPER.match(text):
        return "git's remote-helper form (such as ext::) runs commands; only http and https remotes are fetched"
    if any(c.isspace() or not c.isprintable() for c in text):
        return "it holds a space or a control character"
    head = text.split("/", 1)[0]
    if ":" in head and not text.startswith((".", "~")):
        return "scp-like ssh syntax (host:path) is not fetched; use the repository's https URL"
    return "it is a local path, not an http or https URL (a session on a checkout takes its path instead)"


# ----------------------------------------------------------------------------- host and port


def _host_and_port(authority: str, scheme: str) -> tuple[str, int]:
    if authority.startswith("["):
        inside, bracket, after = authority[1:].partition("]")
        if not bracket or (after and not after.startswith(":")):
            raise _Wrong("its IPv6 address is not closed by ] before the port")
        return _ipv6(inside), _port(after[1:] if after else None, scheme)
    if authority.count(":") > 1:
        raise _Wrong("an IPv6 address goes in brackets: [2001:db8::1]")
    host, colon, port = authority.partition(":")
    return _host(host), _port(port if colon else None, scheme)


def _ipv6(text: str) -> str:
    if "%" in text:
        raise _Wrong("an IPv6 zone (%) names an interface of the controller, not a host")
    try:
        address = ipaddress.IPv6Address(text)
    except ValueError:
        raise _Wrong(f"[{text}] is not an IPv6 address") from None
    if address.ipv4_mapped is not None:
        raise _Wrong("an IPv4-mapped IPv6 address (::ffff:a.b.c.d) is refused; write the IPv4 address itself")
    return address.compressed


def _host(text: str) -> str:
    """A host name or dotted-quad IPv4 address in its one spelling: lower-case, IDNA-encoded, no trailing dot."""
    if not text:
        raise _Wrong("it has no host")
    if "%" in text:
        raise _Wrong("a percent-encoded host is refused; write the host itself")
    name = text.lower()
    name = name[:-1] if name.endswith(".") else name
    if not name.isascii():
        name = _idna(name)
    if _DOTTED_QUAD.fullmatch(name):
        return name
    if _NUMERIC.fullmatch(name.rsplit(".", 1)[-1]):
        raise _Wrong(
            f"{text!r} is a numeric spelling of an address (decimal, octal, hex or short); write a dotted-quad "
            "IPv4 address such as 127.0.0.1, or a name"
        )
    if len(name) > MAX_HOST or not _NAME.fullmatch(name):
        raise _Wrong(f"{text!r} is not a host name (letters, digits and hyphens, labels joined by dots)")
    return name


def _idna(name: str) -> str:
    """A Unicode host in its ASCII (``xn--``) form, by Python's IDNA codec, which also maps full-width digits and
    dots; the caller judges the result, so full-width ``127.0.0.1`` is read as the address it spells."""
    if any(c in _DEVIATIONS for c in name):
        raise _Wrong(f"{name!r} is encoded differently by IDNA 2003 and 2008; write its xn-- form")
    try:
        return name.encode("idna").decode("ascii").lower()
    except UnicodeError:
        raise _Wrong(f"{name!r} is not a host name IDNA can encode") from None


def _port(text: str | None, scheme: str) -> int:
    if text is None:
        return DEFAULT_PORTS[scheme]
    if not _PORT.fullmatch(text) or not 0 < int(text) < 65536:
        raise _Wrong(f"{text!r} is not a port from 1 to 65535")
    return int(text)


def _netloc(host: str, port: int, scheme: str) -> str:
    shown = f"[{host}]" if ":" in host else host
    return shown if port == DEFAULT_PORTS[scheme] else f"{shown}:{port}"


# ----------------------------------------------------------------------------- the path


def _path(text: str, glob: bool) -> str:
    """The path in its one spelling, segment by segment; a remote's one trailing ``/`` is dropped (a pattern's is
    refused, since a pattern so written matches no remote)."""
    if text.endswith("/") and len(text) > 1:
        if glob:
            raise _Wrong("it ends in /, which no remote does: write /* for every repository in that folder")
        text = text[:-1]
    if text in ("", "/"):
        raise _Wrong("it names no repository (its path is empty)")
    segments = [_segment(part, glob) for part in text[1:].split("/")]
    return "/" + "/".join(segments)


def _segment(text: str, glob: bool) -> str:
    if not text:
        raise _Wrong("it has an empty path segment (//)")
    if not (_GLOB_PCHAR if glob else _PCHAR).fullmatch(text):
        raise _Wrong(f"the path segment {text!r} holds characters a URL must percent-encode")
    normal = _ESCAPE.sub(_unescaped, text)
    if normal.replace("%3B", ";").split(";", 1)[0] in (".", ".."):  # ..%3B too: a server may decode it first
        raise _Wrong("it has a dot-segment (/./ or /../, or their percent-encoded spelling)")
    return normal


def _unescaped(match: re.Match[str]) -> str:
    """One ``%XX``: an unreserved character as itself, so ``te%61m`` and ``team`` are one path; a slash, backslash,
    percent sign or control character refused (a server that decodes them reads another path, or two); the rest
    kept, in upper case."""
    byte = int(match.group(1), 16)
    if byte in _UNRESERVED:
        return chr(byte)
    if chr(byte) in "/\\%" or byte < 0x20 or byte == 0x7F:
        raise _Wrong(f"it has an encoded slash, backslash, percent sign or control character ({match.group(0)})")
    return match.group(0).upper()


# ----------------------------------------------------------------------------- the operator's patterns


class RemotePattern(BaseModel):
    """One entry of ``CUBICLE_GIT_REMOTES``, as ``parse_pattern`` reads it (see the module's docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    scheme: Literal["http", "https"]
    host: str = Field(description="An exact host (name or IP address), or ``*.`` and a domain of two labels or more.")
    port: int
    path: str = Field(description="Shell-style, one segment at a time; ``**`` once, as a whole segment.")

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, value: Any) -> Any:
        return _pattern_fields(value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _spelled_once(self) -> RemotePattern:
        """Fields given apart are held to the same rules as text."""
        if _pattern_fields(str(self)) != self.model_dump():
            raise ValueError(f"{str(self)!r} is not the normal spelling of this pattern")
        return self

    @property
    def wildcard(self) -> bool:
        return self.host.startswith("*.")

    def matches(self, remote: GitRemote) -> bool:
        """Whether ``remote`` is inside this pattern: its scheme, host, port and path each."""
        return (
            remote.scheme == self.scheme
            and remote.port == self.port
            and self._host_matches(remote.host)
            and _glob(self.path[1:].split("/"), remote.path[1:].split("/"))
        )

    def names(self, remote: GitRemote) -> bool:
        """Whether this pattern matches ``remote`` and names its host exactly: what lets a host at a private
        address in (a ``*`` never does, or one public name's subdomains could lead anywhere)."""
        return not self.wildcard and self.matches(remote)

    def _host_matches(self, host: str) -> bool:
        if not self.wildcard:
            return host == self.host
        label, _, domain = host.partition(".")
        return bool(label) and domain == self.host[2:]

    def __str__(self) -> str:
        return f"{self.scheme}://{_netloc(self.host, self.port, self.scheme)}{self.path}"


def parse_pattern(text: str) -> RemotePattern:
    """``text`` as a ``RemotePattern``; a ValueError naming the pattern and what is wrong, which makes it a settings
    error at start."""
    return RemotePattern.model_validate(_pattern_fields(text))


def _pattern_fields(text: str) -> dict[str, Any]:
    try:
        scheme, authority, path = _split(text, glob=True)
        wild = authority.startswith("*.")
        if "*" in (authority[2:] if wild else authority):
            raise _Wrong("* stands for one DNS label, in front of a domain name only (*.example.com)")
        host, port = _host_and_port(authority[2:] if wild else authority, scheme)
        host = "*." + _domain(host) if wild else host
        glob = _path(path, glob=True)
        if glob.split("/").count("**") > 1 or re.search(r"[^/]\*\*|\*\*[^/]", glob):
            raise _Wrong("** stands alone as a whole path segment, at most once")
        return {"scheme": scheme, "host": host, "port": port, "path": glob}
    except _Wrong as err:
        raise ValueError(f"The remote pattern {_shown(text)} is refused: {err}") from None


def _domain(host: str) -> str:
    """The domain under a ``*.``: a name of two labels or more, so ``*.com`` cannot cover a whole top-level domain."""
    if is_ip(host):
        raise _Wrong("* stands for one DNS label, in front of a domain name, never an address")
    if host.count(".") < 1:
        raise _Wrong(f"*.{host} would cover a whole top-level domain; name a domain of two labels or more")
    return host


def _glob(pattern: list[str], path: list[str]) -> bool:
    """Whether the path's segments match the pattern's: each by ``fnmatchcase`` (``*`` stays inside a segment), a
    ``**`` segment taking one or more whole segments."""
    if not pattern:
        return not path
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        return any(_glob(rest, path[taken:]) for taken in range(1, len(path) + 1))
    return bool(path) and fnmatchcase(path[0], head) and _glob(rest, path[1:])


# ----------------------------------------------------------------------------- admission


class Admitted(BaseModel):
    """A remote this controller may fetch, and the address it checked, which the fetch must connect to."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    remote: GitRemote
    address: str = Field(description="The IP address checked; the fetch pins the host to it.")

    @property
    def host(self) -> str:
        return self.remote.host

    @property
    def port(self) -> int:
        return self.remote.port

    @property
    def pin(self) -> str | None:
        """git's ``http.curloptResolve`` entry (``HOST:PORT:ADDRESS``, an IPv6 address in brackets), so curl
        connects to the checked address and never resolves the name again; None when the host is an IP address."""
        if self.remote.literal_ip:
            return None
        address = f"[{self.address}]" if ":" in self.address else self.address
        return f"{self.host}:{self.port}:{address}"


def lookup(host: str, port: int) -> list[str]:
    """The addresses the system's resolver gives ``host`` for a TCP connection, in its order of preference."""
    return [str(info[4][0]) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]


def admit(
    remote: GitRemote,
    patterns: Sequence[RemotePattern] | None,
    resolve: Resolver = lookup,
    *,
    listed_only: bool = True,
) -> Admitted:
    """``remote`` admitted with the address to pin, or a ``RemoteRefusedError`` (``RemoteURLError`` when its host
    does not resolve).

    ``patterns`` is the operator's list: the remote must match one. ``None`` admits any remote, and so does
    ``listed_only=False`` (a CLI user's own URL), where the patterns only name the hosts that may be at special
    addresses. Either way every address the host resolves to must be public, unless a pattern that matches the
    remote names its host exactly; one special address among public ones refuses the whole name.
    """
    if patterns is not None and listed_only and not any(p.matches(remote) for p in patterns):
        raise RemoteRefusedError(_unlisted(remote, patterns))
    addresses = _addresses(remote, resolve)
    special = [address for address in addresses if is_special(address)]
    if special and not any(p.names(remote) for p in patterns or ()):
        raise RemoteRefusedError(
            f"The remote {remote.url} is refused: {remote.host} resolves to {special[0]}, a loopback, private, "
            "link-local or otherwise special address, which only a host a pattern names exactly may be at."
        )
    return Admitted(remote=remote, address=addresses[0])


def _unlisted(remote: GitRemote, patterns: Sequence[RemotePattern]) -> str:
    if not patterns:
        return (
            f"The remote {remote.url} is refused: this server fetches no remote (CUBICLE_GIT_REMOTES is empty), "
            "so its sessions are made on paths under its repository roots only."
        )
    return f"The remote {remote.url} is refused: it matches none of the server's CUBICLE_GIT_REMOTES patterns."


def _addresses(remote: GitRemote, resolve: Resolver) -> list[str]:
    """Every address ``remote``'s host resolves to, each once, in the resolver's order; an IP host is itself."""
    if remote.literal_ip:
        return [remote.host]
    try:
        found = [str(ipaddress.ip_address(address)) for address in resolve(remote.host, remote.port)]
    except OSError as err:  # socket.gaierror and its kin
        raise RemoteURLError(
            f"The remote {remote.url} is refused: its host does not resolve ({err.strerror or err}).",
            hint="Check the host name, and that the controller's resolver knows it.",
        ) from None
    except ValueError as err:
        raise RemoteRefusedError(f"The remote {remote.url} is refused: its resolver answered {err}.") from None
    if not found:
        raise RemoteURLError(f"The remote {remote.url} is refused: its host resolves to no address.")
    return list(dict.fromkeys(found))
