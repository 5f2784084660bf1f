"""The subset of devcontainer.json Cubicle uses, and a warning for every key it does not.

Used: ``image``; ``build`` (``dockerfile``, ``context``, ``args``, ``target``) and the old
top-level ``dockerFile`` / ``context``; ``containerEnv`` and ``remoteEnv``;
``onCreateCommand``, ``updateContentCommand`` and ``postCreateCommand`` (in that order, as
the setup); and ``customizations.cubicle`` (``network``, ``setup_network``,
``setup_timeout_s``, ``setup_inputs``, ``packages``). Paths are relative to the file's directory, as in
the devcontainer spec.

Everything else is ignored with a warning naming the file and key. Keys that would change
the container's hardening, its user, its mounts or the host (``privileged``, ``capAdd``,
``securityOpt``, ``mounts``, ``runArgs``, ``initializeCommand``, ``features`` ...) are never
applied: Cubicle's container options are fixed. ``${localEnv:...}`` is never read from the
host (a repository must not pull the controller's secrets into its container): it becomes
its default, or empty.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from ..errors import DefinitionError, SetupError
from .files import relative, where

NEVER_APPLIED = {
    "privileged": "the container's privileges are fixed",
    "capAdd": "the container keeps no capabilities",
    "securityOpt": "the container's security options are fixed",
    "mounts": "the container sees only the repository",
    "runArgs": "the container's options are fixed",
    "init": "the sandbox brings its own init",
    "workspaceMount": "the repository is always mounted at /workspace",
    "workspaceFolder": "the repository is always at /workspace",
    "containerUser": "commands always run as the repository's owner",
    "remoteUser": "commands always run as the repository's owner",
    "updateRemoteUserUID": "commands always run as the repository's owner",
    "userEnvProbe": "the environment is the image's and the definition's",
    "forwardPorts": "no port is published",
    "appPort": "no port is published",
    "features": "features install from registries; put what you need in a Dockerfile",
    "overrideFeatureInstallOrder": "features are not installed",
    "dockerComposeFile": "Docker Compose is not used",
    "service": "Docker Compose is not used",
    "runServices": "Docker Compose is not used",
    "initializeCommand": "it would run on the host",
    "hostRequirements": "limits come from the server's settings",
    "overrideCommand": "the container runs the toolbox",
    "shutdownAction": "the container's life is the session's",
}
ONLY_AT_START = ("postStartCommand", "postAttachCommand")
SETUP_KEYS = ("onCreateCommand", "updateContentCommand", "postCreateCommand")
QUIET = {"name", "$schema"}
USED = {"image", "build", "dockerFile", "context", "containerEnv", "remoteEnv", "customizations", *SETUP_KEYS, *QUIET}
BUILD_USED = {"dockerfile", "context", "args", "target"}
CUBICLE_KEYS = {"network", "setup_network", "setup_timeout_s", "setup_inputs", "packages"}
_VARIABLE = re.compile(r"\$\{([^{}]*)\}")
WORKSPACE = "/workspace"

FIELD_KEYS = {
    "image": "image",
    "dockerfile": "build.dockerfile",
    "context": "build.context",
    "build_args": "build.args",
    "target": "build.target",
    "env": "containerEnv",
    "setup": "postCreateCommand",
    "network": "customizations.cubicle.network",
    "setup_network": "customizations.cubicle.setup_network",
    "setup_timeout_s": "customizations.cubicle.setup_timeout_s",
    "setup_inputs": "customizations.cubicle.setup_inputs",
    "packages": "customizations.cubicle.packages",
}
"""Which key of the file an Environment field came from, for error messages."""


class Converter:
    """One devcontainer.json's contents turned into Environment fields, with warnings."""

    def __init__(self, file: str, data: Any) -> None:
        if not isinstance(data, dict):
            raise DefinitionError(f"{file}: the top level must be a JSON object.")
        self.file = file
        self.data: dict[str, Any] = data
        self.base = file.rsplit("/", 1)[0] if "/" in file else "."
        self.warnings: list[str] = []
        self.fields: dict[str, Any] = {}

    def warn(self, key: str, why: str) -> None:
        self.warnings.append(f"{self.file}: {key!r} ignored: {why}.")

    def convert(self) -> tuple[dict[str, Any], list[str]]:
        for key in self.data:
            if key in NEVER_APPLIED:
                self.warn(key, f"never applied, {NEVER_APPLIED[key]}")
            elif key in ONLY_AT_START:
                self.warn(
                    key, "only onCreateCommand, updateContentCommand and postCreateCommand run, once, as the setup"
                )
            elif key not in USED:
                self.warn(key, "not a key Cubicle uses")
        self._image_and_build()
        self._env()
        self._setup()
        self._customizations()
        return self.fields, self.warnings

    def _string(self, value: Any, key: str) -> str:
        if not isinstance(value, str):
            raise DefinitionError(f"{where(self.file, key)}: expected a string, got {_kind(value)}.")
        try:
            return self.substitute(value, key)
        except _Unresolvable as missing:
            raise DefinitionError(
                f"{where(self.file, key)}: ${{containerEnv:{missing}}} is known only in the running container; "
                "it may be used in remoteEnv and in the lifecycle commands, not here."
            ) from None

    def _object(self, value: Any, key: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise DefinitionError(f"{where(self.file, key)}: expected an object, got {_kind(value)}.")
        return value

    def substitute(self, text: str, key: str, container_env: dict[str, str] | None = None, defer: bool = False) -> str:
        """Expand the devcontainer variables that make sense here; never read the host's environment. With ``defer``,
        a ``${containerEnv:NAME}`` that only the image knows is left as it is, for ``expand_container_env``."""

        def one(match: re.Match[str]) -> str:
            name, _, rest = match.group(1).partition(":")
            if name in ("localWorkspaceFolder", "containerWorkspaceFolder"):
                return WORKSPACE
            if name in ("localWorkspaceFolderBasename", "containerWorkspaceFolderBasename"):
                return "workspace"
            if name in ("localEnv", "env"):
                variable, _, default = rest.partition(":")
                self.warnings.append(
                    f"{self.file}: {key!r}: ${{{name}:{variable}}} is never read from the host; it becomes {default!r}."
                )
                return default
            if name == "containerEnv":
                variable, _, default = rest.partition(":")
                if container_env is not None and variable in container_env:
                    return container_env[variable]
                if defer:
                    return match.group(0)
                raise _Unresolvable(variable)
            return match.group(0)

        return _VARIABLE.sub(one, text)

    def _path(self, value: Any, key: str, allow_root: bool = False) -> str:
        return relative(self._string(value, key), file=self.file, key=key, base=self.base, allow_root=allow_root)

    def _image_and_build(self) -> None:
        data = self.data
        if "image" in data:
            self.fields["image"] = self._string(data["image"], "image")
        build = self._object(data.get("build", {}), "build")
        for key in build:
            if key == "options":
                self.warn("build.options", "never applied, build options are Cubicle's")
            elif key not in BUILD_USED:
                self.warn(f"build.{key}", "not a build key Cubicle uses")
        self._dockerfile(build)
        args = self._object(build.get("args", {}), "build.args")
        self.fields["build_args"] = {name: self._string(value, f"build.args.{name}") for name, value in args.items()}
        if "target" in build:
            self.fields["target"] = self._string(build["target"], "build.target")

    def _dockerfile(self, build: dict[str, Any]) -> None:
        """The Dockerfile and its context, from ``build`` or the top level's older keys (``dockerFile``, ``context``)."""
        data = self.data
        dockerfile = build.get("dockerfile", data.get("dockerFile"))
        dockerfile_key = "build.dockerfile" if "dockerfile" in build else "dockerFile"
        context_key = "build.context" if "context" in build else "context"
        if dockerfile is not None:
            self.fields["dockerfile"] = self._path(dockerfile, dockerfile_key)
            context = build.get("context", data.get("context", "."))
            self.fields["context"] = self._path(context, context_key, allow_root=True)
        elif "context" in build or "context" in data:
            self.warn(context_key, "a context without a Dockerfile")

    def _env(self) -> None:
        env: dict[str, str] = {}
        container = self._object(self.data.get("containerEnv", {}), "containerEnv")
        for name, value in container.items():
            env[name] = self._string(value, f"containerEnv.{name}")
        remote = self._object(self.data.get("remoteEnv", {}), "remoteEnv")
        for name, value in remote.items():
            key = f"remoteEnv.{name}"
            if value is None:
                env.pop(name, None)
                continue
            if not isinstance(value, str):
                raise DefinitionError(f"{where(self.file, key)}: expected a string or null, got {_kind(value)}.")
            env[name] = self.substitute(value, key, container_env=env, defer=True)  # the image's: at preparation
        self.fields["env"] = env

    def _setup(self) -> None:
        parts = [part for key in SETUP_KEYS if key in self.data for part in self.commands(self.data[key], key)]
        if parts:
            self.fields["setup"] = join_commands(parts)

    def commands(self, value: Any, key: str) -> list[str]:
        """A lifecycle command as shell commands: a string, an exec-form array (quoted), or an object of named ones."""
        if isinstance(value, str):
            text = self.substitute(value, key, defer=True).strip()  # ${containerEnv:...}: at preparation
            return [text] if text else []
        if isinstance(value, list):
            return [self._exec_form(value, key)]
        if isinstance(value, dict):
            return [part for name, item in value.items() for part in self.commands(item, f"{key}.{name}")]
        raise DefinitionError(f"{where(self.file, key)}: expected a string, an array or an object, got {_kind(value)}.")

    def _exec_form(self, value: list[Any], key: str) -> str:
        """An exec-form array as one shell command, each word quoted."""
        if not value or not all(isinstance(item, str) for item in value):
            raise DefinitionError(f"{where(self.file, key)}: an array command must be a non-empty list of strings.")
        return shlex.join(self.substitute(item, key, defer=True) for item in value)

    def _customizations(self) -> None:
        customizations = self._object(self.data.get("customizations", {}), "customizations")
        for tool in customizations:
            if tool != "cubicle":
                self.warn(f"customizations.{tool}", "settings of another tool")
        ours = self._object(customizations.get("cubicle", {}), "customizations.cubicle")
        for key, value in ours.items():
            if key not in CUBICLE_KEYS:
                raise DefinitionError(
                    f"{where(self.file, f'customizations.cubicle.{key}')}: unknown key; "
                    f"the keys are {', '.join(sorted(CUBICLE_KEYS))}."
                )
            self.fields[key] = value


class _Unresolvable(Exception):
    """A ${containerEnv:NAME} whose value only the running container knows."""


_NEEDS_GROUPING = re.compile(r"[;\n#]|(?<!&)&(?!&)")


def expand_container_env(env: dict[str, str], image_env: dict[str, str], most: int) -> dict[str, str]:
    """``env`` with each ``${containerEnv:NAME}`` (or ``${containerEnv:NAME:default}``) left by the definition made
    the value the image gives NAME (its ``ENV``), else the default, else empty: a ``remoteEnv`` PATH of
    ``/opt/venv/bin:${containerEnv:PATH}`` becomes the venv before the image's own PATH. A value that would grow
    past ``most`` characters is a SetupError, found before it is built (a thousand references to a long value)."""
    return {name: _expanded(name, value, image_env, most) for name, value in env.items()}


def _expanded(name: str, value: str, image_env: dict[str, str], most: int) -> str:
    parts: list[str] = []
    size, last = 0, 0
    for match in _VARIABLE.finditer(value):
        kind, _, rest = match.group(1).partition(":")
        variable, _, default = rest.partition(":")
        given = image_env.get(variable, default) if kind == "containerEnv" else match.group(0)
        parts += [value[last : match.start()], given]
        size += match.start() - last + len(given)
        last = match.end()
        _within(name, size, most)
    _within(name, size + len(value) - last, most)
    parts.append(value[last:])
    return "".join(parts)


def _within(name: str, size: int, most: int) -> None:
    if size > most:
        raise SetupError(
            f"{name or 'The setup'} would be longer than {most:,} characters once its ${{containerEnv:...}} "
            "references are made the image's values."
        )


def join_commands(parts: list[str]) -> str:
    """Commands joined with ``&&`` in order: the next runs only if the one before succeeded.

    A part that a bare ``&&`` would split differently (``;``, a newline, a background ``&``, a
    comment) is grouped in a subshell first.
    """
    return " && ".join(f"(\n{part}\n)" if _NEEDS_GROUPING.search(part) and len(parts) > 1 else part for part in parts)


def _kind(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )
