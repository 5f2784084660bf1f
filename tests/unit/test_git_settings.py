"""The settings of sessions on git remotes: each read from its variable, each refused with a sentence that says why."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from controller.cli import usage
from controller.config import DEFAULT_GIT_AUTHOR, GitAuthor, Settings, branch_prefix
from controller.wire.gitremote import parse_pattern


def problems(monkeypatch: pytest.MonkeyPatch, **variables: str) -> str:
    """What ``cubicle`` says of these variables at start ('' when they are fine)."""
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    try:
        Settings()
    except ValidationError as err:
        return usage.environment_problems(err)
    return ""


def test_the_defaults_take_no_remote_and_build_nothing_from_one() -> None:
    settings = Settings()
    assert settings.git_remotes == () and settings.git_credentials is None
    assert settings.git_branch_prefix == "cubicle/" and settings.git_allow_builds is False
    assert settings.git_author == GitAuthor(name="Cubicle", email="cubicle@localhost")
    assert str(settings.git_author) == DEFAULT_GIT_AUTHOR
    assert settings.git_owner == (1000, 1000) and settings.git_max_bytes == 2 << 30
    assert settings.git_connect_timeout_s < settings.git_timeout_s


def test_every_setting_is_read_from_its_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name, value in {
        "CUBICLE_GIT_REMOTES": "https://git.example.com/team/*, http://127.0.0.1:8080/**",
        "CUBICLE_GIT_CREDENTIALS": str(tmp_path / "credentials"),
        "CUBICLE_GIT_BRANCH_PREFIX": "agent/",
        "CUBICLE_GIT_AUTHOR": "Ann Example <ann@example.com>",
        "CUBICLE_GIT_MAX_BYTES": str(1 << 30),
        "CUBICLE_GIT_OWNER": "1001:1002",
        "CUBICLE_GIT_ALLOW_BUILDS": "true",
        "CUBICLE_GIT_CONNECT_TIMEOUT_S": "5",
        "CUBICLE_GIT_TIMEOUT_S": "60",
    }.items():
        monkeypatch.setenv(name, value)
    settings = Settings()
    assert settings.git_remotes == (
        parse_pattern("https://git.example.com/team/*"),
        parse_pattern("http://127.0.0.1:8080/**"),
    )
    assert settings.git_credentials == tmp_path / "credentials" and settings.git_branch_prefix == "agent/"
    assert (settings.git_author.name, settings.git_author.email) == ("Ann Example", "ann@example.com")
    assert settings.git_max_bytes == 1 << 30 and settings.git_owner == (1001, 1002) and settings.git_allow_builds
    assert (settings.git_connect_timeout_s, settings.git_timeout_s) == (5, 60)


def test_remotes_take_a_json_list_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUBICLE_GIT_REMOTES", '["https://git.example.com/a,b/*", "https://*.example.org/*"]')
    assert [str(p) for p in Settings().git_remotes] == ["https://git.example.com/a,b/*", "https://*.example.org/*"]


@pytest.mark.parametrize(
    ("variables", "said"),
    [
        ({"CUBICLE_GIT_REMOTES": "https://*.com/*"}, "whole top-level domain"),
        ({"CUBICLE_GIT_REMOTES": "ssh://git.example.com/team/*"}, "starts with http:// or https://"),
        ({"CUBICLE_GIT_REMOTES": "https://git.example.com/team/"}, "write /* for every repository"),
        ({"CUBICLE_GIT_REMOTES": '["https://a.example.com/*"'}, "not a JSON list"),
        ({"CUBICLE_GIT_CREDENTIALS": "credentials.txt"}, "not an absolute path"),
        ({"CUBICLE_GIT_BRANCH_PREFIX": "a..b/"}, "cannot start a git branch name"),
        ({"CUBICLE_GIT_BRANCH_PREFIX": "-x/"}, "not starting with"),
        ({"CUBICLE_GIT_AUTHOR": "Cubicle"}, "Name <email>"),
        ({"CUBICLE_GIT_AUTHOR": "Cubicle <nobody>"}, "not an email address"),
        ({"CUBICLE_GIT_AUTHOR": "Cu\x1bbicle <c@x>"}, "printable"),
        ({"CUBICLE_GIT_OWNER": "0:0"}, "never root"),
        ({"CUBICLE_GIT_OWNER": "1000:0"}, "never root"),
        ({"CUBICLE_GIT_OWNER": "1000"}, "uid:gid"),
        ({"CUBICLE_GIT_OWNER": "-1:1000"}, "uid:gid"),
        ({"CUBICLE_GIT_MAX_BYTES": "1000"}, "too small"),
        ({"CUBICLE_GIT_CONNECT_TIMEOUT_S": "0"}, "too small"),
        ({"CUBICLE_GIT_TIMEOUT_S": "1"}, "too small"),
    ],
)
def test_a_bad_value_is_refused_at_start_naming_its_variable(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], said: str
) -> None:
    message = problems(monkeypatch, **variables)
    assert said in message and next(iter(variables)) in message


def test_a_token_in_a_pattern_is_never_echoed(monkeypatch: pytest.MonkeyPatch) -> None:
    message = problems(monkeypatch, CUBICLE_GIT_REMOTES="https://alice:hunter2@git.example.com/*")
    assert "credentials" in message and "hunter2" not in message and "alice" not in message


def test_an_empty_credentials_variable_is_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUBICLE_GIT_CREDENTIALS", " ")
    assert Settings().git_credentials is None


def test_the_credentials_path_may_start_at_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("CUBICLE_GIT_CREDENTIALS", "~/git-credentials")
    assert Settings().git_credentials == tmp_path / "git-credentials"


@pytest.mark.parametrize("prefix", ["cubicle/", "agent-", "bots/cubicle/", "x"])
def test_branch_prefixes_git_takes(prefix: str) -> None:
    assert branch_prefix(prefix) == prefix


@pytest.mark.parametrize(
    "prefix",
    ["", "/x", ".x/", "a b/", "a~/", "a^", "a:b/", "a?", "a*/", "a[/", "a\\b/", "a//b/", "a/.b/", "a.lock/", "a@{/"],
)
def test_branch_prefixes_git_refuses(prefix: str) -> None:
    with pytest.raises(ValueError):
        branch_prefix(prefix)


def test_an_author_prints_as_it_is_written() -> None:
    author = GitAuthor.model_validate("  Ann Example   <ann@example.com> ")
    assert str(author) == "Ann Example <ann@example.com>"
    assert GitAuthor.model_validate(author.model_dump()) == author
    for wrong in ("Ann <ann@example.com> <b@c>", "<ann@example.com>", "Ann <a@b@c>", "Ann <ann @example.com>"):
        with pytest.raises(ValidationError):
            GitAuthor.model_validate(wrong)
