"""Where a remote session's files come from and where its changes go back: the URL admitted, its mirror brought
up to date, the commit's tree checked out; and the push of its changes as a branch.

A remote session's files come from three steps, each in a module of its own layer: ``wire.gitremote`` admits the
URL (one spelling, the operator's ``CUBICLE_GIT_REMOTES``, no special address unless named, the address to pin);
``workspace.gitmirror`` fetches it into the data directory's mirror of that URL under a lock that processes
share, and resolves the ref; ``workspace.gittree`` writes the commit's tree as git stores it, once per commit,
read-only for every session on it. The tree is then the session's ``repo``, the lower layer of the same workspace
layer a local checkout gets; the record's ``source`` says where it came from. Nothing is ever written into the
tree: a remote session's changes leave as a patch or a pushed branch.

Each step is blocking git and file work: it runs in a worker thread, outside the lock that serialises session
starts (``Admission.one_at_a_time``), so one large first clone never holds up another session's start.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from ..config import Settings
from ..errors import ImageNotAllowedError
from ..wire.bodies import PushRequest, PushResult, RemoteRepo
from ..wire.changeset import Change, Disposition
from ..wire.envspec import Environment
from ..wire.gitremote import Admitted, admit, parse_remote
from ..wire.sessionrecord import Source
from ..workspace import gitmirror, gitpush, gitsweep, gittree
from ..workspace.gitpatch import printed
from ..workspace.manager import Workspaces

log = logging.getLogger(__name__)

Say = Callable[[str], Awaitable[None]]
"""Where a fetch tells its steps, one line each (a session's ``setup_output`` events of phase ``fetch``)."""


async def _silent(line: str) -> None:
    del line


def _size(count: int) -> str:
    """Bytes as people read them: 1.2 MB, 340 kB, 12 bytes."""
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} bytes"


@dataclass(frozen=True)
class Fetched:
    """A remote's commit on this controller: its tree (the session's ``repo``), where it came from, the submodules
    its tree names but does not hold, and the mirror it was read from."""

    repo: Path
    source: Source
    gitlinks: tuple[str, ...]
    mirror: Path


class Origins:
    """The git remotes one controller fetches from and pushes to, with the server's settings."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    async def admit(self, asked: RemoteRepo, typed: bool = False) -> Admitted:
        """``asked``'s URL admitted, or the error that refuses it (a 4xx before anything is fetched). ``typed``: the
        URL is the CLI user's own, so any remote is admitted (the special-address rule still holds); else it must
        match ``CUBICLE_GIT_REMOTES``. Its host is looked up here (in a worker thread): the address the fetch uses."""
        return await asyncio.to_thread(self._admitted, asked.url, typed)

    def _admitted(self, url: str, typed: bool) -> Admitted:
        return admit(parse_remote(url), self.settings.git_remotes, listed_only=not typed)

    async def fetch(
        self, asked: RemoteRepo, typed: bool = False, *, admitted: Admitted | None = None, say: Say | None = None
    ) -> Fetched:
        """``asked``'s commit checked out here: the mirror brought up to date (under its lock, shared by every
        process on the data directory), the ref resolved, the commit's tree written (or found written). ``say`` is
        told each step as a line (a session's progress events); ``admitted`` is ``admit``'s answer when the caller
        has it already."""
        settings = self.settings
        if admitted is None:
            admitted = await self.admit(asked, typed)
        remote, said = admitted.remote, say or _silent
        began = time.monotonic()
        await said(f"fetching {remote.url}" + (f" at {asked.ref}" if asked.ref else " at its HEAD"))
        options = dataclasses.replace(self._options(admitted), stop=threading.Event())
        try:
            mirror = await asyncio.to_thread(gitmirror.mirror, settings.data_dir, remote.url, asked.ref, options)
        except asyncio.CancelledError:  # the worker thread's wait or fetch ends too, and cleans up after itself
            assert options.stop is not None
            options.stop.set()
            raise
        took = time.monotonic() - began
        fetched = f"fetched {_size(mirror.received)} in {took:.1f} s" if mirror.fetched else "the mirror was current"
        await said(f"{fetched}; {asked.ref or 'HEAD'} is commit {mirror.commit}")
        tree = await asyncio.to_thread(
            gittree.checkout_tree,
            settings.data_dir,
            mirror.path,
            mirror.commit,
            gittree.TreeOptions(owner=settings.git_owner, max_bytes=settings.git_max_bytes),
        )
        await said(f"its files: {_size(tree.size)} in {tree.path}")
        source = Source(url=remote.url, ref=asked.ref, commit=mirror.commit)
        return Fetched(tree.path, source, tree.gitlinks, mirror.path)

    def _options(self, admitted: Admitted) -> gitmirror.MirrorOptions:
        """How git reaches the remote: the server's credentials (through our helper only), the address admitted
        (pinned), the bounds."""
        settings, remote = self.settings, admitted.remote
        return gitmirror.MirrorOptions(
            credentials=settings.git_credentials,
            resolve=None if remote.literal_ip else (remote.host, remote.port, admitted.address),
            max_bytes=settings.git_max_bytes,
            connect_timeout_s=settings.git_connect_timeout_s,
            timeout_s=settings.git_timeout_s,
        )

    async def push(
        self,
        workspaces: Workspaces,
        session_id: str,
        source: Source,
        task: str,
        asked: PushRequest,
        typed: bool = False,
    ) -> PushResult:
        """The session's changes as one commit on its commit, pushed to ``asked.branch`` at its remote. The URL is
        admitted again, by the rule a fetch obeys: ``CUBICLE_GIT_REMOTES`` must still match it, unless ``typed`` (the
        CLI's own user pushes; a pattern the operator removed since the session began stops its pushes through the
        server). Its addresses are looked up again (a name may have moved): any special one is refused unless a
        pattern names the host, and the push goes to the address checked."""
        settings = self.settings
        remote = parse_remote(source.url)
        admitted = await asyncio.to_thread(admit, remote, settings.git_remotes, listed_only=not typed)
        mirror = gitmirror.path_of(settings.data_dir, remote.url)
        author = (settings.git_author.name, settings.git_author.email)
        message = asked.message or _message(task, session_id)
        built = await workspaces.in_thread(
            workspaces.commit, session_id, mirror, source.commit, author, message, asked.force
        )
        pushed = await asyncio.to_thread(self._sent, admitted, mirror, built.commit, asked)
        return PushResult(
            url=pushed.url,
            branch=pushed.branch,
            commit=pushed.commit,
            base=built.base,
            status=pushed.status,
            written=len(built.written) + len(built.removed),
            left=_left(built),
        )

    def _sent(self, admitted: Admitted, mirror: Path, commit: str, asked: PushRequest) -> gitpush.Pushed:
        """``commit`` pushed to ``asked.branch`` at the admitted remote, with the lease asked for."""
        settings = self.settings
        return gitpush.push(
            settings.data_dir,
            mirror,
            admitted.remote.url,
            commit,
            asked.branch,
            options=self._options(admitted),
            lease=gitpush.Lease(asked.expected) if asked.force_with_lease else None,
            prefix=settings.git_branch_prefix,
        )

    @staticmethod
    def unpin(data_dir: Path, source: Source, session_id: str) -> None:
        """Let the session's commit go from its mirror (a purged session's patch or push needs it no more)."""
        mirror = gitmirror.path_of(data_dir, source.url)
        if mirror.is_dir():
            gitmirror.unpin(mirror, session_id)

    @staticmethod
    def pin(fetched: Fetched, session_id: str) -> None:
        """Keep the session's commit in its mirror until the session is discarded, whatever upstream does."""
        gitmirror.pin(fetched.mirror, fetched.source.commit, session_id)


