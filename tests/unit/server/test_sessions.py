"""Sessions and the life of a turn, without Docker: the real SDK against the scripted server, a sandbox passed in."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from controller.agent.scripted import ScriptedServer
from controller.config import Settings
from controller.errors import ConflictError, ForbiddenRepoError, NotFoundError
from controller.sandbox import owners
from controller.server import served
from controller.server.runtime import Runtime
from controller.server.sessions import NewSession, Sessions, open_sessions
from controller.server.store import Row, open_store
from controller.testing import NoSandbox
from controller.wire.bodies import RemoteRepo
from controller.wire.events import Event, ListSink
from controller.wire.limits import Limits
from controller.workspace import gitmirror
from tests.agent_harness import register, text, tool
from tests.eventually import eventually_async
from tests.sandbox_defaults import owned_dir

pytestmark = pytest.mark.usefixtures("each_store")  # the API suite runs on SQLite and on PostgreSQL


class CountingSandbox(NoSandbox):
    """Refuses every call like NoSandbox, and counts the containers it would have removed."""

    def __init__(self, made: list[CountingSandbox]) -> None:
        self.stops = 0
        made.append(self)

    async def stop(self) -> None:
        self.stops += 1


class Controller:
    """Sessions over a Store in a temp dir, with the sandboxes it made."""

    def __init__(self, sessions: Sessions, made: list[CountingSandbox]) -> None:
        self.sessions = sessions
        self.made = made


@pytest.fixture
async def controller(tmp_path: Path, model_server: ScriptedServer) -> AsyncIterator[Controller]:
    settings = Settings(
        api_key="test",
        base_url=model_server.url,
        model_retries=0,
        data_dir=tmp_path / "data",  # type: ignore[attr-defined]
        idle_timeout_s=0.3,
        docker_host=f"unix://{tmp_path}/no-docker.sock",
    )
    made: list[CountingSandbox] = []
    async with open_sessions(settings, lambda *_: CountingSandbox(made), start=True) as sessions:  # as the API's
        yield Controller(sessions, made)


async def test_a_turn_runs_to_its_end_and_its_events_can_be_followed(
    controller: Controller, model_server: ScriptedServer, tmp_path: Path
) -> None:
    sessions = controller.sessions
    model = register(model_server, [{"content": [text("hello"), tool("list_files")]}, {"content": [text("done")]}])
    record = await sessions.create(NewSession(owned_dir(tmp_path / "repo"), "look", model, Limits()))
    events = [event.type async for event in sessions.follow(record.id, 0)]
    assert events[0] == "session_started" and events[-1] == "session_finished"
    assert events.count("tool_call") == 1 == events.count("tool_result")
    finished = sessions.get(record.id)
    assert (finished.status, finished.finish_reason, finished.steps) == ("idle", "end_turn", 2)
    assert [m["role"] for m in sessions.transcript(record.id)] == ["user", "assistant", "user", "assistant"]


async def test_an_idle_container_is_removed_and_a_follow_up_gets_a_fresh_one(
    controller: Controller, model_server: ScriptedServer, tmp_path: Path
) -> None:
    sessions, made = controller.sessions, controller.made
    model = register(model_server, [{"content": [text("one")]}, {"content": [text("two")]}])
    record = await sessions.create(NewSession(owned_dir(tmp_path / "repo"), "first", model, Limits()))
    await sessions.join(record.id)
    # the idle timeout (0.3 s) removes the container
    await eventually_async(lambda: made[0].stops == 1, what="the idle sandbox to be stopped", timeout=5, interval=0.02)
    await sessions.follow_up(record.id, "second")
    await sessions.join(record.id)
    assert len(made) == 2, "the follow-up reloaded the session onto a new sandbox"
    texts = [b["text"] for m in sessions.transcript(record.id) for b in m["content"]]
    assert texts == ["first", "one", "second", "two"]


async def test_a_follow_up_while_a_turn_runs_is_a_conflict_and_cancel_ends_it(
    controller: Controller, model_server: ScriptedServer, tmp_path: Path
) -> None:
    sessions = controller.sessions
    model = register(model_server, [{"content": [text("slow")], "delay_s": 30}])
    record = await sessions.create(NewSession(owned_dir(tmp_path / "repo"), "wait", model, Limits()))
    await eventually_async(  # under way: a turn cancelled before its task starts records nothing
        lambda: model_server.requests_for(model), what="the turn asks the model"
    )
    with pytest.raises(ConflictError):
        await sessions.follow_up(record.id, "again")
    await asyncio.wait_for(sessions.cancel(record.id), 60)  # it waits 2 s for the turn's end; how soon: bench
    cancelled = await eventually_async(
        lambda: sessions.get(record.id), until=lambda r: r.status != "running", what="the turn ends"
    )
    assert (cancelled.status, cancelled.finish_reason) == ("cancelled", "cancelled")


async def test_closing_the_controller_leaves_a_running_turn_interrupted(
    controller: Controller, model_server: ScriptedServer, tmp_path: Path
) -> None:
    sessions = controller.sessions
    model = register(model_server, [{"content": [text("slow")], "delay_s": 30}])
    record = await sessions.create(NewSession(owned_dir(tmp_path / "repo"), "wait", model, Limits()))
    await eventually_async(  # under way: a turn cancelled before its task starts records nothing
        lambda: model_server.requests_for(model), what="the turn asks the model"
    )
    await sessions.close()
    stopped = sessions.get(record.id)
    assert (stopped.status, stopped.finish_reason) == ("interrupted", "cancelled")
    assert controller.made[0].stops >= 1


async def test_delete_keeps_the_record_unless_purged(
    controller: Controller, model_server: ScriptedServer, tmp_path: Path
) -> None:
    sessions = controller.sessions
    model = register(model_server, [{"content": [text("hi")]}])
    kept = await sessions.create(NewSession(owned_dir(tmp_path / "repo"), "x", model, Limits()))
    await sessions.join(kept.id)
    assert (await sessions.delete(kept.id, purge=False)) is not None and controller.made[0].stops == 1
    assert await sessions.delete(kept.id, purge=True) is None
    with pytest.raises(NotFoundError):
        sessions.get(kept.id)
    with pytest.raises(NotFoundError):
        sessions.follow("s_missing", 0)


async def test_a_restart_interrupts_what_was_running_and_answers_its_dangling_call(tmp_path: Path) -> None:
    settings = Settings(api_key="test", data_dir=tmp_path / "data", docker_host=f"unix://{tmp_path}/no-docker.sock")
    store = open_store(settings)
    left = Row.fresh("s_left", str(tmp_path), "go", "m", steps=1)
    store.insert(left)
    call = {"type": "tool_use", "id": "toolu_1", "name": "run_command", "input": {"command": "sleep 9"}}
    store.save_messages(left.id, [{"role": "user", "content": "go"}, {"role": "assistant", "content": [call]}], 0)
    sessions = Sessions(settings, store, Runtime(settings, sandbox_factory=lambda *_: NoSandbox()))
    await sessions.start()
    assert sessions.get(left.id).status == "interrupted"
    answer = sessions.transcript(left.id)[-1]["content"][0]
    assert answer["tool_use_id"] == "toolu_1" and answer["is_error"] and "controller stopped" in answer["content"]
    assert [(e.type, getattr(e, "status", "")) for e in store.events_after(left.id, 0)] == [("status", "interrupted")]
    await sessions.close()
    store.close()


async def test_a_turn_cancelled_before_it_began_still_records_its_end(
    controller: Controller, model_server: ScriptedServer, tmp_path: Path
) -> None:
    """Cancel in the same step as create: the turn's task never ran a line, yet the session ends cancelled."""
    sessions = controller.sessions
    model = register(model_server, [{"content": [text("never sent")]}])
    record = await sessions.create(NewSession(owned_dir(tmp_path / "repo"), "start and stop", model, Limits()))
    await sessions.cancel(record.id)
    ended = await eventually_async(
        lambda: sessions.get(record.id), what="the session to leave running", until=lambda r: r.status != "running"
    )
    assert (ended.status, ended.finish_reason) == ("cancelled", "cancelled")
    kinds = [event.type async for event in sessions.follow(record.id, 0)]
    assert kinds[0] == "session_started" and kinds[-1] == "session_finished"


