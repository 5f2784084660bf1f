"""An environment as sessions record it (``Environment``) and as a request overrides it (``EnvironmentRequest``):
the models and their bounds. Reading a repository's definition files is ``controller.environment``'s."""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .network import NetworkPolicy, SetupNetwork

Source = Literal[
    ".cubicle/environment.toml",
    ".devcontainer/devcontainer.json",
    ".devcontainer.json",
    "request",
    "detected",
    "default",
]

CUBICLE_FILE = ".cubicle/environment.toml"

DEVCONTAINER_FILES = (".devcontainer/devcontainer.json", ".devcontainer.json")

DEFINITION_FILES = (CUBICLE_FILE, *DEVCONTAINER_FILES)

MANIFESTS = (
    "pyproject.toml",
    "setup.py",
    "setup.cfg",
    "requirements*.txt",
    "Pipfile*",
    "poetry.lock",
    "uv.lock",
    "package.json",
    "package-lock.json",
    "yarn.lock",
    "pnpm-lock.yaml",
    "Cargo.toml",
    "Cargo.lock",
    "go.mod",
    "go.sum",
    "Gemfile*",
)

DEFAULT_SETUP_INPUTS = (*MANIFESTS, *DEFINITION_FILES)
"""What a setup reads unless the definition says otherwise: the root's dependency manifests and the definitions."""

SETUP_TIMEOUT_S = 900

MAX_SETUP_TIMEOUT_S = 4 * 3600

MAX_SETUP_CHARS = 64 * 1024

MAX_ENV = 256

MAX_ENV_VALUE = 32 * 1024

MAX_BUILD_ARGS = 64

MAX_INPUTS = 128

_IMAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,254}$")

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")

MAX_PACKAGES = 64

_PACKAGE = re.compile(r"^[a-z0-9][a-z0-9+.-]{0,99}(=[A-Za-z0-9.+~:-]{1,100})?$")
"""A Debian package name, with an optional ``=version``: nothing a shell or apt would read as an option."""

_TARGET = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")

PATH_VARIABLE = "CUBICLE_PATH"
"""The sandbox's copy of the PATH an environment defines: the toolbox sets PATH to it after the login shell's
profile, before each command (the toolbox's ``processes.PATH_VARIABLE``)."""
RESERVED_ENV = re.compile(r"^(HOME|LD_[A-Z0-9_]*)$")


def keeping_path(command: str, env: Mapping[str, str]) -> str:
    """``command`` for ``bash -lc`` with the environment's PATH set again after the login shell's profile (as the
    toolbox does for the agent's commands; the setup runs without a toolbox)."""
    path = env.get("PATH")
    return f"PATH={shlex.quote(path)}; export PATH; {command}" if path else command


"""Variables a definition may not set: HOME is the container's tmpfs, and LD_* would load code into the toolbox."""


_NUL_OR_NEWLINE = re.compile("[\x00\n]")


