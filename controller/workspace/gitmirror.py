"""The controller's cache of remote repositories: one bare mirror per URL, fetched only for what is new, and the
commits sessions are based on pinned in it.

Layout under the data directory::

    git/home/                   git's empty HOME (``gitrun.home``)
    git/mirrors/<key>/          a bare repository per URL (``key``: a hash of the normalised URL)
    git/mirrors/<key>.lock      its flock: one fetch of a URL at a time, across processes
    git/tmp/                    where a first fetch is made before it is renamed into place
    git/trees/<commit>/         a commit's files (``gittree``)

``gitsweep`` keeps all of it bounded (``cubicle gc``).

Why each part is as it is:

* **A first fetch is made aside and renamed in**, so a failure (an unreachable host, refused credentials, a fetch
  past ``max_bytes``, a killed controller) leaves no half-made mirror for the next session to trust.
* **One lock per mirror** (``fcntl.flock``, released by the kernel when a process dies): two sessions on one URL
  never run two fetches into one repository. The second waits; when it gets the lock it does not fetch again if a
  fetch that *began* at most ``fresh_s`` before its own call succeeded meanwhile and its ref resolves — so a
  session is based on the remote as it was at most ``fresh_s`` before it asked. A full commit id already in the
  mirror needs no fetch at all (a commit never changes).
* **Only branches and tags are fetched** (and the remote's HEAD, as ``refs/cubicle/head``), pruned as the remote
  deletes them; the sessions' pins (``refs/cubicle/sessions/<id>``, ``pin``) lie outside what a fetch writes or
  prunes, so a force-push upstream never takes a session's base commit away. No gc runs automatically
  (``gitrun.HARDENING``); ``gitsweep`` compacts a mirror under its lock and keeps what its refs reach.
* **A resolved commit is held** (``hold``: a ref ``refs/cubicle/held/<time>-<id>``, for ``HOLD_S``) from the
  moment it is resolved under the lock, so a compaction between the fetch and the session's pin cannot drop it.
* **Bounded**: a connection is tried first, within ``connect_timeout_s`` (git 2.39 has no connect timeout of
  its own), so an unreachable host is a prompt, clear error; the fetch is then killed past ``timeout_s``, as soon
  as what it wrote under the mirror passes ``max_bytes``, or as soon as git's processes hold more than
  ``max_bytes`` of memory (and ``MEMORY_ALLOWANCE`` for themselves). The disk is counted as it is taken
  (``tree_size``: allocated blocks, each file and directory at least ``ENTRY_BYTES``), not by file sizes: a
  fetched ref is a file of 41 bytes that takes a block and an inode. The memory is counted because git reads a
  remote's whole list of refs into memory before it writes anything, so an answer that never ends would never
  show on disk (``gitrun.process_memory``: the anonymous resident memory of the fetch and every process it
  started, looked at every ``MEMORY_WATCH_S``). A fetch that ended past the bound between two looks is refused
  all the same. A stalled transfer ends after ``stall_s`` (``http.lowSpeedTime``).
* **A failed or stopped fetch keeps nothing**: a first fetch leaves no mirror; a later one has the mirror's
  branches, tags and HEAD put back as they were and the packs it added removed (``_Before``), so it is no
  progress a next fetch could finish cheaply: that one must take the whole answer again, within the bound. Each
  fetch keeps what it receives as one pack (``transfer.unpackLimit=1``), which makes its objects one set of
  files to remove.
* **Refs packed**: after each successful fetch ``git pack-refs --all`` moves the refs into one ``packed-refs``
  file, so a remote's many branches take a line each at rest, not a block and an inode each.
* **The address pinned**: ``resolve=(host, port, address)`` becomes ``http.curloptResolve``, so git connects to
  the address the URL policy checked, not to whatever a second DNS answer says.
* **Credentials** only through ``gitcreds`` (a file, never the URL: a URL with userinfo is refused); errors name
  the host, and every password of the file is stripped from what git said before it is quoted.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import os
import re
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from ..errors import GitAuthError, GitError, GitRefError, GitRemoteError, GitTooLargeError, RemoteURLError
from ..wire.gitremote import parse_remote
from . import gitcreds
from .gitrun import Git, home, process_memory
from .quota import flock_within

REFSPECS = ("+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*")
HEAD_REF = "refs/cubicle/head"
HEAD_SPEC = f"+HEAD:{HEAD_REF}"
PINS = "refs/cubicle/sessions/"
HELD = "refs/cubicle/held/"
HOLD_S = 3600.0
"""How long a commit ``mirror`` resolved is held in the mirror by a ref of its own (``hold``): long enough for the
session it was resolved for to write its checkout, its record and its pin."""
STAMP = "cubicle-fetched"
"""A file in the mirror: when its last successful fetch began (seconds since the epoch)."""
USED = "cubicle-used"
"""A file in the mirror: when a session last resolved a ref in it (seconds since the epoch)."""
WATCH_S = 0.1
MEMORY_WATCH_S = 0.01
"""How often a fetch's memory is looked at (its processes started after it; all of them every ``WATCH_S``, with
the mirror's disk): a remote on a fast link sends tens of MiB in ``WATCH_S``, and all of it is kept in memory."""
FETCHED_REFS = ("refs/heads/", "refs/tags/", HEAD_REF)
MEMORY_ALLOWANCE = 4 << 20
"""Memory git's processes may hold for themselves during a fetch or a push, beyond ``max_bytes`` (their anonymous
resident memory, ``gitrun.process_memory``; a fetch's processes hold about 2.5 MiB of their own, its credential
helper, ``gitcreds``, is not counted)."""
ENTRY_BYTES = 4096
"""What each file or directory under a mirror counts for at least when a fetch is measured: a block and an inode."""
_FULL_ID = re.compile(r"[0-9a-f]{40}")
_SHORT_ID = re.compile(r"[0-9a-f]{4,39}")
_BAD_REF = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]|\.\.|@\{|//|^[-/.]|[/.]$|\.lock$")
_SESSION_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}")


