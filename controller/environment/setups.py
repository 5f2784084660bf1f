"""The environment's setup step: run once per environment and inputs, kept as a read-only layer.

The setup command runs in a container of its own, from the environment's image, as the
repository's owner, with its own network policy, over an overlay whose lower layer is
the checkout and whose upper layer is this module's *setup tree*. When it succeeds, the
tree becomes a lower layer of every session on that environment (``lowerdir=tree:repo``,
see ``workspace.layer.set_setup``): the agent uses what setup installed (a virtualenv in
the workspace, say), its writes still go to its own layer, and nothing setup made is
ever listed as a change to apply.

What setup may leave: new paths only. It must not shadow the checkout, so after it runs
every entry of the tree that replaces, deletes or hides an entry of the checkout is
dropped (and named in the output): a later edit of that file by the user then shows
through, as it should. Directories the checkout has stay, merged.

A tree is keyed by everything that decides what setup does (see ``cachekeys.setup_key``); a later
session with the same key skips setup. A remote repository's tree is keyed by its URL, not by the
commit's tree it was made on, so a later commit reuses it unless the tree would hide one of that
commit's own files (``shadowing``). Layout, under ``<data_dir>/environments/setups/``::

    <key>/tree  <key>/work   the overlay's upper and work directories
    <key>/setup.json         written last: the tree is complete (absent: a half run, redone)
    <key>.lock               held while a setup runs, so two sessions never run the same one
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import stat
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from docker.errors import DockerException, NotFound
from docker.types import Mount
from docker.utils.socket import frames_iter
from pydantic import BaseModel, ConfigDict

from ..errors import SetupError
from ..sandbox import docker as sandbox
from ..sandbox import owners
from ..sandbox.egress import Route
from ..wire.envspec import keeping_path
from ..wire.limits import Limits
from ..workspace import Layer, beneath
from ..workspace.changes import OPAQUE
from ..workspace.layer import discard_dir, lower_link, overlay_options
from ..workspace.records import save

MAX_LINE_CHARS = 2000
MAX_EVENT_LINES = 5000  # lines of setup output sent as events; the rest is counted, and the tail kept
TAIL_LINES = 30  # lines of output a failure quotes

Output = Callable[[str], Awaitable[None]]
"""Receives the setup's output, a few whole lines at a time (untrusted text)."""


class SetupRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str
    command: str
    seconds: float
    dropped: list[str] = []  # entries of the checkout the setup changed; not kept


def setups_dir(data_dir: Path) -> Path:
    return data_dir / "environments" / "setups"


