"""The recorder: a session's event sink that commits before anyone can see.

Each event, the session counters it changes (usage, steps, status) and every change to
the transcript are written to the store first; only then are the session's followers
woken. A controller that dies therefore loses nothing it has streamed or acknowledged.
"""

from __future__ import annotations

from typing import Any

from pydantic_core import to_json

from ..agent.conversation import Conversation
from ..wire.events import (
    AppliedEvent,
    ChangesEvent,
    CommandOutput,
    DiscardedEvent,
    Event,
    EventSink,
    FinishReason,
    RewoundEvent,
    SessionFinished,
    Status,
    TextDelta,
    ToolCall,
    ToolResult,
    UsageEvent,
)
from .feed import Feed
from .store import Store

STATUS_AFTER: dict[FinishReason, Status] = {
    "end_turn": "idle",
    "max_steps": "idle",
    "token_budget": "idle",
    "timeout": "idle",
    "too_many_entries": "idle",
    "cancelled": "cancelled",
    "error": "failed",
}  # fmt: skip - a table


SMALL_ARGUMENTS = 4096
"""A tool call's arguments up to this size (JSON) are stored whole, past the cap too."""
SHORT_ARGUMENT = 1024
"""Past the cap, a tool call keeps its arguments whose name and value (JSON) are this short, up to SMALL_ARGUMENTS."""


def _result_kept(event: ToolResult, room: float) -> ToolResult:
    """A tool result, its output dropped if it does not fit in ``room`` (JSON takes at most 6 bytes a character:
    far from the cap, nothing is counted)."""
    if not event.output or 6 * len(event.output) + 2 <= room or len(to_json(event.output)) <= room:
        return event
    return event.model_copy(update={"output": "", "output_not_kept": len(event.output)})


def _call_kept(event: ToolCall, room: float) -> ToolCall:
    """A tool call, only its short arguments kept if they are not small and do not fit in ``room``."""
    encoded = len(to_json(event.input))
    if encoded <= SMALL_ARGUMENTS or encoded <= room:
        return event
    kept, dropped = _short_arguments(event.input)
    return event.model_copy(update={"input": kept, "input_not_kept": dropped})


def _short_arguments(arguments: Any) -> tuple[dict[str, Any], int]:
    """The arguments a tool call keeps past the cap (a path, a flag), and the bytes of JSON it drops; each
    dropped value says so in its place, and a dropped name goes with its value."""
    kept: dict[str, Any] = {}
    dropped = total = 0
    for name, value in arguments.items() if isinstance(arguments, dict) else [("", arguments)]:
        size = len(to_json(value))
        if len(name) <= 64 and size <= SHORT_ARGUMENT and total + size <= SMALL_ARGUMENTS:
            kept[name] = value
            total += size
            continue
        dropped += size
        if len(name) <= 64 and total < SMALL_ARGUMENTS:
            kept[name] = f"({size} bytes not stored: the session's stored events reached the server's cap)"
            total += 100
        else:
            dropped += len(name)  # the name goes too
    return kept, dropped


OUTPUT_SHARE = 7 / 8
"""Tool output is stored while a session's events stay under this share of its cap; the rest of the cap is left
for the metadata of the events after it (a few hundred bytes each), which is always stored."""


