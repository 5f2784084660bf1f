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
import os
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..wire.envspec import DEFAULT_SETUP_INPUTS, Environment

MAX_READ = 1 << 20
"""The most of one file read to detect; a larger one is read as absent."""
TEST_NAMES = frozenset({"test", "tests", "testing", "dev", "develop", "development", "devel"})
"""Extras and dependency groups whose packages the project's tests need."""
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
_REQUIREMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-\[\], <>=!~;'\"()@:/+*]*$")
"""A requirement as tox's ``deps`` writes one (no option, no substitution): passed to pip as one argument."""


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
    """The environment ``root``'s files show (the module's docstring), or None when its kind is not plain."""
    found = Found()
    _node(root, found)
    _python(root, found)
    if not found.kinds:
        return None
    env = {**found.env, "PATH": ":".join([*found.path, PATH_TAIL])}
    return Environment(
        source="detected",
        detected=f"{' and '.join(found.kinds)} ({', '.join(dict.fromkeys(found.files))})",
        packages=found.packages,
        env=env,
        setup=" && ".join(found.setup),
        setup_inputs=tuple(dict.fromkeys([*DEFAULT_SETUP_INPUTS, *found.files])),
    )


# --------------------------------------------------------------------------- reading


def _text(root: Path, rel: str) -> str | None:
    """The file's text when it is a regular file inside ``root`` (no symlink anywhere on its way), else None."""
    path = root
    try:
        for part in rel.split("/"):
            path = path / part
            if os.path.islink(path):
                return None
        if not path.is_file() or path.stat().st_size > MAX_READ:
            return None
        return path.read_text("utf-8", errors="replace")
    except OSError:
        return None


def _toml(root: Path, rel: str) -> dict[str, Any] | None:
    text = _text(root, rel)
    if text is None:
        return None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
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


# --------------------------------------------------------------------------- Node


def _node(root: Path, found: Found) -> None:
    if _text(root, "package.json") is None or any(os.path.lexists(root / lock) for lock in OTHER_NODE_LOCKS):
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
        self.files = [name for name, there in present.items() if there] + self.requirements  # grows with tox's
        if self.files == ["tox.ini"]:  # tox alone runs anything: no Python project by itself
            self.files = []
        self.named: list[str] = []
        tox_extras = self._tox()
        pyproject = self.pyproject or {}
        declared = list(_table(pyproject, "project", "optional-dependencies"))
        if self.setup_cfg is not None and self.setup_cfg.has_section("options.extras_require"):
            declared += self.setup_cfg.options("options.extras_require")
        self.extras = [
            name for name in dict.fromkeys([*declared, *tox_extras]) if name in tox_extras or name.lower() in TEST_NAMES
        ]
        self.groups = [name for name in _table(pyproject, "dependency-groups") if name.lower() in TEST_NAMES]
        if self._configures_pytest() and not self._declares("pytest"):
            self.named.append("pytest")

    @property
    def installable(self) -> bool:
        """Whether pip can install the project itself (a setup.py, or a pyproject.toml that describes one)."""
        pyproject = self.pyproject or {}
        return self.has_setup_py or bool(_table(pyproject, "project") or _table(pyproject, "build-system"))

    def _tox(self) -> list[str]:
        """``[testenv]``'s ``extras`` (returned: tox installs them to test) and ``deps`` (noted)."""
        if self.tox is None or not self.tox.has_section("testenv"):
            return []
        for line in self.tox.get("testenv", "deps", fallback="").splitlines():
            line = line.split("#", 1)[0].strip()
            if line.startswith("-r"):
                rel = line[2:].strip().replace("{toxinidir}/", "")
                if "{" not in rel and _text(self.root, rel) is not None:
                    self.requirements.append(rel)
                    self.files.append(rel)
            elif line and "{" not in line and _REQUIREMENT.match(line):
                self.named.append(line)
        return self.tox.get("testenv", "extras", fallback="").replace(",", " ").split()

    def _configures_pytest(self) -> bool:
        pyproject = self.pyproject or {}
        return (
            bool(_table(pyproject, "tool", "pytest"))
            or _text(self.root, "pytest.ini") is not None
            or _text(self.root, "conftest.py") is not None
            or bool(self.setup_cfg and self.setup_cfg.has_section("tool:pytest"))
            or bool(self.tox and self.tox.has_section("pytest"))
        )

    def _declares(self, package: str) -> bool:
        """Whether ``package`` is named by what the setup installs (a rough read: any mention counts)."""
        texts = [_text(self.root, rel) or "" for rel in self.requirements]
        texts += self.named
        pyproject = self.pyproject or {}
        for name in self.extras:
            texts += map(str, _table(pyproject, "project", "optional-dependencies").get(name) or [])
            if self.setup_cfg is not None:
                texts.append(self.setup_cfg.get("options.extras_require", name, fallback=""))
        for name in self.groups:
            texts += map(str, _table(pyproject, "dependency-groups").get(name) or [])
        return any(re.search(rf"(?im)^\s*{package}\b", text) for text in texts)

    def setup(self, venv: str) -> str:
        """The setup command: make the virtualenv, then one pip install of everything found."""
        pip = f"{venv}/bin/python -m pip"
        words: list[str] = []
        if self.installable:
            words.append(f".[{','.join(self.extras)}]" if self.extras else ".")
            words.insert(0, "-e")
        for rel in dict.fromkeys(self.requirements):
            words += ["-r", rel]
        for name in self.groups:
            words += ["--group", name]
        words += dict.fromkeys(self.named)
        steps = [f"python3 -m venv {venv}"]
        if self.groups:
            steps.append(f"{pip} install --quiet --upgrade 'pip>=25.1'")
        if words:
            steps.append(f"{pip} install {shlex.join(words)}")
        return " && ".join(steps)