@dataclass(frozen=True)
class MirrorOptions:
    """How a fetch may reach the remote and how much it may take."""

    credentials: Path | None = None
    resolve: tuple[str, int, str] | None = None
    max_bytes: int = 2 << 30
    connect_timeout_s: float = 10.0
    timeout_s: float = 600.0
    stall_s: int = 60
    fresh_s: float = 10.0
    stop: threading.Event | None = field(default=None, compare=False)
    """Set by whoever waits for the fetch (a session cancelled meanwhile): the wait for the lock or the fetch ends
    at once, as a fetch past its bounds does."""


@dataclass(frozen=True)
class RemoteMirror:
    """A mirror after ``mirror``: where it is, its URL, what the ref resolved to, and what this call fetched."""

    path: Path
    url: str
    commit: str
    fetched: bool
    received: int


def normalise(url: str) -> str:
    """``url`` in the one form its mirror is keyed by: ``wire.gitremote``'s, the spelling a controller admits
    (scheme and host in lower case, no default port, no trailing slash, no credentials, query or fragment, http(s)
    only). One rule for both, so that the URL admitted is the URL fetched and the mirror's key."""
    try:
        return parse_remote(url).url
    except RemoteURLError as err:
        raise GitError(str(err), hint=err.hint) from None


def key(url: str) -> str:
    """The mirror's directory name for a normalised URL."""
    return hashlib.sha256(url.encode()).hexdigest()[:32]


