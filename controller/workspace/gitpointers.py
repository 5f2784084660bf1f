"""The work-tree paths the checkout's own git configuration points at: git on the host runs or reads them.

Many checkouts point git into their work tree: ``core.hooksPath`` (husky sets ``.husky/_``), an
``include.path`` to a tracked config file, an alias or ``core.fsmonitor`` that runs a script of the
repository. An agent's change there is no ordinary change: after a plain apply, the user's next
``git status`` (or their shell prompt's) would run it. Those paths are therefore ``trusted``, like the
environment's definition: listed with the reason, applied only when forced by name.

The configuration is read from the *real* checkout, never the layer, with git itself (system, global
and repository config, includes and ``includeIf`` followed, worktrees and ``commondir`` understood),
in a fixed environment: ``git config --list`` runs no program the configuration names. It is read
again whenever the changes are judged, so an apply sees the configuration as it is then. The
well-known hook managers' files (``.husky/``, lefthook's and pre-commit's configuration) are
trusted whatever git says. Where git is not installed, only those are.
"""

from __future__ import annotations

import logging
import os
import posixpath
import pwd
import re
import shlex
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

TIMEOUT_S = 10.0
MAX_CONFIG_BYTES = 4 << 20
"""More configuration output than this is cut: the keys after it are not read (a config that large is odd)."""

HOOK_MANAGERS = (
    (".husky", True, "husky"),
    (".lefthook", True, "lefthook"),
    *(
        (name, False, "lefthook")
        for name in (
            "lefthook.yml",
            "lefthook.yaml",
            ".lefthook.yml",
            ".lefthook.yaml",
            "lefthook-local.yml",
            ".lefthook-local.yml",
        )
    ),
    (".pre-commit-config.yaml", False, "pre-commit"),
)
"""(path, is a directory, manager): what husky, lefthook and pre-commit read or run when git runs their hooks."""

PATH_KEYS = re.compile(
    r"include\.path|includeif\..*\.path|core\.(hookspath|attributesfile|excludesfile|fsmonitor)", re.IGNORECASE
)
"""Keys whose value is a path git reads or runs."""
COMMAND_KEYS = re.compile(
    r"core\.(sshcommand|editor|pager|askpass)|sequence\.editor|diff\.external|interactive\.difffilter"
    r"|diff\..+\.(textconv|command)|filter\..+\.(clean|smudge|process)|merge\..+\.driver"
    r"|credential\.(.+\.)?helper|alias\..+|gpg\.(.+\.)?program|pager\..+|core\.gitproxy",
    re.IGNORECASE,
)
"""Keys whose value is a command git runs (through the shell, from the work tree's top)."""


@dataclass(frozen=True)
class Pointer:
    """A path of the session's repository (relative, POSIX) that git reads or runs."""

    path: str
    directory: bool
    """Everything below ``path`` is covered too (a hooks directory)."""
    why: str
    """The configuration that points here (``core.hooksPath``), or the hook manager."""

    def covers(self, path: str, is_dir: bool) -> bool:
        """``path`` is this file, lies in this directory, or is on the way to it as anything but a directory
        (a symlink there would lead git elsewhere)."""
        return (
            path == self.path
            or (self.directory and path.startswith(self.path + "/"))
            or (not is_dir and self.path.startswith(path + "/"))
        )


def pointers(repo: Path, home: str | None = None) -> tuple[Pointer, ...]:
    """Every path of ``repo`` (the session's repository, inside some git work tree or not) git is told to run or
    read, and the hook managers' files; blocking. ``home`` holds the global config (default: the home of the
    checkout's owner, whose git it is)."""
    found = [Pointer(path, directory, f"{manager}, when git runs hooks") for path, directory, manager in HOOK_MANAGERS]
    home = home or _home(repo)
    listed = _git_config(repo, home)
    if listed is not None:
        top, entries = listed
        found += _from_config(Path(top), repo, entries, home)
    return tuple(dict.fromkeys(found))


