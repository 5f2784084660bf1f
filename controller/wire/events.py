"""Events: everything that happens in a session, in one tagged union.

The agent emits them through an ``EventSink``; the CLI prints them, the API persists
and streams them. Each carries the session id, a per-session sequence number (set by
whoever persists it) and a timestamp.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

FinishReason = Literal["end_turn", "max_steps", "token_budget", "timeout", "too_many_entries", "cancelled", "error"]
Status = Literal["running", "idle", "interrupted", "cancelled", "failed"]
EditReason = Literal["threshold", "overflow", "manual"]


class Usage(BaseModel):
    """Token counts summed over a session; ``total`` is what the token budget limits."""

    model_config = ConfigDict(extra="forbid")

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens

    def add(self, other: Any) -> None:
        """Add an SDK ``Usage`` (or anything with the same attributes); missing counts are zero."""
        for name in type(self).model_fields:
            setattr(self, name, getattr(self, name) + (getattr(other, name, 0) or 0))


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid")

    session_id: str
    seq: int = 0
    ts: float = Field(default_factory=time.time)


class SessionStarted(_Event):
    """A session began: its repository, its first task and its model."""

    type: Literal["session_started"] = "session_started"
    repo: str
    task: str
    model: str


class UserMessage(_Event):
    """A follow-up message from the user, at the start of the turn it begins (the first task is in session_started)."""

    type: Literal["user_message"] = "user_message"
    text: str


class TextDelta(_Event):
    """A piece of the model's text, as it streams."""

    type: Literal["text"] = "text"
    text: str


class ToolCall(_Event):
    """The model asked for a tool call (its input as the model wrote it, capped)."""

    type: Literal["tool_call"] = "tool_call"
    id: str
    name: str
    input: Any
    input_not_kept: int = Field(
        0,
        description="Bytes (JSON) of arguments the server did not store, because the session's stored events reached "
        "their cap (a write_file's content); each dropped value says so in its place.",
    )


class ToolResult(_Event):
    """A tool call's result: what the model is shown, and whether it is an error."""

    type: Literal["tool_result"] = "tool_result"
    id: str
    name: str
    is_error: bool
    output: str = Field(description="The full output, up to the event cap.")
    model_chars: int = Field(description="How many characters of it the model saw (head + tail).")
    duration_s: float
    exit_code: int | None = Field(None, description="run_command's exit code; None for other tools and failed calls.")
    output_not_kept: int = Field(
        0,
        description="Characters of output the server did not store, because the session's stored events reached "
        "their cap (CUBICLE_SESSION_EVENTS_MB); the model saw its share as usual.",
    )


class CommandOutput(_Event):
    """Output of a running command, as it comes (stdout and stderr in the order they came; untrusted text)."""

    type: Literal["command_output"] = "command_output"
    tool_use_id: str = Field(description="The id of the tool_call whose command printed it.")
    text: str = Field(description="Decoded as it came; a character is never split between two events.")
    truncated: bool = Field(
        False,
        description="The command's live output reached its cap here (live_output_bytes): no more follows, "
        "though the command goes on and its tool_result has the output the model saw.",
    )


class UsageEvent(_Event):
    """Tokens used by the last model request, by the turn and by the session."""

    type: Literal["usage"] = "usage"
    step: int
    turn: Usage
    session: Usage
    prompt_tokens: int = Field(0, description="Size of the prompt this step sent (input plus cache reads and writes).")
    context_window: int = Field(0, description="The context window the session's policy assumes.")


class ContextEdited(_Event):
    """The model's view of the transcript was edited (the stored transcript never is)."""

    type: Literal["context_edited"] = "context_edited"
    kind: Literal["mask", "compact", "trim", "server"] = Field(
        description="server: the API cleared old tool results itself (the server strategy), in the request just sent."
    )
    reason: EditReason
    upto: int = Field(description="Messages before this index were masked, or compacted away (server: the request's).")
    tokens_before: int
    tokens_after: int
    duration_s: float


class StatusEvent(_Event):
    """The session's status changed (running, idle, interrupted, cancelled, failed)."""

    type: Literal["status"] = "status"
    status: Status
    detail: str = ""


class SessionFinished(_Event):
    """A turn ended: why (the finish reason), after how many steps and tokens."""

    type: Literal["session_finished"] = "session_finished"
    reason: FinishReason
    steps: int
    usage: Usage
    detail: str = ""


