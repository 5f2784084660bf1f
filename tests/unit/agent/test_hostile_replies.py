"""A hostile model's reply never breaks a session: through the real SDK, the scripted server and the HTTP API.

The sandbox is the stub that refuses every call: nothing here needs Docker, and a poisoned call must
never reach a sandbox anyway.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anthropic
import pytest
from anthropic.types import RawMessageStreamEvent
from pydantic import TypeAdapter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from controller.agent.anthropic_model import AnthropicModel, collect
from controller.agent.model import INVALID_INPUT, cleared_by_api, parse_tool_input
from controller.agent.scripted import Scenario, ScriptedServer, free_port, serve_in_thread
from controller.config import Settings
from controller.errors import ModelError
from controller.server.api import create_app
from controller.testing import NoSandbox
from controller.wire.policies import ContextPolicy
from tests.agent_harness import register, text
from tests.integration.api_helpers import Api
from tests.sandbox_defaults import owned_dir

TOKEN = "hostile-token"
LONE = "\ud800"
POISONED_INPUT = r'{"command": "echo \ud800"}'  # the JSON escape: json.loads yields a lone surrogate


@pytest.fixture(scope="module")
def model_server() -> Iterator[ScriptedServer]:
    server = ScriptedServer([Scenario(name="default", turns=[])])
    with serve_in_thread(server.app) as url:
        server.url = url  # type: ignore[attr-defined]
        yield server


@contextmanager
def _api(tmp_path: Path, model_url: str) -> Iterator[Api]:
    owned_dir(tmp_path / "roots" / "repo")
    settings = Settings(
        api_key="test",
        base_url=model_url,
        model_retries=0,
        api_token=TOKEN,
        repo_roots=[tmp_path / "roots"],
        data_dir=tmp_path / "data",
        sse_heartbeat_s=1,
    )
    with serve_in_thread(create_app(settings, sandbox_factory=lambda *_: NoSandbox())) as url:
        client = Api(url, TOKEN)
        yield client
        client.http.close()


@pytest.fixture
def api(tmp_path: Path, model_server: ScriptedServer) -> Iterator[Api]:
    with _api(tmp_path, model_server.url) as client:  # type: ignore[attr-defined]
        yield client


def _run_poisoned_session(api: Api, model_server: ScriptedServer, tmp_path: Path, first: dict[str, Any]) -> str:
    """One turn with ``first`` as the model's first reply, then a plain one; then a follow-up turn."""
    turns = [first, {"content": [text("first turn done")]}, {"content": [text("second turn done")]}]
    sid = api.create(str(tmp_path / "roots" / "repo"), register(model_server, turns, prefix="hostile"))["id"]
    events = api.events(sid)
    assert events[-1]["type"] == "session_finished", events[-3:]
    record = api.get(sid)
    assert record["status"] == "idle" and record["finish_reason"] == "end_turn", record
    return sid


def _check_everything_still_answers(api: Api, sid: str) -> list[dict[str, Any]]:
    messages = api.http.get(f"/v1/sessions/{sid}/messages")
    assert messages.status_code == 200, messages.text
    follow = api.http.post(f"/v1/sessions/{sid}/messages", json={"text": "and now?"})
    assert follow.status_code == 202, follow.text
    record = api.wait_for(sid, lambda r: r["status"] != "running")
    assert record["status"] == "idle" and record["finish_reason"] == "end_turn", record
    transcript = api.http.get(f"/v1/sessions/{sid}/messages")
    assert transcript.status_code == 200, transcript.text
    assert transcript.json()["messages"][-1]["content"][0]["text"] == "second turn done"
    assert api.http.get(f"/v1/sessions/{sid}").status_code == 200
    assert api.http.get("/v1/sessions").status_code == 200
    events = api.events(sid)
    assert [e["type"] for e in events].count("session_finished") == 2
    transcript_messages: list[dict[str, Any]] = transcript.json()["messages"]
    return transcript_messages


