"""Context management over a long session: 300 steps of 16,000-character outputs in a 200k-token window.

The real loop runs against the scripted server (which counts prompts and cache reads like the
real API and refuses prompts above the window) and a MemorySandbox, once with the default
policy, once with the ``server`` strategy (the scripted server clears old tool results as the
API's context-management beta would; the prompt sizes are then of what the model is shown) and
once unmanaged (the baseline, which hits the window near step 45). The context
overhead per step is the time ``plan`` and ``view`` take at each step of the same session,
replayed with the same policy. ``python -m bench.context`` prints this table alone.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import anthropic

from bench.measure import Report, smoke
from controller.agent.anthropic_model import AnthropicModel
from controller.agent.context import Measure, estimate_tokens, plan, view
from controller.agent.loop import Agent, Conversation, TurnOutcome
from controller.agent.scripted import CONTEXT_BETA, Scenario, ScriptedServer, serve_in_thread, server_edits
from controller.testing import MemorySandbox, Reply
from controller.wire.events import ContextEdited, ListSink
from controller.wire.limits import Limits
from controller.wire.policies import ContextPolicy, Edit

STEPS = 300
OUTPUT_CHARS = 16_000
WINDOW = 200_000
MAX_TOKENS = 8192


async def _session(
    url: str, server: ScriptedServer, name: str, policy: ContextPolicy, steps: int = STEPS
) -> tuple[TurnOutcome, Any]:
    turns = [{"content": [{"type": "tool_use", "name": "run_command", "input": {"command": "make test"}}]}] * steps
    turns.append({"content": [{"type": "text", "text": "Done."}]})
    server.scenarios[name] = Scenario.model_validate({"name": name, "turns": turns, "context_window": WINDOW})
    client = anthropic.AsyncAnthropic(api_key="bench", base_url=url, max_retries=0)
    limits = Limits(max_steps=steps + 5, token_budget=1_000_000_000, model_output_chars=OUTPUT_CHARS)
    sandbox = MemorySandbox(commands={"make test": Reply(stdout="E" * (OUTPUT_CHARS - 60))})
    sink, convo = ListSink(), Conversation()
    agent = Agent(
        session_id=name,
        model=AnthropicModel(client, name, MAX_TOKENS, policy.server_edits()),
        sandbox=sandbox,
        sink=sink,
        limits=limits,
        system="You are a careful engineer.",
        context=policy,
    )
    convo.add_user_text("Fix the failing tests.")
    try:
        outcome = await agent.run_turn(convo)
    finally:
        await client.close()
    return outcome, (convo, sink)


def _overhead(messages: list[dict[str, Any]], policy: ContextPolicy) -> list[float]:
    """Seconds of plan + view at each step, replaying the session's growth with the same policy."""
    edits: list[Edit] = []
    measure, spent = Measure(), []
    for end in range(3, len(messages) + 1, 2):  # each step adds an assistant message and its results
        grown = messages[:end]
        started = time.perf_counter()
        while (edit := plan(grown, edits, policy, MAX_TOKENS, measure=measure)) is not None:
            edits.append(edit.model_copy(update={"summary": "summary"}) if edit.kind == "compact" else edit)
        view(grown, edits, measure)
        spent.append(time.perf_counter() - started)
    return spent


def _shown(request: dict[str, Any]) -> dict[str, Any]:
    """The request as the model is shown it: after the API's own edits, if it asked for any."""
    edited = server_edits(request, CONTEXT_BETA)
    return request if isinstance(edited, str) else edited[0]


def _cached(state: Any) -> float:
    usage = state[0].usage
    prompt = usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens
    return float(usage.cache_read_input_tokens / prompt) if prompt else 0.0


def _row(label: str, server: ScriptedServer, name: str, outcome: TurnOutcome, state: Any) -> list[str]:
    convo, sink = state
    usages = [r for r in server.requests if r.get("model") == name]
    sizes = sorted(estimate_tokens(_shown(r)["messages"]) for r in usages)
    edits = [e for e in sink.events if isinstance(e, ContextEdited)]
    steps = sum(1 for m in convo.messages if m["role"] == "assistant")
    return [
        label,
        f"{steps}",
        outcome.reason,
        f"{sizes[-1]:,}",
        f"{sizes[round(0.95 * (len(sizes) - 1))]:,}",
        f"{len(edits)}",
        f"{_cached(state):.0%}",
        f"{len(convo.messages)}",
    ]


async def table(report: Report) -> None:
    server = ScriptedServer([Scenario(name="default", turns=[])])
    policy = ContextPolicy(window=WINDOW)
    steps = 20 if smoke() else STEPS  # smoke: too few to need any edit, enough to run every path once
    with serve_in_thread(server.app) as url:
        managed = await _session(url, server, "bench-managed", policy, steps)
        by_api = await _session(url, server, "bench-server", policy.model_copy(update={"strategy": "server"}), steps)
        off = policy.model_copy(update={"strategy": "off"})
        unmanaged = await _session(url, server, "bench-unmanaged", off, steps)
    cached = _cached(managed[1])
    spent = sorted(await asyncio.to_thread(_overhead, managed[1][0].messages, policy))
    p95 = spent[round(0.95 * (len(spent) - 1))]
    header = [
        "policy",
        "steps done",
        "ended",
        "largest prompt shown (est.)",
        "p95 prompt shown (est.)",
        "edits",
        "cache reads",
        "messages stored",
    ]
    rows = [
        _row("auto (default)", server, "bench-managed", *managed),
        _row("server (the API clears; opt-in)", server, "bench-server", *by_api),
        _row("off (baseline)", server, "bench-unmanaged", *unmanaged),
    ]
    rows.append(
        [
            "auto: context overhead",
            "",
            "",
            "",
            f"p95 {p95 * 1000:.2f} ms/step (p50 {statistics.median(spent) * 1000:.2f})",
            "",
            "",
            "",
        ]
    )
    report.extra.append(
        (f"Context: {steps} steps of {OUTPUT_CHARS:,}-character outputs, {WINDOW:,}-token window", header, rows)
    )
    largest = int(rows[0][3].replace(",", ""))
    report.check(managed[0].reason == "end_turn", "context: the managed session ends with end_turn")
    report.check(largest <= WINDOW - MAX_TOKENS - policy.margin, f"context: largest prompt {largest:,} ≤ 182k")
    report.check(int(rows[0][5]) <= 12, f"context: {rows[0][5]} edits ≤ 12")
    report.check(cached >= 0.8, f"context: {cached:.0%} of prompt tokens from cache ≥ 80%")
    report.check(p95 <= 0.002, f"context: overhead p95 {p95 * 1000:.2f} ms ≤ 2 ms per step")


def main() -> None:
    report = Report()
    asyncio.run(table(report))
    print(report.render())


if __name__ == "__main__":
    main()
