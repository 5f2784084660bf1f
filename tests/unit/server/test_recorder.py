"""The Recorder and the Feed against a real Store: committed before visible, replayed then live."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.agent.loop import Conversation
from controller.server.feed import Feed
from controller.server.recorder import Recorder
from controller.server.store import Row, Store
from controller.wire.events import (
    CommandOutput,
    Event,
    FinishReason,
    SessionFinished,
    StatusEvent,
    TextDelta,
    ToolCall,
    ToolResult,
    Usage,
    UsageEvent,
)
from controller.wire.policies import Edit
from tests.eventually import eventually_async

SID = "s_feedtest"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    store = Store(tmp_path / "cubicle.db")
    record = Row.fresh(SID, "/r", "t", "m")
    store.insert(record)
    yield store
    store.close()


class Turn:
    """Whether the session's turn runs: what the Feed asks before it stops following."""

    def __init__(self) -> None:
        self.running = True

    def __call__(self, session_id: str) -> bool:
        return self.running


def text(n: int) -> TextDelta:
    return TextDelta(session_id=SID, text=f"t{n}")


def finished(reason: FinishReason) -> SessionFinished:
    return SessionFinished(session_id=SID, reason=reason, steps=2, usage=Usage(output_tokens=9))


async def collect(feed: Feed, after: int = 0) -> list[Event]:
    return [event async for event in feed.follow(SID, after)]


async def test_follow_replays_after_a_sequence_number_and_ends_when_no_turn_runs(store: Store) -> None:
    turn = Turn()
    feed = Feed(store, turn, poll_s=300)
    recorder = Recorder(store, feed, SID, Conversation())
    for n in range(3):
        await recorder.emit(text(n))
    turn.running = False
    assert [e.seq for e in await collect(feed)] == [1, 2, 3]
    assert [(e.seq, e.text) for e in await collect(feed, after=2) if isinstance(e, TextDelta)] == [(3, "t2")]
    assert await collect(feed, after=3) == []


def test_a_read_of_events_is_bounded_in_bytes_but_always_makes_progress(store: Store) -> None:
    """Outputs of up to a MiB each: a replay goes out in pieces of about EVENTS_READ_BYTES, never zero events."""
    big = "x" * 400_000
    for _ in range(6):
        store.append_event(TextDelta(session_id=SID, text=big))
    first = store.events_after(SID, 0, max_bytes=1_000_000)
    assert [e.seq for e in first] == [1, 2]
    assert [e.seq for e in store.events_after(SID, 2, max_bytes=10)] == [3]  # one past the cap: still one
    assert [e.seq for e in store.events_after(SID, 3)] == [4, 5, 6]  # the default cap, 8 MiB


async def test_events_stored_between_two_reads_come_as_one_batch(store: Store) -> None:
    turn = Turn()
    feed = Feed(store, turn, poll_s=300)
    recorder = Recorder(store, feed, SID, Conversation())
    batches = feed.batches(SID)
    for n in range(3):
        await recorder.emit(text(n))
    assert [e.seq for e in await anext(batches)] == [1, 2, 3]
    await recorder.emit(text(3))
    await recorder.emit(text(4))
    assert [e.seq for e in await anext(batches)] == [4, 5]
    turn.running = False
    feed.notify(SID)
    assert [batch async for batch in batches] == []


async def test_followers_share_a_read_until_the_next_event_is_stored(store: Store) -> None:
    turn = Turn()
    feed = Feed(store, turn, poll_s=300)
    recorder = Recorder(store, feed, SID, Conversation())
    for n in range(3):
        await recorder.emit(text(n))
    first, second, late = feed.batches(SID), feed.batches(SID), feed.batches(SID)
    shared = await anext(first)
    assert await anext(second) is shared, "two followers reading from the same point under one wake-up share it"
    await recorder.emit(text(3))
    assert [e.seq for e in await anext(late)] == [1, 2, 3, 4], "a read made before the newest event is not reused"
    assert [e.seq for e in await anext(first)] == [4]


async def test_an_event_after_a_quiet_spell_goes_out_at_once(store: Store) -> None:
    """Not one interval later: with an interval of five minutes, a held event would miss the wait's bound by far (how
    soon it goes out is SSE delivery's benchmark row)."""
    feed = Feed(store, Turn(), poll_s=300, interval_s=300)
    recorder = Recorder(store, feed, SID, Conversation())
    first, second = feed.batches(SID), feed.batches(SID)
    waiting = asyncio.create_task(anext(first))
    await asyncio.sleep(0.05)  # a quiet spell: the follower waits (were it not waiting yet, it would read the event)
    await recorder.emit(text(0))
    assert [e.seq for e in await asyncio.wait_for(waiting, 30)] == [1]
    assert [e.seq for e in await asyncio.wait_for(anext(second), 30)] == [1]