def _endpoint(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.hostname is not None
    return parts.hostname, parts.port or gitcreds.DEFAULT_PORTS[parts.scheme]


def remote_git(data_dir: Path, url: str, options: MirrorOptions) -> Git:
    """The git of a fetch of ``url``: our credential helper, the pinned address, no unpacking, stall bounds."""
    config: list[tuple[str, str]] = [
        ("transfer.unpackLimit", "1"),
        ("http.lowSpeedLimit", "1"),
        ("http.lowSpeedTime", str(options.stall_s)),
    ]
    secrets: tuple[str, ...] = ()
    if options.credentials is not None:
        config += gitcreds.helper_config(options.credentials)
        with contextlib.suppress(OSError):
            text = options.credentials.read_text(encoding="utf-8", errors="replace")
            secrets = tuple(c.password for c in gitcreds.parse(text) if len(c.password) >= 4)
    if options.resolve is not None:
        config.append(("http.curloptResolve", _resolve_entry(url, options.resolve)))
    return Git(home(data_dir), tuple(config), secrets)


def _resolve_entry(url: str, resolve: tuple[str, int, str]) -> str:
    """``host:port:address`` for curl, refused unless it names the URL's own host and port."""
    host, port, address = resolve
    if (host.lower().strip("[]"), port) != _endpoint(url):
        raise GitError(
            f"The pinned address is for {host}:{port}, not for the URL's {':'.join(map(str, _endpoint(url)))}."
        )
    try:
        ip = ipaddress.ip_address(address)  # a name here would be resolved again by curl
    except ValueError:
        raise GitError(f"The pinned address {address[:80]!r} is not an IP address.") from None
    shown_host = f"[{host.strip('[]')}]" if ":" in host else host
    return f"{shown_host}:{port}:{f'[{ip}]' if ip.version == 6 else ip}"


def check_ref(ref: str | None) -> None:
    """Refuse a ref that is not a plain name (an option, a revision expression, a control character), and a full
    ref outside the remote's branches and tags (the mirror's own, such as another session's pin)."""
    if ref is not None and (not ref or len(ref) > 255 or _BAD_REF.search(ref)):
        raise GitRefError(f"{ref[:80]!r} is not a branch, tag or commit name.")
    if ref is not None and ref.startswith("refs/") and not ref.startswith(("refs/heads/", "refs/tags/")):
        raise GitRefError(f"{ref!r} is not a branch or a tag: a full ref starts with refs/heads/ or refs/tags/.")


@contextlib.contextmanager
def locked(path: Path, timeout: float, stop: threading.Event | None = None) -> Iterator[None]:
    """Hold the flock at ``path`` (waiting at most ``timeout``, or until ``stop`` is set); the kernel releases it
    if this process dies."""
    with if_free(path, timeout, stop) as held:
        if not held:
            if stop is not None and stop.is_set():
                raise GitError("The fetch was stopped while it waited for another fetch of the same URL.")
            raise GitError(f"Another fetch held {path.name} for more than {timeout:g} s.")
        yield


@contextlib.contextmanager
def if_free(path: Path, patience_s: float = 0.0, stop: threading.Event | None = None) -> Iterator[bool]:
    """Hold the flock at ``path`` if it is free within ``patience_s`` (and before ``stop`` is set); whether it is
    held.

    The lock is held on the file that is at ``path`` once the flock is taken: ``gitsweep`` unlinks the lock file
    of a mirror it removes while it holds it, and a process that opened the old file meanwhile gets the flock of
    a file nobody else will open again, so it opens ``path`` anew."""
    deadline = time.monotonic() + patience_s
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            if not flock_within(fd, max(0.0, deadline - time.monotonic()), WATCH_S, stop):
                yield False
                return
            if _same_file(fd, path):
                yield True
                return
        finally:
            os.close(fd)


def _same_file(fd: int, path: Path) -> bool:
    try:
        now = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino)


def path_of(data_dir: Path, url: str) -> Path:
    """Where the mirror of ``url`` is, made or not; its lock is beside it (``.lock``)."""
    return data_dir / "git" / "mirrors" / key(normalise(url))


def lock_of(path: Path) -> Path:
    """The lock file of the mirror at ``path``."""
    return path.with_name(f"{path.name}.lock")


