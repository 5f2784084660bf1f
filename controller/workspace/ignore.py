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
