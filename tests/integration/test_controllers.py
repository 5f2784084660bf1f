"""Several controllers on one PostgreSQL database and one data directory: any of them serves any session, a cancel
reaches the controller running the turn, and a controller that dies or stalls past its lease is taken over and
fenced off (it writes nothing more)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from controller.agent.scripted import ScriptedServer, free_port
from controller.workspace.layer import open_layer
from tests.agent_harness import register, text, tool
from tests.databases import postgres_schema
from tests.eventually import eventually
from tests.integration.api_helpers import serve_env, serve_subprocess
from tests.integration.cli_helpers import environment
from tests.integration.controllers_helpers import TOKEN, Pair, controller_pair, stop
from tests.integration.helpers import containers_of
from tests.sandbox_defaults import TEST_INSTANCE

LEASE_S = 2.0


@pytest.fixture
def pair(tmp_path: Path, model_server: ScriptedServer) -> Iterator[Pair]:
    with controller_pair(tmp_path, model_server.url, LEASE_S) as pair:  # type: ignore[attr-defined]
        yield pair


LONG = [
    {"content": [text("Starting."), tool("list_files")]},
    {"content": [tool("run_command", command="echo started > started.txt; sleep 300", timeout_s=600)]},
    {"content": [text("Done after the long command.")]},
]


def _wait_for_the_long_command(pair: Pair, sid: str) -> None:
    upper = open_layer(pair.data_dir, sid).upper
    eventually((upper / "started.txt").exists, what="the long command runs", timeout=60)


def _seqs(events: list[dict[str, Any]]) -> list[int]:
    return [int(e["seq"]) for e in events]


def test_a_session_on_one_controller_streams_from_the_other_and_a_cancel_sent_there_stops_it(
    pair: Pair, model_server: ScriptedServer, make_repo: Callable[..., Path], docker_client: Any
) -> None:
    sid = pair.a.api.create(str(make_repo()), register(model_server, LONG, prefix="two"))["id"]
    live_on_b: list[dict[str, Any]] = []
    follower = threading.Thread(target=lambda: live_on_b.extend(pair.b.api.events(sid)), daemon=True)
    follower.start()
    _wait_for_the_long_command(pair, sid)

    response = pair.b.api.http.post(f"/v1/sessions/{sid}/cancel")
    assert response.status_code == 200, response.text
    stopped = pair.b.api.wait_for(sid, lambda r: r["status"] != "running")  # how soon: bench/responsiveness.py
    assert (stopped["status"], stopped["finish_reason"]) == ("cancelled", "cancelled")
    assert containers_of(docker_client, sid) == [], "A's command was killed, and its container removed with it"

    follower.join(timeout=30)
    assert not follower.is_alive(), "B's stream ends when A's turn ends"
    from_a = pair.a.api.events(sid)
    assert live_on_b == from_a, "B streamed A's session with the same ids and contents"
    assert _seqs(from_a) == list(range(1, len(from_a) + 1)), "no gap, no duplicate"
    assert [e["type"] for e in from_a][-1] == "session_finished"


def test_a_killed_controllers_session_is_taken_over_and_continues_on_the_other(
    pair: Pair, model_server: ScriptedServer, make_repo: Callable[..., Path], docker_client: Any
) -> None:
    sid = pair.a.api.create(str(make_repo()), register(model_server, LONG, prefix="kill"))["id"]
    _wait_for_the_long_command(pair, sid)
    assert containers_of(docker_client, sid)

    pair.a.process.send_signal(signal.SIGKILL)
    pair.a.process.wait()
    # How soon (within two leases, the README says) is a benchmark row: bench/responsiveness.py.
    record = pair.b.api.wait_for(sid, lambda r: r["status"] == "interrupted")
    assert record["owner"].startswith(f"{TEST_INSTANCE}-b:")
    # The dead controller's sandbox goes with the takeover.
    eventually(lambda: containers_of(docker_client, sid) == [], what="A's container is removed")

    response = pair.b.api.http.post(f"/v1/sessions/{sid}/messages", json={"text": "please go on"})
    assert response.status_code == 202, response.text
    done = pair.b.api.wait_for(sid, lambda r: r["status"] != "running", timeout=60)
    assert (done["status"], done["finish_reason"]) == ("idle", "end_turn")
    transcript = pair.b.api.http.get(f"/v1/sessions/{sid}/messages").json()["messages"]
    roles = [m["role"] for m in transcript]
    assert roles == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert transcript[0]["content"][0]["text"] == "do it", "the whole transcript, from the first task"
    assert transcript[4]["content"][0]["is_error"] is True and transcript[4]["content"][-1]["text"] == "please go on"
    assert transcript[-1]["content"][0]["text"] == "Done after the long command."
    events = pair.b.api.events(sid)
    assert _seqs(events) == list(range(1, len(events) + 1))


def test_a_controller_paused_past_its_lease_writes_nothing_after_the_takeover(
    pair: Pair, model_server: ScriptedServer, make_repo: Callable[..., Path], docker_client: Any
) -> None:
    turns = [
        {"content": [text("Starting."), tool("list_files")]},
        {"content": [tool("run_command", command="echo started > started.txt; sleep 6; echo finished")]},
        {"content": [tool("write_file", path="after.txt", content="written after the pause\n")]},
        {"content": [text("Done.")]},
    ]
    sid = pair.a.api.create(str(make_repo()), register(model_server, turns, prefix="pause"))["id"]
    _wait_for_the_long_command(pair, sid)

    pair.a.process.send_signal(signal.SIGSTOP)
    try:
        taken = eventually(
            lambda: pair.rows(
                "SELECT seq FROM events WHERE session_id = %s AND type = 'status' AND data LIKE %s",
                sid,
                '%"interrupted"%',
            ),
            what="B records the takeover",
            interval=0.05,
        )[0]
        messages = pair.rows("SELECT idx, message FROM messages WHERE session_id = %s ORDER BY idx", sid)
        eventually(lambda: containers_of(docker_client, sid) == [], what="A's container is removed")
    finally:
        pair.a.process.send_signal(signal.SIGCONT)
    # A wakes: its command's container is gone, and every write of its turn names a claim that is not the
    # session's any more. Give it time to try (its command would have ended, its next step been taken).
    time.sleep(3 * LEASE_S)
    assert pair.a.process.poll() is None, "A lives on"
    last = pair.rows("SELECT seq, type FROM events WHERE session_id = %s AND seq > %s", sid, taken[0])
    assert last == [], f"A wrote after the takeover: {last}"
    assert pair.rows("SELECT idx, message FROM messages WHERE session_id = %s ORDER BY idx", sid) == messages
    assert containers_of(docker_client, sid) == [], "A's command is gone with its container, and A made no other"
    assert not (open_layer(pair.data_dir, sid).upper / "after.txt").exists()
    record = pair.a.api.get(sid)  # A reads the session from the database like anyone
    assert record["status"] == "interrupted" and record["owner"].startswith(f"{TEST_INSTANCE}-b:")


def test_a_running_cubicle_run_on_the_same_database_survives_a_server_starting_and_stopping(
    tmp_path: Path, model_server: ScriptedServer, make_repo: Callable[..., Path]
) -> None:
    turns = [
        {"content": [tool("run_command", command=f"sleep {4 * LEASE_S}")]},
        {"content": [text("The run finished.")]},
    ]
    scenario = tmp_path / "run.json"
    scenario.write_text(json.dumps({"name": "run", "turns": turns}))
    with postgres_schema() as url:
        env = environment(
            {"CUBICLE_DATABASE_URL": url, "CUBICLE_LEASE_S": str(LEASE_S), "CUBICLE_DATA_DIR": str(tmp_path / "data")}
        )
        run = subprocess.Popen(
            [sys.executable, "-m", "controller", "run", str(make_repo()), "run", "--json", "--scenario", str(scenario)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )
        try:
            assert run.stdout is not None
            sid = json.loads(run.stdout.readline())["session_id"]
            serve = serve_env(model_server.url, TOKEN, tmp_path, f"{TEST_INSTANCE}-serve")  # type: ignore[attr-defined]
            server = serve_subprocess(
                serve | {"CUBICLE_DATABASE_URL": url, "CUBICLE_LEASE_S": str(LEASE_S)}, free_port()
            )
            time.sleep(2 * LEASE_S)  # a whole lease and more while both run: the server must leave the run alone
            stop(server)
            out, err = run.communicate(timeout=120)
        finally:
            if run.poll() is None:
                run.kill()
                run.wait()
        assert run.returncode == 0, err[-2000:]
        with psycopg.connect(url, autocommit=True) as conn:
            status = conn.execute("SELECT status, finish_reason FROM sessions WHERE id = %s", (sid,)).fetchone()
            events = [
                json.loads(r[0])
                for r in conn.execute("SELECT data FROM events WHERE session_id = %s ORDER BY seq", (sid,))
            ]
    assert status == ("idle", "end_turn")
    assert "The run finished." in out and events[-1]["type"] == "session_finished"
    assert [e["status"] for e in events if e["type"] == "status"] == ["running"], "never interrupted"
