"""End to end: the controller in its own container (built from this repo), driven through its published port."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

from controller.sandbox import owners
from controller.testing.container import CubicleContainer
from tests.integration.api_helpers import Api


def test_session_through_the_containerized_controller(
    controller_image: str, tmp_path: Path, make_repo: Callable[..., Path], docker_client: Any
) -> None:
    repos = tmp_path / "repos"
    repos.mkdir()
    repo = make_repo("repos/project")
    flow = tmp_path / "flow.json"
    flow.write_text(
        json.dumps(
            {
                "name": "e2e",
                "turns": [
                    {
                        "content": [
                            {"type": "text", "text": "Checking."},
                            {
                                "type": "tool_use",
                                "name": "run_command",
                                "input": {"command": "id -u && echo e2e > e2e.txt"},
                            },
                        ]
                    },
                    {"content": [{"type": "text", "text": "Done end to end."}]},
                ],
            }
        )
    )
    token = secrets.token_hex(16)
    instance = "e2e-" + secrets.token_hex(4)
    with CubicleContainer(
        controller_image, token=token, repo_roots=[repos], scenario=flow, instance=instance
    ) as cubicle:
        api = Api(cubicle.url, token)
        assert api.http.get("/healthz").json()["status"] == "ok"
        assert api.http.get("/v1/sessions", headers={"Authorization": ""}).status_code == 401
        sid = api.create(str(repo), "e2e")["id"]
        events = api.events(sid)
        record = api.get(sid)
        assert not (repo / "e2e.txt").exists()  # the agent wrote its layer, in the controller's data dir
        applied = api.http.post(f"/v1/sessions/{sid}/apply", json={})
        api.http.close()
    assert applied.status_code == 200 and applied.json()["applied"] == ["e2e.txt"], applied.text
    assert events[-1]["type"] == "session_finished" and events[-1]["reason"] == "end_turn"
    assert record["status"] == "idle" and record["steps"] == 2
    result = next(e for e in events if e["type"] == "tool_result")
    assert result["output"].startswith("exit code 0") and f"{repo.stat().st_uid}\n" in result["output"]
    assert (repo / "e2e.txt").read_text() == "e2e\n"
    leftovers = docker_client.containers.list(all=True, filters={"label": f"{owners.SESSION}={sid}"})
    assert leftovers == [], "stopping the controller removes its sandboxes"