class Setups:
    """The setup trees of one data directory: find a finished one, or run the setup to make it."""

    def __init__(self, data_dir: Path, clear_as_root: Callable[[Path], None]) -> None:
        self.root = setups_dir(data_dir)
        self._clear_as_root = clear_as_root

    def tree(self, key: str) -> Path:
        return self.root / key / "tree"

    def finished(self, key: str) -> bool:
        return (self.root / key / "setup.json").is_file()

    async def ensure(self, client: Any, key: str, run: SetupRun, output: Output, note: Output) -> Path:
        """The finished tree for ``key``: reused when there, else made by running the setup (SetupError on failure).

        ``output`` gets the command's output; ``note`` Cubicle's own lines about it, which the command cannot forge.
        """
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        async with self._locked(key):
            if not self.finished(key):
                await self._make(client, key, run, output, note)
        return self.tree(key)

    @contextlib.asynccontextmanager
    async def _locked(self, key: str) -> Any:
        fd = os.open(self.root / f"{key}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            await asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    async def _make(self, client: Any, key: str, run: SetupRun, output: Output, note: Output) -> None:
        home = self.root / key
        await asyncio.to_thread(self._remove, home)  # a half run of before
        home.mkdir(mode=0o700)
        tree, work = home / "tree", home / "work"
        work.mkdir(mode=0o700)
        tree.mkdir(mode=0o700)
        info = run.layer.info
        if os.geteuid() == 0:
            os.chown(tree, info.uid, info.gid)
        os.chmod(tree, stat.S_IMODE(os.stat(info.repo).st_mode) & 0o777)
        started = time.monotonic()
        try:
            await run.execute(client, overlay_options([lower_link(run.layer)], tree, work), output, note)
        except BaseException:
            await asyncio.to_thread(self._remove, home)
            raise
        dropped = await asyncio.to_thread(keep_only_new, tree, run.layer.repo)
        if dropped:
            shown = ", ".join(dropped[:10]) + (f" and {len(dropped) - 10} more" if len(dropped) > 10 else "")
            await note(f"setup changed paths of the repository; those changes are not kept: {shown}\n")
        record = SetupRecord(key=key, command=run.setup.command, seconds=time.monotonic() - started, dropped=dropped)
        save(home / "setup.json", record)

    def _remove(self, home: Path) -> None:
        if discard_dir(home):
            self._clear_as_root(home)
            discard_dir(home)

    def in_use(self, layers_root: Path) -> set[str]:
        """Keys of the trees some session's layer sits on (``layer.json`` names its tree)."""
        used: set[str] = set()
        for info in layers_root.glob("*/layer.json"):
            with contextlib.suppress(OSError, ValueError):
                tree = json.loads(info.read_text()).get("setup")
                if tree and Path(tree).parent.parent == self.root:
                    used.add(Path(tree).parent.name)
        return used

    def sweep(self, layers_root: Path) -> list[str]:
        """Remove the trees no session uses (and half-made ones no setup is making); returns their keys."""
        if not self.root.is_dir():
            return []
        used = self.in_use(layers_root)
        removed = []
        for home in self.root.iterdir():
            if not home.is_dir() or home.name in used:
                continue
            fd = os.open(self.root / f"{home.name}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a setup is running into it
                self._remove(home)
                removed.append(home.name)
            finally:
                os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(self.root / f"{home.name}.lock")
        return removed


@dataclass(frozen=True)
class SetupCommand:
    """What a setup runs: ``command`` (by ``bash -lc``) in ``image`` with ``env``, stopped after ``timeout_s``."""

    command: str
    image: str
    env: dict[str, str]
    timeout_s: float


class SetupRun:
    """One run of the setup command in a throwaway container; the output streamed, bounded in time and size."""

    def __init__(
        self, *, layer: Layer, setup: SetupCommand, route: Route, limits: Limits, instance: str, session_id: str
    ) -> None:
        self.layer = layer
        self.setup = setup
        self.route = route
        self.limits = limits
        self.instance = instance
        self.session_id = session_id
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)

    @property
    def volume(self) -> str:
        return f"cubicle-setup-{self.session_id}"

    async def execute(self, client: Any, options: str, output: Output, note: Output) -> None:
        """Run the command to its end; SetupError with the output's last lines if it fails or times out."""
        labels = owners.labels(self.instance, self.session_id)
        container: Any = None
        try:
            await asyncio.to_thread(self._make_volume, client, options, labels)
            container = await asyncio.to_thread(client.containers.create, **self._options(labels))
            code = await self._follow(client, container, output, note)
        except DockerException as err:
            raise SetupError(f"The setup container could not run: {err}") from None
        finally:
            if container is not None:
                with contextlib.suppress(DockerException):
                    await asyncio.to_thread(container.remove, force=True, v=True)
            await sandbox.remove_named_volume(client, self.volume)
        if code is None:
            raise SetupError(
                self._failure(f"The setup command ran longer than {self.setup.timeout_s:.0f}s and was stopped")
            )
        if code != 0:
            raise SetupError(self._failure(f"The setup command failed (exit code {code})"))

    def _failure(self, what: str) -> str:
        tail = "".join(self.tail).rstrip()
        return f"{what}: {self.setup.command}" + (f"\nIts last lines:\n{tail}" if tail else "")

    def _make_volume(self, client: Any, options: str, labels: dict[str, str]) -> None:
        with contextlib.suppress(NotFound):
            client.volumes.get(self.volume).remove(force=True)
        client.volumes.create(**sandbox.overlay_volume(self.volume, options, labels))

    def _options(self, labels: dict[str, str]) -> dict[str, Any]:
        """The sandbox's own hardening and network (``sandbox.container_options``, with the setup's policy and
        route), on the setup's overlay, running the command instead of the toolbox."""
        options = sandbox.container_options(self.setup.image, self.layer, self.limits, labels, self.route)
        workspace = Mount(sandbox.WORKSPACE, self.volume, type="volume", no_copy=True)
        mounts = [workspace if m["Target"] == sandbox.WORKSPACE else m for m in options["mounts"]]
        options.update(
            command=["/bin/bash", "-lc", keeping_path(self.setup.command, self.setup.env)],
            stdin_open=False,
            mounts=mounts,
            environment={**self.setup.env, **options["environment"]},
        )
        return options

    async def _follow(self, client: Any, container: Any, output: Output, note: Output) -> int | None:
        """Start the container and pass its output on; its exit code, or None when it ran out of time."""
        loop = asyncio.get_running_loop()
        lines: asyncio.Queue[str | None] = asyncio.Queue()
        attached = await asyncio.to_thread(
            client.api.attach_socket, container.id, {"stdout": 1, "stderr": 1, "stream": 1}
        )
        sock = sandbox.raw_socket(attached)

        def pump() -> None:
            try:
                for line in _lines(data for _, data in frames_iter(sock, False)):
                    loop.call_soon_threadsafe(lines.put_nowait, line)
            except Exception:  # noqa: BLE001 - the stream ends however the container ends
                pass
            finally:
                loop.call_soon_threadsafe(lines.put_nowait, None)

        await asyncio.to_thread(container.start)
        threading.Thread(target=pump, daemon=True, name=f"setup-{self.session_id}").start()
        try:
            async with asyncio.timeout(self.setup.timeout_s):
                await self._relay(lines, output, note)
                result = await asyncio.to_thread(container.wait)
        except TimeoutError:
            return None
        finally:
            sock.close()
        return int(result.get("StatusCode", -1))

    async def _relay(self, lines: asyncio.Queue[str | None], output: Output, note: Output) -> None:
        sent = hidden = 0
        while (line := await lines.get()) is not None:
            self.tail.append(line)
            batch = [line]
            while not lines.empty() and len(batch) < 200:
                more = lines.get_nowait()
                if more is None:
                    lines.put_nowait(None)
                    break
                self.tail.append(more)
                batch.append(more)
            room = max(0, MAX_EVENT_LINES - sent)
            if room:
                await output("".join(batch[:room]))
            sent += min(room, len(batch))
            hidden += max(0, len(batch) - room)
        if hidden:
            await note(f"{hidden} more lines of setup output not shown\n")


def _lines(chunks: Any) -> Iterator[str]:
    """Whole lines from a stream of byte chunks (invalid UTF-8 replaced), each cut to ``MAX_LINE_CHARS``."""
    pending = b""
    for chunk in chunks:
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for raw in complete:
            yield raw[:MAX_LINE_CHARS].decode("utf-8", "replace") + "\n"
        if len(pending) > MAX_LINE_CHARS:
            yield pending[:MAX_LINE_CHARS].decode("utf-8", "replace") + "\n"
            pending = b""
    if pending:
        yield pending.decode("utf-8", "replace") + "\n"


def keep_only_new(tree: Path, repo: Path) -> list[str]:
    """Drop from the setup tree whatever would replace, delete or hide an entry of the checkout.

    Kept: entries the checkout lacks, and directories it has too (merged). Dropped: a whiteout
    (a deletion), a file, link or other entry where the checkout has something, and the
    opaque marker of a directory (which would hide the checkout's entries below it).
    Returns the dropped paths.
    """
    return _compared(tree, repo, remove=True)


def shadowing(tree: Path, repo: Path) -> list[str]:
    """What a finished setup tree, made over another checkout, would replace, delete or hide of ``repo`` (as
    ``keep_only_new`` names them), leaving the tree as it is. Empty when the tree fits ``repo``: a new commit of a
    remote that added a file where the setup made one must not see the setup's in its place."""
    return _compared(tree, repo, remove=False)


def _compared(tree: Path, repo: Path, remove: bool) -> list[str]:
    found: list[str] = []
    top = beneath.open_root(tree)
    low = beneath.open_root(repo)
    try:
        _prune(top, low, "", found, depth=0, remove=remove)
    finally:
        os.close(top)
        os.close(low)
    return found


def _prune(fd: int, low: int, prefix: str, dropped: list[str], depth: int, remove: bool) -> None:
    with os.scandir(fd) as it:
        entries = sorted((e.name, e.stat(follow_symlinks=False)) for e in it)
    for name, st in entries:
        path = prefix + name
        below = _lstat(low, path)
        if below is None:
            continue  # new: kept whole
        if stat.S_ISDIR(st.st_mode) and stat.S_ISDIR(below.st_mode) and depth < 256:
            child = beneath.open_dir(fd, name)
            try:
                if _marked(child, OPAQUE):
                    if remove:
                        os.removexattr(child, OPAQUE)
                    dropped.append(path + "/ (emptied)")
                _prune(child, low, path + "/", dropped, depth + 1, remove)
            finally:
                os.close(child)
            continue
        if remove:
            beneath.remove_tree(fd, name)
        dropped.append(path)


def _lstat(fd: int, rel: str) -> os.stat_result | None:
    try:
        return beneath.lstat(fd, rel)
    except OSError:
        return None


def _marked(fd: int, name: str) -> bool:
    try:
        os.getxattr(fd, name)
    except OSError:
        return False
    return True


__all__ = ["SetupCommand", "SetupRecord", "SetupRun", "Setups", "keep_only_new", "shadowing"]
