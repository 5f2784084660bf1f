"""The API as the layer tests drive it: a hostile scripted model, then changes, apply, revert, rewind, discard."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from controller.agent.scripted import ScriptedServer, serve_in_thread
from controller.config import Settings
from controller.server.api import create_app
from tests.agent_harness import register, text, tool
from tests.integration.api_helpers import Api
from tests.sandbox_defaults import SANDBOX_LIMITS, TEST_INSTANCE

TOKEN = "layer-token"


def commands(*lines: str, end: str = "done") -> list[dict[str, Any]]:
    """A scenario: each line one run_command step (the hostile model's moves), then a final answer."""
    return [{"content": [tool("run_command", command=line)]} for line in lines] + [{"content": [text(end)]}]


class LayerApi(Api):
    def __init__(self, url: str, server: ScriptedServer, data_dir: Path) -> None:
        super().__init__(url, TOKEN)
        self.server = server
        self.data_dir = data_dir

    @classmethod
    @contextlib.contextmanager
    def serve(cls, base: Path, server: ScriptedServer, **overrides: Any) -> Iterator[LayerApi]:
        values: dict[str, Any] = {
            "api_key": "test",
            "base_url": server.url,
            "api_token": TOKEN,
            "repo_roots": [base],  # type: ignore[attr-defined]
            "data_dir": base / "data",
            "instance": TEST_INSTANCE,
            "limits": SANDBOX_LIMITS,
            "sse_heartbeat_s": 1,
        }
        settings = Settings(**(values | overrides))
        with serve_in_thread(create_app(settings)) as url:
            api = cls(url, server, settings.data_dir)
            try:
                yield api
            finally:
                api.http.close()

    def session(self, repo: Path, turns: list[dict[str, Any]], **extra: Any) -> str:
        """Start a session on ``repo`` whose model plays ``turns``; return once its first turn has ended."""
        sid = str(self.create(str(repo), register(self.server, turns, prefix="layer"), **extra)["id"])
        self.finish(sid)
        return sid

    def finish(self, sid: str) -> list[dict[str, Any]]:
        """The session's events once no turn runs (the stream closes then)."""
        events = self.events(sid)
        assert events[-1]["type"] == "session_finished", events[-3:]
        return events

    def follow_up(self, sid: str, message: str) -> list[dict[str, Any]]:
        accepted = self.http.post(f"/v1/sessions/{sid}/messages", json={"text": message})
        assert accepted.status_code == 202, accepted.text
        return self.finish(sid)

    def changes(self, sid: str) -> dict[str, dict[str, Any]]:
        listed = self.http.get(f"/v1/sessions/{sid}/changes")
        assert listed.status_code == 200, listed.text
        return {c["path"]: c for c in listed.json()}

    def post(self, sid: str, action: str, **body: Any) -> httpx.Response:
        return self.http.post(f"/v1/sessions/{sid}/{action}", json=body)

    def apply(self, sid: str, **body: Any) -> dict[str, Any]:
        done = self.post(sid, "apply", **body)
        assert done.status_code == 200, done.text
        result = dict(done.json())
        assert result["conflicts"] == []
        return result

    def layer(self, sid: str) -> Path:
        return self.data_dir / "workspaces" / sid
