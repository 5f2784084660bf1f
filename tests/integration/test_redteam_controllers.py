"""Findings of an independent red-team of several controllers on one database, each failing on the first version
of leases and fencing: a change between turns racing a follow-up on the other controller, a `cubicle run` resumed
after its takeover, a dropped database connection, and streams on the other controller ending early."""

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

import pytest

from controller.agent.scripted import Scenario, ScriptedServer, free_port
from controller.workspace.layer import open_layer
from tests.agent_harness import register, text, tool
from tests.databases import postgres_schema
from tests.eventually import eventually
from tests.integration.api_helpers import Api, serve_env, serve_subprocess
from tests.integration.cli_helpers import environment
from tests.integration.controllers_helpers import TOKEN, Pair, controller_pair, stop
from tests.sandbox_defaults import TEST_INSTANCE

LEASE_S = 5.0
"""Long enough that a loaded machine does not cost a controller its lease; no test here waits for one to expire
but the `cubicle run`'s, which sets its own."""


@pytest.fixture
def pair(tmp_path: Path, model_server: ScriptedServer) -> Iterator[Pair]:
    with controller_pair(tmp_path, model_server.url, LEASE_S) as pair:  # type: ignore[attr-defined]
        yield pair


TWO_TURNS = [
    {"content": [tool("write_file", path="a.txt", content="one\n")]},
    {"content": [text("turn one done")]},
    {"content": [tool("run_command", command="sleep 1; echo slept")]},
    {"content": [text("turn two done")]},
]


