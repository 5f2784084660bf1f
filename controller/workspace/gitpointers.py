"""The work-tree paths the checkout's own git configuration points at: git on the host runs or reads them.

Many checkouts point git into their work tree: ``core.hooksPath`` (husky sets ``.husky/_``), an
``include.path`` to a tracked config file, an alias or ``core.fsmonitor`` that runs a script of the
repository. An agent's change there is no ordinary change: after a plain apply, the user's next
``git status`` (or their shell prompt's) would run it. Those paths are therefore ``trusted``, like the
environment's definition: listed with the reason, applied only when forced by name.

What counts, read from the *real* checkout (never the layer) each time changes are judged:

- every config file git reads that lies in the repository (a dotfiles repository holding
  ``~/.gitconfig``), and every path a config value names: includes (conditional ones whatever
  their condition says today), hooks, attributes and excludes files, templates, signers files;
- every path a command git runs names (aliases, pager, editor, textconv, filters, merge and diff
  tools, credential helpers, ...), and the top folder of each, since a script finds its
  neighbours there (``node scripts/gen`` runs ``scripts/gen.js``);
- the same for every command line of the hooks git runs and of the hook managers' files
  (husky, lefthook, pre-commit, lint-staged), which call the repository's own scripts;
- each path both as written and as its symlinks lead (``.githooks -> tools/hooks``).

git itself lists the configuration (system, global of the checkout's owner, repository;
worktrees and ``commondir`` understood), in a fixed environment: ``git config --list`` runs
no program the configuration names. Where git is not installed, only the hook managers' files
count. A judgement by text, not a shell: a command that builds a path at run time from parts
no word shows is beyond it.
"""

from __future__ import annotations

import logging
import os
import posixpath
import pwd
import re
import shlex
import subprocess
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

TIMEOUT_S = 10.0
MAX_CONFIG_BYTES = 4 << 20
"""More configuration output than this is cut: the keys after it are not read (a config that large is odd)."""
MAX_INCLUDED_FILES = 64
MAX_SCRIPT_BYTES = 64 << 10
MAX_SCRIPTS = 200
"""Hook and hook-manager files read for the paths they run, and how much of each."""


def _hook_managers() -> tuple[tuple[str, bool, str], ...]:
    lefthook = [
        f"{folder}{dot}lefthook{local}.{ext}"
        for folder in ("", ".config/") for dot in ("", ".") for local in ("", "-local")
        for ext in ("yml", "yaml", "toml", "json", "jsonc")
    ]  # fmt: skip
    lint_staged = [".lintstagedrc", *(f".lintstagedrc.{e}" for e in ("json", "yaml", "yml", "mjs", "cjs", "js"))]
    return (
        (".husky", True, "husky"),
        (".lefthook", True, "lefthook"),
        (".lefthook-local", True, "lefthook"),
        *((name, False, "lefthook") for name in lefthook),
        (".pre-commit-config.yaml", False, "pre-commit"),
        (".pre-commit-config.yml", False, "pre-commit"),
        *((name, False, "lint-staged") for name in lint_staged),
        *((f"lint-staged.config.{e}", False, "lint-staged") for e in ("js", "mjs", "cjs")),
    )


HOOK_MANAGERS = _hook_managers()
"""(path, is a directory, manager): what husky, lefthook, pre-commit and lint-staged read or run when git runs
hooks."""

PATH_KEYS = re.compile(
    r"include\.path|includeif\..*\.path|core\.(hookspath|attributesfile|excludesfile|fsmonitor)|commit\.template"
    r"|blame\.ignorerevsfile|gpg\.ssh\.allowedsignersfile|mailmap\.file|init\.templatedir",
    re.IGNORECASE,
)
"""Keys whose value is a path git reads or runs."""
DIRECTORY_KEYS = ("core.hookspath", "init.templatedir")
COMMAND_KEYS = re.compile(
    r"core\.(sshcommand|editor|pager|askpass|gitproxy)|sequence\.editor|diff\.external|interactive\.difffilter"
    r"|diff\..+\.(textconv|command)|filter\..+\.(clean|smudge|process)|merge\..+\.driver"
    r"|(merge|diff)tool\..+\.(cmd|path)|credential\.(.+\.)?helper|alias\..+|gpg\.(.+\.)?program"
    r"|gpg\.ssh\.defaultkeycommand|pager\..+|remote\..+\.(uploadpack|receivepack)",
    re.IGNORECASE,
)
"""Keys whose value is a command git runs (through the shell, from the work tree's top)."""
BOOLEANS = ("", "true", "false", "yes", "no", "on", "off", "0", "1")
_BUILT = re.compile(r"^(?:.*[)}]|\$\w+)(?=/)")
"""What a shell word builds at run time before a slash: ``"$(git rev-parse --show-toplevel)"/x``, ``$ROOT/x``."""


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