class Recorder:
    """Writes one session's events, counters and transcript to the store, then wakes its followers."""

    def __init__(
        self, store: Store, feed: Feed, session_id: str, convo: Conversation, events_cap: int | None = None
    ) -> None:
        self.store = store
        self.events_cap = events_cap
        """Bytes of stored events past which tool results keep their metadata but not their output."""
        self._stored: int | None = None
        """Bytes of the session's stored events, counted from the store when the first tool result needs it."""
        self._live_full = False
        """A command's live output did not fit under the cap: no more of it is stored (this controller's run)."""
        self.feed = feed
        self.session_id = session_id
        self.convo = convo
        self.saved = len(convo.messages)
        """How many of the transcript's messages the store holds (the last of them may have changed since)."""
        self.saved_edits = len(convo.edits)
        self.interrupting = False
        """Set when the controller stops: a turn cancelled then is ``interrupted``, to be continued later."""
        self.epoch: int | None = None
        """The claim this process holds on the session (see ``Leases.claim``): every write names it, and fails once
        another controller has claimed the session since. None: writes between turns, not fenced."""

    async def emit(self, event: Event) -> None:
        fields: dict[str, Any] | None = None  # what the event changes in the session's row, written with it
        if isinstance(event, UsageEvent):
            fields = {"usage": event.session, "steps": self.convo.steps}
        elif isinstance(event, ChangesEvent):
            fields = {"unapplied": event.summary.files + event.summary.unlisted_applied}
        elif isinstance(event, AppliedEvent) and event.left is not None:
            fields = {"unapplied": event.left}
        elif isinstance(event, DiscardedEvent | RewoundEvent):  # a rewind's files are counted after it (Sessions)
            fields = {"unapplied": 0 if isinstance(event, DiscardedEvent) else None}
        elif isinstance(event, SessionFinished):
            fields = {
                "status": self.status_after(event.reason),
                "finish_reason": event.reason,
                "detail": event.detail,
                "usage": event.usage,
                "steps": event.steps,
                "lease_expires": 0,  # the turn's lease ends with it
            }
        stored = self._bounded(event)
        if stored is None:  # not stored past the cap (the model's text): the caller's view still gets it
            return
        written = self.store.append_event(stored, self.epoch, fields)
        if self._stored is not None:
            self._stored += written
        event.seq = stored.seq
        self.wake()

    @property
    def stored(self) -> int:
        """Bytes of the session's stored events."""
        if self._stored is None:
            self._stored = self.store.event_bytes(self.session_id)
        return self._stored

    def _bounded(self, event: Event) -> Event | None:
        """The event as it is stored, None for none. Past the session's cap a tool result keeps everything but its
        output, a tool call its short arguments, the model's text goes to the transcript only, and a command's live
        output is not stored (nor shown: the result has it)."""
        if self.events_cap is None or not isinstance(event, ToolResult | ToolCall | TextDelta | CommandOutput):
            return event
        room = self.events_cap * OUTPUT_SHARE - self.stored
        if isinstance(event, TextDelta):
            return event if room > 0 else None
        if isinstance(event, CommandOutput):  # once one did not fit, none is stored: a gap would mislead
            self._live_full = self._live_full or len(to_json(event.text)) > room
            return None if self._live_full else event
        return _result_kept(event, room) if isinstance(event, ToolResult) else _call_kept(event, room)

    async def save_transcript(self, convo: Conversation) -> None:
        """Write what changed since the last save: new messages, the last saved one (a user text may have merged
        into it), and new context edits, so a reload rebuilds exactly the view the model would have been sent."""
        self.store.save_messages(self.session_id, convo.messages, max(0, self.saved - 1), self.epoch)
        self.saved = len(convo.messages)
        if len(convo.edits) > self.saved_edits:
            self.store.add_edits(self.session_id, convo.edits, self.saved_edits, self.epoch)
            self.saved_edits = len(convo.edits)

    def mark_failed(self, detail: str) -> None:
        """The turn failed so badly that its end could not be recorded as an event; keep at least the status."""
        self.store.update(
            self.session_id, self.epoch, status="failed", finish_reason="error", detail=detail, lease_expires=0
        )

    def wake(self) -> None:
        """Wake the session's followers without an event: its turn ended, or it was unloaded."""
        self.feed.notify(self.session_id)

    def status_after(self, reason: FinishReason) -> Status:
        return "interrupted" if self.interrupting and reason == "cancelled" else STATUS_AFTER[reason]


class Tee:
    """A session's events: committed by its recorder first (the API and ``cubicle sessions`` see them), then shown."""

    def __init__(self, recorder: Recorder, view: EventSink) -> None:
        self.recorder = recorder
        self.view = view
        self.view_failed: BaseException | None = None

    async def emit(self, event: Event) -> None:
        """The recorder's failure is the turn's; the view's (a closed pipe, a terminal gone) only ends the view:
        the turn goes on and records its end."""
        await self.recorder.emit(event)
        if self.view_failed is None:
            try:
                await self.view.emit(event)
            except (OSError, ValueError, SystemExit) as err:  # a closed pipe or file; rich turns EPIPE into SystemExit
                self.view_failed = err
