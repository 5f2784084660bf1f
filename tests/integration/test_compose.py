"""compose.yaml's default profile brought up (through the engine's API: tests/integration/compose_stack.py says why),
waited for until healthy, and one scripted session run through it."""

from __future__ import annotations

import json
import secrets
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from controller.config import DEFAULT_IMAGE
from controller.sandbox import images, owners
from tests.eventually import eventually
from tests.integration.api_helpers import Api
from tests.integration.compose_stack import Build, Stack, wait_for_http

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = {
    "name": "compose",
    "turns": [
        {
            "content": [
                {"type": "tool_use", "name": "run_command", "input": {"command": "id -u && echo compose > c.txt"}}
            ]
        },
        {"content": [{"type": "text", "text": "Done through compose."}]},
    ],
}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _model_service(image: str, scenario: Path) -> dict[str, Any]:
    """What an override file would add: the scripted model, reachable as http://model:8123 on the project network."""
    command = ["cubicle", "scripted-server", "/etc/cubicle/scenario.json", "--host", "0.0.0.0", "--port", "8123"]
    return {"image": image, "command": command, "volumes": [f"{scenario}:/etc/cubicle/scenario.json:ro"]}


def test_compose_default_profile_serves_a_session(
    controller_image: str, docker_client: Any, tmp_path: Path, make_repo: Callable[..., Path]
) -> None:
    (tmp_path / "repos").mkdir()
    repo = make_repo("repos/shop")
    data_dir = tmp_path / "state" / "cubicle"
    data_dir.mkdir(parents=True)  # as the README says: Compose makes the data directory's bind but never creates it
    (tmp_path / "scenario.json").write_text(json.dumps(SCENARIO))
    token, instance, port = secrets.token_hex(16), "compose-" + secrets.token_hex(4), _free_port()
    env = {
        "CUBICLE_API_TOKEN": token,
        "CUBICLE_REPO_ROOT": str(tmp_path / "repos"),
        "CUBICLE_DATA_DIR": str(data_dir),
        "CUBICLE_INSTANCE": instance,
        "CUBICLE_PORT": str(port),
        "ANTHROPIC_API_KEY": "scripted",
        "ANTHROPIC_BASE_URL": "http://model:8123",
    }
    builds = {
        "sandbox-image": Build(DEFAULT_IMAGE, images.SANDBOX.path, images.SANDBOX.dockerfile),
        "controller": Build(controller_image, ROOT, ROOT / "Dockerfile.controller"),  # as .ci/controller-image builds
    }
    stack = Stack.load(docker_client, ROOT / "compose.yaml", instance, env, builds=builds)
    assert stack.default_profile() == ["sandbox-image", "controller"]
    stack.services["model"] = _model_service(controller_image, tmp_path / "scenario.json")
    with stack.up(["model", *stack.default_profile()]):
        wait_for_http(f"http://127.0.0.1:{port}/healthz")
        api = Api(f"http://127.0.0.1:{port}", token)
        sid = api.create(str(repo), "compose")["id"]
        events, record = api.events(sid), api.get(sid)
        api.http.close()
        health = eventually(lambda: stack.health("controller"), until=lambda s: s != "starting", what="a health check")
    assert health == "healthy"  # the image's HEALTHCHECK, which `depends_on: service_healthy` would wait for
    assert record["status"] == "idle" and events[-1]["type"] == "session_finished", events[-3:]
    result = next(e for e in events if e["type"] == "tool_result")
    assert result["output"].startswith("exit code 0") and f"{repo.stat().st_uid}\n" in result["output"]
    assert not (repo / "c.txt").exists() and any(data_dir.iterdir())  # the agent wrote its layer in the data dir
    leftovers = docker_client.containers.list(all=True, filters={"label": f"{owners.SESSION}={sid}"})
    assert leftovers == [], "stopping the controller removes its sandboxes"
    assert docker_client.containers.list(all=True, filters={"label": f"com.docker.compose.project={instance}"}) == []
