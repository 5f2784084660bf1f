"""The model that answers through the Messages API, with the official SDK (``AsyncAnthropic``).

``AnthropicModel`` streams a reply, surfacing text deltas as they arrive. It reads the raw
stream events itself rather than through the SDK's stream helper, because the helper
raises on tool input that is not valid JSON, which would end the turn; here such input
becomes an error result the model can act on (``model.parse_tool_input``). The SDK
retries 429, 529 and 5xx answers with exponential backoff and honours ``retry-after``;
what still fails becomes a ``ModelError`` with a sentence a person can act on.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpcore  # noqa: F401 - see below
from anthropic import AsyncStream
from anthropic.types import Message, RawMessageStreamEvent

from ..config import Settings
from ..errors import ConfigError, ContextOverflowError, ModelError
from .model import (
    DEFAULT_BASE_URL,
    PURPOSE_HEADER,
    SUMMARY_MAX_TOKENS,
    TURN_HEADER,
    OnText,
    checked_input,
    clean_strings,
    clean_text,
    parse_tool_input,
    with_cache_breakpoints,
)

# httpx imports httpcore only when its first client is made. Two threads making their first clients at once (the
# API's model clients, a test's client) then import it concurrently, and CPython 3.11's import locks can fail that
# with a KeyError (CPython issues 87712 and 91351; seen once in CI). Imported here, it is loaded before any thread.

log = logging.getLogger(__name__)


def make_client(settings: Settings) -> anthropic.AsyncAnthropic:
    """The SDK client, made once and shared; a missing API key is a ConfigError."""
    if settings.api_key is None or not settings.api_key.get_secret_value().strip():
        raise ConfigError(
            "ANTHROPIC_API_KEY is not set.",
            hint="Export your key, or point ANTHROPIC_BASE_URL at an Anthropic-compatible server and set any key it "
            "accepts; to try Cubicle with no key at all, add --scenario demo (a scripted model, offline).",
        )
    return anthropic.AsyncAnthropic(
        api_key=settings.api_key.get_secret_value(),
        base_url=settings.base_url or DEFAULT_BASE_URL,  # never None: the SDK would read a blank variable itself
        max_retries=settings.model_retries,
    )


CONTEXT_MANAGEMENT_BETA = "context-management-2025-06-27"
"""The beta that lets a request ask the API to clear old tool results itself (the ``server`` strategy)."""


class AnthropicModel:
    """The real model, through ``AsyncAnthropic``; create once and share."""

    def __init__(
        self,
        client: anthropic.AsyncAnthropic,
        name: str,
        max_tokens: int,
        context_management: dict[str, Any] | None = None,
    ) -> None:
        """``context_management`` (``ContextPolicy.server_edits``) goes with every reply's request, through the
        SDK's beta Messages API; the edits the API applied come back on the reply (``applied_edits``)."""
        self._client = client
        self.name = name
        self.max_tokens = max_tokens
        self.context_management = context_management

    async def reply(
        self, system: str, tools: list[dict[str, Any]], messages: list[dict[str, Any]], on_text: OnText, turn: int = 0
    ) -> Message:
        return await self._send(system, tools, messages, on_text, {TURN_HEADER: str(turn)})

    async def summarize(
        self, system: str, tools: list[dict[str, Any]], messages: list[dict[str, Any]], instruction: str, turn: int = 0
    ) -> Message:
        asked = [*messages, {"role": "user", "content": [{"type": "text", "text": instruction}]}]
        if messages and messages[-1]["role"] == "user":  # merged, so roles keep alternating
            last = messages[-1]
            blocks = (
                [{"type": "text", "text": last["content"]}] if isinstance(last["content"], str) else last["content"]
            )
            asked = [*messages[:-1], {"role": "user", "content": [*blocks, {"type": "text", "text": instruction}]}]
        headers = {TURN_HEADER: str(turn), PURPOSE_HEADER: "compact"}
        return await self._send(system, tools, asked, _ignore_text, headers, summary=True)

    async def _send(
        self,
        system: str,
        tools: list[dict[str, Any]],
        messages: list[dict[str, Any]],
        on_text: OnText,
        headers: dict[str, str],
        summary: bool = False,
    ) -> Message:
        """One streamed request; a summary may not call tools and gets at most SUMMARY_MAX_TOKENS."""
        system_blocks, sent = with_cache_breakpoints(system, messages)
        managed = self.context_management is not None and not summary
        try:
            request: dict[str, Any] = {
                "model": self.name,
                "max_tokens": min(self.max_tokens, SUMMARY_MAX_TOKENS) if summary else self.max_tokens,
                "system": system_blocks,
                "tools": tools,
                "messages": sent,
                "tool_choice": {"type": "none"} if summary else anthropic.omit,
                "stream": True,
                "extra_headers": headers,
            }
            stream: AsyncStream[RawMessageStreamEvent]
            if managed and self.context_management is not None:
                stream = await self._client.beta.messages.create(  # type: ignore[call-overload]
                    **request, betas=[CONTEXT_MANAGEMENT_BETA], context_management=self.context_management
                )
            else:
                stream = await self._client.messages.create(**request)
            async with stream:
                return await collect(stream, on_text, managed=managed)
        except anthropic.APIError as err:
            raise self._failed(err) from None
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as err:  # a reply of an odd shape
            raise ModelError(f"The model's reply could not be read: {clean_text(str(err)[:300])}") from None

    def _failed(self, err: anthropic.APIError) -> ModelError:
        """What a failed request is to the user: the API's answer, and what to check."""
        if isinstance(err, anthropic.AuthenticationError):
            return ModelError(
                f"The model API rejected the API key ({err.status_code}).", hint="Check ANTHROPIC_API_KEY."
            )
        if isinstance(err, anthropic.APIStatusError):
            detail = clean_text(_detail(err))
            if err.status_code == 400 and "prompt is too long" in detail:
                return ContextOverflowError(f"The model API answered 400: {detail}")
            if err.status_code == 400 and "context_management" in detail and self.context_management is not None:
                return ModelError(
                    f"The model API answered 400: {detail}",
                    hint="This endpoint lacks Anthropic's context-management beta, which the context strategy "
                    "'server' needs: use CUBICLE_CONTEXT__STRATEGY=auto (or the session's context.strategy).",
                )
            return ModelError(f"The model API answered {err.status_code}: {detail}")
        if isinstance(err, anthropic.APIConnectionError):
            return ModelError(
                f"Could not reach the model API: {_sentence(str(err))}",
                hint="Check ANTHROPIC_BASE_URL and the network.",
            )
        raise err


