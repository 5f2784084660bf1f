"""A repository's environment: which image its sessions run in, what sets it up, what it may reach.

A repository defines it in one of (first found wins):

1. ``.cubicle/environment.toml``, Cubicle's own small file (every key below, nothing else);
2. ``.devcontainer/devcontainer.json``, then ``.devcontainer.json``: the subset in ``devcontainer``.

With neither, the environment is the one its files show (``detected``: a Python or Node project),
else the default: the sandbox image, no setup. Flags and API
fields override what a file says (``override``, ``EnvironmentRequest``). The files are read
from the real checkout: a definition, a Dockerfile or a build context that resolves outside
the repository is refused, and so is anything invalid, with a ``DefinitionError`` naming the
file and key. What a file asks for that Cubicle does not do is listed in ``warnings``.

The Cubicle file (paths relative to the repository's root)::

    image = "python:3.12-slim"           # a local image to add the toolbox to; or:
    dockerfile = "docker/dev.Dockerfile"  # built from the repository, with
    context = "."                         #   this build context (default: the root),
    target = "dev"                        #   this stage,
    build_args = { PYTHON = "3.12" }      #   and these build arguments
    packages = ["nodejs", "npm"]          # Debian packages added to the image (on the sandbox image by default)
    env = { DJANGO_SETTINGS_MODULE = "app.settings.test" }
    setup = "pip install -e '.[dev]'"     # or ["pip", "install", "-e", "."], or { deps = "...", db = "..." }
    setup_timeout_s = 900
    setup_network = "allow=pypi.org,files.pythonhosted.org"  # replaces the default; "defaults,allow=..." adds to it
    setup_inputs = ["pyproject.toml", "requirements*.txt"]
    network = "none"                      # the agent's; the server clamps it to its maximum
"""

from __future__ import annotations

import fnmatch
import hashlib
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

import pyjson5
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import DefinitionError
from ..wire.envspec import CUBICLE_FILE, DEFINITION_FILES, RESERVED_ENV, Environment, EnvironmentRequest
from ..wire.network import DefaultsPlus, NetworkPolicy
from . import buildcontext, detected
from .devcontainer import FIELD_KEYS, Converter, join_commands
from .files import (
    MAX_DEFINITION_BYTES,
    MAX_DOCKERFILE_BYTES,
    is_inside,
    links_along,
    read_regular,
    read_text,
    real_root,
    relative,
    resolve,
    where,
)

# --------------------------------------------------------------------------- the Cubicle file


Command = str | list[str] | dict[str, str | list[str]]


