"""The SDK client made from Settings: where it sends requests, under the environment compose.yaml passes."""

from __future__ import annotations

import os
import re
from pathlib import Path

import anthropic
import pytest
import yaml

from controller.agent.anthropic_model import make_client
from controller.config import Settings
from controller.errors import ConfigError

COMPOSE = Path(__file__).resolve().parents[3] / "compose.yaml"
HOST = {"CUBICLE_API_TOKEN": "t" * 32, "CUBICLE_REPO_ROOT": "/srv/code"}  # what compose.yaml demands be set


def _interpolate(value: str, host: dict[str, str]) -> str:
    """Compose's ``${VAR}``, ``${VAR:-default}`` and ``${VAR:?error}`` (an empty variable counts as unset)."""

    def one(match: re.Match[str]) -> str:
        name, op, arg = match.group(1), match.group(2), match.group(3) or ""
        given = host.get(name, "")
        if op == ":?" and not given:
            raise AssertionError(f"compose would refuse to start: {arg}")
        return given or (arg if op == ":-" else "")

    return re.sub(r"\$\{(\w+)(:[-?])?([^}]*)\}", one, value)


def compose_environment(host: dict[str, str]) -> dict[str, str]:
    """The controller's environment exactly as compose.yaml builds it from ``host``."""
    service = yaml.safe_load(COMPOSE.read_text())["services"]["controller"]
    return {key: _interpolate(str(value), host) for key, value in service["environment"].items()}


@pytest.fixture
def environ(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The process environment without the caller's Cubicle or Anthropic variables."""
    for key in list(os.environ):
        if key.startswith(("CUBICLE_", "ANTHROPIC_")):
            monkeypatch.delenv(key)
    return monkeypatch


def sdk_default_base_url(environ: pytest.MonkeyPatch) -> str:
    """Where the SDK sends requests when nobody names an endpoint."""
    environ.delenv("ANTHROPIC_BASE_URL", raising=False)
    return str(anthropic.AsyncAnthropic(api_key="x").base_url)


def test_compose_passes_a_blank_base_url_when_none_is_set() -> None:
    assert compose_environment(HOST)["ANTHROPIC_BASE_URL"] == ""  # the case this file is about


@pytest.mark.parametrize("base_url", ["", "   "])
def test_a_blank_base_url_from_compose_means_the_default_endpoint(environ: pytest.MonkeyPatch, base_url: str) -> None:
    default = sdk_default_base_url(environ)
    env = compose_environment({**HOST, "ANTHROPIC_API_KEY": "sk-ant-test"}) | {"ANTHROPIC_BASE_URL": base_url}
    for key, value in env.items():
        environ.setenv(key, value)
    client = make_client(Settings())
    assert str(client.base_url) == default
    assert client.api_key == "sk-ant-test"


def test_a_blank_api_key_from_compose_is_a_config_error(environ: pytest.MonkeyPatch) -> None:
    for key, value in compose_environment(HOST).items():
        environ.setenv(key, value)
    assert os.environ["ANTHROPIC_API_KEY"] == ""
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY is not set"):
        make_client(Settings())


def test_a_named_base_url_is_used(environ: pytest.MonkeyPatch) -> None:
    env = compose_environment({**HOST, "ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": "http://127.0.0.1:8123"})
    for key, value in env.items():
        environ.setenv(key, value)
    assert str(make_client(Settings()).base_url).rstrip("/") == "http://127.0.0.1:8123"


def test_the_postgres_profile_runs_two_named_controllers_on_one_database_and_one_data_directory() -> None:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    host = HOST | {"CUBICLE_DATABASE_URL": "postgresql://cubicle:pw@postgres/cubicle"}
    first, second = (
        {key: _interpolate(str(value), host) for key, value in services[name]["environment"].items()}
        for name in ("controller", "controller-2")
    )
    assert first["CUBICLE_INSTANCE"] != second["CUBICLE_INSTANCE"], "each controller tells its containers apart"
    assert first["CUBICLE_DATABASE_URL"] == second["CUBICLE_DATABASE_URL"] == host["CUBICLE_DATABASE_URL"]
    assert services["controller"]["volumes"] == services["controller-2"]["volumes"], "one data directory"
    assert services["controller-2"]["ports"] != services["controller"]["ports"]
    assert services["controller-2"]["depends_on"]["postgres"] == {"condition": "service_healthy"}
    assert services["postgres"]["profiles"] == services["controller-2"]["profiles"] == ["postgres"]


def test_compose_without_a_database_url_keeps_sqlite(environ: pytest.MonkeyPatch) -> None:
    for key, value in compose_environment(HOST).items():
        environ.setenv(key, value)
    assert Settings().database_url is None
