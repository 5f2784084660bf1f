"""Context management in the loop, through the real SDK and a scripted server that counts like the real API."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from controller.agent.conversation import Conversation
from controller.agent.scripted import CLEARED, CONTEXT_BETA, ScriptedServer, invalid_request, prompt_usage, server_edits
from controller.testing import MemorySandbox, Reply
from controller.wire.events import ContextEdited, ErrorEvent, UsageEvent
from controller.wire.policies import ContextPolicy
from tests.agent_harness import LIMITS, REPO_FILES, register, text, tool

OUTPUT = {"make test": Reply(stdout="E" * 8000)}
"""Each step's command prints 8,000 characters, about 2,000 tokens."""
WINDOW = 30_000
POLICY = ContextPolicy(window=WINDOW, min_free=6000, keep_recent=4000, margin=1000)


def _steps(n: int) -> list[dict[str, Any]]:
    return [{"content": [tool("run_command", command="make test")]}] * n + [{"content": [text("Done.")]}]


def _edits_seen(request: dict[str, Any]) -> tuple[str, int]:
    """What tells two views apart: the first message (a compaction rewrites it) and how many results are masked."""
    return str(request["messages"][0]), str(request["messages"]).count("[cleared to save context")


def _sizes(requests: list[dict[str, Any]]) -> list[int]:
    return [sum(prompt_usage(r, set()).values()) for r in requests]


async def test_sixty_steps_of_long_output_fit_a_small_window(
    run_in_memory: Callable[..., Any], model_server: ScriptedServer
) -> None:
    """Unmanaged, this session passes the 30k window near step 12 and every later request is refused."""
    limits = LIMITS.model_copy(update={"max_steps": 70})
    name = register(model_server, _steps(60), context_window=WINDOW)
    run = await run_in_memory([], limits=limits, commands=OUTPUT, context=POLICY, name=name)
    assert run.outcome.reason == "end_turn" and len(run.requests) >= 61
    assert max(_sizes(run.requests)) <= WINDOW - 1024 - 1000 + 200
    assert all(invalid_request(r) is None for r in run.requests)
    edits = run.of_type(ContextEdited)
    assert edits and len(edits) == len(run.convo.edits) and len(edits) <= 20
    assert sum(1 for m in run.convo.messages if m["role"] == "assistant") == 61, "the transcript keeps everything"
    extended = 0
    for earlier, later in itertools.pairwise(run.requests):
        if _edits_seen(earlier) == _edits_seen(later):  # no edit in between: the cache prefix holds
            assert later["messages"][: len(earlier["messages"]) - 1] == earlier["messages"][:-1]
            extended += 1
    assert extended >= 40


async def test_under_the_server_strategy_the_api_clears_old_results_and_the_view_is_sent_whole(
    run_in_memory: Callable[..., Any], model_server: ScriptedServer
) -> None:
    """The same sixty steps with the clearing left to the API (its context-management beta, as the scripted
    server applies it): what the model sees stays under the window, what is sent is the whole transcript."""
    limits = LIMITS.model_copy(update={"max_steps": 70})
    name = register(model_server, _steps(60), context_window=WINDOW)
    server = POLICY.model_copy(update={"strategy": "server"})
    run = await run_in_memory([], limits=limits, commands=OUTPUT, context=server, name=name)
    assert run.outcome.reason == "end_turn" and len(run.requests) == 61
    assert all(r["context_management"] == server.server_edits() for r in run.requests)
    seen = [server_edits(r, CONTEXT_BETA) for r in run.requests]
    assert all(not isinstance(s, str) for s in seen)
    shown = [s[0] for s in seen if not isinstance(s, str)]
    assert max(sum(prompt_usage(s, set()).values()) for s in shown) <= WINDOW, "what the model sees fits"
    assert max(_sizes(run.requests)) > 3 * WINDOW, "what is sent is everything: nothing was masked here"
    assert not run.convo.edits and "[cleared" not in str(run.requests)
    edits = run.of_type(ContextEdited)
    assert edits and all(e.kind == "server" and e.tokens_before - e.tokens_after >= 6000 for e in edits)
    assert len(edits) == sum(1 for s in shown if CLEARED in str(s["messages"]))
    assert sum(1 for m in run.convo.messages if m["role"] == "assistant") == 61


