"""Detected environments, without Docker: what a repository with no definition gets from its own files, and what
never reads as a kind (the real runs are tests/integration/test_detected_projects.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError

from controller.environment.definition import Overrides, load, materials, override, setup_inputs_hash, trusted_paths
from controller.errors import DefinitionError
from controller.wire.envspec import DEFAULT_SETUP_INPUTS, Environment

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def write(repo: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return repo


def test_a_repository_of_no_plain_kind_gets_the_default(tmp_path: Path) -> None:
    write(tmp_path, {"main.go": "package main\n", "README.md": "hi\n", "tox.ini": "[tox]\n"})
    env = load(tmp_path)
    assert env == Environment(source="default")
    assert env.detected is None and not env.builds


def test_a_definition_wins_even_an_empty_one(tmp_path: Path) -> None:
    write(tmp_path, {"pyproject.toml": "[project]\nname = 'x'\n", ".cubicle/environment.toml": ""})
    env = load(tmp_path)
    assert env.source == ".cubicle/environment.toml" and env.setup is None and env.detected is None


def test_detection_can_be_turned_off(tmp_path: Path) -> None:
    write(tmp_path, {"pyproject.toml": "[project]\nname = 'x'\n"})
    assert load(tmp_path, detect=False).source == "default"


def test_a_python_project_gets_a_venv_with_its_test_extras_first_on_path(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "pyproject.toml": (
                "[build-system]\nrequires = ['setuptools']\n[project]\nname = 'x'\n"
                "[project.optional-dependencies]\ntest = ['pytest']\ndocs = ['sphinx']\nDev = ['ruff']\n"
            ),
            "requirements-dev.txt": "mypy\n",
        },
    )
    env = load(tmp_path)
    assert env.source == "detected" and env.file is None
    assert env.detected == "Python (pyproject.toml, requirements-dev.txt)"
    assert env.setup == (
        "python3 -m venv .venv && .venv/bin/python -m pip install -e '.[test,Dev]' -r requirements-dev.txt"
    )
    assert env.env == {"VIRTUAL_ENV": "/workspace/.venv", "PATH": "/workspace/.venv/bin:${containerEnv:PATH}"}
    assert not env.builds  # the sandbox image as it is
    assert set(DEFAULT_SETUP_INPUTS) <= set(env.setup_inputs)


def test_a_checkout_with_a_venv_of_its_own_keeps_it(tmp_path: Path) -> None:
    write(tmp_path, {"setup.py": "from setuptools import setup\nsetup()\n", ".venv/pyvenv.cfg": "home = /usr\n"})
    env = load(tmp_path)
    assert env.setup == "python3 -m venv .cubicle-venv && .cubicle-venv/bin/python -m pip install -e ."
    assert env.env["PATH"].startswith("/workspace/.cubicle-venv/bin:")


def test_setup_cfg_extras_tox_deps_and_groups(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "setup.py": "import setuptools\nsetuptools.setup()\n",
            "setup.cfg": "[metadata]\nname = x\n[options.extras_require]\ntesting = pytest\nfast = orjson\n",
            "tox.ini": (
                "[testenv]\nextras = fast\ndeps =\n    -r{toxinidir}/requirements/ci.txt\n"
                "    hypothesis>=6  # property tests\n    {env:EXTRA}\n    --pre\ncommands = pytest\n"
            ),
            "requirements/ci.txt": "coverage\n",
            "pyproject.toml": "[build-system]\nrequires = ['setuptools']\n[dependency-groups]\ntest = ['pytest-xdist']\nlint = ['ruff']\n",
        },
    )
    env = load(tmp_path)
    assert env.detected == "Python (pyproject.toml, setup.py, setup.cfg, tox.ini, requirements/ci.txt)"
    assert env.setup == (
        "python3 -m venv .venv && .venv/bin/python -m pip install --quiet --upgrade 'pip>=25.1' && "
        ".venv/bin/python -m pip install -e '.[testing,fast]' -r requirements/ci.txt --group test 'hypothesis>=6'"
    )
    assert "requirements/ci.txt" in env.setup_inputs and "tox.ini" in env.setup_inputs


def test_pytest_is_added_when_configured_and_declared_nowhere(tmp_path: Path) -> None:
    write(tmp_path, {"requirements.txt": "requests\n", "pytest.ini": "[pytest]\n"})
    assert load(tmp_path).setup == "python3 -m venv .venv && .venv/bin/python -m pip install -r requirements.txt pytest"
    write(tmp_path, {"requirements.txt": "requests\npytest>=8\n"})
    assert load(tmp_path).setup == "python3 -m venv .venv && .venv/bin/python -m pip install -r requirements.txt"


def test_the_inflection_fixture_without_its_devcontainer(tmp_path: Path) -> None:
    repo = tmp_path / "inflection"
    shutil.copytree(FIXTURES / "inflection", repo, ignore=shutil.ignore_patterns(".devcontainer"))
    env = load(repo)
    assert env.detected == "Python (pyproject.toml, setup.py, setup.cfg, requirements.txt)"
    assert env.setup == "python3 -m venv .venv && .venv/bin/python -m pip install -e . -r requirements.txt"


def test_a_node_project_gets_nodejs_and_npm_ci(tmp_path: Path) -> None:
    write(tmp_path, {"package.json": '{"name": "x"}', "package-lock.json": "{}"})
    env = load(tmp_path)
    assert env.detected == "Node (package.json, package-lock.json)"
    assert env.packages == ("nodejs", "npm") and env.builds
    assert env.setup == "npm ci --no-audit --no-fund"
    assert env.env == {"PATH": "/workspace/node_modules/.bin:${containerEnv:PATH}"}
    assert materials(env, tmp_path).build_hash != materials(Environment(source="detected"), tmp_path).build_hash
    assert trusted_paths(env, tmp_path) == ()  # nothing of the repository's is built outside the sandbox


def test_node_without_a_lock_installs_and_another_managers_lock_is_not_plain(tmp_path: Path) -> None:
    write(tmp_path, {"package.json": '{"name": "x"}'})
    assert load(tmp_path).setup == "npm install --no-audit --no-fund"
    write(tmp_path, {"yarn.lock": ""})
    assert load(tmp_path).source == "default"


def test_node_and_python_in_one_repository(tmp_path: Path) -> None:
    write(tmp_path, {"package.json": "{}", "requirements.txt": "flask\n"})
    env = load(tmp_path)
    assert env.detected == "Node and Python (package.json, requirements.txt)"
    assert env.setup == (
        "npm install --no-audit --no-fund && python3 -m venv .venv && "
        ".venv/bin/python -m pip install -r requirements.txt"
    )
    assert env.env["PATH"] == "/workspace/node_modules/.bin:/workspace/.venv/bin:${containerEnv:PATH}"


@pytest.mark.parametrize("name", ["pyproject.toml", "package.json"])
def test_a_manifest_that_is_a_link_or_too_large_is_not_read(tmp_path: Path, name: str) -> None:
    outside = tmp_path / "outside"
    outside.write_text("{}")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / name).symlink_to(outside)
    assert load(repo).source == "default"
    (repo / name).unlink()
    (repo / name).write_text(" " * (2 << 20))
    assert load(repo).source == "default"


def test_what_a_manifest_says_reaches_the_setup_only_quoted(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "pyproject.toml": '[build-system]\nrequires = []\n[project.optional-dependencies]\n"test;touch /x" = []\n',
            "tox.ini": "[testenv]\nextras = $(reboot)\ndeps =\n    a; rm -rf /\n    `id`\n",
        },
    )
    setup = load(tmp_path).setup
    assert setup is not None
    assert "-e '.[test;touch /x,$(reboot)]'" in setup  # one word to the shell, quoted whole: pip refuses it
    assert "'a; rm -rf /'" in setup and "`id`" not in setup


def test_red_team_a_package_name_cannot_end_a_dockerfile_line(tmp_path: Path) -> None:
    write(tmp_path, {".cubicle/environment.toml": 'packages = ["curl\\n", "run", "true"]\n'})
    with pytest.raises(DefinitionError, match="not a Debian package name"):
        load(tmp_path)
    for bad in ({"image": "alpine\n"}, {"target": "dev\n"}, {"env": {"A\n": "1"}}, {"build_args": {"A\n": "1"}}):
        with pytest.raises(ValidationError):
            Environment.model_validate(bad)


def test_red_team_a_tox_requirement_file_out_of_the_repository_is_never_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("pytest\n")
    repo = write(tmp_path / "repo", {"setup.py": "", "tox.ini": "[testenv]\ndeps =\n    -r../secret.txt\n"})
    env = load(repo)
    assert env.setup == "python3 -m venv .venv && .venv/bin/python -m pip install -e ."
    assert "../secret.txt" not in env.setup_inputs


def test_red_team_what_would_crash_the_reader_or_break_a_bound_gives_the_default_or_less(tmp_path: Path) -> None:
    write(tmp_path / "deep", {"pyproject.toml": "a = " + "[" * 5000 + "]" * 5000})
    assert load(tmp_path / "deep").setup == "python3 -m venv .venv"  # a pyproject it cannot read: a venv still
    many = "".join(f"    -r r{n}.txt\n" for n in range(200))
    files = {f"r{n}.txt": "x\n" for n in range(200)}
    write(tmp_path / "many", {"setup.py": "", "tox.ini": f"[testenv]\ndeps =\n{many}", **files})
    env = load(tmp_path / "many")
    assert env.source == "detected" and len(env.setup_inputs) <= 128
    huge = "".join(f"    package{n}{'x' * 200}\n" for n in range(400))
    write(tmp_path / "long", {"setup.py": "", "tox.ini": f"[testenv]\ndeps =\n{huge}"})
    assert load(tmp_path / "long").source == "detected"


def test_tox_lines_for_some_environments_only_are_left_out(tmp_path: Path) -> None:
    write(tmp_path, {"setup.py": "", "tox.ini": "[testenv]\ndeps =\n  pytest\n  django32: Django>=3.2,<3.3\n"})
    assert load(tmp_path).setup == "python3 -m venv .venv && .venv/bin/python -m pip install -e . pytest"


def test_an_application_without_a_build_system_installs_its_dependencies_by_name(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "pyproject.toml": (
                "[project]\nname = 'site'\ndependencies = ['django>=5', 42]\n"
                "[project.optional-dependencies]\ntest = ['pytest-django']\n"
                "[dependency-groups]\ndev = ['pytest']\n"
            ),
            "app/__init__.py": "",
            "migrations/__init__.py": "",
        },
    )
    assert load(tmp_path).setup == (
        "python3 -m venv .venv && .venv/bin/python -m pip install --quiet --upgrade 'pip>=25.1' && "
        ".venv/bin/python -m pip install --group dev 'django>=5' pytest-django"
    )


def test_requirement_files_they_include_are_inputs_too(tmp_path: Path) -> None:
    write(tmp_path, {"requirements/dev.txt": "-r base.txt\n-c ../constraints.txt\n", "requirements/base.txt": "a\n"})
    write(tmp_path, {"constraints.txt": "a==1\n"})
    env = load(tmp_path)
    assert {"requirements/dev.txt", "requirements/base.txt", "constraints.txt"} <= set(env.setup_inputs)
    before = setup_inputs_hash(env, tmp_path)
    (tmp_path / "requirements" / "base.txt").write_text("numpy\n")
    assert setup_inputs_hash(load(tmp_path), tmp_path) != before


def test_a_corepack_project_of_another_manager_is_not_plain(tmp_path: Path) -> None:
    write(tmp_path, {"package.json": '{"packageManager": "pnpm@9.1.0"}'})
    assert load(tmp_path).source == "default"
    write(tmp_path, {"package.json": '{"packageManager": "npm@10.2.0"}'})
    assert load(tmp_path).source == "detected"


def test_a_requests_image_over_a_detected_node_project_drops_the_debian_packages(tmp_path: Path) -> None:
    write(tmp_path, {"package.json": "{}"})
    env = override(load(tmp_path), Overrides(image="node:20"))
    assert env.packages == () and env.setup == "npm install --no-audit --no-fund" and env.source == "request"