async def test_register_makes_the_record_and_layer_and_refuses_a_repo_a_live_process_works_in(
    controller: Controller, tmp_path: Path
) -> None:
    """What `cubicle run` starts from: a running record owned by this process and its layer; no turn, no sandbox."""
    sessions = controller.sessions
    repo = owned_dir(tmp_path / "repo")
    record = await sessions.register(NewSession(repo, "task", None, Limits(), prefix="cli-"))
    assert record.id.startswith("cli-") and record.owner == sessions.owner and record.status == "running"
    assert sessions.store.get(record.id) == record
    assert sessions.workspaces.sessions() == [record.id] and controller.made == []
    assert not sessions.is_running(record.id)

    elsewhere = f"{sessions.settings.instance}:1:{owners._start_ticks(1)}"  # pid 1: alive, and not us
    sessions.store.update(record.id, owner=elsewhere)
    with pytest.raises(ConflictError, match=f"Session {record.id} is running on"):
        await sessions.register(NewSession(owned_dir(repo / "sub"), "task", None, Limits()))
    sessions.store.update(record.id, owner=f"{sessions.settings.instance}:999999:1")  # gone: no longer in the way
    await sessions.register(NewSession(owned_dir(repo / "sub"), "task", None, Limits()))


async def test_a_new_sessions_lease_runs_from_its_row_not_from_before_its_layer_was_made(
    controller: Controller, tmp_path: Path
) -> None:
    """Making a layer can take longer than a lease on a busy host: a row written with its lease already run out was
    taken over as interrupted by another controller before its first turn began (the bench's stores section)."""
    sessions = controller.sessions
    record = await sessions.register(NewSession(owned_dir(tmp_path / "repo"), "task", None, Limits()))
    made = (sessions.workspaces.open(record.id).root / "layer.json").stat().st_mtime
    stored = sessions.store.get(record.id)
    assert stored is not None and stored.lease_expires - sessions.lease_s >= made


