"""The agent loop: the model asks for tools, the sandbox runs them, until the turn ends.

One turn: append the user's text; send history + tools; append the whole assistant
message; while it stops for ``tool_use``, run the calls (consecutive read-only calls
concurrently, everything else in order) and send all results in one user message,
in call order. ``max_tokens`` and ``pause_turn`` continue the turn; limits and
cancellation end it with a recorded reason. The transcript is always left valid for
the next turn: a tool_use never stays without its tool_result.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ContextOverflowError, ModelError, SandboxError, SetupError, TooManyEntriesError
from ..sandbox.sandboxes import Sandbox
from ..wire.events import (
    ContextEdited,
    EditReason,
    ErrorEvent,
    EventSink,
    FinishReason,
    SessionFinished,
    StatusEvent,
    TextDelta,
    ToolCall,
    ToolResult,
)
from ..wire.limits import Limits
from ..wire.policies import ContextPolicy
from ..wire.protocol import OutputFeed
from . import tools
from .compactor import Compactor
from .conversation import Conversation as Conversation  # re-exported: callers build turns from here
from .conversation import tool_result
from .liveoutput import LiveOutput, LiveView
from .model import MAX_REPORTED_TOKENS, Model, block_to_param, cleared_by_api
from .tools import Approver

if TYPE_CHECKING:
    from anthropic.types import Message

log = logging.getLogger(__name__)

CONTINUE_AFTER_MAX_TOKENS = "Your reply was cut off by the output token limit. Continue exactly where you stopped."
CUT_OFF_TOOL_CALL = (
    "This tool call was cut off by the output token limit before its input was complete, so it was not run. "
    "Send it again with less input: split a large file into several smaller writes or edits."
)


SaveTranscript = Callable[["Conversation"], Awaitable[None]]
"""Called after every change to the transcript, so it can be persisted before anything else happens."""


@dataclass
class TurnOutcome:
    reason: FinishReason
    detail: str = ""


Execute = Callable[[OutputFeed], Awaitable[tools.ToolOutcome]]
"""Runs one tool call (its arguments bound) and gives back its outcome; a command's output goes to the feed as it
comes."""
TurnEnd = Callable[[TurnOutcome], Awaitable[None]]
"""Called when a turn has ended, just before its ``session_finished``: the workspace's checkpoint goes here."""


async def run_call(
    sink: EventSink, session_id: str, call_id: str, name: str, arguments: Any, execute: Execute, live: LiveView
) -> tools.ToolOutcome:
    """One tool call, recorded: its ``tool_call`` event, ``execute`` (``tools.execute`` underneath: the same checks,
    limits and result text for every caller) with a command's output shown as it runs (``live``), its
    ``tool_result`` event. The model's calls and an MCP client's both come through here."""
    await sink.emit(ToolCall(session_id=session_id, id=call_id, name=name, input=arguments))
    output = LiveOutput(sink, session_id, call_id, live)
    try:
        outcome = await execute(output.feed)
    except BaseException:
        output.abandon()
        raise
    await output.close()
    await sink.emit(
        ToolResult(
            session_id=session_id,
            id=call_id,
            name=name,
            is_error=outcome.is_error,
            output=outcome.text,
            model_chars=len(outcome.model_text),
            duration_s=round(outcome.duration_s, 4),
            exit_code=outcome.exit_code,
        )
    )
    return outcome


@dataclass(frozen=True)
class Hooks:
    """What a turn calls out to, each optional: the approver asked before each change, the saving of the transcript
    after each change to it, and the end of the turn (just before its ``session_finished``)."""

    approver: Approver | None = None
    save_transcript: SaveTranscript | None = None
    on_turn_end: TurnEnd | None = None


NO_HOOKS = Hooks()


YIELD_EVERY_S = 0.005
"""How often a streaming reply lets the event loop serve others (its followers), at most: ~5 ms of latency, and
the deltas in between reach a follower as one batch."""


