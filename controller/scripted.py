"""A scripted Anthropic-compatible server, for tests and offline demos.

It serves ``POST /v1/messages`` (streaming SSE and plain JSON) from a scenario: the
reply is chosen by the number of assistant messages in the request, so the server
keeps no conversation state and any number of sessions can share it. A scenario turn
can first answer with injected error statuses (with ``retry-after``), stream tool
input as raw (partial or malformed) JSON, wait before answering, and report chosen
token usage. Every request body is recorded; ``GET /_requests`` returns them.

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
from pydantic import BaseModel, ConfigDict, Field
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

SCENARIOS_DIR = Path(__file__).parent / "scenarios"


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


class Scenario(_Model):
    name: str = "scenario"
    turns: list[Turn]
    final_text: str = "The scripted scenario has no more turns."

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
        self.app = Starlette(
            routes=[
                Route("/v1/messages", self._messages, methods=["POST"]),
                Route("/_requests", self._recorded, methods=["GET", "DELETE"]),
                Route("/healthz", lambda _: JSONResponse({"ok": True})),
            ]
        )

    def requests_for(self, model: str) -> list[dict[str, Any]]:
        return [r for r in self.requests if r.get("model") == model]

    async def _recorded(self, request: Request) -> Response:
        if request.method == "DELETE":
            self.requests.clear()
        return JSONResponse(self.requests)

    async def _messages(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(body)
        scenario = self.scenarios.get(body.get("model", ""), self.default)
        index = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
        turn = (
            scenario.turns[index]
            if index < len(scenario.turns)
            else Turn(content=[Block(type="text", text=scenario.final_text)])
        )
        injected = self._next_error(scenario.name, index, body, turn)
        if injected is not None:
            return _error_response(injected)
        if turn.delay_s:
            await asyncio.sleep(turn.delay_s)
        message = _message(body, index, turn)
        if body.get("stream"):
            return StreamingResponse(_sse(message, index, turn), media_type="text/event-stream")
        return JSONResponse(_final_message(message, index, turn))

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


def _message(body: dict[str, Any], index: int, turn: Turn) -> dict[str, Any]:
    has_tools = any(b.type == "tool_use" for b in turn.content)
    input_tokens = turn.input_tokens if turn.input_tokens is not None else len(json.dumps(body.get("messages"))) // 4
    return {
        "id": f"msg_scripted_{index:03d}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "scripted"),
        "content": [],
        "stop_reason": turn.stop_reason or ("tool_use" if has_tools else "end_turn"),
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": 0},
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


async def _sse(message: dict[str, Any], index: int, turn: Turn) -> AsyncIterator[str]:
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
    yield _event("message_delta", {"delta": delta, "usage": {"output_tokens": _output_tokens(turn)}})
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