@dataclass
class _Reading:
    """One reading of a checkout's git configuration: where it is, and what was found so far."""

    repo: str
    top: str
    home: str
    found: list[Pointer] = field(default_factory=list)
    read: set[str] = field(default_factory=set)

    def add(self, value: str, base: str, directory: bool, why: str) -> None:
        """``value`` (relative to ``base``) as written and as its symlinks lead, where either lies in the repo."""
        full = posixpath.normpath(posixpath.join(base, _expanded(value, self.home)))
        for candidate in dict.fromkeys((full, os.path.realpath(full))):
            inside = _relative(self.repo, candidate)
            if inside is not None:
                self.found.append(Pointer(inside, directory, why))

    def command(self, command: str, why: str, every_word: bool = True) -> None:
        """The paths a shell command runs: each command's program, or the script an interpreter is given
        (``sh x.sh``, ``node scripts/gen``: then its folder too, where the interpreter finds ``gen.js``), after
        any ``cd DIR``. With ``every_word`` (a command git's own configuration names), any word that leads
        into the repository counts too."""
        cwd = self.top
        for words in _commands(command):
            while words and _ASSIGNMENT.match(words[0]):
                words = words[1:]
            if not words:
                continue
            if words[0] == "cd" and len(words) > 1:
                cwd = posixpath.join(cwd, _expanded(words[1], self.home))
                continue
            program, rest = words[0], [w for w in words[1:] if not w.startswith("-") or "=" in w]
            if posixpath.basename(program) in SHELLS and "-c" in words[1:]:
                at = words.index("-c")
                if at + 1 < len(words):
                    self.command(words[at + 1], why, every_word)
                continue
            ran = (
                [w for w in rest if not w.startswith("-")][:1]
                if posixpath.basename(program) in INTERPRETERS
                else [program]
            )
            for word in ran + (rest if every_word else []):
                self._word(word, cwd, why, module=posixpath.basename(program) in INTERPRETERS)

    def _word(self, word: str, cwd: str, why: str, module: bool) -> None:
        word = word.split("=", 1)[1] if word.startswith("-") else word  # --file=path
        word = _BUILT.sub("", word).lstrip("/") if _BUILT.match(word) else word
        if not word or word in (".", "..") or not ("/" in word or "." in word):
            return
        self.add(word, cwd, False, why)
        if module and "." not in posixpath.basename(word):  # the interpreter picks the file: its folder counts
            self.add(posixpath.dirname(word) or ".", cwd, True, why)


SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh"})
INTERPRETERS = SHELLS | frozenset(
    {"node", "deno", "bun", "python", "python3", "ruby", "perl", "php", "exec", "source", ".", "env", "npx", "tsx"}
)
"""Programs whose first argument is what they run."""
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_OPERATORS = frozenset({";", "&&", "||", "|", "&", "(", ")", "{", "}", ";;", "|&", "()"})


def _commands(command: str) -> Iterator[list[str]]:
    """The simple commands of a shell line, split at its operators."""
    current: list[str] = []
    for word in _words(command):
        if word in _OPERATORS or set(word) <= set(";&|(){}"):
            if current:
                yield current
            current = []
        else:
            current.append(word)
    if current:
        yield current


def pointers(repo: Path, home: str | None = None) -> tuple[Pointer, ...]:
    """Every path of ``repo`` (the session's repository, inside some git work tree or not) git is told to run or
    read, and the hook managers' files; blocking. ``home`` holds the global config (default: the home of the
    checkout's owner, whose git it is)."""
    found = [Pointer(path, directory, f"{manager}, when git runs hooks") for path, directory, manager in HOOK_MANAGERS]
    home = home or _home(repo)
    where = _git(repo, home, "rev-parse", "--show-toplevel", "--git-path", "hooks")
    lines = (where or "").splitlines()
    if len(lines) < 2 or not lines[0]:
        return tuple(dict.fromkeys(found))
    reading = _Reading(os.path.realpath(repo), lines[0], home)
    listed = _git(Path(reading.top), home, "config", "--list", "--show-origin", "--includes", "-z")
    _from_config(reading, _entries(listed or ""))
    for default in (f"{home}/.gitconfig", f"{home}/.config/git/config", "/etc/gitconfig"):
        reading.add(default, "/", False, "a config file git reads")
    hooks = posixpath.join(str(repo), lines[1])  # git prints it relative to where it ran
    reading.add(hooks, "/", True, "git's hooks")
    for script in _scripts(reading, hooks):
        _from_script(reading, script)
    return tuple(dict.fromkeys(found + reading.found))