def mirror(data_dir: Path, url: str, ref: str | None = None, options: MirrorOptions | None = None) -> RemoteMirror:
    """The mirror of ``url`` under ``data_dir``, made or brought up to date, and ``ref`` (a branch, a tag, a full
    or abbreviated commit id; the remote's HEAD when None) resolved to a commit id in it.

    Raises GitRemoteError (unreachable, too slow, no such repository), GitAuthError, GitRefError,
    GitTooLargeError (past ``max_bytes``), GitError (anything else git refused); a first fetch that fails
    leaves no mirror behind.
    """
    options = options or MirrorOptions()
    url = normalise(url)
    check_ref(ref)
    path, asked = path_of(data_dir, url), time.time()
    path.parent.mkdir(parents=True, exist_ok=True)
    git = remote_git(data_dir, url, options)
    with locked(lock_of(path), options.timeout_s, options.stop):
        if not path.is_dir():
            fetched, received = True, _first_fetch(git, data_dir, path, url, options)
        elif _current(git, path, ref, asked - options.fresh_s):
            fetched, received = False, 0
        else:
            fetched, received = True, fetch(git, path, url, options)
        commit = resolve_ref(git, path, ref)
        hold(git, path, commit)
        return RemoteMirror(path, url, commit, fetched, received)


def _current(git: Git, path: Path, ref: str | None, since: float) -> bool:
    """Whether the mirror can answer ``ref`` without a fetch: a commit it holds, or a fetch begun after ``since``."""
    if ref is not None and _FULL_ID.fullmatch(ref):
        return _commit_of(git, path, ref) is not None
    try:
        stamp = float((path / STAMP).read_text())
    except (OSError, ValueError):
        return False
    try:
        return stamp >= since and _resolved(git, path, ref) is not None
    except GitRefError:  # ambiguous as the mirror stands: a fetch may settle it, else resolving says so
        return False


def _first_fetch(git: Git, data_dir: Path, path: Path, url: str, options: MirrorOptions) -> int:
    """Make the mirror aside, fetch into it, and rename it into place; on any failure remove it."""
    spare = data_dir / "git" / "tmp"
    spare.mkdir(parents=True, exist_ok=True)
    made = Path(tempfile.mkdtemp(prefix="mirror-", dir=spare))
    try:
        git.run(["init", "--quiet", "--bare", "--template=", str(made)], spare)
        received = fetch(git, made, url, options)
        os.rename(made, path)
    except BaseException:
        shutil.rmtree(made, ignore_errors=True)
        raise
    return received


def fetch(git: Git, path: Path, url: str, options: MirrorOptions) -> int:
    """Fetch what is new of ``url`` into the mirror at ``path``; the bytes it wrote there (as ``tree_size`` counts).

    A remote without a HEAD (an empty repository, a HEAD naming no branch) is fetched again without it. A fetch
    that fails or is stopped leaves the mirror's fetched refs and packs as they were (``_Before``); one that
    succeeds has its refs packed into one file and the freshness stamp written."""
    reach(url, options)
    began = time.time()
    before = _Before.of(git, path)
    try:
        try:
            received = _watched_fetch(git, path, url, (*REFSPECS, HEAD_SPEC), options)
        except GitError as err:
            if "couldn't find remote ref HEAD" not in str(err):
                raise
            received = _watched_fetch(git, path, url, REFSPECS, options)
            git.run(["update-ref", "-d", HEAD_REF], path)
    except BaseException:
        with contextlib.suppress(GitError, OSError):  # the fetch's own error is the one to report
            before.restore(git, path)
        raise
    git.run(["pack-refs", "--all"], path)
    (path / STAMP).write_text(f"{began}\n")
    return received


def reach(url: str, options: MirrorOptions) -> None:
    """Connect to the remote (its pinned address if given) within the connect timeout, or raise GitRemoteError."""
    host, port = _endpoint(url)
    target = options.resolve[2] if options.resolve else host
    try:
        socket.create_connection((target, port), timeout=options.connect_timeout_s).close()
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise GitRemoteError(
            f"{host}:{port} did not accept a connection within {options.connect_timeout_s:g} s ({reason})."
        ) from None


