"""Reading a repository's files for its environment: every path resolves inside the real checkout, or it is refused.

The repository is attacker-influenced: a definition file, a Dockerfile or a build context
may be a symlink to anywhere on the host, a FIFO that blocks whoever opens it, or a file of
gigabytes. So a path is resolved (every symlink followed) and must land inside the
repository's real root; the file opened must be a regular file, opened without following a
final symlink and without blocking, and is read only up to a limit.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..errors import DefinitionError
from ..wire.envspec import normalize

READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
MAX_DEFINITION_BYTES = 256 * 1024
"""A definition file (TOML or JSONC) larger than this is refused."""
MAX_DOCKERFILE_BYTES = 1024 * 1024


def where(file: str, key: str | None = None) -> str:
    """How an error names its place: the file, and the key in it when there is one."""
    return f"{file}, key {key!r}" if key else file


def real_root(repo: Path) -> Path:
    """The repository's real directory (its own symlinks resolved)."""
    root = Path(os.path.realpath(repo))
    if not root.is_dir():
        raise DefinitionError(f"{repo} is not a directory.")
    return root


def is_inside(root: Path, full: str) -> bool:
    text = str(root)
    return full == text or full.startswith(text.rstrip("/") + "/")


MAX_LINKS = 40
"""The kernel's own bound: a path needing more symbolic links than this is refused (the kernel says ELOOP)."""


def links_along(root: Path, rel: str) -> list[str]:
    """Every symlink inside ``root`` met while resolving ``rel`` (each by where it lies, repo-relative), in order.

    A definition file reached through ``build -> docker`` is as much decided by ``build`` as by the file: an agent
    that retargets the link has rewritten the file, so the links count among what the definition reads. The walk
    is ``os.path.realpath``'s, step for step (that is how ``resolve`` finds the files the definition reads): a
    missing component taken as it is written, a loop left where it closes; and past ``MAX_LINKS`` links a
    ValueError (``resolve`` refuses such a path; realpath itself would recurse until Python gives up)."""
    walk = _LinkWalk(root, rel)
    walk.walk(str(root), rel)
    return walk.found


class _LinkWalk:
    """One ``links_along``: the links found so far, the hops taken, and where each link met has led."""

    def __init__(self, root: Path, rel: str) -> None:
        self.root = root
        self.rel = rel
        self.found: list[str] = []
        self.hops = 0
        self.seen: dict[str, str | None] = {}  # a link's resolved path; None while it is being resolved (a loop)

    def walk(self, path: str, rest: str) -> tuple[str, bool]:
        """Resolve ``rest`` from directory ``path``: where it leads, and False when it ended in a loop."""
        if rest.startswith("/"):
            path, rest = "/", rest.lstrip("/")
        for name in rest.split("/"):
            if name in ("", "."):
                continue
            if name == "..":
                path = os.path.dirname(path) or "/"
                continue
            candidate = os.path.join(path, name)
            if not _is_link(candidate):
                path = candidate
                continue
            if candidate in self.seen:
                resolved = self.seen[candidate]
                if resolved is None:
                    return candidate, False  # a loop: realpath stops here too
                path = resolved
                continue
            path, ok = self.follow(path, candidate)
            if not ok:
                return path, False
        return path, True

    def follow(self, path: str, link: str) -> tuple[str, bool]:
        """Resolve ``link`` (met in directory ``path``) as ``walk`` does, counting it against ``MAX_LINKS`` and
        noting it when it lies inside the root."""
        self.hops += 1
        if self.hops > MAX_LINKS:
            raise ValueError(f"{self.rel!r} passes through more than {MAX_LINKS} symbolic links")
        if is_inside(self.root, link) and link != str(self.root):
            self.found.append(Path(link).relative_to(self.root).as_posix())
        self.seen[link] = None
        path, ok = self.walk(path, os.readlink(link))
        if ok:
            self.seen[link] = path
        return path, ok


def _is_link(path: str) -> bool:
    """Whether ``path`` is a symlink; a path that cannot be looked at is taken as it is written, as realpath does."""
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return False


def relative(value: str, *, file: str, key: str, base: str = ".", allow_root: bool = False) -> str:
    """``normalize``, with a DefinitionError naming the file and key."""
    try:
        return normalize(value, base=base, allow_root=allow_root)
    except ValueError as err:
        raise DefinitionError(f"{where(file, key)}: {err}.") from None


def resolve(root: Path, rel: str, *, file: str, key: str | None = None) -> Path:
    """The real path of repo-relative ``rel``: every symlink followed (at most ``MAX_LINKS``), and the result inside
    ``root``."""
    try:
        links_along(root, rel)
    except ValueError as err:
        raise DefinitionError(f"{where(file, key)}: {err}.") from None
    full = os.path.realpath(os.path.join(root, rel))
    if not is_inside(root, full):
        raise DefinitionError(
            f"{where(file, key)}: {rel!r} resolves to {full}, outside the repository; "
            "a definition, Dockerfile or build context must stay inside it."
        )
    return Path(full)


def read_regular(path: Path, limit: int, *, file: str, key: str | None = None) -> bytes:
    """The bytes of the regular file at ``path`` (already resolved), at most ``limit`` of them."""
    try:
        fd = os.open(path, READ_FLAGS)
    except FileNotFoundError:
        raise DefinitionError(f"{where(file, key)}: {path} does not exist.") from None
    except OSError as err:
        raise DefinitionError(f"{where(file, key)}: {path} cannot be opened: {err.strerror}.") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise DefinitionError(f"{where(file, key)}: {path} is not a regular file.")
        if info.st_size > limit:
            raise DefinitionError(f"{where(file, key)}: {path} is {info.st_size} bytes; at most {limit} are read.")
        os.set_blocking(fd, True)
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, min(1 << 16, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:
            raise DefinitionError(f"{where(file, key)}: {path} is larger than {limit} bytes.")
        return b"".join(chunks)
    except OSError as err:
        raise DefinitionError(f"{where(file, key)}: {path} cannot be read: {err.strerror}.") from None
    finally:
        os.close(fd)


def read_text(root: Path, rel: str, limit: int, *, file: str, key: str | None = None) -> str:
    """A repo-relative text file, resolved inside the repository, decoded as UTF-8."""
    data = read_regular(resolve(root, rel, file=file, key=key), limit, file=file, key=key)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise DefinitionError(
            f"{where(file, key)}: {rel} is not UTF-8 text ({err.reason} at byte {err.start})."
        ) from None
