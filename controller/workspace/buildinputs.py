"""The files of the checkout an environment's next build or setup runs, as the layer judges changes against them.

``controller.environment.inputs`` finds them when the session starts; a change to one is
never an ordinary change: a named input (a ``COPY`` source, a setup input) is ``trusted``,
applied only when forced by name, and a path of a build context the Dockerfile copies whole is
``build_input``, applied only with one acknowledgement for all of them (``--build-inputs``).
"""

from __future__ import annotations

import fnmatch
import functools
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from .dockerignore import DockerIgnore


class BuildInputs(BaseModel):
    """Repo-relative globs with their reasons, and the context copied whole (with what its .dockerignore leaves out)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    patterns: tuple[tuple[str, str], ...] = ()
    context: str | None = None
    ignore: tuple[str, ...] = ()

    def why(self, path: str, is_dir: bool) -> str | None:
        """Why ``path`` is a named build input: it or a directory holding it matches a glob, or (not as a
        directory) it lies on the way to one, where a link would lead the build elsewhere."""
        for pattern, reason in self.patterns:
            # fnmatch's * crosses "/": "PATTERN/*" matches whatever lies below a match, at any depth
            if fnmatch.fnmatchcase(path, pattern) or fnmatch.fnmatchcase(path, pattern + "/*"):
                return reason
            if not is_dir and pattern.startswith(path + "/"):
                return reason
        return None

    def copied_whole(self, path: str) -> bool:
        """Whether ``path`` is in the build context the Dockerfile copies whole, and not left out by its .dockerignore."""
        if self.context is None:
            return False
        if self.context:
            if not path.startswith(self.context + "/"):
                return False
            path = path[len(self.context) + 1 :]
        matcher = _matcher(self.ignore)
        return matcher is None or not matcher.matches(path)


@functools.lru_cache(maxsize=16)
def _matcher(ignore: tuple[str, ...]) -> DockerIgnore | None:
    """A .dockerignore's patterns, compiled once for every path of a listing (Docker's rules, matched in linear
    time: the lines may be a remote's; imported here, as importing ``docker.utils`` loads the whole SDK, which a
    listing without a build context never needs)."""
    from .dockerignore import DockerIgnore

    try:
        return DockerIgnore(list(ignore))
    except ValueError:  # a line RE2 cannot compile: the build refuses it; here nothing counts as left out
        return None