async def _ignore_text(text: str) -> None:
    return None


async def collect(events: AsyncIterator[Any], on_text: OnText, managed: bool = False) -> Message:
    """Build the assistant message from raw stream events, surfacing text as it arrives.

    Tool input is parsed once, when the stream has ended. Input that is not valid JSON (cut off,
    malformed, nested too deep, holding a lone surrogate) does not fail the reply: it becomes
    ``{INVALID_INPUT: reason}``, which the tool layer answers with an is_error result, so the model
    can send the call again. Every other string the model sent (text, tool names and ids, the
    message's own fields) gets U+FFFD for a lone surrogate, so the reply can always be stored,
    streamed and sent back. ``managed``: the request asked the API to edit its context, and the
    report of what it did (``context_management``, an object) is kept on the message; otherwise,
    or in any other shape, that field is ignored.
    """
    message: dict[str, Any] = {}
    blocks: list[dict[str, Any]] = []
    partial: dict[int, list[str]] = {}
    async for event in events:
        if event.type == "message_start":
            message = event.message.to_dict()
        elif event.type == "content_block_start":
            blocks.append(event.content_block.to_dict())
        elif event.type == "content_block_delta":
            await _apply_delta(blocks[event.index], event.delta, partial.setdefault(event.index, []), on_text)
        elif event.type == "message_delta":
            _apply_message_delta(message, event, managed)
    for index, block in enumerate(blocks):
        if partial.get(index):
            block["input"] = parse_tool_input("".join(partial[index]))
        elif "input" in block:  # sent whole in content_block_start: checked like streamed input
            block["input"] = checked_input(block["input"])
    message["content"] = blocks
    clean_strings(message)
    return Message.model_validate(message)


def _apply_message_delta(message: dict[str, Any], event: Any, managed: bool) -> None:
    """The message's closing fields: why it stopped, its usage so far, and (``managed``) the context edits' report."""
    message.update({k: v for k, v in event.delta.to_dict().items() if k in ("stop_reason", "stop_sequence")})
    message["usage"] = {**message.get("usage", {}), **event.usage.to_dict(exclude_none=True)}
    report: Any = getattr(event, "context_management", None) if managed else None
    report = report.to_dict() if hasattr(report, "to_dict") else report
    if isinstance(report, dict):
        message["context_management"] = report


async def _apply_delta(block: dict[str, Any], delta: Any, json_parts: list[str], on_text: OnText) -> None:
    if delta.type == "text_delta":
        piece = clean_text(delta.text)
        block["text"] = block.get("text", "") + piece
        if piece:
            await on_text(piece)
    elif delta.type == "input_json_delta":
        json_parts.append(delta.partial_json)
    elif delta.type == "thinking_delta":
        block["thinking"] = block.get("thinking", "") + delta.thinking
    elif delta.type == "signature_delta":
        block["signature"] = delta.signature
    elif delta.type == "citations_delta":
        block["citations"] = [*(block.get("citations") or []), delta.citation.to_dict()]


def _sentence(text: str) -> str:
    """``text`` ending in exactly one full stop (the SDK's own messages already end in one)."""
    return clean_text(text).rstrip().rstrip(".") + "."


def _detail(err: anthropic.APIStatusError) -> str:
    body = err.body
    if isinstance(body, dict):
        inner = body.get("error")
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
    return err.message
