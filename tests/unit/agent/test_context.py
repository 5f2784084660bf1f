"""view(messages, edits): the model's bounded view of a transcript the store keeps whole."""

from __future__ import annotations

import copy
import itertools
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.agent.context import (
    Measure,
    estimate_tokens,
    files_changed,
    mask_keeping,
    plan,
    tokens,
    user_words,
    view,
)
from controller.wire.policies import ContextPolicy, Edit

Message = dict[str, Any]


@st.composite
def transcripts(draw: st.DrawFn) -> list[Message]:
    """A valid transcript: turns of user text, then steps of parallel tool calls and their results."""
    messages: list[Message] = []
    ids = iter(range(10_000))
    for turn in range(draw(st.integers(1, 3))):
        words = {"type": "text", "text": f"follow-up {turn}: " + draw(st.text(max_size=30))}
        if messages and messages[-1]["role"] == "user":
            messages[-1]["content"].append(words)
        else:
            messages.append({"role": "user", "content": [words]})
        for _ in range(draw(st.integers(0, 4))):
            names = draw(st.lists(st.sampled_from(["read_file", "write_file", "run_command"]), min_size=1, max_size=3))
            uses = [
                {
                    "type": "tool_use",
                    "id": f"toolu_{next(ids)}",
                    "name": name,
                    "input": {"path": f"f{len(messages)}.py", "content": "x" * draw(st.integers(0, 3000))},
                }
                for name in names
            ]
            messages.append({"role": "assistant", "content": [{"type": "text", "text": "working"}, *uses]})
            results = [
                {
                    "type": "tool_result",
                    "tool_use_id": u["id"],
                    "content": "out " * draw(st.integers(0, 50)),
                    **({"is_error": True} if draw(st.booleans()) else {}),
                }
                for u in uses
            ]
            messages.append({"role": "user", "content": results})
        if draw(st.booleans()):
            messages.append({"role": "assistant", "content": [{"type": "text", "text": "done"}]})
    return messages


@st.composite
def edited(draw: st.DrawFn) -> tuple[list[Message], list[Edit]]:
    messages = draw(transcripts())
    edits = [Edit(kind="mask", upto=draw(st.integers(0, len(messages)))) for _ in range(draw(st.integers(0, 2)))]
    cuts = [i for i, m in enumerate(messages) if i > 0 and m["role"] == "assistant"]  # where a compaction may cut
    if cuts and draw(st.booleans()):
        kind = draw(st.sampled_from(["compact", "trim"]))
        edits.append(Edit(kind=kind, upto=draw(st.sampled_from(cuts)), summary="we fixed the parser"))
    return messages, draw(st.permutations(edits))


def _valid_for_the_api(messages: list[Message]) -> None:
    assert messages[0]["role"] == "user"
    assert all(a["role"] != b["role"] for a, b in itertools.pairwise(messages))
    for index, message in enumerate(messages):
        asked = [b["id"] for b in message["content"] if b.get("type") == "tool_use"]
        answered_here = [b["tool_use_id"] for b in message["content"] if b.get("type") == "tool_result"]
        if answered_here:
            previous = messages[index - 1]["content"]
            assert answered_here == [b["id"] for b in previous if b.get("type") == "tool_use"]
        if asked and index + 1 < len(messages):
            answers = [b["tool_use_id"] for b in messages[index + 1]["content"] if b.get("type") == "tool_result"]
            assert answers == asked


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(edited())
def test_the_view_is_always_a_valid_request_that_keeps_the_users_words(case: tuple[list[Message], list[Edit]]) -> None:
    messages, edits = case
    before = copy.deepcopy(messages)
    shown = view(messages, edits)
    assert messages == before, "the stored transcript is never changed"
    assert view(copy.deepcopy(messages), edits) == shown, "the same input gives the same view"
    _valid_for_the_api(shown)
    text = json.dumps(shown, ensure_ascii=False)
    assert all(json.dumps(words, ensure_ascii=False)[1:-1] in text for words in user_words(messages))


@settings(max_examples=200, deadline=None, derandomize=True)
@given(edited(), st.data())
def test_between_edits_each_request_starts_with_the_previous_one(
    case: tuple[list[Message], list[Edit]], data: st.DataObject
) -> None:
    messages, edits = case
    reach = max([e.upto + (e.kind != "mask") for e in edits], default=1)
    n = data.draw(st.integers(min(reach, len(messages)), len(messages)))
    earlier, later = view(messages[:n], edits), view(messages, edits)
    assert later[: len(earlier)] == earlier


def _session(steps: int, output: int) -> list[Message]:
    messages: list[Message] = [{"role": "user", "content": [{"type": "text", "text": "fix the parser"}]}]
    for i in range(steps):
        use = {"type": "tool_use", "id": f"t{i}", "name": "run_command", "input": {"command": "pytest"}}
        messages.append({"role": "assistant", "content": [use]})
        messages.append(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": "E" * output}]}
        )
    return messages


