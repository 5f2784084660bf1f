"""The docs' Python client example (docs/guides/api.md), run exactly as written against a live `cubicle serve`."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from controller.agent.scripted import ScriptedServer
from tests.agent_harness import register, text, tool
from tests.integration.client_helpers import cubicle_serve
from tests.integration.helpers import doc_example

PAGE, HEADING = "docs/guides/api.md", "## Python client"


def test_the_readme_client_example_runs(
    tmp_path: Path, model_server: ScriptedServer, make_repo: Callable[..., Path]
) -> None:
    shop = make_repo("home/code/shop")
    home = shop.parents[1]
    turns = [
        {"content": [tool("run_command", command="echo 'def test_empty(): pass' > test_cart.py")]},
        {"content": [text("Added the test.")]},
    ]
    model = register(model_server, turns, prefix="readme-client")
    with cubicle_serve(home / "code", model_server, CUBICLE_MODEL=model) as served:
        script = tmp_path / "readme_client.py"
        script.write_text(doc_example(PAGE, HEADING))
        env = {**os.environ, "HOME": str(home), "CUBICLE_URL": served.url, "CUBICLE_API_TOKEN": served.token}
        done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert "tool: run_command {'command': \"echo 'def test_empty(): pass' > test_cart.py\"}" in done.stdout
    assert "status: idle | finish: end_turn | steps: 2" in done.stdout
    assert "added test_cart.py" in done.stdout
    assert (shop / "test_cart.py").read_text() == "def test_empty(): pass\n"
