"""The context surface of the API, with no Docker: the model's view of a transcript, and compaction on request."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.agent.scripted import ScriptedServer, serve_in_thread
from controller.config import Settings
from controller.server.api import create_app
from controller.testing import MemorySandbox, Reply
from controller.wire.policies import ContextPolicy
from tests.agent_harness import register, text, tool
from tests.integration.api_helpers import Api
from tests.sandbox_defaults import owned_dir

pytestmark = pytest.mark.usefixtures("each_store")  # the API suite runs on SQLite and on PostgreSQL

TOKEN = "context-token"
POLICY = ContextPolicy(window=60_000, keep_recent=3000, margin=1000)


@pytest.fixture
def api(tmp_path: Path, model_server: ScriptedServer) -> Iterator[Api]:
    owned_dir(tmp_path / "roots" / "repo")
    settings = Settings(
        api_key="test",
        base_url=model_server.url,
        model_retries=0,
        api_token=TOKEN,  # type: ignore[attr-defined]
        repo_roots=[tmp_path / "roots"],
        data_dir=tmp_path / "data",
        sse_heartbeat_s=1,
        context=POLICY,
    )
    commands = {"make test": Reply(stdout="F" * 6000)}
    app = create_app(settings, sandbox_factory=lambda *_: MemorySandbox({"README.md": "# r\n"}, commands))
    with serve_in_thread(app) as url:
        client = Api(url, TOKEN)
        yield client
        client.http.close()


def test_a_session_is_compacted_on_request_and_the_model_view_shows_it(
    api: Api, model_server: ScriptedServer, tmp_path: Path
) -> None:
    steps = [{"content": [tool("run_command", command="make test")]}] * 6 + [{"content": [text("Done.")]}]
    name = register(model_server, steps, summary="SUMMARY: make test fails six times")
    sid = api.create(str(tmp_path / "roots" / "repo"), name, task="fix the tests")["id"]
    api.wait_for(sid, lambda s: s["status"] == "idle")
    before = api.http.get(f"/v1/sessions/{sid}/messages", params={"view": "model"}).json()
    assert before["edits"] == [] and before["window"] == 60_000 and before["estimated_tokens"] > 9000

    compacted = api.http.post(f"/v1/sessions/{sid}/compact")
    assert compacted.status_code == 200, compacted.text
    after = api.http.get(f"/v1/sessions/{sid}/messages", params={"view": "model"}).json()
    (edit,) = after["edits"]
    assert edit["kind"] == "compact" and "SUMMARY: make test fails six times" in str(after["messages"][0])
    assert "fix the tests" in str(after["messages"][0]) and after["estimated_tokens"] < before["estimated_tokens"]
    stored = api.http.get(f"/v1/sessions/{sid}/messages").json()
    assert "edits" not in stored and len(stored["messages"]) == 14, "the stored transcript stays whole"
    edited = [e for e in api.events(sid) if e["type"] == "context_edited"]
    assert [(e["kind"], e["reason"]) for e in edited] == [("compact", "manual")]


def test_compaction_waits_for_the_turn_to_end(api: Api, model_server: ScriptedServer, tmp_path: Path) -> None:
    name = register(model_server, [{"content": [text("thinking")], "delay_s": 5}])
    sid = api.create(str(tmp_path / "roots" / "repo"), name)["id"]
    refused = api.http.post(f"/v1/sessions/{sid}/compact")
    assert refused.status_code == 409 and "running a turn" in refused.json()["detail"]
    api.http.post(f"/v1/sessions/{sid}/cancel")
    assert api.http.post("/v1/sessions/nope/compact").status_code == 404


def test_a_session_can_carry_its_own_context_policy(api: Api, model_server: ScriptedServer, tmp_path: Path) -> None:
    """The server manages context; a session that asks for ``off`` hits the window, as unmanaged loops do."""
    steps = [{"content": [tool("run_command", command="make test")]}] * 30 + [{"content": [text("Done.")]}]
    name = register(model_server, steps, context_window=20_000)
    managed = api.create(str(tmp_path / "roots" / "repo"), name, context={"window": 20_000})
    unmanaged = api.create(str(owned_dir(tmp_path / "roots" / "other")), name, context={"strategy": "off"})
    assert unmanaged["context"]["strategy"] == "off" and unmanaged["context"]["window"] == POLICY.window
    ended = {sid: api.wait_for(sid, lambda s: s["status"] != "running") for sid in (managed["id"], unmanaged["id"])}
    assert ended[managed["id"]]["finish_reason"] == "end_turn"
    assert (
        ended[unmanaged["id"]]["finish_reason"] == "error" and "prompt is too long" in ended[unmanaged["id"]]["detail"]
    )
    view = api.http.get(f"/v1/sessions/{managed['id']}/messages", params={"view": "model"}).json()
    assert view["window"] == 20_000 and view["edits"]


def test_a_policy_outside_its_bounds_is_refused(api: Api, tmp_path: Path) -> None:
    response = api.http.post(
        "/v1/sessions", json={"repo": str(tmp_path / "roots" / "repo"), "task": "t", "context": {"window": 10}}
    )
    assert response.status_code == 422
    response = api.http.post(
        "/v1/sessions", json={"repo": str(tmp_path / "roots" / "repo"), "task": "t", "context": {"strategy": "magic"}}
    )
    assert response.status_code == 422