async def test_after_a_batch_a_follower_reads_again_one_interval_later_and_gathers_what_came_meanwhile(
    store: Store,
) -> None:
    """An interval of a second: the three events below are stored well within it, even on a busy machine."""
    feed = Feed(store, Turn(), poll_s=300, interval_s=1.0)
    recorder = Recorder(store, feed, SID, Conversation())
    first, second = feed.batches(SID), feed.batches(SID)
    waiting = asyncio.create_task(anext(first))
    await asyncio.sleep(0.05)
    began = time.monotonic()
    await recorder.emit(text(0))
    assert [e.seq for e in await asyncio.wait_for(waiting, 30)] == [1]
    assert [e.seq for e in await anext(second)] == [1]
    waiting, also = asyncio.create_task(anext(first)), asyncio.create_task(anext(second))
    for n in range(1, 4):
        await recorder.emit(text(n))
        await asyncio.sleep(0.02)
    batch, same = await asyncio.wait_for(asyncio.gather(waiting, also), 30)
    assert [e.seq for e in batch] == [2, 3, 4], "events stored within the interval go out together"
    assert same is batch, "followers sent the same batch wake together and still share one read"
    assert time.monotonic() - began >= 1.0, "the follower waited out the interval (a load can only lengthen it)"


async def test_a_follower_that_finds_the_turn_ended_reads_the_store_anew_before_it_ends(store: Store) -> None:
    """Another process stores its last events and its end before its notify arrives: a follower that joins
    in between must not end its stream on the empty read another follower made before them."""
    turn = Turn()
    feed = Feed(store, turn, poll_s=300)
    store.append_event(text(0))  # seq 1, stored by the controller that runs the turn (another process)
    waiting = asyncio.create_task(anext(feed.batches(SID, after=1)))  # reads nothing after 1, and waits
    await asyncio.sleep(0.05)
    store.append_event(finished("end_turn"))
    turn.running = False
    assert [e.seq async for batch in feed.batches(SID, after=1) for e in batch] == [2]
    feed.notify(SID)  # the notify arrives
    assert [e.seq for e in await asyncio.wait_for(waiting, 30)] == [2]


async def test_a_follower_catching_up_reads_on_without_waiting_for_the_interval(store: Store) -> None:
    turn = Turn()
    turn.running = False
    for n in range(1200):
        store.append_event(text(n))
    feed = Feed(store, turn, poll_s=300, interval_s=300)  # a wait would outlast the bound below by far
    batches = feed.batches(SID)
    sizes = [len(await asyncio.wait_for(anext(batches), 30)) for _ in range(3)]
    assert sizes == [500, 500, 200]
    await batches.aclose()


async def test_a_poll_reads_the_store_again_despite_a_shared_read(store: Store) -> None:
    turn = Turn()
    feed = Feed(store, turn, poll_s=0.01)
    follower = feed.batches(SID)
    waiting = asyncio.create_task(anext(follower))
    await asyncio.sleep(0.05)  # the follower has read nothing and waits; that empty read is kept on the wake-up
    store.append_event(text(0))  # stored without a notify, as another process would
    assert [e.seq for e in await asyncio.wait_for(waiting, 30)] == [1]


async def test_a_follower_is_woken_by_each_event_and_by_the_end_of_the_turn(store: Store) -> None:
    turn = Turn()
    feed = Feed(store, turn, poll_s=300)  # far longer than the test: only notify can wake the follower in time
    recorder = Recorder(store, feed, SID, Conversation())
    seen: list[Event] = []

    async def follow() -> None:
        async for event in feed.follow(SID):
            seen.append(event)

    follower = asyncio.create_task(follow())
    for n in range(3):
        await asyncio.sleep(0.05)
        await recorder.emit(text(n))
    await eventually_async(lambda: [e.seq for e in seen], until=lambda seqs: seqs == [1, 2, 3], what="each is followed")
    assert not follower.done()
    turn.running = False
    feed.notify(SID)
    await asyncio.wait_for(follower, 30)


