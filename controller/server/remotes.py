"""Sessions on a git remote: the URL admitted, its mirror brought up to date, the commit's tree checked out.

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
import logging
from dataclasses import dataclass
from pathlib import Path

from ..config import Settings
from ..wire.bodies import RemoteRepo
from ..wire.gitremote import admit, parse_remote
from ..wire.sessionrecord import Source
from ..workspace import gitmirror, gittree

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Fetched:
    """A remote's commit on this controller: its tree (the session's ``repo``), where it came from, the submodules
    its tree names but does not hold, and the mirror it was read from."""

    repo: Path
    source: Source
    gitlinks: tuple[str, ...]
    mirror: Path


class Remotes:
    """The remotes one controller fetches, with the server's settings."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    async def fetch(self, asked: RemoteRepo, typed: bool = False) -> Fetched:
        """``asked``'s commit checked out here. ``typed``: the URL is the CLI user's own, so any remote is
        admitted (the special-address rule still holds); else it must match ``CUBICLE_GIT_REMOTES``."""
        return await asyncio.to_thread(self._fetched, asked, typed)

    def _fetched(self, asked: RemoteRepo, typed: bool) -> Fetched:
        settings = self.settings
        admitted = admit(parse_remote(asked.url), settings.git_remotes, listed_only=not typed)
        remote = admitted.remote
        options = gitmirror.MirrorOptions(
            credentials=settings.git_credentials,
            resolve=(remote.host, remote.port, admitted.address),
            max_bytes=settings.git_max_bytes,
            connect_timeout_s=settings.git_connect_timeout_s,
            timeout_s=settings.git_timeout_s,
        )
        mirror = gitmirror.mirror(settings.data_dir, remote.url, asked.ref, options)
        tree = gittree.checkout_tree(
            settings.data_dir,
            mirror.path,
            mirror.commit,
            gittree.TreeOptions(owner=settings.git_owner, max_bytes=settings.git_max_bytes),
        )
        source = Source(url=remote.url, ref=asked.ref, commit=mirror.commit)
        return Fetched(tree.path, source, tree.gitlinks, mirror.path)

    @staticmethod
    def pin(fetched: Fetched, session_id: str) -> None:
        """Keep the session's commit in its mirror until the session is discarded, whatever upstream does."""
        gitmirror.pin(fetched.mirror, fetched.source.commit, session_id)
