"""The repository's own ignore rules, parsed in-process.

Running ``git check-ignore`` would hand the decision to whatever ``.git/config`` says;
here the rules are the ``.gitignore`` files and ``.git/info/exclude`` as they were when
the session started (recorded with the baseline), matched with ``pathspec``'s gitwildmatch.
Precedence follows git: a deeper ``.gitignore`` overrides a shallower one, ``info/exclude``
sits below the root ``.gitignore``, the last matching line in a file wins, and nothing
inside an ignored directory can be re-included.
"""

from __future__ import annotations

EXCLUDE = ".git/info/exclude"  # key under which info/exclude is recorded; it applies at the root


class IgnoreRules:
    """Matches paths against ignore files keyed by the directory they sit in ('' is the root)."""

    def __init__(self, files: dict[str, str]) -> None:
        from pathspec import GitIgnoreSpec  # here: only a walk reads the rules, and the module is slow to import

        ordered = sorted(files.items(), key=lambda item: _rank(item[0]))
        self._specs = [(_base(key), GitIgnoreSpec.from_lines(text.splitlines())) for key, text in ordered]
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
            include = spec.check_file(rel + "/" if is_dir else rel).include
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
    from pathspec import GitIgnoreSpec

    lines = text.splitlines()
    if any(sum(line.count(c) for c in "*?[") > MAX_TOOL_WILDCARDS for line in lines):
        return None
    try:
        GitIgnoreSpec.from_lines(lines)
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