def _watched_fetch(git: Git, path: Path, url: str, specs: tuple[str, ...], options: MirrorOptions) -> int:
    """Run the fetch, measuring the mirror and the memory of git's processes while it runs; stop it past
    ``max_bytes`` on disk, past ``max_bytes + MEMORY_ALLOWANCE`` of memory, or past ``timeout_s``."""
    before = tree_size(path)
    memory = options.max_bytes + MEMORY_ALLOWANCE
    args = ["fetch", "--quiet", "--prune", "--no-tags", "--no-write-fetch-head", "--", url, *specs]
    with git.started(args, path) as run:
        deadline = time.monotonic() + options.timeout_s
        grown = held = looks = 0
        while run.proc.poll() is None:
            full = looks % round(WATCH_S / MEMORY_WATCH_S) == 0
            held = process_memory(run.proc.pid, not full, gitcreds.HELPER)
            if full:
                grown = tree_size(path) - before
            if grown > options.max_bytes or held > memory or time.monotonic() > deadline or _stopping(options):
                break
            looks += 1
            time.sleep(MEMORY_WATCH_S)
        code = run.proc.poll()
        said = run.stderr()
    if code is None:  # stopped: what it wrote by now names the cause when it is the disk (a pack being received)
        raise _stopped(url, tree_size(path) - before, held, options)
    if code != 0:
        raise failure(git, url, said)
    grown = tree_size(path) - before
    if grown > options.max_bytes:  # it ended between two looks: refused all the same
        raise _stopped(url, grown, 0, options)
    return grown


def _stopping(options: MirrorOptions) -> bool:
    return options.stop is not None and options.stop.is_set()


def _stopped(url: str, grown: int, held: int, options: MirrorOptions) -> GitError:
    if _stopping(options):
        return GitError(f"The fetch of {url} was stopped (its session was cancelled).")
    if grown > options.max_bytes:
        return GitTooLargeError(
            f"The fetch of {url} wrote {grown:,} bytes, more than the {options.max_bytes:,} it may; it was stopped."
        )
    if held > options.max_bytes + MEMORY_ALLOWANCE:
        return GitTooLargeError(
            f"The fetch of {url} held {held:,} bytes of memory, more than the {options.max_bytes:,} it may (and "
            f"{MEMORY_ALLOWANCE:,} for git itself); it was stopped. The remote's answer (its list of refs, or an "
            "object as it is unpacked) is that large."
        )
    return GitRemoteError(f"The fetch of {url} took longer than {options.timeout_s:g} s; it was stopped.")


@dataclass(frozen=True)
class _Before:
    """The mirror's fetched refs (branches, tags, the remote's HEAD) and its pack files before a fetch, to put back
    when the fetch fails or is stopped: a stopped fetch must not count as progress toward the next one, which
    would otherwise find the objects and refs already there and succeed having fetched almost nothing."""

    refs: dict[str, str]
    packs: frozenset[str]

    @classmethod
    def of(cls, git: Git, path: Path) -> _Before:
        return cls(_fetched_refs(git, path), frozenset(_packs(path)))

    def restore(self, git: Git, path: Path) -> None:
        """Put the refs back in one transaction (removing the ref locks a killed fetch left: only a fetch, under
        the mirror's lock, writes these refs), then remove the packs the fetch added."""
        for top in (path / "refs" / "heads", path / "refs" / "tags"):
            for lock in top.rglob("*.lock") if top.is_dir() else ():
                lock.unlink(missing_ok=True)
        (path / f"{HEAD_REF}.lock").unlink(missing_ok=True)
        now = _fetched_refs(git, path)
        commands = [f"delete {ref}\n" for ref in now if ref not in self.refs]
        commands += [f"update {ref} {oid}\n" for ref, oid in self.refs.items() if now.get(ref) != oid]
        if commands:
            git.run(["update-ref", "--no-deref", "--stdin"], path, stdin="".join(commands).encode())
        for name in _packs(path) - self.packs:
            (path / "objects" / "pack" / name).unlink(missing_ok=True)