async def test_a_repository_holding_the_data_directory_is_refused_and_the_database_is_private(tmp_path: Path) -> None:
    """The CLI has no repository roots, yet ``cubicle run ~`` must not show the agent every session's transcript."""
    repo = owned_dir(tmp_path / "home")
    settings = Settings(api_key="test", data_dir=repo / ".local" / "cubicle", docker_host=f"unix://{tmp_path}/none")
    store = open_store(settings)
    sessions = Sessions(settings, store, Runtime(settings, sandbox_factory=lambda *_: NoSandbox()))
    with pytest.raises(ForbiddenRepoError, match="would expose"):
        await sessions.register(NewSession(repo, "t", "m", Limits()))
    assert not (settings.data_dir / "workspaces").exists()
    assert settings.data_dir.stat().st_mode & 0o777 == 0o700
    if store.path is not None:  # SQLite's file; PostgreSQL's transcripts are its server's to guard
        assert store.path.stat().st_mode & 0o777 == 0o600
    store.close()


async def test_a_view_and_an_approver_see_the_turn_the_store_records(
    controller: Controller, model_server: ScriptedServer, tmp_path: Path
) -> None:
    """`cubicle run` drives its turn through the same session object as the API, with its terminal as a view (every
    event, after the store has it) and its y/n as the approver."""
    sessions = controller.sessions
    model = register(
        model_server, [{"content": [tool("write_file", path="a.txt", content="x")]}, {"content": [text("ok")]}]
    )
    view = ListSink()
    asked: list[str] = []

    async def approver(name: str, arguments: dict[str, Any]) -> bool:
        asked.append(name)
        return False  # declined: the model is told, and carries on

    record = await sessions.create(
        NewSession(owned_dir(tmp_path / "repo"), "write", model, Limits()), view=view, approver=approver
    )
    live = sessions.loaded(record.id)
    assert live is not None and live.task is not None
    outcome = await live.task
    assert outcome is not None and outcome.reason == "end_turn" and asked == ["write_file"]
    stored = [event.type async for event in sessions.follow(record.id, 0)]
    assert [event.type for event in view.events] == stored
    assert stored[0] == "session_started" and stored[-1] == "session_finished"


