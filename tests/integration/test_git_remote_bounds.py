"""What a fetch of a remote, or a push to it, may take of the controller's host (``gitmirror``'s bounds), against
the suite's real smart-HTTP git server (``bench.gitserver``) and a hostile HTTP server (``tests.hostile_server``):
memory while git reads a ref listing, disk as blocks and entries rather than file sizes, and nothing kept of a
fetch that was stopped. No module of ours is patched; git runs as the controller runs it."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from bench.gitserver import GitServer, plain_git_env
from controller.errors import GitError, GitTooLargeError
from controller.workspace import gitmirror, gitpush
from controller.workspace.gitmirror import MirrorOptions
from tests.hostile_server import FakeServer, head
from tests.integration.conftest import GIT_PASSWORD, INFLECTION

NAME = "inflection"


def _options(data_dir: Path, server: GitServer, **changes: object) -> MirrorOptions:
    data_dir.mkdir(parents=True, exist_ok=True)
    file = data_dir / "credentials"
    file.write_text(f"http://tester:{GIT_PASSWORD}@127.0.0.1:{server.port}\n")
    return MirrorOptions(credentials=file, **changes)  # type: ignore[arg-type]


ENDLESS_CAP = 256 << 20
"""What the endless server sends at most before it gives up (so a failing run cannot fill the machine's memory)."""


def _endless(sent: list[int], service: str) -> Callable[[asyncio.StreamWriter], Awaitable[None]]:
    """An ``info/refs`` answer for ``service`` that never ends (until ``ENDLESS_CAP``), counted in ``sent``."""

    async def endless(writer: asyncio.StreamWriter) -> None:
        writer.write(head("200 OK", f"application/x-{service}-advertisement"))
        line = f"# service={service}\n".encode()
        writer.write(b"%04x%s0000" % (len(line) + 4, line))
        chunk = b"0fff" + b"a" * 4091
        while sent[0] < ENDLESS_CAP:
            writer.write(chunk * 64)
            sent[0] += len(chunk) * 64
            await writer.drain()

    return endless


def test_an_endless_ref_advertisement_is_stopped_near_max_bytes(tmp_path: Path) -> None:
    """A hostile server answers ``info/refs`` with a body that never ends. git reads that whole answer into memory
    before parsing it, so nothing is written under the mirror: the fetch must be stopped by the memory its
    processes hold, once it has taken about ``max_bytes``, not at ``timeout_s``."""
    sent = [0]
    data = tmp_path / "data"
    options = MirrorOptions(max_bytes=1 << 20, timeout_s=60, stall_s=10)
    with (
        FakeServer({"/repo.git/info/refs": _endless(sent, "git-upload-pack")}) as base,
        pytest.raises(GitTooLargeError, match=r"bytes of memory, more than the 1,048,576"),
    ):
        gitmirror.mirror(data, f"{base}/repo.git", None, options)
    assert sent[0] <= 16 * options.max_bytes, f"the fetch took {sent[0]:,} bytes with max_bytes {options.max_bytes:,}"
    assert not gitmirror.path_of(data, f"{base}/repo.git").exists()


def test_a_push_to_an_endless_ref_advertisement_is_stopped_near_max_bytes(tmp_path: Path) -> None:
    """A push reads the remote's ref listing (``git-receive-pack``'s) whole into memory too, before it sends
    anything: it is stopped by the same bound, and nothing is pushed."""
    sent = [0]
    data = tmp_path / "data"
    options = MirrorOptions(max_bytes=1 << 20, timeout_s=60, stall_s=10)
    with FakeServer({"/repo.git/info/refs": _endless(sent, "git-receive-pack")}) as base:
        url = f"{base}/repo.git"
        mirror = gitmirror.path_of(data, url)
        mirror.parent.mkdir(parents=True)
        env = plain_git_env(tmp_path)
        subprocess.run(["git", "init", "--quiet", "--bare", str(mirror)], check=True, env=env)
        tree = subprocess.run(["git", "mktree"], cwd=mirror, input=b"", capture_output=True, check=True, env=env)
        made = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit-tree", tree.stdout.decode().strip()]
        commit = subprocess.run(made, cwd=mirror, input=b"m\n", capture_output=True, check=True, env=env)
        with pytest.raises(GitTooLargeError, match="bytes of memory"):
            gitpush.push(data, mirror, url, commit.stdout.decode().strip(), "cubicle/s1", options=options)
    assert sent[0] <= 16 * options.max_bytes, f"the push took {sent[0]:,} bytes with max_bytes {options.max_bytes:,}"


def _allocated(path: Path) -> int:
    """The bytes the files under ``path`` take on disk (their blocks)."""
    total = 0
    for top, _dirs, files in os.walk(path):
        for name in files:
            total += os.lstat(os.path.join(top, name)).st_blocks * 512
    return total


def _branches(server: GitServer, count: int, prefix: str = "b") -> str:
    """Add ``count`` branches at the remote's HEAD (one line each in its packed-refs, cheap on its side)."""
    work = server.work(NAME)
    head = server.git("rev-parse", "HEAD", cwd=work)
    with (server.bare(NAME) / "packed-refs").open("a") as refs:
        refs.writelines(f"{head} refs/heads/{prefix}/{i:07d}\n" for i in range(count))
    return head


def test_many_refs_cannot_take_more_disk_than_max_bytes(git_server: GitServer, tmp_path: Path) -> None:
    """Each ref a fetch writes is a small file that takes a block and an inode; a remote advertising 20,000
    branches must be counted at that cost (and refused past ``max_bytes``), or take no more than ``max_bytes``."""
    git_server.create(NAME, INFLECTION)
    _branches(git_server, 20_000)
    data = tmp_path / "data"
    options = _options(data, git_server, max_bytes=4 << 20)
    try:
        found = gitmirror.mirror(data, git_server.url(NAME), None, options)
    except GitError:
        return  # refused: what should happen
    taken = _allocated(found.path)
    assert taken <= options.max_bytes, f"the mirror takes {taken:,} bytes of disk; it was counted as {found.received:,}"


def test_a_mirror_keeps_its_refs_packed(git_server: GitServer, tmp_path: Path) -> None:
    """Within its bound, a fetch of many branches leaves them in one file, not a file (and a block) each."""
    git_server.create(NAME, INFLECTION)
    head = _branches(git_server, 2_000)
    data = tmp_path / "data"
    found = gitmirror.mirror(data, git_server.url(NAME), "b/0001999", _options(data, git_server))
    assert found.commit == head
    loose = [p for p in (found.path / "refs" / "heads").rglob("*") if p.is_file()]
    assert loose == []
    assert _allocated(found.path) < 2 << 20


def test_a_later_fetch_stopped_past_its_bound_leaves_the_mirror_as_it_was(
    git_server: GitServer, tmp_path: Path
) -> None:
    """A fetch stopped past ``max_bytes`` (while it ran, or after it ended between two looks) keeps none of its
    refs or packs: the next fetch must take all of it again, and is stopped again."""
    work = git_server.create(NAME, INFLECTION)
    data = tmp_path / "data"
    first = gitmirror.mirror(data, git_server.url(NAME), None, _options(data, git_server))
    refs = git_server.git("-C", str(first.path), "for-each-ref", "--format=%(objectname) %(refname)", cwd=work)
    packs = sorted(os.listdir(first.path / "objects" / "pack"))
    git_server.commit(NAME, {"blob.bin": os.urandom(8 << 20)}, "Eight incompressible MiB")
    git_server.git("branch", "big", cwd=work)
    git_server.push(NAME)
    bounded = _options(data, git_server, max_bytes=1 << 20, fresh_s=0)
    for _attempt in range(2):
        with pytest.raises(GitTooLargeError, match=r"wrote [\d,]+ bytes, more than the 1,048,576"):
            gitmirror.mirror(data, git_server.url(NAME), "big", bounded)
        after = git_server.git("-C", str(first.path), "for-each-ref", "--format=%(objectname) %(refname)", cwd=work)
        assert after == refs
        assert sorted(os.listdir(first.path / "objects" / "pack")) == packs
    found = gitmirror.mirror(data, git_server.url(NAME), "big", _options(data, git_server, fresh_s=0))
    assert found.commit == git_server.git("rev-parse", "HEAD", cwd=work)
    assert found.received > 8 << 20
