"""compose.yaml, Dockerfile.controller and .ci/wheelhouse agree with the code and with the README (no Docker).

The stack itself is brought up by tests/integration/test_compose.py."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from controller.config import SYSTEM_CA_BUNDLES
from controller.environment.dockerfile import CA_PATH, CA_VARIABLES

ROOT = Path(__file__).resolve().parents[2]


def _commands(text: str) -> list[str]:
    """The compose commands of a README block or of compose.yaml's header, comments dropped."""
    lines = [line.removeprefix("#").split("  #")[0].strip() for line in text.splitlines()]
    return [
        line for line in lines if line.startswith((".ci/wheelhouse", "sudo mkdir", "export CUBICLE_API", "docker "))
    ]


def test_the_readme_and_compose_yaml_give_the_same_steps() -> None:
    readme = (ROOT / "README.md").read_text()
    block = readme.split("### As a service, with Compose", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    header = (ROOT / "compose.yaml").read_text().split("services:", 1)[0].split("# Two controllers", 1)[0]
    assert _commands(block) == _commands(header) and len(_commands(block)) == 4
    assert "Docker socket" in readme.split("### As a service, with Compose", 1)[1].split("## ", 1)[0]


def test_the_default_profile_is_what_the_integration_test_brings_up() -> None:
    services = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]
    assert [name for name, spec in services.items() if not spec.get("profiles")] == ["sandbox-image", "controller"]


def test_the_controller_image_trusts_the_bundle_as_environment_builds_do() -> None:
    dockerfile = (ROOT / "Dockerfile.controller").read_text()
    assert {f"{name}={CA_PATH}" for name in CA_VARIABLES} <= set(re.findall(r"\b[A-Z_]+=\S+", dockerfile))
    assert "/src/wheelhouse/ca-certificates.crt" in dockerfile


def test_the_wheelhouse_finds_the_bundle_as_the_settings_do() -> None:
    script = (ROOT / ".ci" / "wheelhouse").read_text()
    searched = re.search(r"for path in (.*); do", script)
    assert searched is not None and searched.group(1).split() == list(SYSTEM_CA_BUNDLES)
    assert "for name in SSL_CERT_FILE REQUESTS_CA_BUNDLE; do" in script and "CUBICLE_CA_BUNDLE+set" in script
    assert "requirements.lock" in script and "--require-hashes" in script
