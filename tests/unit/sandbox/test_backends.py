"""The sandbox backend seam: chosen by configuration, refused clearly when not runnable, and the only way in."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from controller.config import DockerBackendConfig, KubernetesBackendConfig, Settings
from controller.errors import ConfigError
from controller.sandbox.backends import open_backend
from tests.unit.imports import imports, modules, tree

ENGINE_MODULES = {"sandbox.engine", "sandbox.images", "sandbox.egress", "sandbox.isolation", "sandbox.kubernetes"}
"""How the Docker backend starts things: none of the agent, the server or the workspace may reach for them."""


def test_docker_is_the_default_and_kubernetes_is_refused_with_where_its_design_is(tmp_path: Path) -> None:
    assert isinstance(Settings(data_dir=tmp_path).backend, DockerBackendConfig)
    assert open_backend(Settings(data_dir=tmp_path)).kind == "docker"
    chosen = Settings(data_dir=tmp_path, backend={"kind": "kubernetes", "namespace": "sandboxes"})  # type: ignore[arg-type]
    assert isinstance(chosen.backend, KubernetesBackendConfig) and chosen.backend.namespace == "sandboxes"
    with pytest.raises(ConfigError, match=r"designed but not yet runnable: docs/kubernetes\.md"):
        open_backend(chosen)


def test_cubicle_serve_refuses_a_backend_that_cannot_run_before_it_starts(tmp_path: Path) -> None:
    env = {**os.environ, "CUBICLE_BACKEND__KIND": "kubernetes", "CUBICLE_DATA_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "controller", "serve"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stderr
    assert "designed but not yet runnable" in done.stderr and "Traceback" not in done.stderr


def test_an_unknown_backend_is_an_error_that_names_the_kinds(tmp_path: Path) -> None:
    env = {**os.environ, "CUBICLE_BACKEND__KIND": "nomad", "CUBICLE_DATA_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "controller", "sessions"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "'docker', 'kubernetes'" in done.stderr, done.stderr


def test_the_kubernetes_design_is_never_imported_by_the_server_or_the_cli() -> None:
    """It is reached only by running it (``python -m controller.sandbox.kubernetes``)."""
    code = (
        "import sys, controller.server.api, controller.cli.app, controller.sandbox.backends; "
        "print('controller.sandbox.kubernetes' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "False"


def test_the_agent_the_server_and_the_workspace_start_nothing_themselves() -> None:
    """Adding a backend touches none of them: they reach the Docker SDK and the engine's modules only through
    ``sandbox.backends`` (the workspace reads ``.dockerignore`` with the SDK's own parsing and pattern translation,
    ``docker.utils.build`` and ``docker.utils.fnmatch``, which start nothing)."""
    leaks: dict[str, set[str]] = {}
    for module in modules():
        if module.split(".")[0] not in {"agent", "server", "workspace"}:
            continue
        found = imports(module) & ENGINE_MODULES
        for node in ast.walk(tree(module)):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "docker":
                if node.module not in {"docker.utils.build", "docker.utils.fnmatch"}:
                    found.add(node.module or "")
            elif isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names if alias.name.split(".")[0] == "docker"}
        if found:
            leaks[module] = found
    assert leaks == {}
