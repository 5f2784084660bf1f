"""The HTTP API with real Docker and the scripted model server."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from controller.agent.scripted import ScriptedServer, serve_in_thread
from controller.config import Settings
from controller.server.api import create_app
from tests.agent_harness import register, text, tool
from tests.eventually import eventually
from tests.integration.api_helpers import Api
from tests.integration.helpers import container_running, containers_of
from tests.sandbox_defaults import SANDBOX_LIMITS, TEST_INSTANCE

pytestmark = pytest.mark.usefixtures("each_store")  # the API suite runs on SQLite and on PostgreSQL

TOKEN = "integration-token"


def settings_for(tmp_path: Path, model_server: ScriptedServer, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "api_key": "test",
        "base_url": model_server.url,  # type: ignore[attr-defined]
        "api_token": TOKEN,
        "repo_roots": [tmp_path],
        "data_dir": tmp_path / "data",
        "instance": TEST_INSTANCE,
        "limits": SANDBOX_LIMITS,
        "sse_heartbeat_s": 1,
        **overrides,
    }
    return Settings(**values)


@pytest.fixture
def api_factory(tmp_path: Path, model_server: ScriptedServer) -> Iterator[Callable[..., Api]]:
    stack: list[Any] = []
    clients: list[Api] = []

    def start(**overrides: Any) -> Api:
        context = serve_in_thread(create_app(settings_for(tmp_path, model_server, **overrides)))
        url = context.__enter__()
        stack.append(context)
        clients.append(Api(url, TOKEN))
        return clients[-1]

    yield start
    for context in reversed(stack):
        context.__exit__(None, None, None)
    for client in clients:
        client.http.close()


@pytest.fixture
def api(api_factory: Callable[..., Api]) -> Api:
    return api_factory()


WORK = [
    {"content": [text("Looking around."), tool("list_files"), tool("read_file", path="README.md")]},
    {"content": [tool("run_command", command="echo from-the-sandbox > out.txt && cat out.txt")]},
    {"content": [text("Finished.")]},
]


def test_full_session_over_http(api: Api, model_server: ScriptedServer, make_repo: Callable[..., Path]) -> None:
    repo = make_repo()
    created = api.create(str(repo), register(model_server, prefix="api", turns=WORK))
    assert created["status"] == "running"
    events = api.events(created["id"])
    kinds = [e["type"] for e in events]
    assert kinds[0] == "session_started" and kinds[-1] == "session_finished"
    assert kinds.count("tool_call") == 3 == kinds.count("tool_result")
    record = api.get(created["id"])
    assert record["status"] == "idle" and record["finish_reason"] == "end_turn" and record["steps"] == 3
    assert record["usage"]["input_tokens"] > 0
    assert kinds.index("changes") < kinds.index("session_finished")
    assert not (repo / "out.txt").exists(), "the checkout changes only through apply"
    changes = api.http.get(f"/v1/sessions/{created['id']}/changes").json()
    assert [(c["path"], c["kind"]) for c in changes] == [("out.txt", "added")]
    assert api.http.post(f"/v1/sessions/{created['id']}/apply", json={}).status_code == 200
    assert (repo / "out.txt").read_text() == "from-the-sandbox\n"
    transcript = api.http.get(f"/v1/sessions/{created['id']}/messages").json()["messages"]
    assert [m["role"] for m in transcript] == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert transcript[2]["content"][0]["type"] == "tool_result"
    listed = api.http.get("/v1/sessions").json()
    assert created["id"] in [s["id"] for s in listed["items"]]


def test_sse_disconnect_and_resume_loses_and_duplicates_nothing(
    api: Api, model_server: ScriptedServer, make_repo: Callable[..., Path]
) -> None:
    slow = [{**turn, "delay_s": 0.3} for turn in WORK]
    sid = api.create(str(make_repo()), register(model_server, prefix="api", turns=slow))["id"]
    first = api.events(sid, stop_after=3)
    rest = api.events(sid, last_event_id=first[-1]["seq"])
    seqs = [e["seq"] for e in first + rest]
    assert seqs == list(range(1, len(seqs) + 1))
    assert rest[-1]["type"] == "session_finished"
    replay = api.events(sid)
    assert [e["seq"] for e in replay] == seqs
    via_query = api.http.get(f"/v1/sessions/{sid}/events", params={"after": len(seqs) - 1})
    assert via_query.text.count("event: session_finished") == 1 and "id: 1\n" not in via_query.text


def test_sse_sends_heartbeats_while_the_model_is_silent(
    api: Api, model_server: ScriptedServer, make_repo: Callable[..., Path]
) -> None:
    sid = api.create(
        str(make_repo()), register(model_server, prefix="api", turns=[{"content": [text("late")], "delay_s": 2.5}])
    )["id"]
    with api.http.stream("GET", f"/v1/sessions/{sid}/events", timeout=30) as response:
        lines = list(response.iter_lines())
    assert any(line.startswith(":") for line in lines), "no keep-alive comment while the turn ran"
    assert "event: session_finished" in lines


def test_follow_up_and_409_while_running(
    api: Api, model_server: ScriptedServer, make_repo: Callable[..., Path]
) -> None:
    turns = [
        {"content": [tool("run_command", command="sleep 1")], "delay_s": 0.2},
        {"content": [text("first turn done")]},
        {"content": [tool("read_file", path="README.md")]},
        {"content": [text("second turn done")]},
    ]
    sid = api.create(str(make_repo()), register(model_server, prefix="api", turns=turns))["id"]
    busy = api.http.post(f"/v1/sessions/{sid}/messages", json={"text": "more"})
    assert busy.status_code == 409 and "running" in busy.json()["detail"]
    api.wait_for(sid, lambda r: r["status"] == "idle")
    accepted = api.http.post(f"/v1/sessions/{sid}/messages", json={"text": "now read the readme"})
    assert accepted.status_code == 202 and accepted.json()["status"] == "running"
    record = api.wait_for(sid, lambda r: r["status"] == "idle")
    assert record["steps"] == 4
    transcript = api.http.get(f"/v1/sessions/{sid}/messages").json()["messages"]
    user_texts = [b["text"] for m in transcript if m["role"] == "user" for b in m["content"] if b["type"] == "text"]
    assert user_texts == ["do it", "now read the readme"]
    assert transcript[-1]["content"][0]["text"] == "second turn done"
    events = api.events(sid)
    (said,) = [e for e in events if e["type"] == "user_message"]  # the follow-up is in the record, in its place
    assert said["text"] == "now read the readme"
    kinds = [e["type"] for e in events]
    assert kinds.index("user_message") == kinds.index("session_finished") + 1


def test_cancel_mid_command_leaves_nothing(
    api: Api, model_server: ScriptedServer, make_repo: Callable[..., Path], docker_client: Any
) -> None:
    turns = [
        {"content": [tool("run_command", command="echo started; sleep 300.152; touch never", timeout_s=600)]},
        {"content": [text("unreachable")]},
    ]
    sid = api.create(
        str(make_repo()), register(model_server, prefix="api", turns=turns), limits={"command_timeout_s": 600}
    )["id"]
    api.wait_for_event(sid, "tool_call")
    eventually(lambda: container_running(docker_client, "sleep 300.152"), what="the command runs")  # its own: no other
    # It answers once the turn ended, or after two seconds with the turn still ending (a busy machine): how soon is
    # a benchmark row (bench/responsiveness.py), and what it ends as is this test's.
    assert api.http.post(f"/v1/sessions/{sid}/cancel").status_code == 200
    cancelled = api.wait_for(sid, lambda r: r["status"] != "running")
    assert (cancelled["status"], cancelled["finish_reason"]) == ("cancelled", "cancelled")
    assert containers_of(docker_client, sid) == []
    transcript = api.http.get(f"/v1/sessions/{sid}/messages").json()["messages"]
    (answer,) = transcript[-1]["content"]  # the interrupted call was answered with what it did
    assert answer["is_error"] is True and answer["content"].startswith("cancelled after"), answer
    assert "<stdout>\nstarted\n</stdout>" in answer["content"]


def test_delete_removes_the_container(
    api: Api, model_server: ScriptedServer, make_repo: Callable[..., Path], docker_client: Any
) -> None:
    sid = api.create(str(make_repo()), register(model_server, prefix="api", turns=WORK))["id"]
    api.wait_for(sid, lambda r: r["status"] == "idle")
    assert containers_of(docker_client, sid), "the container stays up between turns"
    deleted = api.http.delete(f"/v1/sessions/{sid}")
    assert deleted.status_code == 200 and containers_of(docker_client, sid) == []
    assert api.get(sid)["id"] == sid
    assert api.http.delete(f"/v1/sessions/{sid}", params={"purge": True}).status_code == 204
    assert api.http.get(f"/v1/sessions/{sid}").status_code == 404


def test_idle_timeout_removes_the_container_and_follow_up_starts_fresh(
    api_factory: Callable[..., Api], model_server: ScriptedServer, make_repo: Callable[..., Path], docker_client: Any
) -> None:
    api = api_factory(idle_timeout_s=0.5)
    turns = [
        {"content": [tool("run_command", command="echo one")]},
        {"content": [text("a")]},
        {"content": [tool("run_command", command="echo two")]},
        {"content": [text("b")]},
    ]
    sid = api.create(str(make_repo()), register(model_server, prefix="api", turns=turns))["id"]
    api.wait_for(sid, lambda r: r["status"] == "idle")
    eventually(
        lambda: containers_of(docker_client, sid),
        until=lambda found: found == [],
        what="the idle session's container is removed",
        timeout=10,
    )
    api.http.post(f"/v1/sessions/{sid}/messages", json={"text": "again"})
    assert api.wait_for(sid, lambda r: r["status"] == "idle")["finish_reason"] == "end_turn"


def test_429_over_the_concurrency_cap(
    api_factory: Callable[..., Api], model_server: ScriptedServer, make_repo: Callable[..., Path]
) -> None:
    api = api_factory(max_concurrent_sessions=1)
    held = register(model_server, prefix="api", turns=[{"content": [text("held")], "after": secrets.token_hex(4)}])
    first = api.create(str(make_repo("a")), held)
    over = api.http.post("/v1/sessions", json={"repo": str(make_repo("b")), "task": "x", "model": held})
    assert over.status_code == 429 and "Retry" in over.json()["detail"]
    api.http.post(f"/v1/sessions/{first['id']}/cancel")


def test_a_request_may_name_only_an_allowed_runtime_and_runsc_only_offline(
    api_factory: Callable[..., Api], model_server: ScriptedServer, make_repo: Callable[..., Path]
) -> None:
    api = api_factory(allowed_runtimes=["runc"])
    repo, model = str(make_repo()), register(model_server, prefix="rt", turns=WORK)
    refused = api.http.post(
        "/v1/sessions", json={"repo": repo, "task": "x", "model": model, "limits": {"runtime": "runsc"}}
    )
    assert refused.status_code == 422, refused.text
    assert "The runtime 'runsc' is not allowed on this server; allowed: runc." in refused.json()["detail"]
    api = api_factory()
    offline = {"runtime": "runsc", "network": "open"}
    refused = api.http.post("/v1/sessions", json={"repo": repo, "task": "x", "model": model, "limits": offline})
    assert refused.status_code == 422 and "Sessions under runsc have no network" in refused.json()["detail"]
    assert api.http.get("/v1/sessions").json()["total"] == 0  # nothing was started


# Each prints setup-ran-42, which the build's own line quoting its step (RUN echo setup-ran-$((6*7))) does not.
FAILING_PREPARATIONS = {
    "setup": {".cubicle/environment.toml": 'setup = "echo setup-ran-$((6*7)); exit 1"\nsetup_network = "none"\n'},
    "build": {
        ".cubicle/environment.toml": 'dockerfile = "Dockerfile"\nsetup_network = "none"\n',
        "Dockerfile": f"FROM {Settings().image}\nRUN echo setup-ran-$((6*7)) && exit 1\n",
    },
}


@pytest.mark.parametrize("failing", FAILING_PREPARATIONS)
def test_a_failed_setup_runs_once_a_turn_and_its_output_comes_before_the_turns_end(
    api: Api, model_server: ScriptedServer, make_repo: Callable[..., Path], failing: str
) -> None:
    """The turn and the container's warm start both need the environment: a setup (or a build) that failed is
    reported to both, never run a second time (whose output would come after ``session_finished``). A follow-up
    tries it again."""
    repo = make_repo(files={"README.md": "# demo\n", **FAILING_PREPARATIONS[failing]})
    sid = api.create(str(repo), register(model_server, prefix="api-setup", turns=WORK))["id"]
    assert api.wait_for(sid, lambda r: r["status"] != "running")["status"] == "failed"
    assert api.http.post(f"/v1/sessions/{sid}/messages", json={"text": "again"}).status_code == 202
    api.wait_for(sid, lambda r: r["status"] != "running")
    assert api.http.delete(f"/v1/sessions/{sid}").status_code == 200  # waits for the warm start, whatever it ran
    events = api.events(sid)
    kinds = [
        "ran" if e["type"] == "setup_output" and "setup-ran-42" in e["text"] else e["type"]
        for e in events
        if e["type"] in ("session_started", "user_message", "setup_output", "error", "session_finished")
    ]
    assert [k for k in kinds if k != "setup_output"] == [
        "session_started",
        "ran",
        "error",
        "session_finished",
        "user_message",
        "ran",
        "error",
        "session_finished",
    ], kinds
    errors = [e for e in events if e["type"] == "error"]
    assert len(errors) == 2 and all(e["kind"] == "setup" and "setup-ran-42" in e["message"] for e in errors), errors
