"""Sessions on a git remote: start, first fetch and push, each beside the local or plain git work it stands in for.

A repository of 20,000 small files (200 directories of 100 files of 60 lines; ``--smoke``: 110 of 3) is generated
and served by the suite's own git server (``bench.gitserver``: nginx, fcgiwrap, git-http-backend, basic auth, on
loopback). The controller's side runs as a server does, with its settings (``CUBICLE_GIT_REMOTES`` naming the
server, ``CUBICLE_GIT_CREDENTIALS``) and a data directory of its own:

* **First fetch**: what ``Origins.fetch`` does into an empty data directory (``gitmirror.mirror`` makes the mirror,
  ``gittree.checkout_tree`` writes the commit's tree and its ``.git``, owned by the agent, with the server's
  options) against a plain ``git clone`` of the same URL, alternating, each into a fresh directory.
* **Session ready**, as the other sections time it (the workspace layer created, the sandbox started until the
  toolbox answers), with what a remote adds before it: ``Origins.fetch`` with the mirror cached and the session's
  pin. Three ways, beside a local clone of the same commit: the tree cached and the mirror fetched less than
  ``fresh_s`` before (no fetch); the tree cached and a fetch that finds nothing new (a session more than ``fresh_s``
  after the last); a new commit pushed upstream just before (the mirror fetches it, its tree is written whole).
* **Push of a 100-file change** made in a real sandbox (60 files modified, 30 added, 10 deleted):
  ``gitpush.session_commit`` + ``gitpush.push`` to a new branch, against ``git add --all`` + ``git commit`` +
  ``git push`` of the same change from a plain clone.

Part of ``python -m bench``; ``python -m bench.remotes`` prints this table alone. Needs the engine, the sandbox image
and Debian's nginx and fcgiwrap.
"""

from __future__ import annotations

import asyncio
import secrets
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import gitserver
from bench.gitserver import GitServer
from bench.measure import Report, Row, Sample, ms, repetitions, smoke
from bench.rows import INSTANCE, LIMITS, give_away, section_main
from bench.workspace import in_sandbox
from controller import workspace
from controller.config import Settings
from controller.sandbox.docker import DockerSandbox
from controller.sandbox.sandboxes import Deployment
from controller.server.origins import Fetched, Origins
from controller.wire.bodies import RemoteRepo
from controller.workspace import gitmirror, gitpush, gittree
from controller.workspace.gitmirror import MirrorOptions

NAME = "bench"
PASSWORD = "bench-" + secrets.token_hex(8)
AUTHOR = ("Cubicle Bench", "bench@cubicle.invalid")
READY_TARGET = 1.3
"""A session on a URL whose mirror is cached is ready within this multiple of a session on a local checkout."""
CLONE_TARGET = 1.2
"""A first fetch (mirror and tree) within this multiple of a plain ``git clone``."""

CHANGE_100 = r"""
import os, sys
nonce = sys.argv[1]
for i in range(60):
    with open(f"pkg{i:03d}/mod001.py", "a") as f:
        f.write(f"# changed by {nonce}\n")
for i in range(30):
    with open(f"pkg{i:03d}/new_{nonce}.py", "w") as f:
        f.write(f"print({nonce!r})\n" * 20)
for i in range(10):
    os.remove(f"pkg{100 + i:03d}/mod002.py")
"""
"""The 100 changes of the push rows (``nonce``: each push's bytes differ, so no push finds them at the remote)."""


def sizes() -> tuple[int, int]:
    """Directories and files per directory: 20,000 files, or 330 in smoke mode (the change needs 110 and 3)."""
    return (110, 3) if smoke() else (200, 100)


def generate(root: Path) -> Path:
    """The repository's files (no ``.git``: the server makes the commit)."""
    dirs, per_dir = sizes()
    source = root / "source"
    for d in range(dirs):
        folder = source / f"pkg{d:03d}"
        folder.mkdir(parents=True)
        for f in range(per_dir):
            (folder / f"mod{f:03d}.py").write_text("".join(f"line {i} of {d}/{f}\n" for i in range(60)))
    return source


