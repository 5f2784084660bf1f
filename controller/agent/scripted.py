"""A scripted Anthropic-compatible server, for tests and offline demos.

It serves ``POST /v1/messages`` (streaming SSE and plain JSON) from a scenario: the
reply is chosen by the ``x-cubicle-turn`` header when the client sends one (Cubicle
sends the number of assistant messages in its full transcript, which survives context
edits), else by the number of assistant messages in the request. So the server keeps no
conversation state and any number of sessions can share it. A scenario turn can first
answer with injected error statuses (with ``retry-after``), stream tool input as raw
(partial or malformed) JSON, wait before answering, and report chosen token usage.

Like the real API it counts the whole prompt (tools, system, messages: serialized
characters over four), splits it into cache reads, cache writes and uncached input by
the prefixes marked with ``cache_control`` it has seen before, answers 400 "prompt is
too long" above a scenario's ``context_window``, and answers 400 to a request whose
tool results do not answer the tool calls of the message before, or that marks more
than four cache breakpoints. With the context-management beta it applies
``clear_tool_uses`` edits as the API does (all but the newest tool results cleared once the
prompt reaches the trigger, when that clears enough) before counting, and reports them. Every
request body is recorded as sent; ``GET /_requests`` returns them.

Run it: ``cubicle scripted-server controller/scenarios/demo.json --port 8123``, then
point ``ANTHROPIC_BASE_URL`` at it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import uvicorn
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from .model import PURPOSE_HEADER, TURN_HEADER

SCENARIOS_DIR = Path(__file__).resolve().parents[1] / "scenarios"
CHARS_PER_TOKEN = 4
FRAMING_TOKENS = 3
MAX_BREAKPOINTS = 4
LOOKBACK_BLOCKS = 20
CONTEXT_BETA = "context-management-2025-06-27"
CLEAR_TOOL_USES = "clear_tool_uses_20250919"
CLEARED = "[cleared by the API's context management]"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Block(_Model):
    """A content block of a scripted reply."""

    type: Literal["text", "tool_use"]
    text: str = ""
    name: str = ""
    input: Any = Field(default_factory=dict, description="Tool input, streamed as JSON.")
    raw_input: str | None = Field(None, description="Streamed verbatim instead of input: partial or malformed JSON.")


class InjectedError(_Model):
    status: int
    retry_after: float | None = None
    type: str = "overloaded_error"
    message: str = "scripted error"


class Turn(_Model):
    content: list[Block] = Field(default_factory=list)
    stop_reason: str | None = Field(None, description="Default: tool_use when a tool is called, else end_turn.")
    input_tokens: int | None = None
    output_tokens: int | None = None
    errors: list[InjectedError] = Field(default_factory=list, description="Answered, in order, before the reply.")
    delay_s: float = Field(0, ge=0, le=3600, description="Wait this long before answering.")
    after: str | None = Field(
        None,
        description="Answer only once the gate of this name is opened (POST /_gates/NAME): a test holds a turn "
        "open exactly as long as it needs, on a quiet machine or a loaded one, where a delay only guesses.",
    )


class Scenario(_Model):
    name: str = "scenario"
    turns: list[Turn]
    final_text: str = "The scripted scenario has no more turns."
    context_window: int | None = Field(None, ge=1, description="Prompts above this many tokens get the real 400.")
    summary: str = Field(
        "Summary: the task is in progress; the newest messages show where it stands.",
        description="The answer to every summary request (x-cubicle-purpose: compact); it uses up no turn.",
    )
    summary_errors: list[InjectedError] = Field(
        default_factory=list, description="Answered, in order, to summary requests before the summary."
    )

    @classmethod
    def load(cls, path: str | Path) -> Scenario:
        file = Path(path)
        if not file.is_file() and (SCENARIOS_DIR / f"{path}.json").is_file():
            file = SCENARIOS_DIR / f"{path}.json"
        return cls.model_validate_json(file.read_text())


class ScriptedServer:
    """The ASGI app plus what it recorded; scenarios are picked by the request's ``model`` when it names one."""

    def __init__(self, scenarios: list[Scenario]) -> None:
        if not scenarios:
            raise ValueError("at least one scenario is needed")
        self.scenarios = {s.name: s for s in scenarios}
        self.default = scenarios[0]
        self.requests: list[dict[str, Any]] = []
        self._errors_served: Counter[str] = Counter()
        self._cached: set[str] = set()
        self._gates: dict[str, asyncio.Event] = {}
        self.app = Starlette(
            routes=[
                Route("/v1/messages", self._messages, methods=["POST"]),
                Route("/_requests", self._recorded, methods=["GET", "DELETE"]),
                Route("/_gates/{name}", self._open_gate, methods=["POST"]),
                Route("/healthz", lambda _: JSONResponse({"ok": True})),
            ]
        )

    def requests_for(self, model: str) -> list[dict[str, Any]]:
        return [r for r in self.requests if r.get("model") == model]

    async def _recorded(self, request: Request) -> Response:
        if request.method == "DELETE":
            self.requests.clear()
        return JSONResponse(self.requests)

    def _gate(self, name: str) -> asyncio.Event:
        return self._gates.setdefault(name, asyncio.Event())

    async def _open_gate(self, request: Request) -> Response:
        name = request.path_params["name"]
        self._gate(name).set()
        return JSONResponse({"opened": name})

    async def _messages(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(body)
        scenario = self.scenarios.get(body.get("model", ""), self.default)
        edited = server_edits(body, request.headers.get("anthropic-beta", ""))
        if isinstance(edited, str):
            return _error_response(InjectedError(status=400, type="invalid_request_error", message=edited))
        shown, applied = edited
        usage = prompt_usage(shown, self._cached)
        refusal = invalid_request(body) or _too_long(usage, scenario.context_window)
        if refusal is not None:
            return _error_response(InjectedError(status=400, type="invalid_request_error", message=refusal))
        index = _turn_index(request, body)
        if request.headers.get(PURPOSE_HEADER) == "compact":
            turn = Turn(content=[Block(type="text", text=scenario.summary)], errors=scenario.summary_errors)
        elif index < len(scenario.turns):
            turn = scenario.turns[index]
        else:
            turn = Turn(content=[Block(type="text", text=scenario.final_text)])
        injected = self._next_error(scenario.name, index, body, turn)
        if injected is not None:
            return _error_response(injected)
        if turn.after is not None:
            await self._gate(turn.after).wait()
        if turn.delay_s:
            await asyncio.sleep(turn.delay_s)
        message = _message(body, index, turn, usage)
        managed = {"context_management": {"applied_edits": applied}} if "context_management" in body else {}
        if body.get("stream"):
            return StreamingResponse(_sse(message, index, turn, managed), media_type="text/event-stream")
        return JSONResponse({**_final_message(message, index, turn), **managed})

    def _next_error(self, name: str, index: int, body: dict[str, Any], turn: Turn) -> InjectedError | None:
        """Errors are counted per distinct request, so a retry of the same request moves on to the next one."""
        digest = hashlib.sha256(json.dumps(body.get("messages"), sort_keys=True).encode()).hexdigest()
        key = f"{name}:{index}:{digest}"
        served = self._errors_served[key]
        if served >= len(turn.errors):
            return None
        self._errors_served[key] += 1
        return turn.errors[served]


def _error_response(error: InjectedError) -> Response:
    headers = {"retry-after": f"{error.retry_after:g}"} if error.retry_after is not None else {}
    payload = {"type": "error", "error": {"type": error.type, "message": error.message}}
    return JSONResponse(payload, status_code=error.status, headers=headers)


def _turn_index(request: Request, body: dict[str, Any]) -> int:
    header = request.headers.get(TURN_HEADER, "")
    if header.isascii() and header.isdigit():
        return int(header)
    return sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")


def prompt_usage(body: dict[str, Any], cached: set[str]) -> dict[str, int]:
    """The prompt's tokens as the API reports them: cache reads, cache writes, and the uncached rest.

    The prompt is tools, then system, then messages, block by block. A block with ``cache_control``
    ends a cacheable prefix; at each such block the longest prefix cached before, ending at it or
    up to 20 blocks earlier, is read from the cache, and the rest up to the last breakpoint is written
    to it. A few tokens of framing are never cached, as in the real API.
    """
    digest = hashlib.sha256(str(body.get("model")).encode())
    prefixes: list[tuple[int, str]] = []  # (characters so far, digest of the prefix) after each block
    chars = read = written = 0
    marks: list[str] = []
    for block in _prompt_blocks(body):
        marked = isinstance(block, dict) and "cache_control" in block
        text = json.dumps({k: v for k, v in block.items() if k != "cache_control"} if marked else block)
        digest.update(text.encode())
        chars += len(text)
        prefixes.append((chars, digest.copy().hexdigest()))
        if marked:
            hits = [size for size, key in prefixes[-1 - LOOKBACK_BLOCKS :] if key in cached]
            read, written = max([read, *hits]), chars
            marks.append(prefixes[-1][1])
    cached.update(marks)  # written by this request: a hit only for the next one
    total = chars // CHARS_PER_TOKEN
    read_tokens = read // CHARS_PER_TOKEN
    written_tokens = max(0, written // CHARS_PER_TOKEN - read_tokens)
    return {
        "input_tokens": total - read_tokens - written_tokens + FRAMING_TOKENS,
        "cache_read_input_tokens": read_tokens,
        "cache_creation_input_tokens": written_tokens,
    }


def _prompt_blocks(body: dict[str, Any]) -> Iterator[Any]:
    yield from body.get("tools") or []
    system = body.get("system") or []
    yield from ([{"type": "text", "text": system}] if isinstance(system, str) else system)
    for message in body.get("messages") or []:
        content = message.get("content")
        yield {"role": message.get("role")}
        yield from ([{"type": "text", "text": content}] if isinstance(content, str) else content or [])


class _Amount(BaseModel):
    type: str = "input_tokens"
    value: int = Field(ge=0)


class ClearToolUses(_Model):
    """The beta's ``clear_tool_uses`` edit, as far as the scripted server applies it."""

    type: Literal["clear_tool_uses_20250919"]
    trigger: _Amount = _Amount(value=100_000)
    keep: _Amount = _Amount(type="tool_uses", value=3)
    clear_at_least: _Amount = _Amount(value=0)
    clear_tool_inputs: bool | list[str] = False
    exclude_tools: list[str] = Field(default_factory=list)


class ContextManagement(_Model):
    edits: list[ClearToolUses]


def server_edits(body: dict[str, Any], betas: str) -> tuple[dict[str, Any], list[dict[str, Any]]] | str:
    """The request as the model would see it after its ``context_management`` edits, and the edits applied;
    or the 400 the API answers (the field without the beta, an edit it does not know, a malformed one)."""
    if "context_management" not in body:
        return body, []
    if CONTEXT_BETA not in [b.strip() for b in betas.split(",")]:
        return "context_management: Extra inputs are not permitted"
    try:
        managed = ContextManagement.model_validate(body["context_management"])
    except ValidationError as err:
        return f"context_management: {err.errors()[0]['msg']} at {err.errors()[0]['loc']}"
    applied: list[dict[str, Any]] = []
    for edit in managed.edits:
        body, done = _clear_tool_uses(body, edit)
        applied += done
    return body, applied


def _clear_tool_uses(body: dict[str, Any], edit: ClearToolUses) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``edit`` applied: past its trigger, every tool result but the newest ``keep`` cleared (and the inputs
    of the calls it names), if that clears at least ``clear_at_least``."""
    before = sum(prompt_usage(body, set()).values())
    messages = body.get("messages") or []
    messages = messages if isinstance(messages, list) else []
    clear = _clearable(messages, edit)
    if before < edit.trigger.value or not clear:
        return body, []
    ids = {b.get("tool_use_id") for b in clear}
    edited = {**body, "messages": [_message_cleared(m, ids, edit) for m in messages]}
    cleared = before - sum(prompt_usage(edited, set()).values())
    if cleared < edit.clear_at_least.value:
        return body, []
    return edited, [{"type": CLEAR_TOOL_USES, "cleared_tool_uses": len(clear), "cleared_input_tokens": cleared}]


def _clearable(messages: list[Any], edit: ClearToolUses) -> list[dict[str, Any]]:
    """The tool results ``edit`` clears, oldest first: those not cleared yet, of tools it does not exclude,
    all but the newest ``keep``."""
    blocks = [b for m in messages for b in _blocks_of(m) if isinstance(b, dict)]
    names = {b.get("id"): b.get("name") for b in blocks}
    results = [
        b
        for b in blocks
        if b.get("type") == "tool_result"
        and b.get("content") != CLEARED
        and names.get(b.get("tool_use_id")) not in edit.exclude_tools
    ]
    return results[: max(0, len(results) - edit.keep.value)]


def _message_cleared(message: Any, ids: set[Any], edit: ClearToolUses) -> Any:
    blocks = _blocks_of(message)
    return {**message, "content": [_cleared(b, ids, edit) for b in blocks]} if blocks else message


def _cleared(block: Any, ids: set[Any], edit: ClearToolUses) -> Any:
    if not isinstance(block, dict):
        return block
    if block.get("type") == "tool_result" and block.get("tool_use_id") in ids:
        return {**block, "content": CLEARED}
    inputs = edit.clear_tool_inputs
    if (
        block.get("type") == "tool_use"
        and block.get("id") in ids
        and (inputs is True or (isinstance(inputs, list) and block.get("name") in inputs))
    ):
        return {**block, "input": {}}
    return block


def _blocks_of(message: Any) -> list[Any]:
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, list) else []


def invalid_request(body: dict[str, Any]) -> str | None:
    """What the real API refuses with a 400 that a client bug could cause: unanswered or stray tool results,
    and more than four cache breakpoints. (Consecutive messages of one role are allowed: the API merges them.)"""
    messages = body.get("messages") or []
    for index in range(len(messages)):
        for check in (_unanswered, _stray):
            if refusal := check(messages, index):
                return refusal
    marks = sum(1 for block in _prompt_blocks(body) if isinstance(block, dict) and "cache_control" in block)
    if marks > MAX_BREAKPOINTS:
        return f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {marks}."
    return None


def _unanswered(messages: list[dict[str, Any]], index: int) -> str | None:
    """The refusal if the assistant message at ``index`` calls tools the next message does not answer, one for one."""
    asked = _ids(messages[index], "tool_use", "id") if messages[index].get("role") == "assistant" else []
    if not asked or index + 1 >= len(messages) or _ids(messages[index + 1], "tool_result", "tool_use_id") == asked:
        return None
    return (
        f"messages.{index + 1}: `tool_use` ids were found without `tool_result` blocks immediately after: "
        f"{', '.join(asked)}. Each `tool_use` block must have a corresponding `tool_result` block in the next message."
    )


def _stray(messages: list[dict[str, Any]], index: int) -> str | None:
    """The refusal if the message at ``index`` answers tool calls the message before it did not make."""
    answered = _ids(messages[index], "tool_result", "tool_use_id")
    previous = messages[index - 1] if index else {}
    if not answered or _ids(previous, "tool_use", "id") == answered:
        return None
    return (
        f"messages.{index}: unexpected `tool_use_id` found in `tool_result` blocks: {', '.join(answered)}. "
        "Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
    )


def _ids(message: dict[str, Any], kind: str, key: str) -> list[str]:
    content = message.get("content")
    return (
        [str(b.get(key)) for b in content if isinstance(b, dict) and b.get("type") == kind]
        if isinstance(content, list)
        else []
    )


def _too_long(usage: dict[str, int], window: int | None) -> str | None:
    tokens = sum(usage.values())
    if window is None or tokens <= window:
        return None
    return f"prompt is too long: {tokens} tokens > {window} maximum"


def _message(body: dict[str, Any], index: int, turn: Turn, usage: dict[str, int]) -> dict[str, Any]:
    has_tools = any(b.type == "tool_use" for b in turn.content)
    if turn.input_tokens is not None:
        usage = {"input_tokens": turn.input_tokens}
    return {
        "id": f"msg_scripted_{index:03d}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "scripted"),
        "content": [],
        "stop_reason": turn.stop_reason or ("tool_use" if has_tools else "end_turn"),
        "stop_sequence": None,
        "usage": {**usage, "output_tokens": 0},
    }


def _tool_id(index: int, position: int) -> str:
    return f"toolu_scripted_{index:03d}_{position:02d}"


def _output_tokens(turn: Turn) -> int:
    if turn.output_tokens is not None:
        return turn.output_tokens
    return max(1, sum(len(b.text) + len(json.dumps(b.input)) for b in turn.content) // 4)


def _final_message(message: dict[str, Any], index: int, turn: Turn) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    for position, block in enumerate(turn.content):
        if block.type == "text":
            content.append({"type": "text", "text": block.text})
        else:
            content.append(
                {"type": "tool_use", "id": _tool_id(index, position), "name": block.name, "input": block.input}
            )
    return {**message, "content": content, "usage": {**message["usage"], "output_tokens": _output_tokens(turn)}}


def _event(kind: str, data: dict[str, Any]) -> str:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"


def _chunks(text: str, size: int) -> Iterator[str]:
    for start in range(0, len(text), size):
        yield text[start : start + size]


async def _sse(
    message: dict[str, Any], index: int, turn: Turn, managed: dict[str, Any] | None = None
) -> AsyncIterator[str]:
    yield _event("message_start", {"message": message})
    for position, block in enumerate(turn.content):
        if block.type == "text":
            yield _event("content_block_start", {"index": position, "content_block": {"type": "text", "text": ""}})
            for piece in _chunks(block.text, 24):
                yield _event("content_block_delta", {"index": position, "delta": {"type": "text_delta", "text": piece}})
        else:
            start = {"type": "tool_use", "id": _tool_id(index, position), "name": block.name, "input": {}}
            yield _event("content_block_start", {"index": position, "content_block": start})
            raw = block.raw_input if block.raw_input is not None else json.dumps(block.input)
            for piece in _chunks(raw, 64):
                yield _event(
                    "content_block_delta",
                    {"index": position, "delta": {"type": "input_json_delta", "partial_json": piece}},
                )
        yield _event("content_block_stop", {"index": position})
        await asyncio.sleep(0)
    delta = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    yield _event("message_delta", {"delta": delta, "usage": {"output_tokens": _output_tokens(turn)}, **(managed or {})})
    yield _event("message_stop", {})


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def serve_in_thread(app: Any, host: str = "127.0.0.1", port: int | None = None) -> Iterator[str]:
    """Serve ``app`` with uvicorn on a background thread; yields its base URL and stops it on exit."""
    port = port or free_port()
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError(f"the server on port {port} did not start")
        time.sleep(0.01)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def run(paths: list[str], host: str, port: int) -> None:
    """Serve scenarios in the foreground (the CLI's ``scripted-server``)."""
    server = ScriptedServer([Scenario.load(p) for p in paths])
    uvicorn.run(server.app, host=host, port=port, log_level="info")