def normalize(value: str, *, base: str = ".", allow_root: bool = False) -> str:
    """``value`` (relative to repo-relative ``base``) as a normalised repo-relative POSIX path; a ValueError if it
    is empty, absolute, holds a NUL or newline, or climbs out of the repository by its text. Where it leads after
    its symlinks are followed is ``resolve``'s to check."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected a non-empty path, got {value!r}")
    if _NUL_OR_NEWLINE.search(value) or len(value) > 4096:
        raise ValueError("the path holds a NUL or newline, or is too long")
    if value.startswith("/"):
        raise ValueError(f"{value!r} is absolute; give a path inside the repository")
    norm = posixpath.normpath(posixpath.join(base, value))
    if f"{norm}/".startswith("../"):  # ".." itself, or below it
        raise ValueError(f"{value!r} leads out of the repository")
    if norm == "." and not allow_root:
        raise ValueError(f"{value!r} names the repository itself, not a file")
    return norm


class Environment(BaseModel):
    """Where a repository's sessions run. Default: the sandbox image, no setup, no network asked for."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: Source = Field("default", description="Where the definition came from.")
    image: str | None = Field(
        None, description="An image the toolbox is added to (pulled when missing, unless the server forbids it)."
    )
    dockerfile: str | None = Field(None, description="A Dockerfile in the repository (repo-relative POSIX path).")
    context: str = Field(".", description="The Dockerfile's build context (repo-relative); default the root.")
    build_args: dict[str, str] = Field(default_factory=dict, description="Build arguments of the Dockerfile.")
    target: str | None = Field(None, description="The Dockerfile's stage to build.")
    packages: tuple[str, ...] = Field(
        (),
        description="Debian packages installed into the image (apt-get, with the setup's network), on the sandbox "
        "image or on the image or Dockerfile named.",
    )
    env: dict[str, str] = Field(default_factory=dict, description="Variables given to the setup and the agent.")
    setup: str | None = Field(None, description="A bash command run once in the image before the agent starts.")
    setup_timeout_s: int = Field(
        SETUP_TIMEOUT_S, ge=1, le=MAX_SETUP_TIMEOUT_S, description="Longest the setup may take."
    )
    setup_network: SetupNetwork | None = Field(
        None,
        description="What the setup (and an image build) asks to reach; None: not asked. A policy replaces the "
        "server's default setup network; defaults[,allow=HOST,...] adds to it.",
    )
    setup_inputs: tuple[str, ...] = Field(
        DEFAULT_SETUP_INPUTS, description="Repo-relative globs of the files the setup reads (its cache key)."
    )
    network: NetworkPolicy | None = Field(None, description="What the agent asks to reach; None: not asked.")
    warnings: tuple[str, ...] = Field((), description="Every key of the definition that was ignored, and why.")
    detected: str | None = Field(
        None,
        description="With no definition: the kind of project its files show, and which files (see environment.detected).",
    )

    @field_validator("image")
    @classmethod
    def _image(cls, value: str | None) -> str | None:
        if value is not None and not _IMAGE.fullmatch(value):
            raise ValueError(f"{value!r} is not an image reference (name[:tag][@digest])")
        return value

    @field_validator("dockerfile")
    @classmethod
    def _dockerfile(cls, value: str | None) -> str | None:
        return None if value is None else normalize(value)

    @field_validator("context")
    @classmethod
    def _context(cls, value: str) -> str:
        return normalize(value, allow_root=True)

    @field_validator("target")
    @classmethod
    def _target(cls, value: str | None) -> str | None:
        if value is not None and not _TARGET.fullmatch(value):
            raise ValueError(f"{value!r} is not a build stage name")
        return value

    @field_validator("packages")
    @classmethod
    def _packages(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if len(value) > MAX_PACKAGES:
            raise ValueError(f"at most {MAX_PACKAGES} packages")
        for name in value:
            if not _PACKAGE.fullmatch(name):
                raise ValueError(f"{name!r} is not a Debian package name (with an optional =version)")
        return value

    @field_validator("build_args")
    @classmethod
    def _build_args(cls, value: dict[str, str]) -> dict[str, str]:
        if len(value) > MAX_BUILD_ARGS:
            raise ValueError(f"at most {MAX_BUILD_ARGS} build arguments")
        for name, text in value.items():
            if not _NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not a build argument name (letters, digits, _)")
            if "\x00" in text or len(text) > MAX_ENV_VALUE:
                raise ValueError(f"the value of {name} holds a NUL or is longer than {MAX_ENV_VALUE} characters")
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        if len(value) > MAX_ENV:
            raise ValueError(f"at most {MAX_ENV} variables")
        for name, text in value.items():
            if not _NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not a variable name (letters, digits, _)")
            if RESERVED_ENV.match(name):
                raise ValueError(
                    f"{name} may not be set (HOME is the container's, LD_* would load code into the toolbox)"
                )
            if "\x00" in text or len(text) > MAX_ENV_VALUE:
                raise ValueError(f"the value of {name} holds a NUL or is longer than {MAX_ENV_VALUE} characters")
        return value

    @field_validator("setup")
    @classmethod
    def _setup(cls, value: str | None) -> str | None:
        if value is not None and ("\x00" in value or len(value) > MAX_SETUP_CHARS):
            raise ValueError(f"the setup holds a NUL or is longer than {MAX_SETUP_CHARS} characters")
        return value.strip() or None if value is not None else None

    @field_validator("setup_inputs")
    @classmethod
    def _inputs(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if len(value) > MAX_INPUTS:
            raise ValueError(f"at most {MAX_INPUTS} patterns")
        for pattern in value:
            parts = pattern.split("/")
            if not pattern or pattern.startswith("/") or "\x00" in pattern or ".." in parts or len(pattern) > 1024:
                raise ValueError(f"{pattern!r} is not a repo-relative glob pattern")
        return value

    @model_validator(mode="after")
    def _one_base(self) -> Environment:
        if self.image and self.dockerfile:
            raise ValueError("give either image or dockerfile, not both")
        return self

    @property
    def builds(self) -> bool:
        """Whether sessions need an environment image (else they use the sandbox image as it is)."""
        return bool(self.image or self.dockerfile or self.packages)

    @property
    def file(self) -> str | None:
        """The repository's definition file this came from; None for a request's, a detected or the default."""
        return self.source if self.source in DEFINITION_FILES else None


class EnvironmentRequest(BaseModel):
    """``environment`` in ``POST /v1/sessions``: each field given overrides the repository's definition."""

    model_config = ConfigDict(extra="forbid")

    ignore_repository: bool = Field(
        False, description="Start from the default environment instead of the repository's definition files."
    )
    image: str | None = Field(None, description="A local image to add the toolbox to; replaces a Dockerfile build.")
    dockerfile: str | None = Field(None, description="A Dockerfile in the repository (repo-relative); replaces image.")
    context: str | None = Field(None, description="The Dockerfile's build context (repo-relative).")
    target: str | None = Field(None, description="The Dockerfile's stage to build.")
    build_args: dict[str, str] | None = Field(None, description="Build arguments; replace the definition's.")
    env: dict[str, str] | None = Field(None, description="Variables added to the definition's, for setup and agent.")
    setup: str | list[str] | None = Field(
        None, description="Setup command (a list is one command, quoted); an empty string removes the definition's."
    )
    setup_timeout_s: int | None = Field(None, ge=1, le=MAX_SETUP_TIMEOUT_S, description="Longest the setup may take.")
    setup_network: SetupNetwork | None = Field(
        None, description="What the setup asks to reach: a policy, or defaults[,allow=HOST,...] to add to the default."
    )
    setup_inputs: list[str] | None = Field(None, description="Repo-relative globs of the files the setup reads.")
    network: NetworkPolicy | None = Field(None, description="What the agent asks to reach (clamped by the server).")
