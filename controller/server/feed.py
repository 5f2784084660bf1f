"""The event feed: a session's stored events, replayed and then followed live.

Events reach the feed only after the store has committed them (see ``recorder``), so
whatever a follower sees survives a crash. A follower is woken by ``notify``, or checks
again after ``poll_s`` at the latest; it stops when it has read everything and no turn
is running.

Followers of one session usually read the same events at the same moment (one notify wakes
them all), so a read is kept on the wake-up it happened under and shared by every follower
that reads from the same point before the next notify: one store read, and one encoding of
each event, per wake-up instead of one per follower.

A follower that has just been sent a group reads again no sooner than ``interval_s`` later (unless
it is catching up on a full read): an event after a quiet spell goes out at once, and a busy
session's events go out in at most one group per interval per follower instead of one per commit. Each group is a
write to every follower's socket on the loop that also runs the turn, so with many followers
the writes, not the events, are what following costs.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Callable

from ..wire.events import Event
from .store import Store

READ_EVENTS = 500
"""Events one read of the store returns at most: a follower with more to catch up on reads again at once."""


class Batch(list[Event]):
    """Events read from the store together, shared by the followers that read them under the same wake-up."""

    def __init__(self, events: list[Event]) -> None:
        super().__init__(events)
        self.encoded: bytes | None = None
        """What the first follower to write the batch made of it (the API's SSE frames), for the others to reuse."""
        self.due: float | None = None
        """When its followers read again: one interval after the first of them was done with it (loop time)."""


class _Changed(asyncio.Event):
    """A session's wake-up, with the reads made under it (by the sequence number read after): valid until a
    notify sets it and drops it. Followers in step make two: the new events, then none after them."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: dict[int, Batch] = {}


class Feed:
    """Replay-then-live iterators over each session's events, and the wake-up that drives them."""

    def __init__(self, store: Store, running: Callable[[str], bool], poll_s: float, interval_s: float = 0.0) -> None:
        self._store = store
        self._running = running
        self._poll_s = poll_s
        self._interval_s = interval_s
        self._changed: weakref.WeakValueDictionary[str, _Changed] = weakref.WeakValueDictionary()
        """One event per session that someone waits on; it goes away with its last follower."""

    def notify(self, session_id: str) -> None:
        """Wake everyone following the session: there are new events, or its turn has ended."""
        changed = self._changed.pop(session_id, None)
        if changed is not None:
            changed.set()

    def notify_all(self) -> None:
        """Wake every follower: events may have been stored that no notify announced (another process's)."""
        for session_id in list(self._changed):
            self.notify(session_id)

    async def follow(self, session_id: str, after: int = 0) -> AsyncIterator[Event]:
        """Every event of the session after sequence number ``after``, then each new one as it is stored."""
        async for batch in self.batches(session_id, after):
            for event in batch:
                yield event

    async def batches(self, session_id: str, after: int = 0) -> AsyncGenerator[Batch, None]:
        """``follow``'s events, in the groups in which they were read from the store (never an empty one).

        Events stored between two wake-ups come as one group, so a follower can send them in one write; after
        a group, the next is read no sooner than ``interval_s`` later, so a busy session's events gather.
        """
        loop = asyncio.get_running_loop()
        due = 0.0
        while True:
            if (wait := due - loop.time()) > 0:
                # Followers of the same group share its deadline: they wake together and still share one read.
                await asyncio.sleep(wait)
            changed = self._waiter(session_id)  # taken before reading, so a change in between is not missed
            # Asked before reading: a turn that ends in between has stored its last event (with its end), and the
            # read shows it; asked after, another process's last events could be stored after an empty read.
            running = self._running(session_id)
            events = self._read(changed, session_id, after)
            if not events and not running:
                # The shared empty read may predate the end: another process stores its last events and its
                # end before its notify reaches this one. Only a read made now may end the stream.
                events = Batch(self._store.events_after(session_id, after, READ_EVENTS))
                if not events:
                    return
            if events:
                after = events[-1].seq
                yield events
                if len(events) >= READ_EVENTS:
                    continue  # catching up (a replay, a slow follower): no wait, there is more already
                if events.due is None:
                    events.due = loop.time() + self._interval_s
                due = events.due
                continue
            try:
                await asyncio.wait_for(changed.wait(), self._poll_s)
            except TimeoutError:
                changed.reads.clear()  # a poll reads the store again: what was stored without a notify shows now

    def _read(self, changed: _Changed, session_id: str, after: int) -> Batch:
        """The events after ``after``: the read another follower made from there under this wake-up, or a new one.

        Every event this process stores is followed by a notify, which replaces the wake-up, so a shared read
        misses nothing a read of the store would show; an event stored without one (by another process) shows
        at the next poll, which drops the shared reads, as it did before they were shared.
        """
        events = changed.reads.get(after)
        if events is None:
            events = changed.reads[after] = Batch(self._store.events_after(session_id, after, READ_EVENTS))
        return events

    def _waiter(self, session_id: str) -> _Changed:
        changed = self._changed.get(session_id)
        if changed is None:
            changed = self._changed[session_id] = _Changed()
        return changed