class Agent:
    """Runs turns of one session against a model and a sandbox, reporting to a sink."""

    def __init__(
        self,
        *,
        session_id: str,
        model: Model,
        sandbox: Sandbox,
        sink: EventSink,
        limits: Limits,
        system: str,
        context: ContextPolicy | None = None,
        hooks: Hooks = NO_HOOKS,
    ) -> None:
        self.session_id = session_id
        self._yielded = 0.0
        self.on_turn_end = hooks.on_turn_end
        self.model = model
        self.sandbox = sandbox
        self.sink = sink
        self.limits = limits
        self.system = system
        self.approver = hooks.approver
        self.save_transcript = hooks.save_transcript
        self._tool_definitions = tools.definitions()
        self.context = context or ContextPolicy()
        self.compactor = Compactor(session_id, model, system, self._tool_definitions, self.context, self._emit)
        self._answered: dict[str, dict[str, Any]] = {}
        """Results of the current step's calls as they finish, kept for a turn stopped mid-step."""

    async def run_turn(self, convo: Conversation) -> TurnOutcome:
        """Run one turn, answering the user message already in ``convo``; never raises for model, tool or sandbox problems."""
        await self._save(convo)
        await self._emit(StatusEvent(session_id=self.session_id, status="running"))
        try:
            async with asyncio.timeout(self.limits.wall_clock_s):
                await self.sandbox.prepare()  # a failed setup ends the turn before any token is spent
                outcome = await self._loop(convo)
        except TimeoutError:
            outcome = TurnOutcome("timeout", f"the turn ran longer than {self.limits.wall_clock_s}s")
            await self._stop_sandbox()
        except asyncio.CancelledError:
            outcome = TurnOutcome("cancelled", "the turn was cancelled")
            await self._stop_sandbox()
        except Exception as err:  # noqa: BLE001 - each kind becomes the turn's end; _failed logs the unknown ones
            outcome = await self._failed(err)
        if convo.answer_dangling(f"the turn stopped: {outcome.detail}", self._answered):
            await self._save(convo)
        if self.on_turn_end is not None:
            await self.on_turn_end(outcome)
        await self._emit(
            SessionFinished(
                session_id=self.session_id,
                reason=outcome.reason,
                steps=convo.steps,
                usage=convo.usage,
                detail=outcome.detail,
            )
        )
        return outcome

    async def _failed(self, err: Exception) -> TurnOutcome:
        """How a turn that raised ends: its reason, and an error event that says what went wrong."""
        if isinstance(err, TooManyEntriesError):
            outcome, kind = TurnOutcome("too_many_entries", str(err)), "too_many_entries"
        elif isinstance(err, SandboxError):
            outcome, kind = TurnOutcome("error", str(err)), "setup" if isinstance(err, SetupError) else "sandbox"
        elif isinstance(err, ModelError):
            outcome, kind = (
                TurnOutcome("error", str(err)),
                "context" if isinstance(err, ContextOverflowError) else "model",
            )
        else:
            log.exception("turn of session %s failed", self.session_id, exc_info=err)
            outcome, kind = TurnOutcome("error", f"internal error: {type(err).__name__}: {err}"), "internal"
        await self._emit(ErrorEvent(session_id=self.session_id, kind=kind, message=outcome.detail))
        return outcome

    async def _loop(self, convo: Conversation) -> TurnOutcome:
        steps = 0
        while (spent := self._spent(convo, steps)) is None:
            steps += 1
            convo.steps += 1
            reply = await self._ask(convo, steps)
            sent = len(convo.messages)
            convo.messages.append({"role": "assistant", "content": [block_to_param(b) for b in reply.content]})
            await self._save(convo)
            await self._count(convo, reply, steps)
            await self._cleared_by_api(reply, sent)
            self._answered.clear()
            if reply.stop_reason == "tool_use":
                await self._use_tools(convo, reply)
            elif reply.stop_reason in ("max_tokens", "model_context_window_exceeded"):
                await self._cut_off(convo, reply, steps)
            elif reply.stop_reason != "pause_turn":
                return TurnOutcome("end_turn")
        return spent

    def _spent(self, convo: Conversation, steps: int) -> TurnOutcome | None:
        """The turn's end when it has used its model requests or its tokens; None while it has some left."""
        if steps >= self.limits.max_steps:
            return TurnOutcome("max_steps", f"stopped after {steps} model requests")
        if convo.usage.total >= self.limits.token_budget:
            return TurnOutcome("token_budget", f"{convo.usage.total} tokens used of {self.limits.token_budget}")
        return None

    async def _use_tools(self, convo: Conversation, reply: Message) -> None:
        """A reply that calls tools: their results are the next message (and a command may have filled the
        workspace past its entries)."""
        uses = [b for b in reply.content if b.type == "tool_use"]
        convo.messages.append({"role": "user", "content": await self._run_tools(uses)})
        await self._save(convo)
        if any(use.name == "run_command" for use in uses):
            await self._check_names(convo)

    async def _cut_off(self, convo: Conversation, reply: Message, steps: int) -> None:
        """A reply cut off by its token limit, or by the context window (then the context is fitted at once)."""
        await self._after_max_tokens(convo, reply)
        await self._save(convo)
        if reply.stop_reason == "model_context_window_exceeded":
            await self._fit(convo, steps, "overflow")

    async def _check_names(self, convo: Conversation) -> None:
        """Stop the turn when the workspace holds more entries than the session may; the model reads why with the
        results it already has, in a note marked as Cubicle's, not the user's."""
        try:
            await self.sandbox.check_names()
        except TooManyEntriesError as err:
            convo.add_user_text(f"[Cubicle, not the user] The turn was stopped: {err}")
            await self._save(convo)
            raise

    async def _ask(self, convo: Conversation, step: int) -> Message:
        """The model's reply to the view of ``convo``; a prompt the API finds too long is compacted once and resent."""
        await self._fit(convo, step, "threshold")
        replies = convo.replies
        for attempt in (1, 2):
            try:
                shown = convo.view()
                return await self.model.reply(self.system, self._tool_definitions, shown, self._on_text, turn=replies)
            except ContextOverflowError:
                if attempt == 2 or not await self._fit(convo, step, "overflow"):
                    raise
        raise AssertionError("unreachable")

    async def _fit(self, convo: Conversation, step: int, reason: EditReason) -> bool:
        if self.context.strategy == "off" or not await self.compactor.fit(convo, step, reason):
            return False
        await self._save(convo)
        return True

    async def _count(self, convo: Conversation, reply: Message, step: int) -> None:
        await self._emit(convo.count(self.session_id, step, reply.usage, self.context.window))

    async def _cleared_by_api(self, reply: Message, sent: int) -> None:
        """What the API cleared of the request itself (the server strategy), as one context_edited event."""
        cleared = cleared_by_api(reply)
        if cleared is None:
            return
        used = reply.usage
        shown = used.input_tokens + (used.cache_read_input_tokens or 0) + (used.cache_creation_input_tokens or 0)
        after = min(max(0, shown), MAX_REPORTED_TOKENS)
        await self._emit(
            ContextEdited(
                session_id=self.session_id,
                kind="server",
                reason="threshold",
                upto=sent,
                tokens_before=after + cleared,
                tokens_after=after,
                duration_s=0.0,
            )
        )

    async def _after_max_tokens(self, convo: Conversation, reply: Message) -> None:
        """Run the complete calls; a cut-off last call gets an error asking for less; plain text is continued."""
        last = reply.content[-1] if reply.content else None
        cut = last if last is not None and last.type == "tool_use" else None
        complete = [b for b in reply.content if b.type == "tool_use" and b is not cut]
        content = await self._run_tools(complete)
        if cut is not None:
            content.append(tool_result(cut.id, CUT_OFF_TOOL_CALL, True))
        else:
            content.append({"type": "text", "text": CONTINUE_AFTER_MAX_TOKENS})
        convo.messages.append({"role": "user", "content": content})

    async def _run_tools(self, uses: list[Any]) -> list[dict[str, Any]]:
        """Consecutive read-only calls run together, the rest one by one; results come back in call order."""
        results: list[dict[str, Any]] = []
        batch: list[Any] = []
        for use in uses:
            if tools.is_read_only(use.name):
                batch.append(use)
                continue
            results += await self._run_batch(batch)
            batch = []
            results += await self._run_batch([use])
        results += await self._run_batch(batch)
        return results

    async def _run_batch(self, uses: list[Any]) -> list[dict[str, Any]]:
        if not uses:
            return []
        return list(await asyncio.gather(*(self._run_one(use) for use in uses)))

    async def _run_one(self, use: Any) -> dict[str, Any]:
        def execute(on_output: OutputFeed) -> Awaitable[tools.ToolOutcome]:
            return tools.execute(use.name, use.input, self.sandbox, self.limits, self.approver, on_output)

        live = LiveView(self.limits.live_output_bytes)
        outcome = await run_call(self.sink, self.session_id, use.id, use.name, use.input, execute, live)
        self._answered[use.id] = block = tool_result(use.id, outcome.model_text, outcome.is_error)
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise asyncio.CancelledError  # the sandbox stopped the call and gave back its output; now stop the turn
        return block

    async def _save(self, convo: Conversation) -> None:
        if self.save_transcript is not None:
            await self.save_transcript(convo)

    async def _on_text(self, text: str) -> None:
        await self._emit(TextDelta(session_id=self.session_id, text=text))
        # The deltas of one socket read arrive without a pause: let the followers (and every other request) in
        # every few milliseconds, or the session's own viewers see its text only when the reply has ended. Not
        # after every delta: each yield wakes every follower for one event instead of a batch of them.
        now = time.monotonic()
        if now - self._yielded >= YIELD_EVERY_S:
            self._yielded = now
            await asyncio.sleep(0)

    async def _emit(self, event: Any) -> None:
        await self.sink.emit(event)

    async def _stop_sandbox(self) -> None:
        """Kill whatever runs in the sandbox; the next call starts a fresh container on the same workspace."""
        with contextlib.suppress(Exception):
            await asyncio.shield(self.sandbox.stop())