def test_tool_input_with_a_lone_surrogate_is_an_error_result(
    api: Api, model_server: ScriptedServer, tmp_path: Path
) -> None:
    first = {"content": [{"type": "tool_use", "name": "run_command", "raw_input": POISONED_INPUT}]}
    sid = _run_poisoned_session(api, model_server, tmp_path, first)
    transcript = _check_everything_still_answers(api, sid)
    call, result = transcript[1]["content"][0], transcript[2]["content"][0]
    assert call["type"] == "tool_use" and INVALID_INPUT in call["input"]
    assert result["is_error"] is True and "surrogate" in result["content"]
    # the model was sent the error result, and the follow-up's request carried the whole history
    assert any(
        b.get("is_error")
        for r in model_server.requests
        for m in r["messages"]
        for b in m["content"]
        if isinstance(b, dict) and b.get("type") == "tool_result" and "surrogate" in str(b.get("content"))
    )


def test_text_and_tool_name_with_lone_surrogates_become_replacement_characters(
    api: Api, model_server: ScriptedServer, tmp_path: Path
) -> None:
    first = {
        "content": [
            {"type": "text", "text": f"half a pair {LONE} here"},
            {"type": "tool_use", "name": f"run_{LONE}", "input": {f"key{LONE}": f"value{LONE}"}},
        ]
    }
    sid = _run_poisoned_session(api, model_server, tmp_path, first)
    transcript = _check_everything_still_answers(api, sid)
    said, call = transcript[1]["content"]
    assert said["text"] == "half a pair \ufffd here"
    assert call["name"] == "run_\ufffd" and INVALID_INPUT in call["input"]
    assert transcript[2]["content"][0]["is_error"] is True
    streamed = "".join(e["text"] for e in api.events(sid) if e["type"] == "text")
    assert "half a pair \ufffd here" in streamed


def _failed_session_still_answers(api: Api, tmp_path: Path) -> str:
    """A session whose every model request fails: it ends failed, and every route still answers."""
    sid = api.create(str(tmp_path / "roots" / "repo"), "any-model")["id"]
    events = api.events(sid)
    assert [e["type"] for e in events][-3:] == ["error", "changes", "session_finished"], events
    record = api.get(sid)
    assert record["status"] == "failed" and record["finish_reason"] == "error"
    assert api.http.get(f"/v1/sessions/{sid}/messages").status_code == 200
    assert api.http.post(f"/v1/sessions/{sid}/messages", json={"text": "again"}).status_code == 202
    assert api.wait_for(sid, lambda r: r["status"] != "running")["status"] == "failed"
    assert [e["type"] for e in api.events(sid)].count("session_finished") == 2
    detail: str = record["detail"]
    return detail


def test_an_error_body_with_a_lone_surrogate_fails_the_turn_cleanly(tmp_path: Path) -> None:
    body = rb'{"type": "error", "error": {"type": "invalid_request_error", "message": "no \ud800 thanks"}}'

    async def hostile(request: Request) -> Response:
        return Response(body, status_code=400, media_type="application/json")

    app = Starlette(routes=[Route("/v1/messages", hostile, methods=["POST"])])
    with serve_in_thread(app) as model_url, _api(tmp_path, model_url) as api:
        detail = _failed_session_still_answers(api, tmp_path)
    assert detail.startswith("The model API answered 400: no \ufffd thanks")


def test_an_endpoint_without_the_context_beta_says_which_strategy_needs_it() -> None:
    """A compatible endpoint refuses the server strategy's field; the error names the setting to change."""
    body = b'{"type": "error", "error": {"type": "invalid_request_error", "message": "context_management: Extra inputs are not permitted"}}'

    async def refusing(request: Request) -> Response:
        return Response(body, status_code=400, media_type="application/json")

    async def ask(url: str) -> None:
        client = anthropic.AsyncAnthropic(api_key="test", base_url=url, max_retries=0)
        edits = ContextPolicy(strategy="server").server_edits()
        try:
            await AnthropicModel(client, "m", 64, edits).reply("s", [], [{"role": "user", "content": "hi"}], _quiet)
        finally:
            await client.close()

    app = Starlette(routes=[Route("/v1/messages", refusing, methods=["POST"])])
    with serve_in_thread(app) as url, pytest.raises(ModelError) as caught:
        asyncio.run(ask(url))
    assert "Extra inputs are not permitted" in str(caught.value)
    assert "CUBICLE_CONTEXT__STRATEGY=auto" in caught.value.hint