def _from_config(top: Path, repo: Path, entries: Iterable[tuple[str, str, str]], home: str) -> list[Pointer]:
    found: list[Pointer] = []
    for origin, key, value in entries:
        if PATH_KEYS.fullmatch(key) and value.lower() not in ("", "true", "false", "yes", "no", "on", "off", "0", "1"):
            base = _origin_dir(origin, top) if key.lower().startswith("include") else top
            inside = _inside(repo, base, _expanded(value, home))
            if inside is not None:
                found.append(Pointer(inside, key.lower() == "core.hookspath", f"git's {key}"))
        elif COMMAND_KEYS.fullmatch(key):
            found += [Pointer(rel, False, f"run by git's {key}") for rel in _command_paths(repo, top, value, home)]
    return found


def _command_paths(repo: Path, top: Path, command: str, home: str) -> list[str]:
    """The paths of ``repo`` a shell command names: any word with a slash or a dot in it that leads there."""
    try:
        words = shlex.split(command.removeprefix("!"))
    except ValueError:
        words = command.removeprefix("!").split()
    found = []
    for word in words:
        for part in word.split("="):  # --config=path
            if part and not part.startswith("-") and ("/" in part or "." in part) and part not in (".", ".."):
                inside = _inside(repo, top, _expanded(part, home))
                if inside is not None:
                    found.append(inside)
    return found


def _inside(repo: Path, base: Path, value: str) -> str | None:
    """``value`` (relative to ``base``) as a path relative to ``repo`` when it lies in it, else None."""
    full = posixpath.normpath(posixpath.join(str(base), value))
    root = posixpath.normpath(str(repo))
    if full == root:
        return "."
    if full.startswith(root + "/"):
        return full[len(root) + 1 :]
    return None


def _expanded(value: str, home: str) -> str:
    """``~/x`` as git spells its owner's home; anything else as it is."""
    return home + value[1:] if value == "~" or value.startswith("~/") else value


def _origin_dir(origin: str, top: Path) -> Path:
    """The folder of the config file an entry came from (``file:.git/config``, relative to the top)."""
    path = origin.removeprefix("file:")
    return (top / path).parent if not os.path.isabs(path) else Path(path).parent


def _git_config(repo: Path, home: str) -> tuple[str, list[tuple[str, str, str]]] | None:
    """(the work tree's top, [(origin, key, value)]) as git reads them for ``repo``; None outside a work tree
    or without git."""
    top = _git(repo, home, "rev-parse", "--show-toplevel")
    if top is None or not top.strip():
        return None
    listed = _git(Path(top.strip()), home, "config", "--list", "--show-origin", "--includes", "-z")
    if listed is None:
        return None
    fields = listed.split("\0")
    entries = []
    for origin, pair in zip(fields[0::2], fields[1::2], strict=False):
        key, _, value = pair.partition("\n")
        entries.append((origin, key, value))
    return top.strip(), entries


def _home(path: Path) -> str:
    """The home of whoever owns ``path``: their git reads their own global config (the controller may be root)."""
    try:
        return pwd.getpwuid(os.stat(path).st_uid).pw_dir
    except (KeyError, OSError):
        return str(Path.home())


def _git(cwd: Path, home: str, *args: str) -> str | None:
    """git's output in a fixed environment (HOME ``home``, for the global config; none of the controller's
    GIT_* variables); None when git is missing or fails."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0", "HOME": home}
    try:
        done = subprocess.run(
            ["git", "-c", "safe.directory=*", *args], cwd=cwd, env=env, capture_output=True, timeout=TIMEOUT_S,
            stdin=subprocess.DEVNULL, check=False,
        )  # fmt: skip
    except FileNotFoundError:
        log.debug("git is not installed: only the hook managers' files are trusted")
        return None
    except (OSError, subprocess.TimeoutExpired) as err:
        log.warning("could not read git's configuration of %s: %s", cwd, err)
        return None
    if done.returncode != 0:
        return None
    return done.stdout[:MAX_CONFIG_BYTES].decode("utf-8", "surrogateescape")
