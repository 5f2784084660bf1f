"""Detected environments: what a repository with no definition runs in, when its files say what kind it is.

A repository without ``.cubicle/environment.toml`` or a devcontainer gets the environment a careful
user would write for it, read from its root's own files (never run, never followed out of it):

- **Python** (``pyproject.toml``, ``setup.py``, ``setup.cfg`` or ``requirements*.txt``): a virtualenv
  in the workspace (``.venv``; ``.cubicle-venv`` when the checkout has a ``.venv`` of its own), first on
  the agent's PATH, with the project installed editable when it is installable, its test and dev
  extras, its requirement files for development and tests, tox's ``deps`` and ``extras`` of
  ``[testenv]``, its PEP 735 dependency groups named for tests or development (pip is upgraded first:
  the image's is older than ``--group``), and pytest when the project configures pytest but declares it
  nowhere. Poetry's own dependency groups and nox sessions are code or tool-specific and not read.
- **Node** (``package.json``): Debian's ``nodejs`` and ``npm`` added to the sandbox image, then
  ``npm ci`` with the lock file (``package-lock.json`` or ``npm-shrinkwrap.json``), ``npm install``
  without one; ``node_modules/.bin`` first on PATH. A yarn or pnpm lock file means another package
  manager's project: not detected.

Both kinds in one repository: both setups, Node's first. Anything else gets the default environment.
The setup runs with the setup's network (the package managers' registries by default), is cached on
its inputs like any setup, and fails the session like any setup; an empty ``.cubicle/environment.toml``
says "the default environment" instead.
"""

from __future__ import annotations

import configparser
import contextlib
import json
import os
import posixpath
import re
import shlex
import stat
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..errors import DefinitionError
from ..wire.envspec import DEFAULT_SETUP_INPUTS, Environment, normalize
from .files import read_regular

MAX_READ = 1 << 20
"""The most of one file read to detect; a larger one is read as absent."""
MAX_REQUIREMENT_FILES = 32
"""Requirement files followed (``-r``/``-c`` inside them included); past it, the rest are left to pip."""
MAX_NAMED = 64
"""Requirements passed to pip by name (tox's ``deps``, a project's dependencies); past it, the rest are left out."""
TEST_PREFIXES = ("test", "dev")
"""Extras and dependency groups whose packages the project's tests need: named test, tests, testing, dev, devel,
develop, development, dev-tools ... (any name that begins so)."""
REQUIREMENT_FILES = (
    "requirements.txt",
    "requirements-dev.txt",
    "requirements_dev.txt",
    "requirements-test.txt",
    "requirements_test.txt",
    "requirements-tests.txt",
    "requirements-testing.txt",
    "dev-requirements.txt",
    "test-requirements.txt",
    "requirements/dev.txt",
    "requirements/test.txt",
    "requirements/tests.txt",
    "requirements/testing.txt",
)
OTHER_NODE_LOCKS = ("yarn.lock", "pnpm-lock.yaml", "bun.lockb", "bun.lock")
NODE_LOCKS = ("package-lock.json", "npm-shrinkwrap.json")
NODE_PACKAGES = ("nodejs", "npm")
PATH_TAIL = "${containerEnv:PATH}"
"""The image's own PATH after what the environment puts first (expanded when the environment is prepared)."""
_REQUIREMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-\[\], <>=!~;'\"()@:/+*]*")
"""A requirement as tox's ``deps`` or a pyproject writes one (no option, no substitution): one argument to pip."""
_TOX_FACTOR = re.compile(r"[A-Za-z0-9_.,!-]+\s*:(\s|$)")
"""A tox ``deps`` line for some environments only (``django32: Django<3.3``): not every test run's."""
_INCLUDE = re.compile(r"(?:-r|--requirement|-c|--constraint)[\s=]*(\S+)")


@dataclass
class Found:
    """What the files said: the kinds, the files that said it, and the environment's fields."""

    kinds: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    setup: list[str] = field(default_factory=list)
    path: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    packages: tuple[str, ...] = ()


def detect(root: Path) -> Environment | None:
    """The environment ``root``'s files show (the module's docstring), or None when its kind is not plain.

    What cannot make an environment (a value past an ``Environment`` bound) gives the default one, with a warning
    saying why."""
    found = Found()
    _node(root, found)
    _python(root, found)
    if not found.kinds:
        return None
    described = f"{' and '.join(found.kinds)} ({', '.join(dict.fromkeys(found.files))})"
    try:
        return Environment(
            source="detected",
            detected=described,
            packages=found.packages,
            env={**found.env, "PATH": ":".join([*found.path, PATH_TAIL])},
            setup=" && ".join(found.setup),
            setup_inputs=tuple(dict.fromkeys([*DEFAULT_SETUP_INPUTS, *found.files])),
        )
    except ValidationError as err:
        reason = err.errors()[0]["msg"].removeprefix("Value error, ")
        return Environment(warnings=(f"{described}: no environment detected ({reason}); write a definition.",))


