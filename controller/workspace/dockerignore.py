"""A build context's ``.dockerignore``, matched as the Docker SDK's ``PatternMatcher`` does, on RE2.

The SDK parses each line (``!`` for an exception, ``.`` and ``..`` cleaned away) and turns it into a
regular expression that Python's ``re`` runs with backtracking: a remote's line of ``*a`` repeated, then
``*b``, takes years on a 40-character name. Here the same parse and the same expression run on RE2, whose
time is linear in the path whatever the line. As in the SDK, a line and a name are compared in lower case,
and a path matches a line when it or the directory above it of the line's depth does.
"""

from __future__ import annotations

import os
from typing import Any

from .ignore import MAX_LINE_CHARS, MAX_WILDCARDS, bounded, matchable


class DockerIgnore:
    """A ``.dockerignore``'s lines, compiled once; ``matches`` answers whether a context path is left out."""

    def __init__(self, lines: list[str]) -> None:
        """Raises ValueError naming a line over ``MAX_LINE_CHARS`` characters or ``MAX_WILDCARDS`` wildcards (the
        SDK's translation takes time in the square of a line's length), or one RE2 cannot compile."""
        import re2
        from docker.utils.build import Pattern  # here: importing the SDK is slow, and a listing rarely needs it
        from docker.utils.fnmatch import translate

        options = re2.Options()
        options.log_errors = False
        options.never_capture = True
        self._patterns: list[tuple[bool, int, Any]] = []
        for number, line in enumerate([*lines, "!.dockerignore"], 1):
            if not bounded(line):
                raise ValueError(
                    f"line {number} of the .dockerignore ({line[:80]!r}...) is over {MAX_LINE_CHARS} characters"
                    f" or {MAX_WILDCARDS} wildcards"
                )
            pattern = Pattern(line)
            if not pattern.dirs:
                continue
            try:
                regex = re2.compile(matchable(translate(pattern.cleaned_pattern.lower())), options)
            except re2.error:
                raise ValueError(f"line {number} of the .dockerignore ({line[:80]!r}) cannot be matched") from None
            self._patterns.append((pattern.exclusion, len(pattern.dirs), regex))

    def matches(self, path: str) -> bool:
        """Whether ``path`` (context-relative, ``/``-separated) is left out: the last line that matches decides."""
        from docker.utils.build import split_path

        name = matchable(path.lower())
        parent = os.path.dirname(name)
        parents = split_path(parent) if parent else []
        matched = False
        for exclusion, depth, regex in self._patterns:
            match = regex.match(name) is not None
            if not match and parents and depth <= len(parents):
                match = regex.match("/".join(parents[:depth])) is not None
            if match:
                matched = not exclusion
        return matched