class GoneView:
    """A terminal that went away (a closed pipe): every emit fails."""

    async def emit(self, event: Any) -> None:
        raise BrokenPipeError(32, "Broken pipe")


async def test_a_view_that_fails_ends_the_view_not_the_turn(
    controller: Controller, model_server: ScriptedServer, tmp_path: Path
) -> None:
    sessions = controller.sessions
    model = register(model_server, [{"content": [text("hello")]}])
    record = await sessions.create(NewSession(owned_dir(tmp_path / "repo"), "look", model, Limits()), view=GoneView())
    live = sessions.loaded(record.id)
    assert live is not None and live.task is not None
    outcome = await live.task
    assert outcome is not None and outcome.reason == "end_turn"
    finished = sessions.get(record.id)
    assert (finished.status, finished.finish_reason) == ("idle", "end_turn")


async def test_a_served_turn_records_its_calls_and_its_end_through_the_same_driver(
    controller: Controller, tmp_path: Path
) -> None:
    """An MCP client's calls (``serve``) go through the driver the model's turns use: recorded calls, the end
    recorded with the changes, the container removed, the session idle; no model (and no key) is needed."""
    sessions = controller.sessions
    sessions.runtime.settings.api_key = None  # a served turn never asks a model
    answers: list[str] = []

    async def calls(live: Any) -> str:
        answers.append((await live.call("list_files", {"path": "."})).text)
        answers.append((await live.call("no_such_tool", None)).text)
        return "the client went"

    record = await sessions.create(NewSession(owned_dir(tmp_path / "repo"), "served", None, Limits()), serve=calls)
    live = sessions.loaded(record.id)
    assert live is not None and live.task is not None
    await asyncio.wait([live.task])
    events = [event async for event in sessions.follow(record.id, 0)]
    kinds = [event.type for event in events]
    assert kinds.count("tool_call") == 2 == kinds.count("tool_result") and kinds[-1] == "session_finished"
    assert "This test runs without a sandbox." in answers[0] and "no_such_tool" in answers[1]
    ended = sessions.get(record.id)
    assert (ended.status, ended.finish_reason, ended.detail) == (
        "idle",
        "end_turn",
        "the client went after 2 tool calls",
    )
    assert controller.made[0].stops >= 1
    assert live.served is not None
    late = await live.served.call("list_files", {})
    assert (late.is_error, late.text) == (True, "This session has ended.")


async def test_a_served_turn_is_cancelled_like_a_model_turn(controller: Controller, tmp_path: Path) -> None:
    """Cancel (the API's, or another controller's command) ends a served turn as it ends the model's: recorded."""
    sessions = controller.sessions
    waiting = asyncio.Event()

    async def calls(live: Any) -> str:
        waiting.set()
        await asyncio.sleep(60)
        return "never"

    record = await sessions.create(NewSession(owned_dir(tmp_path / "repo"), "served", None, Limits()), serve=calls)
    await waiting.wait()
    await sessions.cancel(record.id)  # it waits a while for the end's record; a loaded machine may take longer
    cancelled = await eventually_async(
        lambda: sessions.get(record.id), until=lambda r: r.status != "running", what="the served turn's end"
    )
    assert (cancelled.status, cancelled.finish_reason) == ("cancelled", "cancelled")
    assert cancelled.detail == "the session was cancelled after 0 tool calls"


async def test_a_served_turn_whose_connection_fails_still_records_its_end(
    controller: Controller, tmp_path: Path
) -> None:
    """A client's connection that breaks (not a cancel) ends the turn as an error, recorded, its container gone."""
    sessions = controller.sessions

    async def calls(live: Any) -> str:
        await live.call("list_files", {})
        raise BaseExceptionGroup("the SDK's task group", [OSError("the pipe broke"), asyncio.CancelledError()])

    record = await sessions.create(NewSession(owned_dir(tmp_path / "repo"), "served", None, Limits()), serve=calls)
    live = sessions.loaded(record.id)
    assert live is not None and live.task is not None
    await asyncio.wait([live.task])
    ended = sessions.get(record.id)
    assert (ended.status, ended.finish_reason) == ("failed", "error")
    assert live.served is not None and live.served.connection_failed
    assert "the client's connection failed after 1 tool calls" in ended.detail and "the pipe broke" in ended.detail
    assert controller.made[0].stops >= 1