# --------------------------------------------------------------------------- reading


def _text(root: Path, rel: str) -> str | None:
    """The text of repo-relative ``rel`` when it is a regular file of at most ``MAX_READ`` bytes inside ``root``,
    reached through no symlink; else None (absent, a link, a device, too large, a path out of the repository)."""
    try:
        rel = normalize(rel)
    except ValueError:
        return None
    path = root
    try:
        for part in rel.split("/"):
            path = path / part
            if stat.S_ISLNK(os.lstat(path).st_mode):
                return None
        return read_regular(path, MAX_READ, file=rel).decode("utf-8", "replace")
    except (OSError, DefinitionError):  # read_regular opens with O_NOFOLLOW and O_NONBLOCK, and checks what it opened
        return None


def _toml(root: Path, rel: str) -> dict[str, Any] | None:
    text = _text(root, rel)
    if text is None:
        return None
    try:
        return tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError):
        return {}


def _json(root: Path, rel: str) -> Any:
    text = _text(root, rel)
    if text is None:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return {}


def _ini(root: Path, rel: str) -> configparser.ConfigParser | None:
    text = _text(root, rel)
    if text is None:
        return None
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read_string(text)
    except configparser.Error:
        return configparser.ConfigParser(interpolation=None)
    return parser


def _table(data: Any, *keys: str) -> dict[str, Any]:
    """``data[keys[0]][keys[1]]...`` when every step is a table, else an empty one."""
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None
    return data if isinstance(data, dict) else {}


def _strings(value: Any) -> list[str]:
    """The requirements of a list as a pyproject writes them; anything else (or an odd one) left out."""
    items = value if isinstance(value, list) else []
    return [item for item in items if isinstance(item, str) and _REQUIREMENT.fullmatch(item)]


def _included(root: Path, start: list[str]) -> list[str]:
    """``start``'s requirement files and every one they include (``-r``/``-c``, relative to the including file, as
    pip reads them), inside the repository, at most ``MAX_REQUIREMENT_FILES``: all of them are the setup's inputs."""
    seen: list[str] = []
    pending = list(start)
    while pending and len(seen) < MAX_REQUIREMENT_FILES:
        rel = pending.pop(0)
        text = _text(root, rel) if rel not in seen else None
        if text is None:
            continue
        seen.append(rel)
        for line in text.splitlines():
            included = _INCLUDE.match(line.strip())
            if included:
                with contextlib.suppress(ValueError):
                    pending.append(normalize(included.group(1), base=posixpath.dirname(rel) or "."))
    return seen


# --------------------------------------------------------------------------- Node


def _node(root: Path, found: Found) -> None:
    manifest = _json(root, "package.json")
    if manifest is None or any(os.path.lexists(root / lock) for lock in OTHER_NODE_LOCKS):
        return
    manager = manifest.get("packageManager") if isinstance(manifest, dict) else None
    if isinstance(manager, str) and not manager.startswith("npm@"):  # corepack's yarn or pnpm project
        return
    lock = next((name for name in NODE_LOCKS if _text(root, name) is not None), None)
    found.kinds.append("Node")
    found.files += ["package.json", *([lock] if lock else [])]
    found.packages = NODE_PACKAGES
    found.setup.append("npm ci --no-audit --no-fund" if lock else "npm install --no-audit --no-fund")
    found.path.append("/workspace/node_modules/.bin")


# --------------------------------------------------------------------------- Python


def _python(root: Path, found: Found) -> None:
    project = _Python(root)
    if not project.files:
        return
    found.kinds.append("Python")
    found.files += project.files
    venv = ".cubicle-venv" if os.path.lexists(root / ".venv") else ".venv"
    found.setup.append(project.setup(venv))
    found.path.append(f"/workspace/{venv}/bin")
    found.env["VIRTUAL_ENV"] = f"/workspace/{venv}"