class CubicleFile(BaseModel):
    """``.cubicle/environment.toml``: exactly these keys. TOML types are kept (an env value must be a string)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    image: str | None = None
    dockerfile: str | None = None
    context: str | None = None
    target: str | None = None
    build_args: dict[str, str] = Field(default_factory=dict)
    packages: list[str] | None = None
    env: dict[str, str] = Field(default_factory=dict)
    setup: Command | None = None
    setup_timeout_s: int | None = None
    setup_network: str | None = None
    setup_inputs: list[str] | None = None
    network: str | None = None


def _commands(value: Command, key: str) -> list[str]:
    """The setup as shell commands: a string, an exec-form array (quoted), or a table of named ones in order."""
    if isinstance(value, str):
        return [value.strip()] if value.strip() else []
    if isinstance(value, list):
        if not value:
            raise DefinitionError(f"{where(CUBICLE_FILE, key)}: an array command must not be empty.")
        return [shlex.join(value)]
    return [part for name, item in value.items() for part in _commands(item, f"{key}.{name}")]


def _same(value: Any) -> Any:
    return value


# The optional keys of the Cubicle file, each with what turns its value into the definition's.
_CUBICLE_FIELDS: dict[str, Any] = {
    "image": _same,
    "target": _same,
    "setup_timeout_s": _same,
    "setup_network": _same,
    "network": _same,
    "dockerfile": lambda value: relative(value, file=CUBICLE_FILE, key="dockerfile"),
    "context": lambda value: relative(value, file=CUBICLE_FILE, key="context", allow_root=True),
    "setup": lambda value: join_commands(_commands(value, "setup")),
    "setup_inputs": tuple,
    "packages": tuple,
}


def _from_cubicle_file(root: Path) -> tuple[dict[str, Any], list[str]]:
    text = read_text(root, CUBICLE_FILE, MAX_DEFINITION_BYTES, file=CUBICLE_FILE)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise DefinitionError(f"{CUBICLE_FILE}: not valid TOML: {err}.") from None
    try:
        parsed = CubicleFile.model_validate(data)
    except ValidationError as err:
        raise _named(err, CUBICLE_FILE, {}) from None
    given = {name: getattr(parsed, name) for name in _CUBICLE_FIELDS}
    fields = {name: _CUBICLE_FIELDS[name](value) for name, value in given.items() if value is not None}
    fields["build_args"], fields["env"] = parsed.build_args, parsed.env
    warnings = []
    if parsed.context is not None and parsed.dockerfile is None:
        warnings.append(f"{CUBICLE_FILE}: 'context' ignored: a context without a Dockerfile.")
    return fields, warnings


def _from_devcontainer(root: Path, file: str) -> tuple[dict[str, Any], list[str], dict[str, str]]:
    data = read_regular(resolve(root, file, file=file), MAX_DEFINITION_BYTES, file=file)
    try:
        parsed = pyjson5.decode_utf8(data)
    except pyjson5.Json5Exception as err:
        raise DefinitionError(f"{file}: not valid JSON with comments: {_json_error(err, data)}.") from None
    except UnicodeDecodeError:
        raise DefinitionError(f"{file}: not UTF-8 text.") from None
    fields, warnings = Converter(file, parsed).convert()
    return fields, warnings, FIELD_KEYS


def _json_error(err: Exception, data: bytes) -> str:
    message = str(err.args[0]) if err.args else str(err)
    found = re.search(r"near (\d+)", message)
    if not found:
        return message
    offset = int(found.group(1))
    text = data.decode("utf-8", "replace")[:offset]
    line = text.count("\n") + 1
    return f"{message.split(' near ')[0]} at line {line}, column {offset - (text.rfind(chr(10)) + 1)}"


def _named(err: ValidationError, file: str, keys: dict[str, str]) -> DefinitionError:
    """A pydantic error as a DefinitionError naming the file and each failing key as the file spells it."""
    problems = []
    for error in err.errors()[:5]:
        loc = [str(part) for part in error["loc"]]
        if loc and loc[0] in ("network", "setup_network"):  # a policy is one string in a file
            loc = loc[:1]
        key = ".".join([keys.get(loc[0], loc[0]), *loc[1:]]) if loc else ""
        message = error["msg"].removeprefix("Value error, ")
        problems.append(f"{where(file, key)}: {message}" if key else f"{file}: {message}")
    return DefinitionError("; ".join(problems) + ".")


def _drop_reserved(fields: dict[str, Any], file: str, key: str) -> list[str]:
    env = fields.get("env") or {}
    dropped = [name for name in env if isinstance(name, str) and RESERVED_ENV.match(name)]
    for name in dropped:
        del env[name]
    why = "HOME is the container's own, and LD_* would load code into the toolbox"
    return [f"{file}: '{key}.{name}' ignored: {why}." for name in dropped]


def load(repo: Path, detect: bool = True) -> Environment:
    """The environment ``repo`` defines (see the module's docstring); with no definition, the one its files show
    (``detect``, unless ``detect`` is False), else ``Environment()``."""
    root = real_root(repo)
    present = [file for file in DEFINITION_FILES if os.path.lexists(root / file)]  # a dangling link too
    if not present:
        return (detected.detect(root) if detect else None) or Environment(source="default")
    file, shadowed = present[0], present[1:]
    if file == CUBICLE_FILE:
        fields, warnings = _from_cubicle_file(root)
        keys: dict[str, str] = {}
        env_key = "env"
    else:
        fields, warnings, keys = _from_devcontainer(root, file)
        env_key = "containerEnv"
    warnings += _drop_reserved(fields, file, env_key)
    warnings += [f"{other}: not used, {file} takes precedence." for other in shadowed]
    for name in ("dockerfile", "context"):  # a path that resolves out of the repository is refused here already
        if fields.get(name) and fields.get("dockerfile"):
            resolve(root, fields[name], file=file, key=keys.get(name, name))
    try:
        return Environment.model_validate({**fields, "source": file, "warnings": tuple(warnings)})
    except ValidationError as err:
        raise _named(err, file, keys) from None


@dataclass(frozen=True)
class Overrides:
    """What flags or an API request say instead of a definition; a field left None leaves the definition's."""

    image: str | None = None
    dockerfile: str | None = None
    context: str | None = None
    target: str | None = None
    build_args: dict[str, str] | None = None
    variables: dict[str, str] | None = None
    setup: str | None = None
    setup_timeout_s: int | None = None
    setup_network: NetworkPolicy | DefaultsPlus | str | None = None
    setup_inputs: tuple[str, ...] | list[str] | None = None
    network: NetworkPolicy | str | None = None


def override(env: Environment, given: Overrides) -> Environment:
    """``env`` with what ``given`` says instead; ``source`` becomes "request" if anything changed.

    An ``image`` replaces the file's Dockerfile build and a ``dockerfile`` its image. ``setup=""``
    removes the file's setup. ``variables`` are added to (and override) the file's ``env``.
    An invalid value is a ``DefinitionError`` naming the field.
    """
    changes = _changes(env, given)
    if not changes:
        return env
    data = env.model_dump(mode="json")
    data.update(changes, source="request")
    try:
        return Environment.model_validate(data)
    except ValidationError as err:
        raise _named(err, "the request", {}) from None


def _changes(env: Environment, given: Overrides) -> dict[str, Any]:
    """The environment's fields ``given`` changes, with their new values (an image or a Dockerfile clears the
    other way of getting one, and what only that way uses)."""
    changes: dict[str, Any] = {}
    if given.image is not None:
        changes.update(image=given.image, dockerfile=None, build_args={}, target=None, context=".")
        if env.source == "detected":  # the packages were detection's way to Node on the sandbox image, not asked for
            changes["packages"] = ()
    if given.dockerfile is not None:
        changes.update(dockerfile=given.dockerfile, image=None)
    if given.variables is not None:
        changes["env"] = {**env.env, **given.variables}
    if given.setup is not None:
        changes["setup"] = given.setup or None
    as_given: dict[str, Any] = {
        "context": given.context,
        "target": given.target,
        "build_args": given.build_args,
        "setup_timeout_s": given.setup_timeout_s,
        "setup_network": given.setup_network,
        "setup_inputs": tuple(given.setup_inputs) if given.setup_inputs is not None else None,
        "network": given.network,
    }
    changes.update({name: value for name, value in as_given.items() if value is not None})
    return changes


# --------------------------------------------------------------------------- hashes


@dataclass(frozen=True)
class Materials:
    """What an environment's image is made from, read once from the checkout, and its hashes."""

    definition_hash: str
    """The whole definition and every file of the build context."""
    build_hash: str
    """Only what the image is built from: image or Dockerfile, build arguments, target, context files."""
    dockerfile: str | None
    context: buildcontext.ScannedContext | None
    context_digest: str


def materials(env: Environment, repo: Path) -> Materials:
    """Read (and hash) the Dockerfile and build context of ``env`` from ``repo``, refusing paths out of it.

    The definition files are left out of the context: they hold the setup and the network, which
    do not change the image, and are hashed as the definition instead.
    """
    root = real_root(repo)
    file = env.file or "the request"
    dockerfile_text: str | None = None
    context: buildcontext.ScannedContext | None = None
    context_digest = ""
    if env.dockerfile:
        dockerfile_text = read_text(root, env.dockerfile, MAX_DOCKERFILE_BYTES, file=file, key="dockerfile")
        directory = resolve(root, env.context, file=file, key="context")
        inside = Path(os.path.relpath(root, directory))
        leave_out = frozenset(os.path.normpath(inside / name) for name in DEFINITION_FILES)
        context = buildcontext.scan(directory, root, file=file, leave_out=leave_out)
        context_digest = buildcontext.digest(context)
    build: dict[str, Any] = {
        "image": env.image,
        "dockerfile": env.dockerfile,
        "context": env.context if env.dockerfile else None,
        "build_args": dict(sorted(env.build_args.items())),
        "target": env.target,
    }
    if env.packages:  # only when named: the keys of images made before packages existed stay the same
        build["packages"] = list(env.packages)
    hasher = hashlib.sha256(b"cubicle-build-v1\0")
    hasher.update(json.dumps(build, sort_keys=True).encode() + b"\0")
    hasher.update((dockerfile_text or "").encode("utf-8", "surrogateescape") + b"\0" + context_digest.encode())
    build_hash = hasher.hexdigest()
    definition = env.model_dump(mode="json", exclude={"source", "warnings"})
    whole = hashlib.sha256(b"cubicle-definition-v1\0")
    whole.update(json.dumps(definition, sort_keys=True).encode() + b"\0" + build_hash.encode())
    return Materials(whole.hexdigest(), build_hash, dockerfile_text, context, context_digest)


def definition_hash(env: Environment, repo: Path) -> str:
    """A content hash of the definition and every file of its build context (sha256 hex), stable across runs."""
    return materials(env, repo).definition_hash


# --------------------------------------------------------------------------- the setup's inputs

MAX_INPUT_FILES = 1000
MAX_INPUT_BYTES = 64 * 1024 * 1024
MAX_INPUT_SCAN = 100_000
"""Directory entries looked at while matching ``setup_inputs``; a walk past it is refused."""


def _glob_match(pattern: list[str], parts: list[str]) -> bool:
    """Whether path ``parts`` match glob ``pattern`` segment by segment (``**`` spans any number of them)."""
    if not pattern:
        return not parts
    if pattern[0] == "**":
        return any(_glob_match(pattern[1:], parts[i:]) for i in range(len(parts) + 1))
    return bool(parts) and fnmatch.fnmatchcase(parts[0], pattern[0]) and _glob_match(pattern[1:], parts[1:])


def _may_hold(pattern: list[str], parts: list[str]) -> bool:
    """Whether a directory at ``parts`` may hold a path that ``pattern`` matches (so the walk goes into it)."""
    for index, part in enumerate(parts):
        if index >= len(pattern) - 1 and "**" not in pattern[index:]:
            return False
        if pattern[index] == "**":
            return True
        if not fnmatch.fnmatchcase(part, pattern[index]):
            return False
    return True


def setup_input_files(env: Environment, repo: Path) -> list[str]:
    """The repo-relative paths ``env.setup_inputs`` match in the checkout, sorted: regular files and symlinks.

    A glob's ``*`` and ``?`` stay within one name and ``**`` spans directories; a pattern is
    matched from the repository's root (``requirements*.txt`` is the root's only). The walk
    follows no symlink, never enters ``.git``, and goes only where a pattern may match.
    """
    scan = _InputScan(real_root(repo), [pattern.split("/") for pattern in env.setup_inputs])
    pending: list[list[str]] = [[]]
    while pending:
        pending += scan.directory(pending.pop())
    return sorted(scan.found)


@dataclass
class _InputScan:
    """One walk of ``setup_input_files``: the checkout's ``root``, the patterns split at ``/``, what matched so far."""

    root: Path
    patterns: list[list[str]]
    found: list[str] = field(default_factory=list)
    seen: int = 0

    def directory(self, parts: list[str]) -> list[list[str]]:
        """Note the matching files of the directory at ``parts``; returns its directories a pattern may reach."""
        try:
            with os.scandir(self.root.joinpath(*parts)) as listing:
                children = list(listing)
        except OSError:
            return []
        below: list[list[str]] = []
        for child in children:
            self.seen += 1
            if self.seen > MAX_INPUT_SCAN:
                raise DefinitionError(
                    f"setup_inputs: matching them looked at more than {MAX_INPUT_SCAN} entries; "
                    "anchor the patterns (e.g. 'backend/requirements.txt' rather than '**/requirements.txt')."
                )
            path = [*parts, child.name]
            if child.name == ".git":
                continue
            if child.is_dir(follow_symlinks=False):
                below += [path] if any(_may_hold(pattern, path) for pattern in self.patterns) else []
            elif self.matches(child, path):
                self.add("/".join(path))
        return below

    def matches(self, child: os.DirEntry[str], path: list[str]) -> bool:
        """Whether ``child`` (at ``path``) is a file or symlink that a pattern matches."""
        file_like = child.is_file(follow_symlinks=False) or child.is_symlink()
        return file_like and any(_glob_match(pattern, path) for pattern in self.patterns)

    def add(self, path: str) -> None:
        self.found.append(path)
        if len(self.found) > MAX_INPUT_FILES:
            raise DefinitionError(f"setup_inputs match more than {MAX_INPUT_FILES} files; narrow them.")


def setup_inputs_hash(env: Environment, repo: Path) -> str:
    """A hash of the files the setup reads: each path ``setup_inputs`` match, its mode, and its contents (a symlink:
    its target); and the setup's program when it is a file of the repository (``setup_program``) that no glob
    matched, as the setup runs it (``_program_digest``).

    It covers the files only; a cache of the setup's result keys on it together with the
    image's tag and ``env.setup`` and ``env.env`` (``cachekeys.setup_key``). Bounded: more than
    ``MAX_INPUT_BYTES`` is refused.
    """
    root = real_root(repo)
    files = setup_input_files(env, repo)
    hasher = hashlib.sha256(b"cubicle-setup-inputs-v1\0")
    _hash_inputs(hasher, root, files)
    program = setup_program(env.setup)
    if program is not None and program not in files:
        hasher.update(b"program\0" + _program_digest(root, program))
    return hasher.hexdigest()


def _hash_inputs(hasher: Any, root: Path, files: list[str]) -> None:
    """Hash the files ``setup_input_files`` found (a walk that followed no link: each is inside ``root``)."""
    total = 0
    for rel in files:
        path = root / rel
        info = os.lstat(path)
        hasher.update(rel.encode("utf-8", "surrogateescape") + b"\0" + f"{info.st_mode:o}".encode() + b"\0")
        if stat.S_ISLNK(info.st_mode):
            hasher.update(os.readlink(path).encode("utf-8", "surrogateescape") + b"\0")
            continue
        total += info.st_size
        if total > MAX_INPUT_BYTES:
            raise DefinitionError(f"setup_inputs match more than {MAX_INPUT_BYTES >> 20} MiB of files; narrow them.")
        data = read_regular(path, MAX_INPUT_BYTES, file="setup_inputs", key=rel)
        hasher.update(hashlib.sha256(data).digest())


def setup_program(setup: str | None) -> str | None:
    """The setup's first word when it names a file of the repository (``./install.sh``, ``scripts/setup``),
    repo-relative: a word with a ``/`` that is not absolute."""
    if not setup:
        return None
    try:
        words = shlex.split(setup)
    except ValueError:
        return None
    if not words or words[0].startswith("/") or "/" not in words[0]:
        return None
    return posixpath.normpath("/" + words[0]).lstrip("/") or None


def _program_digest(root: Path, rel: str) -> bytes:
    """The setup's program as the setup will run it: the path, the target of each link on the way, and the
    file's bytes when it is a regular file inside the repository (else what it is: missing, outside, another
    kind). Nothing outside the repository is read: a link out of it is hashed as its text."""
    parts = [rel]
    try:
        parts += [f"{link} -> {os.readlink(root / link)}" for link in links_along(root, rel)]
    except (ValueError, OSError):
        return "\0".join([*parts, "unresolvable"]).encode("utf-8", "surrogateescape")
    full = os.path.realpath(root / rel)
    info = _lstat(full) if is_inside(root, full) else None
    if not is_inside(root, full):
        parts.append("outside the repository")
    elif info is None:
        parts.append("missing")
    elif not stat.S_ISREG(info.st_mode):
        parts.append(f"mode {info.st_mode:o}")
    else:
        data = read_regular(Path(full), MAX_INPUT_BYTES, file="setup", key=rel)
        parts.append(f"mode {stat.S_IMODE(info.st_mode):o} sha256 {hashlib.sha256(data).hexdigest()}")
    return "\0".join(parts).encode("utf-8", "surrogateescape")


def _lstat(path: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except OSError:
        return None


def trusted_paths(env: Environment, repo: Path) -> tuple[str, ...]:
    """Every file of the checkout the definition reads, repo-relative: the definition file (and, when it is
    a link, where it leads), its Dockerfile and the .dockerignore files of the build, with every symlink on
    the way to each (``links_along``). An agent's change to one of them changes what the next session builds
    and runs, so it is applied only when named."""
    root = real_root(repo)
    named: list[str] = []
    if env.file:
        named.append(env.file)
    if env.dockerfile:
        named += [env.dockerfile, f"{env.dockerfile}.dockerignore"]
        named.append(".dockerignore" if env.context in (".", "") else f"{env.context}/.dockerignore")
    found: list[str] = []
    for rel in named:
        found.append(rel)
        try:
            found += links_along(root, rel)
        except ValueError as err:
            raise DefinitionError(f"{err}.") from None
        real = os.path.realpath(root / rel)
        if is_inside(root, real) and real != str(root):
            found.append(Path(real).relative_to(root).as_posix())
    return tuple(dict.fromkeys(found))


def requested(request: EnvironmentRequest, env: Environment) -> Environment:
    """``env`` (the repository's, from ``load``) with the request's fields in its place."""

    base = Environment(source="request") if request.ignore_repository else env
    setup = shlex.join(request.setup) if isinstance(request.setup, list) else request.setup
    return override(
        base,
        Overrides(
            image=request.image,
            dockerfile=request.dockerfile,
            context=request.context,
            target=request.target,
            build_args=request.build_args,
            variables=request.env,
            setup=setup,
            setup_timeout_s=request.setup_timeout_s,
            setup_network=request.setup_network,
            setup_inputs=request.setup_inputs,
            network=request.network,
        ),
    )