@dataclass
class Remote:
    """The served repository and a controller's view of it: its settings and what fetches it."""

    server: GitServer
    url: str
    credentials: Path
    root: Path

    def settings(self, data_dir: Path) -> Settings:
        return Settings(
            data_dir=data_dir,
            git_credentials=self.credentials,
            git_remotes=[f"http://127.0.0.1:{self.server.port}/private/*"],
        )

    def options(self, settings: Settings) -> MirrorOptions:
        """How the server's fetches and pushes reach the URL (``Origins``'s options; a literal address needs no pin)."""
        return MirrorOptions(
            credentials=self.credentials,
            max_bytes=settings.git_max_bytes,
            connect_timeout_s=settings.git_connect_timeout_s,
            timeout_s=settings.git_timeout_s,
        )

    def clone(self, into: Path) -> Path:
        """A plain ``git clone`` of the URL (the password in the URL, as a user's own clone may have it)."""
        authed = self.url.replace("http://", f"http://{gitserver.USER}:{PASSWORD}@")
        self.git("clone", "--quiet", authed, str(into))
        return into

    def git(self, *args: str, cwd: Path | None = None) -> None:
        env = gitserver.plain_git_env(self.root / "home")
        subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, timeout=1800)


async def first_fetch(report: Report, remote: Remote, rounds: int) -> Path:
    """The first fetch beside ``git clone``, alternating (one of each untimed first); a data directory whose
    mirror and tree are made, for the next rows."""
    ours: list[tuple[float, float]] = []
    plain: list[float] = []
    kept = remote.root / "data"
    for i in range(rounds + 1):
        data, clone = remote.root / f"first-{i}", remote.root / f"clone-{i}"
        for which in ("ours", "plain") if i % 2 == 0 else ("plain", "ours"):
            if which == "ours":
                took = await asyncio.to_thread(_first_fetch, remote, data)
                if i > 0:  # the first round warms the server's files and git's code
                    ours.append(took)
            else:
                start = time.perf_counter()
                await asyncio.to_thread(remote.clone, clone)
                if i > 0:
                    plain.append(time.perf_counter() - start)
        shutil.rmtree(clone)
        if i < rounds:
            shutil.rmtree(data)
        else:
            data.rename(kept)
    files = sizes()[0] * sizes()[1]
    ours_s, plain_s = Sample([a + b for a, b in ours]), Sample(plain)
    met = report.check(
        ours_s.p50 <= CLONE_TARGET * plain_s.p50,
        f"first fetch of a {files:,}-file repository {ms(ours_s.p50)} > {CLONE_TARGET} × git clone {ms(plain_s.p50)}",
    )
    report.rows.append(
        Row(
            f"first fetch of a {files:,}-file repository (mirror + tree)",
            ours_s,
            "git clone of the same URL",
            plain_s,
            f"≤ {CLONE_TARGET}×",
            met,
            key="first fetch (mirror + tree)",
        )
    )
    split = [ms(Sample([t[k] for t in ours]).p50) for k in (0, 1)]
    report.extra.append(
        (
            "Of which the mirror and the tree, p50",
            ["", "gitmirror.mirror", "gittree.checkout_tree"],
            [["first fetch (mirror + tree)", *split]],
        )
    )
    return kept


def _first_fetch(remote: Remote, data: Path) -> tuple[float, float]:
    """What ``Origins.fetch`` does on a URL it has never fetched, with the server's options: the mirror made, the
    commit's tree written; the seconds of each."""
    settings = remote.settings(data)
    start = time.perf_counter()
    found = gitmirror.mirror(data, remote.url, "main", remote.options(settings))
    mirrored = time.perf_counter()
    gittree.checkout_tree(
        data, found.path, found.commit, gittree.TreeOptions(owner=settings.git_owner, max_bytes=settings.git_max_bytes)
    )
    return mirrored - start, time.perf_counter() - mirrored


async def start(client: Any, image: str, layers: Path, repo: Path, session_id: str) -> DockerSandbox:
    """A session's start on ``repo`` as the other sections time it: its layer made, its sandbox answering."""
    layer = workspace.create(layers, session_id, repo)
    box = DockerSandbox(
        lambda: client, layer=layer, session_id=session_id, limits=LIMITS, deployment=Deployment(image, INSTANCE)
    )
    await box.start()
    return box