async def test_every_follower_is_woken_not_just_the_first(store: Store) -> None:
    turn = Turn()
    feed = Feed(store, turn, poll_s=300)
    recorder = Recorder(store, feed, SID, Conversation())
    followers = [asyncio.create_task(collect(feed)) for _ in range(3)]
    await asyncio.sleep(0.05)
    await recorder.emit(text(0))
    turn.running = False
    await recorder.emit(finished("end_turn"))
    for follower in followers:
        assert [e.type for e in await asyncio.wait_for(follower, 30)] == ["text", "session_finished"]


async def test_counters_are_committed_before_a_follower_sees_the_event(store: Store) -> None:
    turn = Turn()
    feed = Feed(store, turn, poll_s=300)
    convo = Conversation(steps=4)
    recorder = Recorder(store, feed, SID, convo)
    observed: list[tuple[str, str, int, int]] = []

    async def follow() -> None:
        async for event in feed.follow(SID):
            record = store.get(SID)
            assert record is not None
            observed.append((event.type, record.status, record.usage.input_tokens, record.steps))

    follower = asyncio.create_task(follow())
    await asyncio.sleep(0.01)
    await recorder.emit(UsageEvent(session_id=SID, step=1, turn=Usage(input_tokens=7), session=Usage(input_tokens=70)))
    await eventually_async(lambda: observed, what="the follower reads the record as it gets the event, before the next")
    turn.running = False
    await recorder.emit(finished("end_turn"))
    await asyncio.wait_for(follower, 30)
    assert observed == [("usage", "running", 70, 4), ("session_finished", "idle", 0, 2)]


@pytest.mark.parametrize(
    ("reason", "interrupting", "status"),
    [
        ("end_turn", False, "idle"),
        ("max_steps", False, "idle"),
        ("cancelled", False, "cancelled"),
        ("cancelled", True, "interrupted"),
        ("error", True, "failed"),
    ],
)
async def test_the_status_a_finished_turn_leaves(
    store: Store, reason: FinishReason, interrupting: bool, status: str
) -> None:
    recorder = Recorder(store, Feed(store, Turn(), poll_s=300), SID, Conversation())
    recorder.interrupting = interrupting
    await recorder.emit(finished(reason))
    record = store.get(SID)
    assert record is not None and (record.status, record.finish_reason) == (status, reason)


async def test_save_transcript_writes_new_messages_and_the_merged_last_one(store: Store) -> None:
    convo = Conversation()
    recorder = Recorder(store, Feed(store, Turn(), poll_s=300), SID, convo)
    convo.add_user_text("first")
    await recorder.save_transcript(convo)
    convo.add_user_text("merged into the same user message")
    await recorder.save_transcript(convo)
    convo.messages.append({"role": "assistant", "content": [{"type": "text", "text": "ok"}]})
    await recorder.save_transcript(convo)
    assert store.messages(SID) == convo.messages
    assert len(store.messages(SID)[0]["content"]) == 2


async def test_a_recorder_over_a_stored_transcript_starts_where_the_store_ends(store: Store) -> None:
    convo = Conversation()
    convo.add_user_text("before the restart")
    store.save_messages(SID, convo.messages, 0)
    reloaded = Conversation(messages=store.messages(SID))
    recorder = Recorder(store, Feed(store, Turn(), poll_s=300), SID, reloaded)
    reloaded.add_user_text("after it")
    await recorder.save_transcript(reloaded)
    assert [b["text"] for b in store.messages(SID)[0]["content"]] == ["before the restart", "after it"]


async def test_status_events_need_no_conversation_state(store: Store) -> None:
    recorder = Recorder(store, Feed(store, Turn(), poll_s=300), SID, Conversation())
    await recorder.emit(StatusEvent(session_id=SID, status="interrupted", detail="controller restarted"))
    assert [e.type for e in store.events_after(SID, 0)] == ["status"]


async def test_context_edits_are_stored_so_a_reload_sends_the_same_view(store: Store, tmp_path: Path) -> None:
    """The model's next request after a restart equals the one an uninterrupted run would send."""
    convo = Conversation()
    recorder = Recorder(store, Feed(store, Turn(), poll_s=300), SID, convo)
    convo.add_user_text("fix it")
    for i in range(6):
        use = {"type": "tool_use", "id": f"t{i}", "name": "run_command", "input": {"command": "make"}}
        convo.messages.append({"role": "assistant", "content": [use]})
        convo.messages.append(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": "x" * 500}]}
        )
        if i == 3:
            convo.edits.append(Edit(kind="mask", upto=4, tokens_before=900, tokens_after=400))
        await recorder.save_transcript(convo)
    convo.edits.append(Edit(kind="compact", upto=7, summary="made twice, failed twice"))
    await recorder.save_transcript(convo)
    store.close()
    reopened = Store(tmp_path / "cubicle.db")
    try:
        reloaded = Conversation(messages=reopened.messages(SID), edits=reopened.edits(SID))
        assert reloaded.edits == convo.edits and reloaded.view() == convo.view()
        assert reloaded.messages == convo.messages, "the stored transcript stays whole"
    finally:
        reopened.close()