def _fetched_refs(git: Git, path: Path) -> dict[str, str]:
    """The refs a fetch writes (branches, tags, ``HEAD_REF``) and the objects they name."""
    listed = git.run(["for-each-ref", "--format=%(objectname) %(refname)", *FETCHED_REFS], path).decode()
    return {ref: oid for oid, _, ref in (line.partition(" ") for line in listed.splitlines()) if ref}


def _packs(path: Path) -> set[str]:
    """The names of the files in the mirror's pack directory (packs, their indexes, a fetch's ``tmp_`` files)."""
    with contextlib.suppress(OSError):
        return set(os.listdir(path / "objects" / "pack"))
    return set()


def tree_size(path: Path) -> int:
    """The disk the files and directories under ``path`` take: each its allocated blocks (``st_blocks``), or its
    size if larger, and never less than ``ENTRY_BYTES`` (a block and an inode). What vanishes meanwhile counts
    for nothing. Not ``st_size`` alone: a fetched ref is a file of 41 bytes that takes a whole block."""
    total = 0
    for top, dirs, files in os.walk(path):
        for name in (*dirs, *files):
            with contextlib.suppress(OSError):
                info = os.lstat(os.path.join(top, name))
                total += max(info.st_blocks * 512, info.st_size, ENTRY_BYTES)
    return total


AUTH_WORDS = ("Authentication failed", "could not read Username", "could not read Password", "returned error: 401")
UNREACHABLE_WORDS = ("Could not resolve host", "Failed to connect", "Connection refused", "timed out", "too slow")


def failure(git: Git, url: str, stderr: bytes) -> GitError:
    """The error of a failed fetch, by what git said: refused credentials, an unreachable or wrong remote."""
    said = git.failure(["fetch"], stderr)
    text = stderr.decode(errors="replace")
    host = ":".join(map(str, _endpoint(url)))
    if any(words in text for words in AUTH_WORDS):
        return GitAuthError(f"{host} refused the credentials for {url} (or none in the credentials file match it).")
    if any(words in text for words in UNREACHABLE_WORDS):
        return GitRemoteError(f"{host} could not be reached: {said}")
    if "not found" in text or "returned error: 404" in text:
        return GitRemoteError(f"{host} has no repository at {url}.")
    if "returned error: 30" in text or "redirect" in text.lower():
        return GitRemoteError(f"{host} redirected the fetch of {url}; a remote is fetched only at its own URL.")
    return said


def _commit_of(git: Git, path: Path, name: str) -> str | None:
    """The commit ``name`` means in the mirror, or None."""
    try:
        out = git.run(["rev-parse", "--quiet", "--verify", "--end-of-options", f"{name}^{{commit}}"], path)
    except GitError:
        return None
    return out.decode().strip() or None


def _resolved(git: Git, path: Path, ref: str | None) -> str | None:
    """The commit ``ref`` names in the mirror, or None; the remote's HEAD when None.

    A full commit id is that commit, never a branch or tag someone named after it (a pinned, reviewed commit cannot
    be swapped by pushing such a branch). A name is a branch or a tag; one that is both, at two commits, is refused
    as ambiguous (GitRefError) rather than picked, so neither can stand in for the other. ``refs/heads/…`` and
    ``refs/tags/…`` name one of them exactly. Last, an abbreviated commit id, as git reads one."""
    if ref is None:
        return _commit_of(git, path, HEAD_REF)
    if _FULL_ID.fullmatch(ref):
        return _commit_of(git, path, ref)
    if ref.startswith("refs/"):
        return _commit_of(git, path, ref)
    found = {
        name: commit for name in (f"refs/heads/{ref}", f"refs/tags/{ref}") if (commit := _commit_of(git, path, name))
    }
    if len(set(found.values())) > 1:
        raise GitRefError(
            f"{ref!r} is both a branch and a tag of the remote, at different commits; ask for refs/heads/{ref} "
            f"or refs/tags/{ref}."
        )
    if found:
        return next(iter(found.values()))
    return _commit_of(git, path, ref) if _SHORT_ID.fullmatch(ref) else None


