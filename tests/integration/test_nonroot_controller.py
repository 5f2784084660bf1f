"""A controller that is not root — the usual case: a developer in the docker group — runs, reviews and discards.

The controller runs as uid 1000 inside the controller image (its package and Python need no
access to this checkout), with the engine's socket and a directory mounted at the same path
inside and outside, as compose does. The overlay's kernel leftovers (``work/work``, root's,
mode 000, whiteouts inside) are what such a controller cannot remove alone: ``discard`` asks
the engine to, and the layer goes whole. An agent's ``chmod 000`` directory cannot be read by
such a controller: it is listed as unreadable and held back, and the rest still applies.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docker.types import Mount

from controller.config import Settings
from tests.integration.cli_helpers import tree
from tests.sandbox_defaults import AGENT_UID, owned_dir

WIPE = {
    "name": "wipe",
    "turns": [
        {
            "content": [
                {
                    "type": "tool_use",
                    "name": "run_command",
                    "input": {
                        "command": "rm -rf docs README.md && mkdir docs && echo fresh > docs/new.txt"
                        " && mkdir locked && echo s > locked/s && chmod 000 locked && chmod 000 /workspace"
                    },
                }
            ]
        },
        {"content": [{"type": "text", "text": "done"}]},
    ],
}


@pytest.fixture
def base() -> Iterator[Path]:
    made = Path(tempfile.mkdtemp(prefix="cubicle-nonroot-"))
    os.chmod(made, 0o755)
    yield made
    shutil.rmtree(made, ignore_errors=True)


def test_a_controller_that_is_not_root_runs_applies_reverts_and_discards(
    base: Path, controller_image: str, docker_client: Any
) -> None:
    repo, data = owned_dir(base / "repo"), owned_dir(base / "data")
    for rel, text in {"README.md": "# demo\n", "docs/a.txt": "a\n", "docs/b.txt": "b\n"}.items():
        (repo / rel).parent.mkdir(exist_ok=True)
        (repo / rel).write_text(text)
    for path in [repo, *repo.rglob("*")]:
        if os.geteuid() == 0:
            os.lchown(path, AGENT_UID, AGENT_UID)
    (base / "wipe.json").write_text(json.dumps(WIPE))
    before = tree(repo)
    socket = Settings().docker_socket or Path("/var/run/docker.sock")

    def cubicle(*args: str) -> tuple[int, str, str]:
        container = docker_client.containers.run(
            controller_image,
            ["cubicle", *args],
            detach=True,
            user=f"{AGENT_UID}:{AGENT_UID}",
            group_add=[str(socket.stat().st_gid)],
            environment={"CUBICLE_DATA_DIR": str(data), "HOME": "/tmp"},
            mounts=[
                Mount("/var/run/docker.sock", str(socket), type="bind"),
                Mount(str(base), str(base), type="bind", propagation="rslave"),
            ],  # as compose.yaml
            network_mode="none",
        )
        try:
            code = container.wait(timeout=180)["StatusCode"]
            out = container.logs(stdout=True, stderr=False).decode()
            err = container.logs(stdout=False, stderr=True).decode()
        finally:
            container.remove(force=True)
        return code, out, err

    code, out, err = cubicle("run", str(repo), "wipe", "--scenario", str(base / "wipe.json"), "--no-apply", "--json")
    assert code == 0, err
    sid = json.loads(out.splitlines()[0])["session_id"]
    assert tree(repo) == before, "the checkout is untouched until apply"
    layer = data / "workspaces" / sid
    assert layer.stat().st_uid == AGENT_UID, "the layer belongs to the controller's user"

    code, out, err = cubicle("changes", sid)
    assert code == 0 and "locked" in out and "unreadable" in out, err  # the agent's chmod 000 blocks nothing else
    code, out, err = cubicle("apply", sid)
    assert code == 0, err
    assert (repo / "docs" / "new.txt").read_text() == "fresh\n" and not (repo / "README.md").exists()
    assert not (repo / "locked").exists(), "what cannot be reviewed is never applied"
    code, out, err = cubicle("revert", sid)
    assert code == 0, err
    assert tree(repo) == before, "revert restores the checkout byte for byte"

    code, out, err = cubicle("discard", sid)
    assert code == 0, err
    assert not layer.exists(), f"the layer is gone, kernel leftovers included: {list(layer.rglob('*'))}"
