"""The controller's git credential helper: it answers ``get`` from a file, and never writes it.

The file is in git's credential-store format, one ``https://user:token@host[:port][/path]`` a line (user and
token percent-encoded; http too). Credentials reach git only through this helper, which git runs as
``credential.helper=!python -I -S gitcreds.py FILE`` (``helper_config``): so a token is never in an argv, a
URL, the mirror's config, an environment variable, git's output or a log — only in the file and, for one
request, in the helper's answer to git on a pipe.

Why not git's own ``store`` helper: on a refused credential git asks every helper to ``erase`` it, and
``store`` rewrites the file without that line — a mistyped password would delete the operator's token, and a
``store`` after a success could rewrite it. This helper reads ``get`` and ignores ``store`` and ``erase``.

A line matches a request by protocol, host and port (the scheme's default port when none is written), and by
its path when it has one (git sends the path: ``credential.useHttpPath`` is on), so two repositories of one
host may have different tokens; the first matching line wins. The module is stdlib only, with no import of the
package, since it runs as a script (``python -I``: no site, no environment) in git's child process.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

DEFAULT_PORTS = {"http": 80, "https": 443}
MAX_FILE = 1 << 20


@dataclass(frozen=True)
class Credential:
    """One line of the file. ``path`` is empty for a line that matches every path of its host."""

    protocol: str
    host: str
    port: int
    path: str
    username: str
    password: str

    def __repr__(self) -> str:  # a credential printed by accident shows no secret
        return f"Credential({self.protocol}://{self.username}:***@{self.host}:{self.port}/{self.path})"


def parse_line(line: str) -> Credential | None:
    """The credential of one line, or None for a line that is not one (blank, a comment, another scheme)."""
    line = line.strip()
    if not line or line.startswith("#"):
        return None
    try:
        url = urlsplit(line)
        port = url.port
    except ValueError:
        return None
    if url.scheme not in DEFAULT_PORTS or not url.hostname or url.username is None or url.password is None:
        return None
    username, password = unquote(url.username), unquote(url.password)
    if any(c in value for value in (username, password) for c in "\n\x00"):
        return None
    path = unquote(url.path).strip("/")  # as git sends it: decoded (a space, not %20)
    if any(c in path for c in "\n\x00"):
        return None
    return Credential(url.scheme, url.hostname.lower(), port or DEFAULT_PORTS[url.scheme], path, username, password)


def parse(text: str) -> list[Credential]:
    """Every credential of a file's text, in order; lines that are not one are skipped, never echoed."""
    return [found for found in map(parse_line, text.splitlines()) if found is not None]


def read_request(text: str) -> dict[str, str]:
    """git's request: ``key=value`` lines up to a blank one."""
    request: dict[str, str] = {}
    for line in text.splitlines():
        if not line:
            break
        key, _, value = line.partition("=")
        request[key] = value
    return request


def split_host(protocol: str, host: str) -> tuple[str, int] | None:
    """``host[:port]`` as git sends it (``[::1]:8080`` for IPv6), with the scheme's default port."""
    try:
        url = urlsplit(f"{protocol}://{host}")
        port = url.port
    except ValueError:
        return None
    if not url.hostname:
        return None
    return url.hostname.lower(), port or DEFAULT_PORTS.get(protocol, 0)


def matching(credentials: Iterable[Credential], request: dict[str, str]) -> Credential | None:
    """The first credential for the request's protocol, host, port and path."""
    protocol = request.get("protocol", "")
    where = split_host(protocol, request.get("host", ""))
    if protocol not in DEFAULT_PORTS or where is None:
        return None
    path = request.get("path", "").strip("/")
    for found in credentials:
        if (found.protocol, found.host, found.port) == (protocol, *where) and found.path in ("", path):
            return found
    return None


def answer(action: str, request_text: str, file: Path) -> str:
    """What the helper prints for ``action``: a username and password for a matching ``get``, else nothing."""
    if action != "get":
        return ""  # store and erase: the file is the operator's, never ours to write
    try:
        with file.open(encoding="utf-8") as f:
            text = f.read(MAX_FILE)
    except OSError:
        return ""
    found = matching(parse(text), read_request(request_text))
    if found is None:
        return ""
    return f"username={found.username}\npassword={found.password}\n"


HELPER = str(Path(__file__).resolve())
"""The helper's script, as git's command line for it names it."""


def helper_config(file: Path) -> tuple[tuple[str, str], ...]:
    """The ``-c`` pairs that make git ask this helper (and only it) about ``file``'s credentials."""
    command = shlex.join([sys.executable, "-I", "-S", HELPER, str(file)])
    return (("credential.helper", f"!{command}"), ("credential.useHttpPath", "true"))


def main(argv: Sequence[str]) -> int:
    """``gitcreds.py FILE ACTION``, as git runs a helper: the request on stdin, the answer on stdout."""
    request = sys.stdin.read(1 << 16)
    if len(argv) != 3:
        return 1
    sys.stdout.write(answer(argv[2], request, Path(argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
