"""``cubicle compact ID``: the CLI compacts a session the API ran, in the database they share."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from controller.agent.scripted import ScriptedServer, serve_in_thread
from controller.config import Settings
from controller.server.api import create_app
from controller.testing import MemorySandbox, Reply
from tests.agent_harness import register, text, tool
from tests.integration.api_helpers import Api
from tests.sandbox_defaults import owned_dir

TOKEN = "compact-token"


def cubicle(data: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CUBICLE_"))}
    env.update(CUBICLE_DATA_DIR=str(data), ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY="test", CUBICLE_MODEL_RETRIES="0")
    return subprocess.run(
        [sys.executable, "-m", "controller", *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_the_cli_compacts_an_api_session_and_refuses_unknown_ones(tmp_path: Path, model_server: ScriptedServer) -> None:
    owned_dir(tmp_path / "roots" / "repo")
    data = tmp_path / "data"
    settings = Settings(
        api_key="test",
        base_url=model_server.url,
        model_retries=0,
        api_token=TOKEN,  # type: ignore[attr-defined]
        repo_roots=[tmp_path / "roots"],
        data_dir=data,
        sse_heartbeat_s=1,
    )
    app = create_app(settings, sandbox_factory=lambda *_: MemorySandbox({}, {"make test": Reply(stdout="F" * 6000)}))
    steps = [{"content": [tool("run_command", command="make test")]}] * 6 + [{"content": [text("Done.")]}]
    name = register(model_server, steps, summary="SUMMARY: make test fails six times")
    with serve_in_thread(app) as url:
        api = Api(url, TOKEN)
        policy = {"window": 60_000, "keep_recent": 3000, "margin": 1000}  # the session's own: the CLI uses it too
        sid = api.create(str(tmp_path / "roots" / "repo"), name, task="fix the tests", context=policy)["id"]
        api.wait_for(sid, lambda s: s["status"] == "idle")

        done = cubicle(data, model_server.url, "compact", sid)  # type: ignore[attr-defined]
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("compact: messages before") and "tokens" in done.stdout
        view = api.http.get(f"/v1/sessions/{sid}/messages", params={"view": "model"}).json()
        assert [e["kind"] for e in view["edits"]] == ["compact"]
        assert "SUMMARY: make test fails six times" in str(view["messages"][0])
        api.http.close()

    again = cubicle(data, model_server.url, "compact", sid)  # type: ignore[attr-defined]
    assert again.returncode == 0 and "nothing to compact" in again.stdout, again.stderr
    unknown = cubicle(data, model_server.url, "compact", "s_nope")  # type: ignore[attr-defined]
    assert unknown.returncode == 2 and "s_nope" in unknown.stderr
