"""Keeps the model's view of a conversation inside its context window, and says so when it edits it.

Before each request the loop asks ``fit``: it applies what ``context.plan`` proposes — a mask,
or a compaction whose summary the model writes from the same cached prefix (no tools allowed) —
and records each edit in the conversation (the stored transcript is never changed) and as a
``context_edited`` event. A summary that fails (the API keeps refusing, or answers nothing
usable) becomes a plain trim of the same messages, with an error event of kind ``context``;
the turn goes on.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import ModelError
from ..wire.events import ContextEdited, EditReason, ErrorEvent, Event
from ..wire.policies import ContextPolicy, Edit
from .context import plan, tokens
from .conversation import Conversation
from .model import Model

SUMMARY_INSTRUCTION = """Context is running out, so the conversation so far will be replaced by your summary. Write it now, \
for yourself, as the only record of what happened. Do not call tools. Use these sections:
1. Task and constraints: what the user asked, in their words where it matters.
2. Files changed: each file you wrote or edited and why.
3. Commands and tests: what you ran and what came out (failures verbatim, short).
4. Errors and fixes: what went wrong and what fixed it.
5. Dead ends: what you tried that did not work, so you do not try it again.
6. Next step: exactly what you were about to do."""

Emit = Callable[[Event], Awaitable[None]]


class Compactor:
    """Applies context edits to one session's conversation as its policy asks."""

    def __init__(
        self, session_id: str, model: Model, system: str, tools: list[dict[str, Any]], policy: ContextPolicy, emit: Emit
    ) -> None:
        self.session_id = session_id
        self.model = model
        self.system = system
        self.tools = tools
        self.policy = policy
        self._emit = emit

    async def fit(self, convo: Conversation, step: int, reason: EditReason = "threshold") -> bool:
        """Edit ``convo``'s view until the plan needs nothing more; True when anything was edited.

        ``reason="overflow"`` (the API said the prompt was too long) and ``"manual"`` (the user asked)
        force one compaction first, whatever the thresholds say.
        """
        edited, force = False, reason in ("overflow", "manual")
        while (edit := self._plan(convo, force)) is not None:
            started = time.monotonic()
            if edit.kind == "compact":
                edit = await self._summarized(convo, edit, step)
            after = tokens(convo.messages, [*convo.edits, edit], convo.measure)
            convo.edits.append(edit.model_copy(update={"tokens_after": after}))
            await self._emit(
                ContextEdited(
                    session_id=self.session_id,
                    kind=edit.kind,
                    reason=reason,
                    upto=edit.upto,
                    tokens_before=edit.tokens_before,
                    tokens_after=after,
                    duration_s=round(time.monotonic() - started, 4),
                )
            )
            edited, force = True, False
        return edited

    def _plan(self, convo: Conversation, force: bool) -> Edit | None:
        return plan(convo.messages, convo.edits, self.policy, self.model.max_tokens, force, convo.measure)

    async def _summarized(self, convo: Conversation, edit: Edit, step: int) -> Edit:
        """The compaction with the model's summary, or a trim of the same messages when no summary comes."""
        try:
            reply = await self.model.summarize(
                self.system, self.tools, convo.view(), SUMMARY_INSTRUCTION, turn=convo.replies
            )
            # a summary's tokens count toward the session's usage and budget like any other request
            await self._emit(convo.count(self.session_id, step, reply.usage, self.policy.window))
            summary = "".join(b.text for b in reply.content if b.type == "text").strip()
            if not summary:
                raise ModelError("the summary came back empty")
        except ModelError as err:
            message = f"The context summary failed ({err}); the older turns were trimmed without one."
            await self._emit(ErrorEvent(session_id=self.session_id, kind="context", message=message))
            return edit.model_copy(update={"kind": "trim"})
        return edit.model_copy(update={"summary": summary})
