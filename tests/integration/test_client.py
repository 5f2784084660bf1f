"""controller.client against real servers: `cubicle serve` subprocesses and the controller's container, real Docker."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from controller.agent.scripted import ScriptedServer, free_port
from controller.client import AsyncClient, Client
from controller.errors import (
    ApplyConflictError,
    AuthError,
    ConflictError,
    InvalidRequestError,
    NotFoundError,
    UnreachableError,
)
from controller.testing.container import CubicleContainer
from controller.wire.events import SessionFinished, ToolResult
from tests.agent_harness import open_gate, register, text, tool
from tests.integration.client_helpers import Relay, Served, cubicle_serve
from tests.sandbox_defaults import owned_dir

WRITES = [
    {"content": [text("Writing."), tool("run_command", command="echo one > out.txt && cat out.txt")], "delay_s": 0.5},
    {"content": [tool("list_files")], "delay_s": 0.5},
    {"content": [tool("read_file", path="out.txt")], "delay_s": 0.5},
    {"content": [text("Done.")], "delay_s": 0.5},
]


@pytest.fixture
def served(tmp_path: Path, model_server: ScriptedServer) -> Iterator[Served]:
    with cubicle_serve(tmp_path, model_server) as server:
        yield server


@pytest.fixture
def client(served: Served) -> Iterator[Client]:
    with Client(served.url, served.token) as client:
        yield client


def test_a_cut_event_stream_resumes_with_no_gap_and_no_duplicate(
    served: Served, client: Client, model_server: ScriptedServer, make_repo: Callable[..., Path]
) -> None:
    relay = Relay(int(served.url.rsplit(":", 1)[1]))
    try:
        with Client(relay.url, served.token) as through:
            sid = through.create(make_repo(), "write", model=register(model_server, WRITES, prefix="cut")).id
            seen = []
            cuts = 0
            for event in through.events(sid):
                seen.append(event)
                if len(seen) in (3, 8):  # the generator is suspended mid-stream: its connection is open
                    cuts += relay.cut()
    finally:
        relay.close()
    assert cuts == 2 and relay.connections >= 3, "each cut dropped the stream, and it was reopened"
    replay = list(client.events(sid))
    assert [e.seq for e in seen] == [e.seq for e in replay] == list(range(1, len(replay) + 1))
    assert [e.type for e in seen] == [e.type for e in replay]
    assert isinstance(seen[-1], SessionFinished) and seen[-1].reason == "end_turn"


def test_errors_carry_the_apis_detail(
    served: Served, client: Client, model_server: ScriptedServer, make_repo: Callable[..., Path]
) -> None:
    with Client(served.url, "not-the-token") as stranger, pytest.raises(AuthError) as unauthorized:
        stranger.sessions()
    assert "(401): A valid bearer token (or the viewer's sign-in cookie with its key) is required." in str(
        unauthorized.value
    )
    assert "CUBICLE_API_TOKEN" in str(unauthorized.value)

    with pytest.raises(NotFoundError) as missing:
        client.get("s_nosuch")
    assert str(missing.value) == "No session 's_nosuch'."

    repo = make_repo()
    with pytest.raises(InvalidRequestError) as invalid:
        client.create(repo, "x", limits={"max_steps": 0})
    assert [e["loc"] for e in invalid.value.errors] == [["body", "limits", "max_steps"]]
    assert "limits.max_steps: Input should be greater than or equal to 1" in str(invalid.value)

    gate = f"busy-{secrets.token_hex(4)}"
    held = [{"content": [text("thinking")], "after": gate}]
    sid = client.create(repo, "wait", model=register(model_server, held, prefix="busy")).id
    with pytest.raises(ConflictError) as busy:
        client.follow_up(sid, "more")
    assert f"Session {sid} is running a turn; wait for it to finish or cancel it." in str(busy.value)
    open_gate(model_server.url, gate)
    assert client.wait(sid).status == "idle"

    other = make_repo("other")
    sid = client.create(other, "write", model=register(model_server, WRITES[:1] + WRITES[-1:], prefix="c")).id
    client.wait(sid)
    (other / "out.txt").write_text("mine\n")
    with pytest.raises(ApplyConflictError) as conflict:
        client.apply(sid)
    assert [c.path for c in conflict.value.conflicts] == ["out.txt"]
    assert (other / "out.txt").read_text() == "mine\n"
    assert client.apply(sid, force=["out.txt"]).applied == ["out.txt"]
    assert (other / "out.txt").read_text() == "one\n"


def test_no_server_is_an_error_naming_the_url() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with Client(url, "t") as nobody, pytest.raises(UnreachableError) as refused:
        nobody.get("s_x")
    assert f"The Cubicle API at {url} could not be reached" in str(refused.value)
    with Client(url, "t") as nobody, pytest.raises(UnreachableError):
        list(nobody.events("s_x"))


def test_the_async_client_follows_a_turn_and_a_follow_up(
    served: Served, model_server: ScriptedServer, make_repo: Callable[..., Path]
) -> None:
    async def go() -> tuple[list[str], list[str], Any]:
        async with AsyncClient(served.url, served.token) as client:
            sid = (await client.create(make_repo(), "write", model=register(model_server, WRITES, prefix="a"))).id
            first = [e.type async for e in client.events(sid)]
            await client.follow_up(sid, "again")
            record = await client.wait(sid)
            everything = [e.type async for e in client.events(sid)]
            return first, everything, record

    first, everything, record = asyncio.run(go())
    assert first[0] == "session_started" and first[-1] == "session_finished"
    assert everything[: len(first)] == first and everything[len(first)] == "user_message"
    assert everything[-1] == "session_finished" and record.status == "idle" and record.finish_reason == "end_turn"


def test_a_whole_session_through_the_controllers_container(controller_image: str, tmp_path: Path) -> None:
    repos = tmp_path / "repos"
    repos.mkdir()
    repo = owned_dir(repos / "shop")
    (repo / "cart.py").write_text("def total(items):\n    return sum(items)\n")
    flow = tmp_path / "flow.json"
    flow.write_text(
        json.dumps(
            {
                "turns": [
                    {"content": [tool("run_command", command="echo 'print(1)' > check.py")]},
                    {"content": [text("Added check.py.")]},
                    {"content": [tool("run_command", command="echo 'print(2)' > check.py")]},
                    {"content": [text("Changed it.")]},
                ]
            }
        )
    )
    instance = "client-e2e-" + secrets.token_hex(4)
    with (
        CubicleContainer(controller_image, token="t0ken", repo_roots=[repos], scenario=flow, instance=instance) as box,
        box.client() as client,
    ):
        assert client.health().status == "ok"
        sid = client.create(repo, "add a check").id
        events = list(client.events(sid))
        assert isinstance(events[-1], SessionFinished) and events[-1].reason == "end_turn"
        result = next(e for e in events if isinstance(e, ToolResult))
        assert result.exit_code == 0
        assert client.get(sid).status == "idle"
        assert sid in [s.id for s in client.sessions().items]
        changes = client.changes(sid, diff=True)
        assert [(c.path, c.kind) for c in changes] == [("check.py", "added")]
        assert changes[0].diff is not None and "+print(1)" in changes[0].diff
        applied = client.apply(sid)
        assert applied.applied == ["check.py"] and (repo / "check.py").read_text() == "print(1)\n"
        assert client.revert(sid).reverted == ["check.py"] and not (repo / "check.py").exists()

        client.follow_up(sid, "change it")
        record = client.wait(sid)
        assert record.status == "idle" and record.steps == 4
        assert [c.turn for c in client.checkpoints(sid)] == [1, 2]
        client.rewind(sid, 1)
        assert "+print(1)" in (client.changes(sid, diff=True)[0].diff or "")
        roles = [m["role"] for m in client.messages(sid).messages]
        assert roles[:4] == ["user", "assistant", "user", "assistant"]
        client.discard(sid)
        with pytest.raises(NotFoundError, match="has no workspace layer"):
            client.changes(sid)
        assert client.delete(sid, purge=True) is None
        with pytest.raises(NotFoundError):
            client.get(sid)
