"""The scripted server through the real SDK over HTTP: non-streaming replies, injected errors, recording."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import httpx
import pytest

from controller.agent.scripted import Scenario, ScriptedServer, serve_in_thread

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


def _ask(url: str, messages: list[dict[str, object]], **options: object) -> anthropic.types.Message:
    with anthropic.Anthropic(api_key="k", base_url=url, max_retries=0) as client:
        return client.messages.create(model="counted", max_tokens=10, messages=messages, **options)  # type: ignore[arg-type]


def _counted(**fields: object) -> Iterator[tuple[ScriptedServer, str]]:
    scenario = Scenario.model_validate(
        {"name": "counted", "turns": [{"content": [{"type": "text", "text": "ok"}]}] * 3, **fields}
    )
    server = ScriptedServer([scenario])
    with serve_in_thread(server.app) as url:
        yield server, url


@pytest.fixture
def counted() -> Iterator[tuple[ScriptedServer, str]]:
    yield from _counted(context_window=2000)


def test_the_prompt_is_counted_and_a_repeated_prefix_is_read_from_the_cache(
    counted: tuple[ScriptedServer, str],
) -> None:
    _, url = counted
    system = [{"type": "text", "text": "s" * 400, "cache_control": {"type": "ephemeral"}}]
    first = [{"role": "user", "content": [{"type": "text", "text": "u" * 800, "cache_control": {"type": "ephemeral"}}]}]
    cold = _ask(url, first, system=system).usage
    assert cold.cache_read_input_tokens == 0 and cold.cache_creation_input_tokens > 300
    longer = [
        {"role": "user", "content": [{"type": "text", "text": "u" * 800}]},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": [{"type": "text", "text": "v" * 40, "cache_control": {"type": "ephemeral"}}]},
    ]
    warm = _ask(url, longer, system=system).usage
    assert warm.cache_read_input_tokens == cold.cache_creation_input_tokens, "the marker moved; the prefix still hits"
    assert 0 < warm.cache_creation_input_tokens < 40 and warm.input_tokens == 3


def test_a_prompt_above_the_window_gets_the_real_400(counted: tuple[ScriptedServer, str]) -> None:
    _, url = counted
    with pytest.raises(anthropic.BadRequestError, match=r"prompt is too long: \d+ tokens > 2000 maximum"):
        _ask(url, [{"role": "user", "content": "x" * 9000}])


@pytest.mark.parametrize(
    ("messages", "problem"),
    [
        (
            [
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "n", "input": {}}]},
                {"role": "user", "content": "no results"},
            ],
            "without `tool_result` blocks",
        ),
        (
            [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t9", "content": "x"}]}],
            "unexpected `tool_use_id`",
        ),
        (
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": str(i), "cache_control": {"type": "ephemeral"}} for i in range(5)
                    ],
                }
            ],
            "maximum of 4 blocks with cache_control",
        ),
    ],
    ids=["unanswered call", "stray result", "five breakpoints"],
)  # fmt: skip - a table
def test_requests_the_real_api_refuses_are_refused(
    counted: tuple[ScriptedServer, str], messages: list[dict[str, object]], problem: str
) -> None:
    _, url = counted
    with pytest.raises(anthropic.BadRequestError, match=problem):
        _ask(url, messages)


def test_the_turn_header_picks_the_reply_whatever_the_history(served: tuple[ScriptedServer, str]) -> None:
    """A compacted history has fewer assistant messages than replies given; the header still names the turn."""
    _, url = served
    with anthropic.Anthropic(api_key="k", base_url=url, max_retries=0) as client:
        message = client.messages.create(
            model="unit",
            max_tokens=10,
            messages=[{"role": "user", "content": "go"}],
            extra_headers={"x-cubicle-turn": "1"},
        )
    assert message.content[0].text == "bye"  # type: ignore[union-attr]