class _Python:
    """A Python project's declarations: the files read, whether it installs, and what its tests need."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.pyproject = _toml(root, "pyproject.toml")
        self.setup_cfg = _ini(root, "setup.cfg")
        self.tox = _ini(root, "tox.ini")
        self.has_setup_py = _text(root, "setup.py") is not None
        present = {
            "pyproject.toml": self.pyproject is not None,
            "setup.py": self.has_setup_py,
            "setup.cfg": self.setup_cfg is not None,
            "tox.ini": self.tox is not None,
        }
        self.requirements = [rel for rel in REQUIREMENT_FILES if _text(root, rel) is not None]
        self.named: list[str] = []
        tox_extras = self._tox()
        self.files = [name for name, there in present.items() if there] + _included(root, self.requirements)
        if self.files == ["tox.ini"]:  # tox alone runs anything: no Python project by itself
            self.files = []
        project = _table(self.pyproject, "project")
        declared = list(_table(project, "optional-dependencies"))
        if self.setup_cfg is not None and self.setup_cfg.has_section("options.extras_require"):
            declared += self.setup_cfg.options("options.extras_require")
        self.extras = [
            name
            for name in dict.fromkeys([*declared, *tox_extras])
            if name in tox_extras or name.lower().startswith(TEST_PREFIXES)
        ]
        self.groups = [
            name for name in _table(self.pyproject, "dependency-groups") if name.lower().startswith(TEST_PREFIXES)
        ]
        if project and not self.installable:  # an application pip cannot build: its dependencies by name
            self.named += _strings(project.get("dependencies"))
            for name in self.extras:
                self.named += _strings(_table(project, "optional-dependencies").get(name))
            self.extras = []
        if self._configures_pytest() and not self._declares("pytest"):
            self.named.append("pytest")
        self.named = list(dict.fromkeys(self.named))[:MAX_NAMED]

    @property
    def installable(self) -> bool:
        """Whether pip can build the project itself: a setup.py, or a pyproject.toml naming its build system (a
        ``[project]`` without one is an application, often of several top-level packages, that setuptools'
        fallback refuses)."""
        return self.has_setup_py or bool(_table(self.pyproject, "build-system"))

    def _tox(self) -> list[str]:
        """``[testenv]``'s ``extras`` (returned: tox installs them to test) and ``deps`` (noted), but for lines of
        some environments only (``py312: ...``) and lines with tox's substitutions."""
        if self.tox is None or not self.tox.has_section("testenv"):
            return []
        for line in self.tox.get("testenv", "deps", fallback="").splitlines():
            line = line.split("#", 1)[0].strip().replace("{toxinidir}/", "")
            if not line or "{" in line or _TOX_FACTOR.match(line):
                continue
            included = _INCLUDE.match(line)
            if included and line.startswith(("-r", "--requirement")):
                with contextlib.suppress(ValueError):
                    rel = normalize(included.group(1))
                    self.requirements += [rel] if _text(self.root, rel) is not None else []
            elif _REQUIREMENT.fullmatch(line):
                self.named.append(line)
        return self.tox.get("testenv", "extras", fallback="").replace(",", " ").split()

    def _configures_pytest(self) -> bool:
        return (
            bool(_table(self.pyproject, "tool", "pytest"))
            or _text(self.root, "pytest.ini") is not None
            or _text(self.root, "conftest.py") is not None
            or bool(self.setup_cfg and self.setup_cfg.has_section("tool:pytest"))
            or bool(self.tox and self.tox.has_section("pytest"))
        )

    def _declares(self, package: str) -> bool:
        """Whether ``package`` is named by what the setup installs (a rough read: any mention counts)."""
        texts = [_text(self.root, rel) or "" for rel in self.files if rel.endswith(".txt")]
        texts += self.named
        extras = _table(self.pyproject, "project", "optional-dependencies")
        for name in self.extras:
            texts += _strings(extras.get(name))
            if self.setup_cfg is not None:
                texts.append(self.setup_cfg.get("options.extras_require", name, fallback=""))
        for name in self.groups:
            texts += _strings(_table(self.pyproject, "dependency-groups").get(name))
        return any(re.search(rf"(?im)^\s*{package}\b", text) for text in texts)

    def setup(self, venv: str) -> str:
        """The setup command: make the virtualenv, then one pip install of everything found."""
        pip = f"{venv}/bin/python -m pip"
        words: list[str] = []
        if self.installable:
            words += ["-e", f".[{','.join(self.extras)}]" if self.extras else "."]
        for rel in dict.fromkeys(self.requirements):
            words += ["-r", rel]
        for name in self.groups:
            words += ["--group", name]
        words += self.named
        steps = [f"python3 -m venv {venv}"]
        if self.groups:
            steps.append(f"{pip} install --quiet --upgrade 'pip>=25.1'")
        if words:
            steps.append(f"{pip} install {shlex.join(words)}")
        return " && ".join(steps)
