"""A controller killed while its session is idle between turns (its container kept for a follow-up) leaves that
container to the controllers still up: one of the same host removes it on its lease-tending tick, not only when
some controller of the host starts again; its own idle containers stay."""

from __future__ import annotations

import os
import secrets
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from controller.agent.scripted import ScriptedServer
from controller.sandbox import owners
from tests.agent_harness import register, text, tool
from tests.eventually import eventually
from tests.integration.controllers_helpers import Pair, controller_pair
from tests.integration.helpers import containers_of
from tests.sandbox_defaults import TEST_INSTANCE

LEASE_S = 2.0
ONE_CALL = [{"content": [tool("list_files")]}, {"content": [text("Looked.")]}]


@pytest.fixture
def pair(tmp_path: Path, model_server: ScriptedServer) -> Iterator[Pair]:
    # One instance for both (as on one host), of this test alone: no other test's sweep judges its containers.
    instance = f"{TEST_INSTANCE}-host-{secrets.token_hex(3)}"
    with controller_pair(tmp_path, model_server.url, LEASE_S, instance) as pair:  # type: ignore[attr-defined]
        yield pair


@pytest.fixture
def made(docker_client: Any) -> Iterator[list[str]]:
    """The sessions the test made; whatever of theirs is left (a failed test) is removed after it."""
    sessions: list[str] = []
    yield sessions
    for sid in sessions:
        owners.remove_session(docker_client, sid)


def _idle_with_its_container(api: Any, repo: Path, model: str, docker_client: Any, made: list[str]) -> str:
    sid = str(api.create(str(repo), model)["id"])
    made.append(sid)
    done = api.wait_for(sid, lambda r: r["status"] != "running", timeout=120)
    assert (done["status"], done["finish_reason"]) == ("idle", "end_turn")
    assert containers_of(docker_client, sid), "an idle session keeps its container for a follow-up"
    return sid


def test_a_killed_controllers_idle_container_is_swept_by_the_one_still_up(
    pair: Pair, model_server: ScriptedServer, make_repo: Callable[..., Path], docker_client: Any, made: list[str]
) -> None:
    model = register(model_server, ONE_CALL, prefix="idle-a")
    on_a = _idle_with_its_container(pair.a.api, make_repo("a"), model, docker_client, made)
    model = register(model_server, ONE_CALL, prefix="idle-b")
    on_b = _idle_with_its_container(pair.b.api, make_repo("b"), model, docker_client, made)

    pair.a.process.send_signal(signal.SIGKILL)
    pair.a.process.wait()
    # A bound against a hang, not a speed: the sweep runs on B's tick every 10 s.
    eventually(lambda: containers_of(docker_client, on_a) == [], what="B removes A's idle container", timeout=60)
    disk = pair.data_dir / "workspaces" / on_a / "disk"  # its quota filesystem, when the layers have one
    eventually(lambda: not os.path.ismount(disk), what="B unmounts the layer A left mounted", timeout=60)

    assert containers_of(docker_client, on_b), "B's own idle session keeps its container"
    assert pair.b.process.poll() is None
    record = pair.b.api.get(on_a)
    assert (record["status"], record["finish_reason"]) == ("idle", "end_turn"), "the session itself is as it was"