async def _quiet(piece: str) -> None:
    return None


def test_an_unreachable_model_api_is_one_sentence(tmp_path: Path) -> None:
    with _api(tmp_path, f"http://127.0.0.1:{free_port()}") as api:
        detail = _failed_session_still_answers(api, tmp_path)
    assert detail.startswith("Could not reach the model API: ") and ".." not in detail, detail


# --------------------------------------------------------------------------- the seam itself


async def _events(raw: list[dict[str, Any]]) -> AsyncIterator[Any]:
    adapter: TypeAdapter[RawMessageStreamEvent] = TypeAdapter(RawMessageStreamEvent)
    for item in raw:
        yield adapter.validate_python(item)


def test_collect_cleans_every_string_the_model_sends() -> None:
    """Ids, names, text and the message's own fields: what the scripted server cannot poison."""
    seen: list[str] = []

    async def on_text(piece: str) -> None:
        seen.append(piece)

    start = {
        "id": f"msg_{LONE}",
        "type": "message",
        "role": "assistant",
        "model": f"m{LONE}",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 0},
    }
    raw = [
        {"type": "message_start", "message": start},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": f"a{LONE}"}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": f"toolu_{LONE}", "name": f"n{LONE}", "input": {}},
        },
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"a": 1}'}},
        {"type": "content_block_stop", "index": 1},
        {
            "type": "content_block_start",
            "index": 2,  # input sent whole, with no deltas
            "content_block": {"type": "tool_use", "id": "toolu_2", "name": "list_files", "input": {"path": LONE}},
        },
        {"type": "content_block_stop", "index": 2},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 3},
        },
    ]
    message = asyncio.run(collect(_events(raw), on_text))
    dumped = message.model_dump_json()  # raises on a lone surrogate
    assert LONE not in dumped
    assert seen == ["a\ufffd"]
    tool_use = message.content[1]
    assert tool_use.type == "tool_use"
    assert tool_use.id == "toolu_\ufffd" and tool_use.name == "n\ufffd" and tool_use.input == {"a": 1}
    whole = message.content[2]
    assert whole.type == "tool_use" and isinstance(whole.input, dict) and INVALID_INPUT in whole.input


@pytest.mark.parametrize(
    "report",
    [
        {"applied_edits": []},
        {"applied_edits": [{"cleared_input_tokens": 10**40}, {"cleared_input_tokens": True}]},
        {"applied_edits": [{"cleared_input_tokens": 7}, "x", {"cleared_input_tokens": -3}]},
        "cleared",
        [1],
        5,
        None,
    ],
)
@pytest.mark.parametrize("managed", [False, True])
def test_a_context_management_report_of_any_shape_never_breaks_a_reply(report: Any, managed: bool) -> None:
    """An endpoint may pass the beta's field through on any request, in any shape: it is read only where it was
    asked for, as a plain count, and never fails the reply."""
    start = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 0},
    }
    raw = [
        {"type": "message_start", "message": start},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": 3},
            "context_management": report,
        },
    ]

    async def on_text(piece: str) -> None:
        return None

    message = asyncio.run(collect(_events(raw), on_text, managed=managed))
    assert message.stop_reason == "end_turn"
    cleared = cleared_by_api(message)
    if not managed or not isinstance(report, dict) or not report["applied_edits"]:
        assert cleared is None
    else:
        assert cleared in (0, 7), "counts that are not plain non-negative integers count as nothing"


@pytest.mark.parametrize(
    "raw",
    [POISONED_INPUT, r'{"\udfff": 1}', r'{"a": [[{"b": "x\udc00y"}]]}', '{"a": "' + LONE + '"}', r'"\ud83d"'],
)
def test_parse_tool_input_refuses_lone_surrogates(raw: str) -> None:
    parsed = parse_tool_input(raw)
    assert isinstance(parsed, dict) and set(parsed) == {INVALID_INPUT}
    assert "surrogate" in parsed[INVALID_INPUT]
    parsed[INVALID_INPUT].encode()  # the reason itself is valid text


def test_parse_tool_input_keeps_real_astral_characters() -> None:
    assert parse_tool_input(r'{"s": "\ud83d\ude00 ok"}') == {"s": "\U0001f600 ok"}