def _from_config(reading: _Reading, entries: Iterable[tuple[str, str, str]]) -> None:
    for origin, key, value in entries:
        source = origin.removeprefix("file:")
        if origin.startswith("file:"):
            reading.add(source, reading.top, False, "a config file git reads")
        lowered = key.lower()
        if PATH_KEYS.fullmatch(key) and value.lower() not in BOOLEANS:
            base = (
                posixpath.dirname(posixpath.join(reading.top, source)) if lowered.startswith("include") else reading.top
            )
            reading.add(value, base, lowered in DIRECTORY_KEYS, f"git's {key}")
            if lowered == "core.hookspath" and posixpath.basename(value.rstrip("/")) == "_":  # husky runs ../<hook>
                reading.add(posixpath.dirname(value.rstrip("/")), reading.top, True, f"husky, through git's {key}")
            if lowered.startswith("include"):
                _included(reading, posixpath.join(base, _expanded(value, reading.home)))
        elif COMMAND_KEYS.fullmatch(key):
            reading.command(value.removeprefix("!"), f"run by git's {key}")


def _included(reading: _Reading, path: str) -> None:
    """A file an include names, read whether or not its condition holds today (``onbranch:`` may hold tomorrow)."""
    path = posixpath.normpath(path)
    if path in reading.read or len(reading.read) >= MAX_INCLUDED_FILES or not os.path.isfile(path):
        return
    reading.read.add(path)
    listed = _git(Path(reading.top), reading.home, "config", "--file", path, "--list", "--show-origin", "-z")
    _from_config(reading, _entries(listed or ""))


def _scripts(reading: _Reading, hooks: str) -> Iterator[str]:
    """The hooks git runs and the hook managers' files, in the real checkout: the files whose commands call
    the repository's own scripts."""
    names = [posixpath.join(hooks, name) for name in _listing(hooks) if not name.endswith(".sample")]
    for path, directory, _ in HOOK_MANAGERS:
        full = posixpath.join(reading.repo, path)
        names += [posixpath.join(full, name) for name in _listing(full)] if directory else [full]
    husky = [p.path for p in reading.found if p.why.startswith("husky")]
    for folder in husky:
        full = posixpath.join(reading.repo, folder)
        names += [posixpath.join(full, name) for name in _listing(full)]
    yield from [name for name in dict.fromkeys(names) if os.path.isfile(name)][:MAX_SCRIPTS]


def _from_script(reading: _Reading, path: str) -> None:
    try:
        with open(path, "rb") as script:
            text = script.read(MAX_SCRIPT_BYTES).decode("utf-8", "replace")
    except OSError:
        return
    name = _relative(reading.repo, os.path.realpath(path)) or posixpath.basename(path)
    for line in text.splitlines():
        line = line.split("#", 1)[0] if not line.lstrip().startswith("#!") else ""
        if line.strip():
            reading.command(line, f"run by {name}, which git runs", every_word=False)


def _listing(folder: str) -> list[str]:
    try:
        return sorted(os.listdir(folder))[:MAX_SCRIPTS]
    except OSError:
        return []


def _words(command: str) -> list[str]:
    """The words of a shell command, its operators (``;``, ``&&``, ``(``, ``{``...) apart, quotes removed."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        return list(lexer)[:1000]
    except ValueError:
        return command.split()[:1000]


def _relative(repo: str, full: str) -> str | None:
    """``full`` as a path relative to ``repo`` when it lies in it, else None."""
    full = posixpath.normpath(full)
    if full == repo:
        return "."
    if full.startswith(repo + "/"):
        return full[len(repo) + 1 :]
    return None


def _entries(listed: str) -> list[tuple[str, str, str]]:
    """``git config --list --show-origin -z`` as (origin, key, value)."""
    fields = listed.split("\0")
    entries = []
    for origin, pair in zip(fields[0::2], fields[1::2], strict=False):
        key, _, value = pair.partition("\n")
        entries.append((origin, key, value))
    return entries


def _expanded(value: str, home: str) -> str:
    """``~/x`` as git spells its owner's home; anything else as it is."""
    return home + value[1:] if value == "~" or value.startswith("~/") else value


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
