"""What an environment's build and setup take from the repository: files an agent's change to would run as root.

The next session's image build copies the Dockerfile's ``COPY``/``ADD`` sources from the build
context and may run them (``RUN ./install.sh``) as root, with the engine's default
capabilities; the setup reads ``setup_inputs`` and may run a program of the repository. An
agent's change to any of these, once applied, runs in every later build. So they are listed
here, for the workspace to hold back (``workspace.buildinputs.BuildInputs``, which judges changes by them):

- each ``COPY``/``ADD`` source from the context (not ``--from=`` another stage or image, not a
  URL or a heredoc), each ``setup_inputs`` glob, and the setup command's first word when it is
  a path of the repository: applied only when forced by name;
- when a source is the whole context (``COPY . /app``), every path of the context that its
  ``.dockerignore`` does not leave out: applied only with one acknowledgement for all of them
  (``apply --build-inputs``).

Globs are matched as ``fnmatch`` does (a ``*`` crossing ``/`` too): wider than the builder, never
narrower.
"""

from __future__ import annotations

import itertools
import json
import posixpath
import re
import shlex
from pathlib import Path

from ..errors import CubicleError
from ..wire.envspec import Environment
from ..workspace.buildinputs import BuildInputs
from .buildcontext import DOCKERIGNORE
from .definition import load, setup_program, trusted_paths
from .files import MAX_DOCKERFILE_BYTES, read_regular, real_root, resolve

COPIED = "the environment's build copies it into the image (COPY/ADD), where the build may run it as root"
READ_BY_SETUP = "the environment's setup reads it"
RUN_BY_SETUP = "the environment's setup runs it"
_INSTRUCTION = re.compile(r"^\s*(COPY|ADD)\s+(.*)$", re.IGNORECASE | re.DOTALL)


def find(env: Environment, repo: Path) -> BuildInputs:
    """The build inputs of ``env`` in ``repo``; a file that cannot be read adds none (the build fails on it anyway)."""
    patterns = [(glob, READ_BY_SETUP) for glob in env.setup_inputs]
    program = setup_program(env.setup)
    if program is not None:
        patterns.append((program, RUN_BY_SETUP))
    if not env.dockerfile:
        return BuildInputs(patterns=tuple(patterns))
    context = _normal(env.context)
    whole = False
    root = real_root(repo)
    try:
        text = read_regular(resolve(root, env.dockerfile, file=env.dockerfile), MAX_DOCKERFILE_BYTES, file="dockerfile")
    except (CubicleError, OSError):
        text = b""
    for source in sources(text.decode("utf-8", "replace")):
        rel = _normal(source)
        if rel in ("", "*") or "$" in rel:  # the whole context, or a source a build argument names: any of it
            whole = True
        else:
            patterns.append((posixpath.join(context, rel) if context else rel, COPIED))
    if not whole:
        return BuildInputs(patterns=tuple(patterns))
    return BuildInputs(patterns=tuple(patterns), context=context, ignore=_ignore_lines(root, context))


# A source that is not the context's: a here-document, a git address, a URL.
_ELSEWHERE = re.compile(r"<<|git@|.*://", re.DOTALL)


def sources(dockerfile: str) -> list[str]:
    """The sources of the Dockerfile's ``COPY`` and ``ADD`` that come from the build context."""
    found: list[str] = []
    for instruction in _instructions(dockerfile):
        match = _INSTRUCTION.match(instruction)
        if match is None:
            continue
        words = _words(match.group(2))
        flags = list(itertools.takewhile(lambda word: word.startswith("--"), words))
        words = words[len(flags) :]
        if any(flag.startswith("--from") for flag in flags) or len(words) < 2:
            continue  # another stage's or image's files; or no destination
        found += [s for s in words[:-1] if not _ELSEWHERE.match(s)]
    return found


def _instructions(text: str) -> list[str]:
    """Instructions with their continuation lines joined (comment lines inside them dropped, as the builder does)."""
    out: list[str] = []
    current = ""
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1]
            continue
        out.append(current + line)
        current = ""
    if current:
        out.append(current)
    return out


def _words(arguments: str) -> list[str]:
    text = arguments.strip()
    flags = []
    while text.startswith("--"):  # flags come first, in either form
        flag, _, text = text.partition(" ")
        flags.append(flag)
        text = text.strip()
    if text.startswith("["):
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError:
            parsed = None
        if isinstance(parsed, list) and all(isinstance(word, str) for word in parsed):
            return [*flags, *parsed]
    try:
        return [*flags, *shlex.split(text)]
    except ValueError:
        return [*flags, *text.split()]


def _normal(path: str) -> str:
    """A repo- or context-relative path as the builder reads it: ``./a/../b/`` is ``b``, ``/`` and ``.`` are ``""``."""
    return posixpath.normpath("/" + path).lstrip("/")


def _ignore_lines(root: Path, context: str) -> tuple[str, ...]:
    try:
        path = resolve(root, posixpath.join(context, DOCKERIGNORE) if context else DOCKERIGNORE, file=DOCKERIGNORE)
        text = read_regular(path, 1 << 20, file=DOCKERIGNORE).decode("utf-8", "replace")
    except (CubicleError, OSError):
        return ()
    return tuple(line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#"))


def definition_files(repo: Path) -> tuple[tuple[str, ...], BuildInputs]:
    """The files the repository's environment definition reads, and what its build and setup take from the
    checkout (none when it has no valid definition)."""
    try:
        env = load(repo)
        return trusted_paths(env, repo), find(env, repo)
    except CubicleError:
        return (), BuildInputs()
