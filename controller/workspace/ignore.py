"""The repository's own ignore rules, parsed in-process.

Running ``git check-ignore`` would hand the decision to whatever ``.git/config`` says;
here the rules are the ``.gitignore`` files and ``.git/info/exclude`` as they were when
the session started (recorded with the baseline), matched with ``pathspec``'s gitwildmatch.
Precedence follows git: a deeper ``.gitignore`` overrides a shallower one, ``info/exclude``
sits below the root ``.gitignore``, the last matching line in a file wins, and nothing
inside an ignored directory can be re-included.

A remote's ignore files are written by whoever controls the remote, so no line may make a match slow: the
patterns run on RE2 (pathspec's ``re2`` backend), which matches in time linear in the path whatever the
pattern, where Python's ``re`` backtracks (one line of ``*a`` sixteen times, then ``*b``, would take years
on a 40-character name). Compiling costs time in a line's size, so a line over ``MAX_LINE_CHARS`` characters
or ``MAX_WILDCARDS`` wildcards (written only to attack) is not compiled: it hides nothing, and one that
re-includes (``!``) re-includes everything below its file's directory, so what the line would decide is
listed, never lost. Lines are compiled ``CHUNK_LINES`` at a time (RE2 holds a bounded program); a line RE2
still cannot hold alone is left out the same way.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathspec import GitIgnoreSpec

EXCLUDE = ".git/info/exclude"  # key under which info/exclude is recorded; it applies at the root
CHUNK_LINES = 256
"""Lines compiled into one RE2 set: a few hundred fit its memory budget, a few thousand may not."""
MAX_LINE_CHARS = 4096
"""PATH_MAX: a longer line with few wildcards names no path a checkout can hold."""
MAX_WILDCARDS = 16
"""Wildcards (``*``, ``?``, ``[``) of a compiled line: a real one has a few; RE2 matches any number in linear time,
but compiling thousands takes seconds, and the Docker SDK's translation of a line takes time in its square."""
_SURROGATE = re.compile("[\ud800-\udfff]")


def matchable(text: str) -> str:
    """``text`` as RE2 can take it: a byte that was not UTF-8 (surrogate-escaped) becomes U+FFFD, still one
    character, so ``?`` and ``*`` count it as before."""
    return text if text.isascii() else _SURROGATE.sub("\ufffd", text)


def bounded(line: str) -> bool:
    """Whether a line is small enough to compile: at most ``MAX_LINE_CHARS`` characters, ``MAX_WILDCARDS`` wildcards."""
    return len(line) <= MAX_LINE_CHARS and sum(line.count(c) for c in "*?[") <= MAX_WILDCARDS


def compile_lines(lines: list[str]) -> list[GitIgnoreSpec]:
    """``lines`` as pathspec gitignore specs matched by RE2, in order. A line over the bounds, or one RE2 cannot
    hold, decides nothing: left out, or ``!*`` in place of a line that re-includes, so it never hides a path."""
    import re2
    from pathspec import GitIgnoreSpec  # here: only a walk reads the rules, and the module is slow to import

    specs: list[GitIgnoreSpec] = []
    for start in range(0, len(lines), CHUNK_LINES):
        chunk = [_compilable(line) for line in lines[start : start + CHUNK_LINES]]
        try:
            specs.append(GitIgnoreSpec.from_lines(chunk, backend="re2"))
        except re2.error:  # a set over RE2's memory budget: one line at a time, leaving out a line that is alone
            for line in chunk:
                try:
                    specs.append(GitIgnoreSpec.from_lines([line], backend="re2"))
                except re2.error:
                    specs.append(GitIgnoreSpec.from_lines([_unbounded(line)], backend="re2"))
    return specs


def _compilable(line: str) -> str:
    return matchable(line) if bounded(line) else _unbounded(line)


def _unbounded(line: str) -> str:
    """What stands for a line that is not compiled: nothing (an empty line), or ``!*`` for a re-inclusion."""
    return "!*" if line.startswith("!") else ""


class IgnoreRules:
    """Matches paths against ignore files keyed by the directory they sit in ('' is the root)."""

    def __init__(self, files: dict[str, str]) -> None:
        ordered = sorted(files.items(), key=lambda item: _rank(item[0]))
        self._specs = [(_base(key), spec) for key, text in ordered for spec in compile_lines(text.splitlines())]
        self._directories: dict[str, bool] = {"": False}
        """Verdicts of directories already asked about: a listing's paths share them, however deep."""

    def ignored(self, path: str, is_dir: bool) -> bool:
        """Whether ``path`` (or a directory above it) is ignored."""
        return self._directory(path.rpartition("/")[0]) or self._match(path, is_dir)

    def _directory(self, path: str) -> bool:
        known = self._directories.get(path)
        if known is None:
            known = self._directories[path] = self._directory(path.rpartition("/")[0]) or self._match(path, True)
        return known

    def _match(self, path: str, is_dir: bool) -> bool:
        verdict: bool | None = None
        for base, spec in self._specs:
            if base and not path.startswith(base + "/"):
                continue
            rel = path[len(base) + 1 :] if base else path
            include = spec.check_file(matchable(rel + "/" if is_dir else rel)).include
            if include is not None:
                verdict = include
        return bool(verdict)


def _base(key: str) -> str:
    return "" if key == EXCLUDE else key


def _rank(key: str) -> tuple[int, int]:
    """info/exclude first, then shallow before deep, so later (deeper) verdicts win."""
    return (-1, 0) if key == EXCLUDE else (0, key.count("/") + bool(key))


# --------------------------------------------------------------------------- what the session's tools write

TOOL_IGNORE = ".gitignore"
MAX_TOOL_IGNORE_BYTES = 4096
"""A tool's own ignore file is a line or two (pytest, mypy, ruff and coverage write ``*`` under a comment)."""
MAX_TOOL_IGNORE_FILES = 256
MAX_TOOL_WILDCARDS = 4
"""Wildcards (``*``, ``?``, ``[``) a line of an agent-written ignore file may hold: its patterns become regular
expressions matched against the agent's own names, so a line of many stars could make a listing crawl."""


def tool_rules_text(data: bytes) -> str | None:
    """The text of an ignore file the session wrote, when it may count (``NewDirectoryRules``): small, UTF-8,
    every line one ``pathspec`` reads with few wildcards. None: it holds nothing back."""
    if len(data) > MAX_TOOL_IGNORE_BYTES:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    lines = text.splitlines()
    if any(sum(line.count(c) for c in "*?[") > MAX_TOOL_WILDCARDS for line in lines):
        return None
    try:
        compile_lines(lines)
    except ValueError:  # pathspec's GitWildMatchPatternError: a line it cannot read
        return None
    return text


class NewDirectoryRules:
    """The ignore files the session's own tools wrote, each in a directory the checkout did not have.

    pytest, mypy, ruff and coverage make a directory (``.pytest_cache``) and write a ``.gitignore`` of ``*`` in it,
    so that git never sees what they keep there. Such a file counts only to hold back more, and only its own
    directory's contents: the directory is new, so everything in it is the session's, and no rule there can reach
    a file the checkout has or another change of the agent's. A ``.gitignore`` the agent writes anywhere else (at
    the top, in a directory the checkout has) counts for nothing: the checkout's rules are the ones recorded when
    the session started, and the review lists every change they do not ignore.
    """

    def __init__(self, files: dict[str, str]) -> None:
        self.directories = frozenset(files)
        self._rules = IgnoreRules(files) if files else None

    def holding(self, path: str, is_dir: bool) -> str | None:
        """The new directory whose ignore file holds ``path`` back; None when none does."""
        parts = path.split("/")
        above = [d for d in ("/".join(parts[:n]) for n in range(1, len(parts))) if d in self.directories]
        if not above or self._rules is None or not self._rules.ignored(path, is_dir):
            return None  # (most paths lie in no such directory: they cost a few lookups, no matching)
        return above[0]
