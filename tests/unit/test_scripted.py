"""The scripted server through the real SDK over HTTP: non-streaming replies, injected errors, recording."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import httpx
import pytest

from controller.scripted import Scenario, ScriptedServer, serve_in_thread

SCENARIO = Scenario.model_validate(
    {
        "name": "unit",
        "turns": [
            {
                "content": [
                    {"type": "text", "text": "hi"},
                    {"type": "tool_use", "name": "read_file", "input": {"path": "a"}},
                ],
                "errors": [{"status": 529, "retry_after": 0.01}],
                "input_tokens": 7,
                "output_tokens": 3,
            },
            {"content": [{"type": "text", "text": "bye"}], "stop_reason": "end_turn"},
        ],
    }
)


@pytest.fixture
def served() -> Iterator[tuple[ScriptedServer, str]]:
    server = ScriptedServer([SCENARIO])
    with serve_in_thread(server.app) as url:
        yield server, url


def test_non_streaming_reply_after_an_injected_529(served: tuple[ScriptedServer, str]) -> None:
    server, url = served
    client = anthropic.Anthropic(api_key="k", base_url=url, max_retries=2)
    message = client.messages.create(model="unit", max_tokens=10, messages=[{"role": "user", "content": "go"}])
    assert message.stop_reason == "tool_use"
    assert [b.type for b in message.content] == ["text", "tool_use"]
    assert message.content[1].input == {"path": "a"}  # type: ignore[union-attr]
    assert (message.usage.input_tokens, message.usage.output_tokens) == (7, 3)
    assert len(server.requests) == 2  # the 529, then the retry
    client.close()


def test_reply_is_chosen_by_assistant_turns_and_requests_are_recorded(served: tuple[ScriptedServer, str]) -> None:
    server, url = served
    client = anthropic.Anthropic(api_key="k", base_url=url, max_retries=0)
    history = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "read_file", "input": {"path": "a"}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x"}]},
    ]
    with client.messages.stream(model="unit", max_tokens=10, messages=history) as stream:  # type: ignore[arg-type]
        final = stream.get_final_message()
    assert final.content[0].text == "bye" and final.stop_reason == "end_turn"  # type: ignore[union-attr]
    recorded = httpx.get(f"{url}/_requests").json()
    assert recorded[-1]["messages"][-1]["content"][0]["tool_use_id"] == "t1" and recorded[-1]["stream"] is True
    assert httpx.delete(f"{url}/_requests").json() == [] and server.requests == []
    client.close()


def test_past_the_last_turn_the_server_ends_the_conversation(served: tuple[ScriptedServer, str]) -> None:
    _, url = served
    client = anthropic.Anthropic(api_key="k", base_url=url, max_retries=0)
    history = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}] * 3 + [
        {"role": "user", "content": "c"}
    ]
    message = client.messages.create(model="unit", max_tokens=10, messages=history)  # type: ignore[arg-type]
    assert message.stop_reason == "end_turn" and "no more turns" in message.content[0].text  # type: ignore[union-attr]
    client.close()


def test_shipped_demo_scenario_loads() -> None:
    demo = Scenario.load("demo")
    assert demo.name == "demo" and len(demo.turns) >= 3
