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
- each path both as written and as its symlinks lead (``.githooks -> tools/hooks``);
- all of it again for each repository nested in the checkout (a submodule, a vendored clone: a folder that held
  a ``.git`` at the session's start), by its own configuration and hook managers, rooted there. One the agent
  makes is never read: its ``.git`` is never applied, and ``gitlike`` keeps it from making a look-alike.

Paths are compared folded (``fold``), as a case-insensitive checkout compares them.

git itself lists the configuration (system, global of the checkout's owner, repository;
worktrees and ``commondir`` understood), in a fixed environment: ``git config --list`` runs
no program the configuration names. Where git is not installed, only the hook managers' files
count. A judgement by text, not a shell: a command that builds a path at run time from parts
no word shows is beyond it.
"""

from __future__ import annotations

import itertools
import logging
import os
import posixpath
import pwd
import re
import subprocess
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from . import shellwords
from .baseline import HFS_IGNORED

log = logging.getLogger(__name__)

TIMEOUT_S = 10.0
MAX_CONFIG_BYTES = 4 << 20
"""More configuration output than this is cut: the keys after it are not read (a config that large is odd)."""
_PATH = "/usr/local/bin:/usr/bin:/bin"
MAX_INCLUDED_FILES = 64
MAX_SCRIPT_BYTES = 64 << 10
MAX_SCRIPTS = 200
"""Hook and hook-manager files read for the paths they run, and how much of each."""
MAX_NESTED = 32
"""Nested repositories whose configuration is read (each as the top one is, within the same bounds)."""
BEYOND_NESTED = f"a nested repository beyond the {MAX_NESTED} whose git configuration is read, so all of it"
NEWER_FORMAT = "this git cannot read the checkout's newer format, so all of it"


def _hook_managers() -> tuple[tuple[str, bool, str], ...]:
    lefthook = [
        f"{folder}{dot}lefthook{local}.{ext}"
        for folder in ("", ".config/")
        for dot in ("", ".")
        for local in ("", "-local")
        for ext in ("yml", "yaml", "toml", "json", "jsonc")
    ]
    lint_staged = [".lintstagedrc", *(f".lintstagedrc.{e}" for e in ("json", "yaml", "yml", "mjs", "cjs", "js"))]
    return (
        (".husky", True, "husky"),
        (".lefthook", True, "lefthook"),
        (".lefthook-local", True, "lefthook"),
        *((name, False, "lefthook") for name in lefthook),
        (".gitmodules", False, "git submodule"),  # URLs and update commands git submodule obeys
        (".lfsconfig", False, "git-lfs"),  # where git lfs sends the repository's objects
        (".pre-commit-config.yaml", False, "pre-commit"),
        (".pre-commit-config.yml", False, "pre-commit"),
        *((name, False, "lint-staged") for name in lint_staged),
        *((f"lint-staged.config.{e}", False, "lint-staged") for e in ("js", "mjs", "cjs")),
    )


HOOK_MANAGERS = _hook_managers()
"""(path, is a directory, reader): what husky, lefthook, pre-commit and lint-staged read or run when git runs
hooks, and what git submodule and git-lfs obey from the work tree."""

PATH_KEYS = re.compile(
    r"include\.path|includeif\..*\.path|core\.(hookspath|attributesfile|excludesfile|fsmonitor)|commit\.template"
    r"|blame\.ignorerevsfile|gpg\.ssh\.(allowedsignersfile|revocationfile)|mailmap\.file|init\.templatedir",
    re.IGNORECASE,
)
"""Keys whose value is a path git reads or runs."""
DIRECTORY_KEYS = ("core.hookspath", "init.templatedir")
COMMAND_KEYS = re.compile(
    r"core\.(sshcommand|editor|pager|askpass|gitproxy)|sequence\.editor|diff\.external|interactive\.difffilter"
    r"|diff\..+\.(textconv|command)|filter\..+\.(clean|smudge|process)|merge\..+\.driver"
    r"|(merge|diff)tool\..+\.(cmd|path)|credential\.(.+\.)?helper|alias\..+|gpg\.(.+\.)?program"
    r"|gpg\.ssh\.defaultkeycommand|pager\..+|remote\..+\.(uploadpack|receivepack)|hook\..+\.command"
    r"|tar\..+\.command|trailer\..+\.(cmd|command)|submodule\..+\.update|sendemail\.smtpserver",
    re.IGNORECASE,
)
"""Keys whose value is a command git runs (through the shell, from the work tree's top)."""
BOOLEANS = ("", "true", "false", "yes", "no", "on", "off", "0", "1")


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
            or self.path == "."  # everything: the configuration could not be read
            or (self.directory and path.startswith(self.path + "/"))
            or (not is_dir and self.path.startswith(path + "/"))
        )


_MANAGERS_READ = tuple(Pointer(path, directory, f"read by {reader}") for path, directory, reader in HOOK_MANAGERS)


def fold(path: str) -> str:
    """``path`` as a case-insensitive filesystem compares it (``str.casefold``, so U+017F is ``s``; and without the
    code points HFS+ ignores): two paths that fold alike may be one file where the checkout lies."""
    return path.translate(HFS_IGNORED).casefold()


class Index:
    """The pointers, looked up by path in time of the path's depth, not of how many there are (nested repositories
    bring hundreds); the first pointer listed that covers a path wins, as trying ``Pointer.covers`` in order.
    Paths are compared folded (``fold``): holding back the other spellings of a pointer costs nothing, while
    on a case-insensitive checkout ``.GitHooks/pre-commit`` is the hook git runs from ``.githooks``."""

    def __init__(self, pointers: tuple[Pointer, ...]) -> None:
        self.everything = next((p for p in pointers if p.path == "."), None)
        self.exact: dict[str, tuple[int, Pointer]] = {}
        self.on_the_way: dict[str, tuple[int, Pointer]] = {}  # strict ancestors of a pointer: covered unless a dir
        self.below: dict[str, tuple[int, Pointer]] = {}  # directories whose whole tree is covered
        for order, pointer in enumerate(pointers):
            folded = fold(pointer.path)
            self.exact.setdefault(folded, (order, pointer))
            if pointer.directory:
                self.below.setdefault(folded, (order, pointer))
            parts = folded.split("/")
            for depth in range(1, len(parts)):
                self.on_the_way.setdefault("/".join(parts[:depth]), (order, pointer))

    def covering(self, path: str, is_dir: bool) -> Pointer | None:
        if self.everything is not None:
            return self.everything
        path = fold(path)
        found = [self.exact.get(path), None if is_dir else self.on_the_way.get(path)]
        at = path.find("/")
        while at >= 0:  # each folder the path lies in
            found.append(self.below.get(path[:at]))
            at = path.find("/", at + 1)
        return min((f for f in found if f is not None), key=lambda f: f[0], default=(0, None))[1]


@dataclass
class _Reading:
    """One reading of a checkout's git configuration: where it is, and what was found so far."""

    repo: str
    top: str
    home: str
    found: list[Pointer] = field(default_factory=list)
    read: set[str] = field(default_factory=set)
    script_dir: str | None = None
    """The folder of the hook script being read (its ``$0``)."""

    def add(self, value: str, base: str, directory: bool, why: str) -> None:
        """``value`` (relative to ``base``) as written, each symlink on its way, and where they lead: each of
        those that lies in the repository (a link turned elsewhere would lead git there)."""
        full = posixpath.normpath(posixpath.join(base, _expanded(value, self.home)))
        self.found += followed(self.repo, full, directory, why)

    def command(self, command: str, why: str, cwd: str | None = None) -> None:
        """The paths a shell command names: every word that leads into the repository (after any ``cd DIR``),
        the script an interpreter runs (``node scripts/gen``, ``python -m tools.lint``: with its folder,
        where the interpreter picks the file), and ``sh -c '…'`` bodies."""
        cwd = cwd or self.top
        for command_words in shellwords.commands(command):
            words = list(itertools.dropwhile(_prefix_word, command_words))
            if words and words[0] == "cd" and len(words) > 1:
                cwd = posixpath.join(cwd, _expanded(words[1], self.home))
            elif words:
                self._simple(words, cwd, why)

    def _simple(self, words: list[str], cwd: str, why: str) -> None:
        """One simple command (its prefixes gone, not a ``cd``): a shell's ``-c`` body is read as a command of its
        own; else each word, a module an interpreter runs (``-m``) as the path it names."""
        if posixpath.basename(words[0]) in shellwords.SHELLS and "-c" in words[1:-1]:
            self.command(words[words.index("-c") + 1], why, cwd)
            return
        interpreted = posixpath.basename(words[0]) in shellwords.INTERPRETERS
        for at, word in enumerate(words):
            module = interpreted and at > 0 and words[at - 1] == "-m"
            self._word(word.replace(".", "/") if module else word, cwd, why, interpreted, module)

    def _word(self, word: str, cwd: str, why: str, interpreted: bool, module: bool) -> None:
        if word.startswith("-"):
            word = word.partition("=")[2]  # --file=path; an option without a value names nothing
        if shellwords.BUILT.match(word):
            word = shellwords.BUILT.sub("", word).lstrip("/")
        if word in ("", ".", "..") or not ("/" in word or "." in word or module):
            return
        self.add(word, cwd, False, why)
        if interpreted and "." not in posixpath.basename(word) and posixpath.dirname(word):
            self.add(posixpath.dirname(word), cwd, True, why)  # the interpreter picks the file there: all of it


def followed(repo: str, full: str, directory: bool, why: str) -> list[Pointer]:
    """``full`` (an absolute path, in ``repo``, real) as written, each symlink of the checkout on its way, and where
    they lead: each of those that lies in the repository, as a pointer (a link turned elsewhere leads the reader
    there, and an entry on the way that becomes a link would)."""
    links, real = _links_along(full)
    found = []
    for candidate, is_directory in [(full, directory), (real, directory), *((link, False) for link in links)]:
        inside = _relative(repo, candidate)
        if inside is not None:
            found.append(Pointer(inside, is_directory, why))
    return found


def _prefix_word(word: str) -> bool:
    """Whether ``word`` comes before a command's name: a variable assignment, or a prefix command (``env``)."""
    return bool(shellwords.ASSIGNMENT.match(word)) or word in shellwords.PREFIXES


def pointers(repo: Path, home: str | None = None, nested: Sequence[str] = ()) -> tuple[Pointer, ...]:
    """Every path of ``repo`` (the session's repository, inside some git work tree or not) git is told to run or
    read, and the hook managers' files; blocking. ``home`` holds the global config (default: the home of the
    checkout's owner, whose git it is). When git is there but cannot read a checkout that has a ``.git``
    (a newer repository format, say), everything counts: held back unless forced, rather than let through.
    ``nested`` (folders of ``repo`` that held a ``.git`` at the session's start) are read alike, each by its own
    configuration, the first ``MAX_NESTED`` of them; everything in the others is held back."""
    home = home or _home(repo)
    real = os.path.realpath(repo)
    found = [*_MANAGERS_READ, *_read(real, real, home, (real,))]
    for at, folder in enumerate(nested):
        found += _nested(real, folder, home) if at < MAX_NESTED else [Pointer(folder, True, BEYOND_NESTED)]
    return tuple(dict.fromkeys(found))


def _nested(real: str, folder: str, home: str) -> list[Pointer]:
    """What the repository nested at ``folder`` makes git run or read: its hook managers' files and what its own
    configuration points at (rooted there). Nothing when it is no longer a folder of the checkout (a symlink)."""
    where = posixpath.join(real, folder)
    if os.path.realpath(where) != where:
        return []
    inside = f", in the nested repository {folder}"
    managers = [Pointer(f"{folder}/{p.path}", p.directory, p.why + inside) for p in _MANAGERS_READ]
    if not os.path.isdir(where):
        return managers  # gone since the session started: nothing of its configuration is left to read
    return managers + [Pointer(p.path, p.directory, p.why + inside) for p in _read(real, where, home, ())]


def _read(real: str, where: str, home: str, managers_at: tuple[str, ...]) -> list[Pointer]:
    """The pointers of the repository whose work tree holds ``where``, as paths of ``real`` (the session's
    folder); the hook managers' files read at its top and in ``managers_at``."""
    listed = _git(Path(where), home, "rev-parse", "--show-toplevel", "--git-path", "hooks")
    lines = (listed or "").splitlines()
    if len(lines) < 2 or not lines[0]:
        if listed is None and _newer_than_our_git(Path(where), home):
            return [Pointer(_relative(real, where) or ".", True, NEWER_FORMAT)]
        return []
    reading = _Reading(real, lines[0], home)
    config = _git(Path(reading.top), home, "config", "--list", "--show-origin", "--includes", "-z")
    _from_config(reading, _entries(config or ""))
    for default in (f"{home}/.gitconfig", f"{home}/.config/git/config", "/etc/gitconfig"):
        reading.add(default, "/", False, "a config file git reads")
    hooks = posixpath.normpath(posixpath.join(where, lines[1]))  # git prints it relative to where it ran
    reading.add(hooks, "/", True, "git's hooks")
    for script in _scripts(reading, hooks, managers_at):
        _from_script(reading, script)
    return reading.found


def _newer_than_our_git(repo: Path, home: str) -> bool:
    """Whether git refused the checkout for a format (an extension) it does not know: a newer git on the host
    reads it, hooks and all, so what this one cannot see must not be let through."""
    done = _run_git(repo, home, "rev-parse", "--git-dir")
    return (
        done is not None
        and done.returncode != 0
        and re.search(rb"repository (extension|format)", done.stderr) is not None
    )


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


def _scripts(reading: _Reading, hooks: str, managers_at: tuple[str, ...]) -> Iterator[str]:
    """The hooks git runs and the hook managers' files (at the work tree's top and in ``managers_at``), in
    the real checkout: the files whose commands call the repository's own scripts."""
    names = [name for name in _files_in(hooks) if not name.endswith(".sample")]
    folders = [*dict.fromkeys((reading.top, *managers_at))]
    places = [(posixpath.join(folder, path), directory) for path, directory, _ in HOOK_MANAGERS for folder in folders]
    places += [(posixpath.join(reading.repo, p.path), True) for p in reading.found if p.why.startswith("husky")]
    for full, directory in places:
        names += _files_in(full) if directory else [full]
    yield from list(filter(os.path.isfile, dict.fromkeys(names)))[:MAX_SCRIPTS]


def _from_script(reading: _Reading, path: str) -> None:
    """The paths a hook (or a hook manager's file) runs, line by line; and the hook itself where it leads."""
    reading.add(path, "/", False, "a hook git runs")
    try:
        with open(path, "rb") as script:
            text = script.read(MAX_SCRIPT_BYTES).decode("utf-8", "replace")
    except OSError:
        return
    name = _relative(reading.repo, os.path.realpath(path)) or posixpath.basename(path)
    reading.script_dir = posixpath.dirname(path)
    for line in text.splitlines():
        line = (
            "" if line.lstrip().startswith("#") else shellwords.DECORATION.sub("", line)
        )  # YAML, JSON, TOML around it
        line = shellwords.BESIDE.sub(lambda _: reading.script_dir or ".", line).strip().strip("\"',{}[]")
        if line:
            reading.command(line, f"run by {name}, which git runs")
    reading.script_dir = None


def _listing(folder: str) -> list[str]:
    try:
        return sorted(os.listdir(folder))[:MAX_SCRIPTS]
    except OSError:
        return []


def _files_in(folder: str) -> list[str]:
    """The paths of the first ``MAX_SCRIPTS`` entries of ``folder`` by name (none if it cannot be listed)."""
    return [posixpath.join(folder, name) for name in _listing(folder)]


def _links_along(full: str) -> tuple[list[str], str]:
    """The symlinks met on the way to ``full`` (each as the path where it was met) and where the way ends."""
    links: list[str] = []
    done, todo = "/", [part for part in full.split("/") if part]
    hops = 0
    while todo:
        part = todo.pop(0)
        if part == "..":
            done = posixpath.dirname(done)
            continue
        here = posixpath.join(done, part)
        try:
            target = os.readlink(here)
        except OSError:  # not a link (or not there): the way goes on as written
            done = here
            continue
        hops += 1
        if hops > 40:
            break
        links.append(here)
        if target.startswith("/"):
            done = "/"
        todo = [p for p in target.split("/") if p not in ("", ".")] + todo
    return links, posixpath.normpath(posixpath.join(done, *todo))


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
    """git's output; None when git is missing or fails."""
    done = _run_git(cwd, home, *args)
    if done is None or done.returncode != 0:
        return None
    return done.stdout[:MAX_CONFIG_BYTES].decode("utf-8", "surrogateescape")


def _run_git(cwd: Path, home: str, *args: str) -> subprocess.CompletedProcess[bytes] | None:
    """git in a fixed environment (HOME ``home``, for the global config; none of the controller's GIT_*
    variables); None when git is not installed or does not answer."""
    env = {"PATH": _PATH, "LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0", "HOME": home}
    try:
        return subprocess.run(
            ["git", "-c", "safe.directory=*", *args],
            cwd=cwd,
            env=env,
            capture_output=True,
            timeout=TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except FileNotFoundError:
        log.debug("git is not installed: only the hook managers' files are trusted")
    except (OSError, subprocess.TimeoutExpired) as err:
        log.warning("could not read git's configuration of %s: %s", cwd, err)
    return None