class ChangeSummary(BaseModel):
    """What a session's workspace layer holds, counted (``GET /changes`` lists it path by path)."""

    files: int = Field(0, description="Changed paths that apply would write.")
    added: int = 0
    modified: int = 0
    deleted: int = 0
    lines_added: int = 0
    lines_removed: int = 0
    held_back: int = Field(0, description="Changed paths apply skips: under .git, unsafe, or ignored.")
    build_inputs: int = Field(
        0,
        description="Of those held back, paths of the build context the environment's Dockerfile copies whole: "
        "applied only with build_inputs (the next environment build runs them as root).",
    )
    truncated_at: int | None = Field(
        None,
        description="Set when the layer holds more entries than the session's names limit (this number): the walk "
        "stopped there, so the counts are partial, and the layer can be rewound or discarded but not applied.",
    )
    unlisted: int = Field(
        0,
        description="Changes found but left out of a bounded listing (the counts above are of the listed ones); "
        "apply judges them too. Always 0 in a turn's changes event, which counts every change.",
    )
    unlisted_applied: int = Field(0, description="Of those left out, the changes an apply writes.")


class ChangesEvent(_Event):
    """A turn ended: the layer's changes so far, and the checkpoint that keeps them."""

    type: Literal["changes"] = "changes"
    summary: ChangeSummary
    checkpoint: int | None = Field(None, description="Rewind to this number to get these files back.")


MAX_LISTED_PATHS = 1000
"""An applied or reverted event names at most this many paths (the apply's own record keeps them all)."""


class AppliedEvent(_Event):
    """The changes were applied to the checkout: the apply's number and the paths it wrote."""

    type: Literal["applied"] = "applied"
    apply: int = Field(description="The apply's number (revert undoes the newest).")
    paths: list[str] = Field(description=f"The paths written: the first {MAX_LISTED_PATHS}.")
    skipped: int = Field(description="Changed paths not applied (under .git, unsafe, or ignored).")
    more: int = Field(0, description="Paths written beyond those listed.")
    left: int | None = Field(None, description="Changed paths a plain apply would still write (the session's rest).")


class RevertedEvent(_Event):
    """An apply was reverted: the checkout is as it was before it."""

    type: Literal["reverted"] = "reverted"
    apply: int
    paths: list[str] = Field(description=f"The paths restored: the first {MAX_LISTED_PATHS}.")
    more: int = Field(0, description="Paths restored beyond those listed.")


class RewoundEvent(_Event):
    """The layer's files were returned to the end of a turn."""

    type: Literal["rewound"] = "rewound"
    turn: int


class DiscardedEvent(_Event):
    """The session's layer and checkpoints were dropped (what was applied stays)."""

    type: Literal["discarded"] = "discarded"


class SetupOutput(_Event):
    """Output of the environment's preparation: the image's pull and build (``build``) or the setup command
    (``setup``)."""

    type: Literal["setup_output"] = "setup_output"
    phase: Literal["fetch", "environment", "build", "setup"] = Field(
        description="fetch: a git remote's files fetched, before the first turn (the URL, the commit, the size); "
        "environment: notes on the definition (ignored keys); build: the image (its pull when the engine lacks "
        "it, then its build); setup: the command."
    )
    text: str = Field(description="One or more whole lines, as the build or the command printed them (untrusted).")


class ErrorEvent(_Event):
    """Something failed without ending the session: its kind and a message saying what to do."""

    type: Literal["error"] = "error"
    kind: str
    message: str


Event = Annotated[
    SessionStarted
    | UserMessage
    | TextDelta
    | ToolCall
    | CommandOutput
    | ToolResult
    | UsageEvent
    | ContextEdited
    | StatusEvent
    | SessionFinished
    | ChangesEvent
    | AppliedEvent
    | RevertedEvent
    | RewoundEvent
    | DiscardedEvent
    | SetupOutput
    | ErrorEvent,
    Field(discriminator="type"),
]
EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)


class EventSink(Protocol):
    """Receives every event of a session, in order."""

    async def emit(self, event: Event) -> None: ...


class ListSink:
    """Keeps events in memory (tests, and the CLI's summary)."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    async def emit(self, event: Event) -> None:
        event.seq = len(self.events) + 1
        self.events.append(event)
