"""The commands on a session's workspace layer: its changes and checkpoints read, and apply, revert, rewind and
discard, each between turns only.

A change to the layer runs *quiesced* (``Quiesce``, which ``Sessions`` gives): the session held
so that no turn begins, here or on another controller, its container stopped (the overlay is
then unmounted), and its recorder writing under the hold's epoch. Listings read at the same
time are shared: one walk of the layer, not one a request, until the layer changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager

from ..errors import CubicleError, InvalidRequestError
from ..wire.bodies import PushRequest, PushResult
from ..wire.changeset import ApplyResult, Changes, Checkpoint, RevertResult
from ..wire.events import MAX_LISTED_PATHS, DiscardedEvent, RevertedEvent, RewoundEvent
from ..workspace.manager import Workspaces, apply_and_report, shown, summarize
from .origins import Origins
from .recorder import Recorder
from .store import Row, Store

log = logging.getLogger(__name__)

Quiesce = Callable[[str, str], AbstractAsyncContextManager[Recorder]]
"""Holds session ``id`` between turns with its container stopped (else a ConflictError ending in ``advice``)."""


class LayerCommands:
    """What the API's and the CLI's review commands do to a session's layer (``Sessions.layers``)."""

    def __init__(
        self, workspaces: Workspaces, store: Store, get: Callable[[str], Row], quiesce: Quiesce, origins: Origins
    ) -> None:
        self.workspaces = workspaces
        self.origins = origins
        self.store = store
        self.get = get
        """The session's record; NotFoundError if there is none."""
        self._quiesce = quiesce
        self._listings: dict[tuple[str, bool], asyncio.Future[Changes]] = {}

    async def changes(self, session_id: str, diff: bool = False) -> Changes:
        self.get(session_id)
        key = (session_id, diff)
        listing = self._listings.get(key)
        if listing is None:  # requests for the same listing while one is read share it: one walk, not one each
            listing = asyncio.ensure_future(self.workspaces.in_thread(self.workspaces.changes, session_id, diff))
            self._listings[key] = listing
            listing.add_done_callback(
                lambda done: self._listings.pop(key, None) if self._listings.get(key) is done else None
            )
            listing.add_done_callback(lambda done: done.cancelled() or done.exception())  # retrieved, whoever waits
        return await asyncio.shield(listing)

    async def patch(self, session_id: str) -> bytes:
        """The session's changes as a binary-safe patch of what a plain apply writes (``workspace.gitpatch``)."""
        self.get(session_id)
        return await self.workspaces.in_thread(self.workspaces.patch, session_id)

    async def checkpoints(self, session_id: str) -> list[Checkpoint]:
        self.get(session_id)
        return await asyncio.to_thread(self.workspaces.checkpoints, session_id)

    async def apply(
        self,
        session_id: str,
        force: list[str] | None = None,
        include_ignored: bool = False,
        build_inputs: bool = False,
        paths: list[str] | None = None,
        ids: list[str] | None = None,
    ) -> ApplyResult:
        """Copy the layer's changes (only those ``paths`` and ``ids`` name, if given) into the checkout (sandbox
        stopped first); ApplyConflictError writes nothing."""
        self._refuse_remote(session_id, "applied")
        async with self._quiesced(session_id, "apply when the turn has ended") as recorder:
            return await apply_and_report(
                self.workspaces, session_id, recorder, force or (), include_ignored, build_inputs, paths, ids
            )

    async def revert(self, session_id: str, force: list[str] | None = None) -> RevertResult:
        """Restore the checkout to its state before the newest apply not yet reverted."""
        self._refuse_remote(session_id, "reverted")
        async with self._quiesced(session_id, "revert when the turn has ended") as recorder:
            result = await self.workspaces.in_thread(self.workspaces.revert, session_id, force or ())
            await recorder.emit(
                RevertedEvent(
                    session_id=session_id,
                    apply=result.record,
                    paths=[shown(p) for p in result.reverted[:MAX_LISTED_PATHS]],
                    more=max(0, len(result.reverted) - MAX_LISTED_PATHS) + result.more_reverted,
                )
            )
        return result

    async def push(self, session_id: str, asked: PushRequest, typed: bool = False) -> PushResult:
        """Push the changes of a session on a git remote to a new branch there (``Origins.push``; ``typed``: the
        CLI's own user asks, so any remote is admitted); the layer is kept, and the push may be made again (to
        another branch, or with the lease)."""
        record = self.get(session_id)
        if record.source is None:
            raise InvalidRequestError(
                f"Session {session_id} works on a checkout of this machine: its changes are applied, not pushed.",
                hint=f"Apply them (cubicle apply {session_id}), then commit and push from the checkout.",
            )
        async with self._quiesced(session_id, "push when the turn has ended"):
            return await self.origins.push(self.workspaces, session_id, record.source, record.task, asked, typed)

    async def rewind(self, session_id: str, turn: int) -> Row:
        """Return the layer to checkpoint ``turn``; the transcript tells the model, the checkout is untouched."""
        async with self._quiesced(session_id, "rewind when the turn has ended") as recorder:
            await self.workspaces.in_thread(self.workspaces.rewind, session_id, turn)
            convo = recorder.convo
            convo.add_user_text(
                f"[cubicle] The files in /workspace were rewound to how they were at the end of turn {turn}; "
                "changes made after it are gone."
            )
            await recorder.save_transcript(convo)
            await recorder.emit(RewoundEvent(session_id=session_id, turn=turn))
            with contextlib.suppress(CubicleError, OSError):  # counted once here; a layer unread stays uncounted
                held = summarize(await self.workspaces.in_thread(self.workspaces.changes, session_id))
                self.store.update(session_id, recorder.epoch, unapplied=held.files + held.unlisted_applied)
        return self.get(session_id)

    async def discard(self, session_id: str) -> Row:
        """Drop the layer: the session's changes are gone; the checkout keeps what was applied."""
        async with self._quiesced(session_id, "cancel it first") as recorder:
            left = await asyncio.to_thread(self.workspaces.discard, session_id)
            if left:
                log.warning("discarding %s left %s (root-owned kernel files; root can remove them)", session_id, left)
            await recorder.emit(DiscardedEvent(session_id=session_id))
        return self.get(session_id)

    def _refuse_remote(self, session_id: str, done: str) -> None:
        """A session on a git remote has no checkout of the user's: its ``repo`` is the controller's own, shared
        by the sessions on the same commit, and nothing is written into it."""
        source = self.get(session_id).source
        if source is not None:
            raise InvalidRequestError(
                f"Session {session_id} works on {source.url}, not on a checkout: nothing is {done} from it.",
                hint=f"Take them as a patch (cubicle changes {session_id} --patch, GET .../changes?format=patch) or "
                f"push them to a branch (cubicle push {session_id} --branch NAME, POST .../push).",
            )

    @contextlib.asynccontextmanager
    async def _quiesced(self, session_id: str, advice: str) -> AsyncIterator[Recorder]:
        async with self._quiesce(session_id, advice) as recorder:
            try:
                yield recorder
            finally:  # the layer changes here: a listing read before is not one to share from now on
                self._listings.pop((session_id, False), None)
                self._listings.pop((session_id, True), None)