MAX_LEFT = 200
"""Lines of what a push left out, at most, in its answer; the rest are counted in a last line."""


def _message(task: str, session_id: str) -> str:
    """A commit's message when the request gives none: the task's first line (shortened), then the session."""
    first = gitpush.plain_line((task.strip().splitlines() or ["Changes"])[0][:72]).strip() or "Changes"
    return f"{first}\n\nMade by Cubicle, session {session_id}.\n"


def _forced(change: Change) -> str:
    return "; name it in force to push it" if change.disposition == Disposition.TRUSTED else ""


def _left(built: gitpush.Built) -> list[str]:
    """What the commit leaves out, one line each, names spelled as the review prints them."""
    lines = [f"{printed(c.path)}: held back ({c.disposition.value}{_forced(c)})" for c in built.held]
    lines += [f"{printed(c.path)}: changed in the checkout since the session saw it" for c in built.conflicts]
    lines += [f"{printed(left.change.path)}: {left.why}" for left in built.left]
    if len(lines) > MAX_LEFT:
        lines = [*lines[:MAX_LEFT], f"... and {len(lines) - MAX_LEFT} more"]
    return lines


def sweep(settings: Settings, used: set[str], exists: Callable[[str], bool]) -> list[str]:
    """``cubicle gc``'s share: the git directory swept (``workspace.gitsweep``) with the
    server's bounds. ``used`` are the sessions' ``repo`` paths, ``exists`` says whether a session is recorded; what
    was removed, as lines to print."""
    return gitsweep.sweep(settings.data_dir, used, exists, sweep_options(settings))


def sweep_options(settings: Settings) -> gitsweep.SweepOptions:
    """A mirror goes after ``CUBICLE_GIT_MIRROR_IDLE``; scratch work is left alone for twice the longest a fetch may
    run (``CUBICLE_GIT_TIMEOUT_S``), and never less than three hours."""
    leftover_s = max(gitsweep.LEFTOVER_S, 2 * settings.git_timeout_s)
    return gitsweep.SweepOptions(idle_s=settings.git_mirror_idle_s, leftover_s=leftover_s)


def refuse_remote_build(environment: Environment, source: Source, allowed: bool) -> None:
    """A remote repository's Dockerfile is built on the server's engine only when the operator allows it
    (``CUBICLE_GIT_ALLOW_BUILDS``): a build runs the repository's own instructions outside the sandbox, and the
    repository is whoever controls that URL. An image it names and its setup commands run as a local one's do."""
    if environment.dockerfile is not None and not allowed:
        raise ImageNotAllowedError(
            f"The environment of {source.url} builds its Dockerfile {environment.dockerfile!r}, and this server "
            "builds no remote repository's Dockerfile.",
            hint="Ask the operator to set CUBICLE_GIT_ALLOW_BUILDS=true, or give the repository an image-based "
            "environment.",
        )


MAX_GITLINKS_SHOWN = 20


def noting_submodules(environment: Environment, gitlinks: tuple[str, ...]) -> Environment:
    """The environment with a warning naming the submodules the commit's tree holds and the session does not: a
    remote's submodules are never fetched (another URL, another policy), so their directories are empty."""
    if not gitlinks:
        return environment
    shown = ", ".join(printed(path) for path in gitlinks[:MAX_GITLINKS_SHOWN])
    more = f" and {len(gitlinks) - MAX_GITLINKS_SHOWN} more" if len(gitlinks) > MAX_GITLINKS_SHOWN else ""
    warning = f"submodules are not fetched, so these directories are empty: {shown}{more}"
    return environment.model_copy(update={"warnings": (*environment.warnings, warning)})