def _race(pair: Pair, sid: str, change: str, delay: float) -> dict[str, int]:
    """A follow-up on A and ``change`` on B ``delay`` seconds later, at once; their status codes."""
    codes: dict[str, int] = {}

    def follow_up() -> None:
        codes["follow_up"] = pair.a.api.http.post(f"/v1/sessions/{sid}/messages", json={"text": "go on"}).status_code

    def between() -> None:
        time.sleep(delay)
        body: dict[str, Any] = {"turn": 1} if change == "rewind" else {}
        codes[change] = pair.b.api.http.post(f"/v1/sessions/{sid}/{change}", json=body).status_code

    threads = [threading.Thread(target=follow_up), threading.Thread(target=between)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return codes


@pytest.mark.parametrize("change", ["rewind", "apply"])
def test_a_change_between_turns_on_one_controller_and_a_follow_up_on_the_other_never_overlap(
    pair: Pair, model_server: ScriptedServer, make_repo: Callable[..., Path], change: str
) -> None:
    """Once the session was left running for good, with a turn whose every write was fenced off, while the layer was
    rewound or applied under it. Now one of the two is refused, or they run one after the other."""
    for trial in range(4):
        sid = pair.a.api.create(str(make_repo(f"race{trial}")), register(model_server, TWO_TURNS, prefix="race"))["id"]
        pair.a.api.wait_for(sid, lambda r: r["status"] == "idle")
        codes = _race(pair, sid, change, delay=trial * 0.01)
        assert set(codes.values()) <= {200, 202, 409}, codes
        done = pair.b.api.wait_for(sid, lambda r: r["status"] != "running", timeout=30)
        if codes["follow_up"] == 202:
            assert (done["status"], done["finish_reason"]) == ("idle", "end_turn"), (trial, codes, done)
            messages = pair.b.api.http.get(f"/v1/sessions/{sid}/messages").json()["messages"]
            assert "go on" in json.dumps(messages) and messages[-1]["content"][0]["text"] == "turn two done"
        again = pair.b.api.http.post(f"/v1/sessions/{sid}/messages", json={"text": "and again"})
        assert again.status_code == 202, f"trial {trial}: {codes}, then a follow-up on B: {again.text}"
        pair.b.api.wait_for(sid, lambda r: r["status"] != "running", timeout=30)


def test_a_cubicle_run_resumed_after_its_takeover_writes_nothing_over_the_new_turn(
    tmp_path: Path, model_server: ScriptedServer, make_repo: Callable[..., Path]
) -> None:
    """Its clean-up once marked the server's running turn `cancelled` ("stopped at start"), so a second server
    then accepted a second turn of the same session."""
    lease = 2.0
    scenario = tmp_path / "run.json"
    scenario.write_text(
        json.dumps(
            {
                "name": "run",
                "turns": [
                    {"content": [tool("run_command", command="echo started > started.txt; sleep 25")]},
                    {"content": [text("The run finished.")]},
                ],
            }
        )
    )
    with postgres_schema() as url:
        data = tmp_path / "data"
        settings = {"CUBICLE_DATABASE_URL": url, "CUBICLE_LEASE_S": str(lease)}
        run = subprocess.Popen(
            [sys.executable, "-m", "controller", "run", str(make_repo()), "go", "--json", "--scenario", str(scenario)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environment(settings | {"CUBICLE_DATA_DIR": str(data)}),
        )
        servers: list[subprocess.Popen[bytes]] = []
        apis: list[Api] = []
        try:
            assert run.stdout is not None
            sid = json.loads(run.stdout.readline())["session_id"]
            eventually((open_layer(data, sid).upper / "started.txt").exists, what="the run's command runs", timeout=60)
            for name in ("one", "two"):
                port = free_port()
                env = serve_env(model_server.url, TOKEN, tmp_path, f"{TEST_INSTANCE}-{name}")  # type: ignore[attr-defined]
                servers.append(serve_subprocess(env | settings, port))
                apis.append(Api(f"http://127.0.0.1:{port}", TOKEN))
            one, two = apis
            model = one.get(sid)["model"]
            model_server.scenarios[model] = Scenario.model_validate(
                {
                    "name": model,
                    "turns": [
                        {"content": [text("unused")]},
                        {"content": [tool("run_command", command="sleep 8")]},
                        {"content": [text("The server's turn finished.")]},
                    ],
                }
            )
            run.send_signal(signal.SIGSTOP)
            try:
                one.wait_for(sid, lambda r: r["status"] == "interrupted", timeout=6 * lease)
                response = one.http.post(f"/v1/sessions/{sid}/messages", json={"text": "go on, server"})
                assert response.status_code == 202, response.text
            finally:
                run.send_signal(signal.SIGCONT)
            run.communicate(timeout=60)
            during = one.get(sid)
            assert during["status"] == "running" and during["owner"].startswith(f"{TEST_INSTANCE}-one:"), during
            second = two.http.post(f"/v1/sessions/{sid}/messages", json={"text": "a second turn, elsewhere"})
            assert second.status_code == 409, "one turn of a session at a time, whichever controller is asked"
            done = one.wait_for(sid, lambda r: r["status"] != "running", timeout=60)
            assert (done["status"], done["finish_reason"]) == ("idle", "end_turn")
        finally:
            if run.poll() is None:
                run.kill()
                run.wait()
            for server in servers:
                stop(server)
            for api in apis:
                api.http.close()


def test_a_controller_whose_database_connections_drop_reconnects(
    pair: Pair, model_server: ScriptedServer, make_repo: Callable[..., Path]
) -> None:
    """It once served 500s until restarted, and /healthz kept saying ok."""
    sid = pair.a.api.create(str(make_repo()), register(model_server, [{"content": [text("hi")]}], prefix="db"))["id"]
    pair.a.api.wait_for(sid, lambda r: r["status"] == "idle")
    assert pair.cut_off(pair.a) >= 1
    assert pair.a.api.http.get(f"/v1/sessions/{sid}").status_code == 200, "a read is tried again on a new connection"
    assert pair.a.api.http.get("/healthz").status_code == 200
    follow_up = pair.a.api.http.post(f"/v1/sessions/{sid}/messages", json={"text": "again"})
    assert follow_up.status_code == 202, follow_up.text
    assert pair.a.api.wait_for(sid, lambda r: r["status"] != "running")["status"] == "idle"


def test_a_followers_stream_on_the_other_controller_ends_with_the_turns_last_event(
    pair: Pair, model_server: ScriptedServer, make_repo: Callable[..., Path]
) -> None:
    """7 of 24 such streams once ended just before `session_finished`: the row said idle before the event was
    stored."""
    turns = [
        {"content": [text("Looking."), tool("list_files")]},
        {"content": [tool("run_command", command="echo hi")]},
        {"content": [text("Done.")]},
    ]
    seen: dict[str, list[dict[str, Any]]] = {}
    threads = []
    ids = []
    for n in range(12):
        sid = pair.a.api.create(str(make_repo(f"sse{n}")), register(model_server, turns, prefix="sse"))["id"]
        ids.append(sid)
        thread = threading.Thread(target=lambda sid=sid: seen.__setitem__(sid, pair.b.api.events(sid)), daemon=True)
        thread.start()
        threads.append(thread)
        time.sleep(0.2)
    for thread in threads:
        thread.join(timeout=120)
    for sid in ids:
        pair.a.api.wait_for(sid, lambda r: r["status"] != "running")
        assert seen[sid] == pair.a.api.events(sid), f"B's stream of {sid} ended early"
        assert seen[sid][-1]["type"] == "session_finished"