def resolve_ref(git: Git, path: Path, ref: str | None) -> str:
    """The commit id ``ref`` means in the mirror, or GitRefError naming it."""
    found = _resolved(git, path, ref)
    if found is None:
        what = "The remote's HEAD names no commit" if ref is None else f"No branch, tag or commit {ref!r}"
        raise GitRefError(f"{what} in the mirror (fetched just now, or at most a few seconds ago).")
    return found


def hold(git: Git, path: Path, commit: str) -> None:
    """Keep ``commit`` in the mirror for ``HOLD_S`` by a ref named for the time (``refs/cubicle/held/<time>-<id>``),
    drop the holds older than that, and note the mirror used now. Called under the mirror's lock, as the commit is
    resolved: from then until the session pins it, no compaction (``gitsweep``) may drop it, even when a later
    fetch prunes the branch it was on."""
    now = time.time()
    drop(git, path, [name for name, at in holds(git, path) if now - at > HOLD_S])
    git.run(["update-ref", "--no-deref", f"{HELD}{int(now)}-{commit}", commit], path)
    (path / USED).write_text(f"{now}\n")


def holds(git: Git, path: Path) -> list[tuple[str, float]]:
    """The mirror's holds: each ref's name and when it was made."""
    listed = git.run(["for-each-ref", "--format=%(refname)", HELD], path).decode().splitlines()
    found = []
    for name in listed:
        made, _, _commit = name[len(HELD) :].partition("-")
        found.append((name, float(made) if made.isdigit() else 0.0))
    return found


def drop(git: Git, path: Path, names: list[str]) -> None:
    """Delete the refs ``names`` of the mirror at ``path`` in one transaction (nothing when there are none)."""
    if names:
        git.run(["update-ref", "--no-deref", "--stdin"], path, stdin="".join(f"delete {n}\n" for n in names).encode())


def last_used(path: Path) -> float:
    """When the mirror at ``path`` was last used: a ref resolved in it, a fetch begun, or (for a mirror that has
    neither stamp) the time its directory last changed."""
    times = []
    for stamp in (USED, STAMP):
        with contextlib.suppress(OSError, ValueError):
            times.append(float((path / stamp).read_text()))
    return max(times) if times else path.stat().st_mtime


def _mirror_git(path: Path) -> Git:
    """The git of local work on a mirror made by ``mirror`` (``<data_dir>/git/mirrors/<key>``)."""
    return Git(home(path.parent.parent.parent))


def pin(path: Path, commit: str, session_id: str) -> str:
    """Keep ``commit`` in the mirror at ``path`` for the session: a ref no fetch writes or prunes. Its name."""
    name = _pin_name(session_id)
    if not _FULL_ID.fullmatch(commit):
        raise GitRefError(f"A pin takes a full commit id, not {commit[:80]!r}.")
    _mirror_git(path).run(["update-ref", "--no-deref", name, commit], path)
    return name


def unpin(path: Path, session_id: str) -> None:
    """Drop the session's pin (nothing happens when there is none): its commit may go at the next gc."""
    _mirror_git(path).run(["update-ref", "--no-deref", "-d", _pin_name(session_id)], path)


def pinned(path: Path, session_id: str) -> str | None:
    """The commit the session's pin keeps in the mirror at ``path``; None when the session has no pin."""
    return _commit_of(_mirror_git(path), path, _pin_name(session_id))


def pins(path: Path) -> list[str]:
    """The sessions whose commits the mirror at ``path`` keeps."""
    listed = _mirror_git(path).run(["for-each-ref", "--format=%(refname)", PINS], path).decode()
    return [line[len(PINS) :] for line in listed.splitlines() if line.startswith(PINS)]


def _pin_name(session_id: str) -> str:
    if not _SESSION_ID.fullmatch(session_id) or session_id.endswith((".", ".lock")) or ".." in session_id:
        raise GitRefError(f"{session_id[:80]!r} cannot name a pin.")
    return f"{PINS}{session_id}"