async def test_tool_results_past_the_sessions_cap_are_stored_without_their_output(store: Store) -> None:
    """The cap counts every stored byte; past it a result keeps its metadata and says how much was not kept,
    while the sink's caller (the live view) still gets the whole event. A reloaded recorder counts from the store."""
    cap = 110_000  # outputs are stored up to 7/8 of it: 96,250 bytes
    recorder = Recorder(store, Feed(store, Turn(), poll_s=300), SID, Conversation(), events_cap=cap)
    shown = []
    for n in range(6):
        result = ToolResult(
            session_id=SID,
            id=f"c{n}",
            name="run_command",
            is_error=False,
            output="é" * 20_000,
            model_chars=100,
            duration_s=0.1,
            exit_code=0,
        )
        await recorder.emit(result)
        shown.append(result)
        await recorder.emit(text(n))
    stored = [e for e in store.events_after(SID, 0) if isinstance(e, ToolResult)]
    assert [len(e.output) for e in stored] == [20_000, 20_000, 0, 0, 0, 0]  # 40,000 bytes each: two fit
    assert [e.output_not_kept for e in stored] == [0, 0, 20_000, 20_000, 20_000, 20_000]
    assert [e.exit_code for e in stored] == [0] * 6 and [e.seq for e in stored] == [e.seq for e in shown]
    assert all(len(e.output) == 20_000 for e in shown)
    assert store.event_bytes(SID) == recorder.stored < cap
    again = Recorder(store, Feed(store, Turn(), poll_s=300), SID, Conversation(), events_cap=cap)
    assert again.stored == recorder.stored
    await again.emit(
        ToolResult(
            session_id=SID,
            id="small",
            name="read_file",
            is_error=False,
            output="x" * 10,
            model_chars=10,
            duration_s=0.1,
        )
    )
    assert store.events_after(SID, 0)[-1].output == "x" * 10  # type: ignore[union-attr]


async def test_live_output_is_stored_until_the_sessions_cap_and_then_not_at_all(store: Store) -> None:
    """A command's live output replays on a reload, so it is stored; past the session's cap it is neither stored
    nor shown to followers (the result says what was not kept)."""
    recorder = Recorder(store, Feed(store, Turn(), poll_s=300), SID, Conversation(), events_cap=100_000)
    for n, size in enumerate((30_000, 30_000, 30_000, 10)):  # the small last one would fit: it is not stored either
        await recorder.emit(CommandOutput(session_id=SID, tool_use_id="c", text=str(n) * size))
    stored = [e.text[0] for e in store.events_after(SID, 0) if isinstance(e, CommandOutput)]
    assert stored == ["0", "1"]  # 30,000 bytes each, under 7/8 of the cap: two fit, then no room is left
    assert store.event_bytes(SID) == recorder.stored < 100_000


async def test_long_arguments_past_the_cap_are_stored_as_a_note(store: Store) -> None:
    """A write_file's content counts toward the cap too; past it the call keeps its path and says what it dropped."""
    recorder = Recorder(store, Feed(store, Turn(), poll_s=300), SID, Conversation(), events_cap=80_000)
    for n in range(3):
        call = ToolCall(
            session_id=SID, id=f"w{n}", name="write_file", input={"path": f"f{n}.txt", "content": "x" * 30_000}
        )
        await recorder.emit(call)
        assert call.input["content"] == "x" * 30_000  # the live view's copy is whole
    stored = [e for e in store.events_after(SID, 0) if isinstance(e, ToolCall)]
    assert [e.input["path"] for e in stored] == ["f0.txt", "f1.txt", "f2.txt"]
    assert [e.input_not_kept for e in stored] == [0, 0, 30_002]  # bytes of JSON: the string and its quotes
    assert (
        stored[2].input["content"] == "(30002 bytes not stored: the session's stored events reached the server's cap)"
    )
    assert store.event_bytes(SID) < 80_000