def fetched_at(mirror: Path, when: float) -> None:
    """Date the mirror's last fetch ``when``: 0 for a session a while after the last one (more than ``fresh_s``),
    now for a session right after another (``mirror`` then fetches nothing)."""
    (mirror / gitmirror.STAMP).write_text(f"{when}\n")


async def ready(report: Report, client: Any, image: str, remote: Remote, data: Path, rounds: int) -> None:
    """Session ready on the URL three ways, and on a local clone of the same commit, round by round."""
    remotes = Origins(remote.settings(data))
    asked = RemoteRepo(url=remote.url, ref="main")
    fetched = await remotes.fetch(asked)
    local = remote.clone(remote.root / "local")
    give_away(local)  # sessions refuse a root-owned checkout; the remote's trees are the agent's already
    layers = remote.root / "layers"
    names = ("fresh", "cached", "new", "local")
    times: dict[str, list[float]] = {name: [] for name in names}
    fetches: dict[str, list[float]] = {name: [] for name in names[:3]}
    for i in range(rounds + 1):
        for name in names[i % 4 :] + names[: i % 4]:  # each takes each place in turn
            if name == "new":
                content = f"changed in round {i}\n".encode()
                remote.server.commit(NAME, {"pkg000/mod000.py": content}, f"Round {i}")
            fetched_at(fetched.mirror, time.time() if name == "fresh" else 0)
            session_id = f"bench-remote-{secrets.token_hex(4)}"
            start_at = time.perf_counter()
            got = fetched
            if name == "local":
                repo, took_fetch = local, 0.0
            else:
                got = await remotes.fetch(asked)
                took_fetch = time.perf_counter() - start_at
                await asyncio.to_thread(Origins.pin, got, session_id)
                repo = got.repo
            box = await start(client, image, layers, repo, session_id)
            took = time.perf_counter() - start_at
            await box.stop()
            if name != "local":
                gitmirror.unpin(got.mirror, session_id)
            if i > 0:
                times[name].append(took)
                if name != "local":
                    fetches[name].append(took_fetch)
            if name == "new":
                fetched = got
        for tree in fetched.repo.parent.iterdir():  # each new commit's tree is written whole: drop the older ones
            if tree != fetched.repo:
                shutil.rmtree(tree)
    base = Sample(times["local"])
    labels = {
        "fresh": "session ready on a URL, tree cached, fetched < 10 s before (no fetch)",
        "cached": "session ready on a URL, tree cached (a fetch finds nothing new)",
        "new": "session ready on a URL, a new commit (mirror cached: fetched, its tree written)",
    }
    for name, label in labels.items():
        ours = Sample(times[name])
        met = report.check(
            ours.p50 <= READY_TARGET * base.p50,
            f"{label}: {ms(ours.p50)} > {READY_TARGET} × a local session's {ms(base.p50)}",
        )
        row = Row(label, ours, "session ready on a local clone", base, f"≤ {READY_TARGET}×", met)
        report.rows.append(row)
    report.extra.append(
        (
            "Of which Origins.fetch (admit, mirror, tree), p50",
            ["session ready on a URL", "Origins.fetch", "the rest (pin, layer, sandbox)"],
            [
                [labels[name], ms(Sample(fetches[name]).p50), ms(Sample(times[name]).p50 - Sample(fetches[name]).p50)]
                for name in labels
            ],
        )
    )


async def push(report: Report, client: Any, image: str, remote: Remote, data: Path, rounds: int) -> None:
    """Push of the 100 changes made in a sandbox, beside a plain commit and push of the same change."""
    remotes = Origins(remote.settings(data))
    asked = RemoteRepo(url=remote.url, ref="main")
    fetched = await remotes.fetch(asked)
    plain = remote.clone(remote.root / "plain")
    layers = remote.root / "push-layers"
    parts: dict[str, list[tuple[float, float]]] = {"ours": [], "plain": []}
    counted: set[int] = set()
    for i in range(rounds + 1):
        for which in ("ours", "plain") if i % 2 == 0 else ("plain", "ours"):
            nonce = f"{which[:4]}{i:04d}"  # as long for both: the same bytes to send
            if which == "ours":
                took, count = await _session_push(client, image, remote, fetched, layers, nonce)
                counted.add(count)
            else:
                took = await asyncio.to_thread(_plain_push, remote, plain, nonce)
            if i > 0:
                parts[which].append(took)
    if counted != {100}:
        raise SystemExit(f"the bench expected 100 changes in each commit, got {sorted(counted)}")
    whole = {which: Sample([a + b for a, b in taken]) for which, taken in parts.items()}
    report.rows.append(
        Row(
            "push of a 100-file change (session_commit + push)",
            whole["ours"],
            "git add + commit + push from a clone",
            whole["plain"],
        )
    )
    split = {which: [Sample([t[k] for t in taken]).p50 for k in (0, 1)] for which, taken in parts.items()}
    report.extra.append(
        (
            "Of which the commit and the push, p50",
            ["", "the commit", "the push"],
            [
                ["session_commit, then gitpush.push", *map(ms, split["ours"])],
                ["git add --all + git commit, then git push", *map(ms, split["plain"])],
            ],
        )
    )


