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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from anthropic.types import Message

from . import tools
from .config import Limits
from .errors import ModelError, SandboxError
from .events import (
    ErrorEvent,
    EventSink,
    FinishReason,
    SessionFinished,
    StatusEvent,
    TextDelta,
    ToolCall,
    ToolResult,
    Usage,
    UsageEvent,
)
from .model import Model, block_to_param
from .sandbox import Sandbox
from .tools import Approver

log = logging.getLogger(__name__)

CONTINUE_AFTER_MAX_TOKENS = "Your reply was cut off by the output token limit. Continue exactly where you stopped."
CUT_OFF_TOOL_CALL = (
    "This tool call was cut off by the output token limit before its input was complete, so it was not run. "
    "Send it again with less input: split a large file into several smaller writes or edits."
)


@dataclass
class Conversation:
    """What persists across turns: the transcript as sent to the model, and session totals."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    steps: int = 0

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
            blocks = [known.get(b["id"]) or _result(b["id"], text, True) for b in dangling]
            self.messages.append({"role": "user", "content": blocks})
        return bool(dangling)


SaveTranscript = Callable[["Conversation"], Awaitable[None]]
"""Called after every change to the transcript, so it can be persisted before anything else happens."""


@dataclass
class TurnOutcome:
    reason: FinishReason
    detail: str = ""


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
        approver: Approver | None = None,
        save_transcript: SaveTranscript | None = None,
    ) -> None:
        self.session_id = session_id
        self.model = model
        self.sandbox = sandbox
        self.sink = sink
        self.limits = limits
        self.system = system
        self.approver = approver
        self.save_transcript = save_transcript
        self._tool_definitions = tools.definitions()
        self._answered: dict[str, dict[str, Any]] = {}
        """Results of the current step's calls as they finish, kept for a turn stopped mid-step."""

    async def run_turn(self, convo: Conversation) -> TurnOutcome:
        """Run one turn, answering the user message already in ``convo``; never raises for model, tool or sandbox problems."""
        await self._save(convo)
        await self._emit(StatusEvent(session_id=self.session_id, status="running"))
        try:
            async with asyncio.timeout(self.limits.wall_clock_s):
                outcome = await self._loop(convo)
        except TimeoutError:
            outcome = TurnOutcome("timeout", f"the turn ran longer than {self.limits.wall_clock_s}s")
            await self._stop_sandbox()
        except asyncio.CancelledError:
            outcome = TurnOutcome("cancelled", "the turn was cancelled")
            await self._stop_sandbox()
        except SandboxError as err:
            outcome = TurnOutcome("error", str(err))
            await self._emit(ErrorEvent(session_id=self.session_id, kind="sandbox", message=str(err)))
        except ModelError as err:
            outcome = TurnOutcome("error", str(err))
            await self._emit(ErrorEvent(session_id=self.session_id, kind="model", message=str(err)))
        except Exception as err:
            log.exception("turn of session %s failed", self.session_id)
            outcome = TurnOutcome("error", f"internal error: {type(err).__name__}: {err}")
            await self._emit(ErrorEvent(session_id=self.session_id, kind="internal", message=outcome.detail))
        if convo.answer_dangling(f"the turn stopped: {outcome.detail}", self._answered):
            await self._save(convo)
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

    async def _loop(self, convo: Conversation) -> TurnOutcome:
        steps = 0
        while True:
            if steps >= self.limits.max_steps:
                return TurnOutcome("max_steps", f"stopped after {steps} model requests")
            if convo.usage.total >= self.limits.token_budget:
                return TurnOutcome("token_budget", f"{convo.usage.total} tokens used of {self.limits.token_budget}")
            steps += 1
            convo.steps += 1
            replies = sum(1 for m in convo.messages if m["role"] == "assistant")
            reply = await self.model.reply(
                self.system, self._tool_definitions, convo.messages, self._on_text, turn=replies
            )
            convo.messages.append({"role": "assistant", "content": [block_to_param(b) for b in reply.content]})
            await self._save(convo)
            await self._count(convo, reply, steps)
            self._answered.clear()
            if reply.stop_reason == "tool_use":
                uses = [b for b in reply.content if b.type == "tool_use"]
                convo.messages.append({"role": "user", "content": await self._run_tools(uses)})
                await self._save(convo)
            elif reply.stop_reason == "max_tokens":
                await self._after_max_tokens(convo, reply)
                await self._save(convo)
            elif reply.stop_reason != "pause_turn":
                return TurnOutcome("end_turn")

    async def _count(self, convo: Conversation, reply: Message, step: int) -> None:
        turn = Usage()
        turn.add(reply.usage)
        convo.usage.add(reply.usage)
        await self._emit(UsageEvent(session_id=self.session_id, step=step, turn=turn, session=convo.usage.model_copy()))

    async def _after_max_tokens(self, convo: Conversation, reply: Message) -> None:
        """Run the complete calls; a cut-off last call gets an error asking for less; plain text is continued."""
        last = reply.content[-1] if reply.content else None
        cut = last if last is not None and last.type == "tool_use" else None
        complete = [b for b in reply.content if b.type == "tool_use" and b is not cut]
        content = await self._run_tools(complete)
        if cut is not None:
            content.append(_result(cut.id, CUT_OFF_TOOL_CALL, True))
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
        await self._emit(ToolCall(session_id=self.session_id, id=use.id, name=use.name, input=use.input))
        outcome = await tools.execute(use.name, use.input, self.sandbox, self.limits, self.approver)
        await self._emit(
            ToolResult(
                session_id=self.session_id,
                id=use.id,
                name=use.name,
                is_error=outcome.is_error,
                output=outcome.text,
                model_chars=len(outcome.model_text),
                duration_s=round(outcome.duration_s, 4),
                exit_code=outcome.exit_code,
            )
        )
        self._answered[use.id] = block = _result(use.id, outcome.model_text, outcome.is_error)
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise asyncio.CancelledError  # the sandbox stopped the call and gave back its output; now stop the turn
        return block

    async def _save(self, convo: Conversation) -> None:
        if self.save_transcript is not None:
            await self.save_transcript(convo)

    async def _on_text(self, text: str) -> None:
        await self._emit(TextDelta(session_id=self.session_id, text=text))

    async def _emit(self, event: Any) -> None:
        await self.sink.emit(event)

    async def _stop_sandbox(self) -> None:
        """Kill whatever runs in the sandbox; the next call starts a fresh container on the same workspace."""
        with contextlib.suppress(Exception):
            await asyncio.shield(self.sandbox.stop())


def _result(tool_use_id: str, text: str, is_error: bool) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_use_id, "content": text or "(no output)"}
    if is_error:
        block["is_error"] = True
    return block