def test_a_mask_keeps_the_newest_results_and_says_how_to_get_the_rest_back() -> None:
    messages = _session(8, 10_000)
    upto = mask_keeping(messages, 5)
    shown = view(messages, [Edit(kind="mask", upto=upto)])
    results = [m["content"][0]["content"] for m in shown if m["role"] == "user" and m is not shown[0]]
    assert [len(r) for r in results[-5:]] == [10_000] * 5
    assert (
        results[:3]
        == ["[cleared to save context: run_command output, 10,000 characters. Call run_command again if you need it.]"]
        * 3
    )
    assert mask_keeping(_session(3, 10), 5) == 0, "nothing to mask while there are fewer results than kept"


def test_a_compaction_keeps_the_users_words_and_the_files_changed() -> None:
    messages = _session(4, 100)
    messages[2]["content"].append({"type": "text", "text": "also keep the old API"})  # a follow-up
    messages[3]["content"].append(
        {"type": "tool_use", "id": "w", "name": "write_file", "input": {"path": "p.py", "content": ""}}
    )
    messages[4]["content"].append({"type": "tool_result", "tool_use_id": "w", "content": "ok"})
    shown = view(messages, [Edit(kind="compact", upto=5, summary="parser half fixed")])
    first = shown[0]["content"][0]["text"]
    assert "fix the parser" in first and "also keep the old API" in first and "parser half fixed" in first
    assert "p.py" in first and files_changed(messages) == ["p.py"]
    assert shown[1:] == messages[5:]


def _apply_policy(messages: list[Message], edits: list[Edit], policy: ContextPolicy) -> None:
    """What the loop does before each request: apply planned edits until none is needed."""
    while (edit := plan(messages, edits, policy, max_tokens=1024)) is not None:
        if edit.kind == "compact":
            edit = edit.model_copy(update={"summary": "ran the tests; parser fails on empty input"})
        edits.append(edit)


@pytest.mark.parametrize(
    ("keep_results", "kinds"), [(5, {"mask"}), (12, {"compact"})], ids=["masking suffices", "masking frees too little"]
)
def test_a_long_session_stays_under_the_ceiling_and_edits_rarely(keep_results: int, kinds: set[str]) -> None:
    """60 steps of 8,000-character outputs in a 30k-token window: without edits it passes the window near step 14."""
    policy = ContextPolicy(window=30_000, min_free=6000, keep_results=keep_results, keep_recent=4000, margin=1000)
    messages, edits, sizes = _session(0, 0), [], []
    previous: list[Message] = []
    for step in range(60):
        messages += _session(1, 8000)[1:]
        messages[-2]["content"][0]["id"] = messages[-1]["content"][0]["tool_use_id"] = f"s{step}"
        count = len(edits)
        _apply_policy(messages, edits, policy)
        shown = view(messages, edits)
        sizes.append(estimate_tokens(shown))
        _valid_for_the_api(shown)
        if len(edits) == count:
            assert shown[: len(previous)] == previous, "between edits each request extends the last"
        previous = shown
    assert max(sizes) <= policy.ceiling(1024)
    assert estimate_tokens(messages) > 100_000, "the store keeps every message whole"
    assert len(edits) <= 20 and {e.kind for e in edits} == kinds


def test_off_never_edits_and_mask_never_summarizes() -> None:
    messages = _session(40, 8000)
    assert plan(messages, [], ContextPolicy(strategy="off", window=30_000), 1024) is None
    edits: list[Edit] = []
    _apply_policy(messages, edits, ContextPolicy(strategy="mask", window=30_000, min_free=3000, margin=1000))
    assert edits and "compact" not in {e.kind for e in edits}
    assert estimate_tokens(view(messages, edits)) <= 30_000 - 1024 - 1000


@settings(max_examples=150, deadline=None, derandomize=True)
@given(edited())
def test_remembered_sizes_give_the_same_view_as_a_fresh_count(case: tuple[list[Message], list[Edit]]) -> None:
    """One Measure carried along a growing transcript (edits arriving as they become valid) never goes stale."""
    messages, edits = case
    work = copy.deepcopy(messages)
    measure, applied = Measure(), []
    for n in range(1, len(work) + 1):
        applied = [e for e in edits if (e.upto <= n if e.kind == "mask" else e.upto < n)]
        remembered = view(work[:n], applied, measure)
        assert remembered == view(work[:n], applied)
        assert tokens(work[:n], applied, measure) == estimate_tokens(remembered)
    last = work[-1]  # a user text merged into the last message replaces its content list, same message object
    last["content"] = [*last["content"], {"type": "text", "text": "one more thing"}]
    assert view(work, applied, measure) == view(work, applied)
    assert tokens(work, applied, measure) == estimate_tokens(view(work, applied))
