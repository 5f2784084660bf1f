"""A session's conversation: the transcript as sent to the model, the context edits on its view, and totals.

The transcript is only ever appended to (a user text may merge into a trailing user message,
so roles keep alternating); what the model is shown is ``context.view(messages, edits)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..wire.events import Usage, UsageEvent
from ..wire.policies import Edit
from .context import Measure, view


@dataclass
class Conversation:
    """What persists across turns: the whole transcript, the edits of the model's view of it, and session totals."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    steps: int = 0
    edits: list[Edit] = field(default_factory=list)
    measure: Measure = field(default_factory=Measure, repr=False, compare=False)
    """Remembered message sizes, so keeping the view in the window costs each step only what it added."""

    @property
    def replies(self) -> int:
        """How many replies the whole transcript holds: the turn number the next request answers (the view may
        hold fewer, once older turns are compacted)."""
        return sum(1 for m in self.messages if m["role"] == "assistant")

    def count(self, session_id: str, step: int, used: Any, window: int) -> UsageEvent:
        """Add a reply's usage to the session's totals; the event that reports both."""
        turn = Usage()
        turn.add(used)
        self.usage.add(used)
        prompt = turn.input_tokens + turn.cache_read_input_tokens + turn.cache_creation_input_tokens
        return UsageEvent(
            session_id=session_id,
            step=step,
            turn=turn,
            session=self.usage.model_copy(),
            prompt_tokens=prompt,
            context_window=window,
        )

    def view(self) -> list[dict[str, Any]]:
        """What the model is sent: the transcript with the context edits applied."""
        return view(self.messages, self.edits, self.measure)

    def add_user_text(self, text: str) -> None:
        """A new user message, merged into a trailing user message so roles keep alternating."""
        block = {"type": "text", "text": text}
        if self.messages and self.messages[-1]["role"] == "user":
            last = self.messages[-1]
            content = last["content"]
            last["content"] = [*([{"type": "text", "text": content}] if isinstance(content, str) else content), block]
        else:
            self.messages.append({"role": "user", "content": [block]})

    def answer_dangling(self, why: str, answered: dict[str, dict[str, Any]] | None = None) -> bool:
        """Answer a trailing assistant message's tool calls, so the history stays valid for the API.

        A call in ``answered`` (it finished, or was stopped with its output) keeps that result;
        any other gets an error result saying it was interrupted.
        """
        if not self.messages or self.messages[-1]["role"] != "assistant":
            return False
        dangling = [b for b in self.messages[-1]["content"] if b.get("type") == "tool_use"]
        if dangling:
            text = f"Interrupted before it returned a result ({why}); it may have run in part."
            known = answered or {}
            blocks = [known.get(b["id"]) or tool_result(b["id"], text, True) for b in dangling]
            self.messages.append({"role": "user", "content": blocks})
        return bool(dangling)


def tool_result(tool_use_id: str, text: str, is_error: bool) -> dict[str, Any]:
    """A tool_result block; empty output says so, since an empty result reads as nothing happened."""
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_use_id, "content": text or "(no output)"}
    if is_error:
        block["is_error"] = True
    return block