async def _session_push(
    client: Any, image: str, remote: Remote, fetched: Fetched, layers: Path, nonce: str
) -> tuple[tuple[float, float], int]:
    """A fresh session's layer, changed in a sandbox (untimed); its commit and push, timed."""
    session_id = f"bench-push-{nonce}"
    gitmirror.pin(fetched.mirror, fetched.source.commit, session_id)
    layer = workspace.create(layers, session_id, fetched.repo)
    await in_sandbox(client, image, layer, f"python3 -c {shlex.quote(CHANGE_100)} {nonce}")

    def commit_and_push() -> tuple[tuple[float, float], int]:
        start = time.perf_counter()
        built = gitpush.session_commit(
            layer, session_id, fetched.mirror, fetched.source.commit, author=AUTHOR, message=f"Bench {nonce}\n"
        )
        committed = time.perf_counter()
        gitpush.push(
            _data_dir(fetched.mirror),
            fetched.mirror,
            remote.url,
            built.commit,
            f"cubicle/bench-{nonce}",
            options=remote.options(remote.settings(_data_dir(fetched.mirror))),
        )
        return (committed - start, time.perf_counter() - committed), len(built.written) + len(built.removed)

    return await asyncio.to_thread(commit_and_push)


def _data_dir(mirror: Path) -> Path:
    """The data directory a mirror is in (``<data_dir>/git/mirrors/<key>``)."""
    return mirror.parents[2]


def _plain_push(remote: Remote, clone: Path, nonce: str) -> tuple[float, float]:
    """The clone reset to the remote's commit and changed alike (untimed); ``git add``, ``commit``, ``push``, timed."""
    remote.git("reset", "--quiet", "--hard", "origin/main", cwd=clone)
    remote.git("clean", "-fdq", cwd=clone)
    subprocess.run([sys.executable, "-c", CHANGE_100, nonce], cwd=clone, check=True)
    start = time.perf_counter()
    remote.git("add", "--all", cwd=clone)
    remote.git("commit", "--quiet", "-m", f"Bench {nonce}", cwd=clone)
    committed = time.perf_counter()
    remote.git("push", "--quiet", "origin", f"HEAD:refs/heads/plain/bench-{nonce}", cwd=clone)
    return committed - start, time.perf_counter() - committed


async def table(report: Report, client: Any, image: str, root: Path, quick: bool) -> None:
    """Add the remote sessions' rows to ``report``; the targets they miss go under the tables."""
    if not gitserver.available():
        raise RuntimeError("the remotes section needs Debian's nginx and fcgiwrap (apt-get install nginx fcgiwrap)")
    work = root / "remotes"
    work.mkdir()
    (work / "home").mkdir()
    source = await asyncio.to_thread(generate, work)
    with gitserver.serving(PASSWORD) as server:
        await asyncio.to_thread(server.create, NAME, source)
        shutil.rmtree(source)
        credentials = work / "credentials"
        credentials.write_text(f"http://{gitserver.USER}:{PASSWORD}@127.0.0.1:{server.port}\n")
        credentials.chmod(0o600)
        remote = Remote(server, server.url(NAME), credentials, work)
        data = await first_fetch(report, remote, repetitions(3 if quick else 5))
        await ready(report, client, image, remote, data, repetitions(5 if quick else 8))
        await push(report, client, image, remote, data, repetitions(3 if quick else 5))


def main() -> int:
    return section_main("remotes", __doc__, "fewer repetitions", table)


if __name__ == "__main__":
    sys.exit(main())