async def test_served_calls_that_end_together_still_take_a_checkpoint_after_every_fifty(
    controller: Controller, tmp_path: Path
) -> None:
    """A hundred calls side by side whose ends land in one turn of the event loop (a loaded machine's, or here
    calls that never leave it) are two checkpoints by the time they are answered: after call 50 and after call 100."""
    sessions = controller.sessions
    taken: list[int | None] = []

    async def calls(live: Any) -> str:
        await asyncio.gather(*(live.call("list_files", {}) for _ in range(2 * served.CHECKPOINT_EVERY)))
        events = sessions.store.events_after(live.host.session_id, 0, limit=100_000)
        taken.extend(e.checkpoint for e in events if e.type == "changes")
        return "the client went"

    record = await sessions.create(NewSession(owned_dir(tmp_path / "repo"), "served", None, Limits()), serve=calls)
    live = sessions.loaded(record.id)
    assert live is not None and live.task is not None
    await asyncio.wait([live.task])
    assert taken == [1, 2]


WAITING = "http://8.8.8.8/team/app.git"
"""A remote at a literal public address (admitted with no lookup) that is never reached: the tests hold its mirror's
lock, as another process's fetch of it would, so the session's fetch waits until it is stopped."""


@contextlib.contextmanager
def _mirror_held(data_dir: Path, url: str) -> Iterator[None]:
    mirror = gitmirror.path_of(data_dir, gitmirror.normalise(url))
    mirror.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(mirror.with_name(f"{mirror.name}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        os.close(fd)


async def _first_events(sessions: Sessions, session_id: str, count: int) -> list[Event]:
    seen: list[Event] = []
    async for event in sessions.follow(session_id, 0):
        seen.append(event)
        if len(seen) == count:
            break
    return seen


async def test_a_remote_session_is_recorded_at_once_and_a_cancel_stops_its_fetch(controller: Controller) -> None:
    sessions = controller.sessions
    with _mirror_held(sessions.settings.data_dir, WAITING):
        record = await sessions.create(NewSession(RemoteRepo(url=WAITING), "t", "m", Limits(), typed=True))
        assert record.source is not None
        assert (record.status, record.repo, record.source.url, record.source.commit) == ("running", "", WAITING, "")
        started, fetching = await asyncio.wait_for(_first_events(sessions, record.id, 2), 60)
        assert started.type == "session_started" and started.repo == WAITING, started
        assert fetching.type == "setup_output" and fetching.phase == "fetch" and WAITING in fetching.text, fetching
        with pytest.raises(ConflictError, match="running"):
            await sessions.follow_up(record.id, "again")
        await asyncio.wait_for(sessions.cancel(record.id), 60)
        done = sessions.get(record.id)
        assert (done.status, done.finish_reason, done.repo) == ("cancelled", "cancelled", ""), done
        assert await sessions.prepared(record.id) is None
        with pytest.raises(ConflictError, match="never had its files"):
            await sessions.follow_up(record.id, "again")
        assert not (sessions.settings.data_dir / "workspaces" / record.id).exists()


async def test_closing_the_controller_while_a_remote_session_fetches_ends_it_failed(controller: Controller) -> None:
    """It has no files to continue on, so it is not left interrupted."""
    sessions = controller.sessions
    with _mirror_held(sessions.settings.data_dir, WAITING):
        record = await sessions.create(NewSession(RemoteRepo(url=WAITING), "t", "m", Limits(), typed=True))
        await asyncio.wait_for(_first_events(sessions, record.id, 2), 60)
        await sessions.close()
    done = sessions.get(record.id)
    assert (done.status, done.finish_reason) == ("failed", "error"), done
    assert "the controller stopped before" in done.detail, done.detail