def test_the_scripted_server_refuses_context_management_without_the_beta_and_clears_as_asked() -> None:
    results = [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": "x" * 4000}]}
        for i in range(6)
    ]
    asked = POLICY.model_copy(update={"strategy": "server"}).server_edits()
    assert asked is not None
    body = {"messages": results, "context_management": asked}

    def with_edit(**changes: Any) -> dict[str, Any]:
        return {**body, "context_management": {"edits": [{**asked["edits"][0], **changes}]}}

    assert server_edits(body, "") == "context_management: Extra inputs are not permitted"
    assert server_edits({"messages": results}, "") == ({"messages": results}, [])
    assert server_edits(body, CONTEXT_BETA) == (body, []), "under its trigger nothing is cleared"
    early = with_edit(trigger={"value": 10})
    assert server_edits(early, CONTEXT_BETA) == (early, []), "nor when it would clear less than clear_at_least"
    edited = server_edits(with_edit(trigger={"value": 10}, clear_at_least={"value": 900}), f"other, {CONTEXT_BETA}")
    assert not isinstance(edited, str)
    shown, applied = edited
    assert [b["content"] == CLEARED for m in shown["messages"] for b in m["content"]] == [True] + [False] * 5
    assert applied[0]["cleared_tool_uses"] == 1 and applied[0]["cleared_input_tokens"] >= 990
    assert results[0]["content"][0]["content"] == "x" * 4000, "the request itself is never changed"
    for odd in (
        "x",
        [1],
        {"edits": "abc"},
        {"edits": [{**asked["edits"][0], "keep": {"value": -1}}]},
        {"edits": [{**asked["edits"][0], "trigger": 5}]},
        {"edits": [{"type": "clear_everything"}]},
    ):
        refused = server_edits({"messages": results, "context_management": odd}, CONTEXT_BETA)
        assert isinstance(refused, str) and refused.startswith("context_management: "), odd


async def test_unmanaged_the_same_session_hits_the_wall(
    run_in_memory: Callable[..., Any], model_server: ScriptedServer
) -> None:
    limits = LIMITS.model_copy(update={"max_steps": 70})
    name = register(model_server, _steps(60), context_window=WINDOW)
    off = POLICY.model_copy(update={"strategy": "off"})
    run = await run_in_memory([], limits=limits, commands=OUTPUT, context=off, name=name, retries=0)
    assert run.outcome.reason == "error" and "prompt is too long" in run.outcome.detail
    assert [e.kind for e in run.of_type(ErrorEvent)] == ["context"]


async def test_a_summarizer_that_only_gets_529s_falls_back_to_trimming(
    run_in_memory: Callable[..., Any], model_server: ScriptedServer
) -> None:
    limits = LIMITS.model_copy(update={"max_steps": 40})
    overloaded = [{"status": 529, "retry_after": 0.01}] * 10
    name = register(model_server, _steps(30), context_window=WINDOW, summary_errors=overloaded)
    policy = POLICY.model_copy(update={"keep_results": 12})  # masking frees too little: a summary is due
    run = await run_in_memory([], limits=limits, commands=OUTPUT, context=policy, name=name, retries=1)
    assert run.outcome.reason == "end_turn"
    assert {e.kind for e in run.of_type(ContextEdited)} == {"trim"}
    assert all(e.kind == "context" and "summary failed" in e.message for e in run.of_type(ErrorEvent))


async def test_a_compaction_keeps_the_follow_ups_verbatim_and_counts_the_summary(
    run_in_memory: Callable[..., Any], model_server: ScriptedServer
) -> None:
    limits = LIMITS.model_copy(update={"max_steps": 40})
    policy = POLICY.model_copy(update={"keep_results": 12})
    name = register(model_server, _steps(8) + _steps(20), context_window=WINDOW, summary="SUMMARY-OF-EARLIER-WORK")
    sandbox, convo = MemorySandbox(REPO_FILES, OUTPUT), Conversation()
    first = await run_in_memory([], limits=limits, context=policy, name=name, sandbox=sandbox, convo=convo)
    convo.add_user_text("FOLLOW-UP: also keep the old API working")
    second = await run_in_memory([], limits=limits, context=policy, name=name, sandbox=sandbox, convo=convo)
    assert first.outcome.reason == second.outcome.reason == "end_turn"
    compacted = [r for r in second.requests if "SUMMARY-OF-EARLIER-WORK" in str(r["messages"][0])]
    assert compacted, "a compaction happened in the second turn"
    head = str(compacted[-1]["messages"][0])
    assert "do the task" in head and "FOLLOW-UP: also keep the old API working" in head
    usage = [e for e in second.of_type(UsageEvent)]
    assert usage[-1].session.total == convo.usage.total and usage[-1].context_window == WINDOW
