"""``cubicle gc``'s share of the git directory (``workspace.gitsweep``), on mirrors fetched from a real smart-HTTP git
server (``bench.gitserver``): what it removes, what it compacts, and what it must leave alone."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bench.gitserver import GitServer
from controller.workspace import gitmirror, gitsweep, gittree
from controller.workspace.gitmirror import MirrorOptions
from controller.workspace.gitsweep import SweepOptions
from tests.integration.conftest import GIT_PASSWORD, INFLECTION

NAME = "inflection"
LONG_AGO = 1_000_000.0
"""An mtime (1970) that any age bound finds old."""


def _options(data_dir: Path, server: GitServer, **changes: object) -> MirrorOptions:
    data_dir.mkdir(parents=True, exist_ok=True)
    file = data_dir / "credentials"
    file.write_text(f"http://tester:{GIT_PASSWORD}@127.0.0.1:{server.port}\n")
    return MirrorOptions(credentials=file, **changes)  # type: ignore[arg-type]


def _has(mirror: Path, commit: str) -> bool:
    found = subprocess.run(["git", "-C", str(mirror), "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True)
    return found.returncode == 0


def _refs(mirror: Path) -> list[str]:
    listed = subprocess.run(["git", "-C", str(mirror), "for-each-ref", "--format=%(refname)"], capture_output=True)
    return listed.stdout.decode().splitlines()


def _only(session_id: str) -> Callable[[str], bool]:
    return lambda asked: asked == session_id


def _opened(path: Path) -> int:
    """How many of this process's file descriptors are open on ``path``."""
    fds = Path("/proc/self/fd")
    return sum(1 for fd in fds.iterdir() if os.path.realpath(fd) in (str(path), f"{path} (deleted)"))


def test_a_pinned_commit_survives_gc_after_a_force_push_and_an_unpinned_one_is_pruned(
    git_server: GitServer, tmp_path: Path
) -> None:
    work = git_server.create(NAME, INFLECTION)
    kept = git_server.commit(NAME, {"kept.txt": b"a live session's base\n"}, "Kept by a pin")
    dropped = git_server.commit(NAME, {"dropped.bin": os.urandom(1 << 20)}, "Only a purged session's base")
    data = tmp_path / "data"
    found = gitmirror.mirror(data, git_server.url(NAME), "main", _options(data, git_server))
    gitmirror.pin(found.path, kept, "live")
    gitmirror.pin(found.path, dropped, "purged")
    git_server.git("reset", "--hard", "HEAD~2", cwd=work)  # both commits gone upstream
    git_server.push(NAME)
    gitmirror.mirror(data, git_server.url(NAME), "main", _options(data, git_server, fresh_s=0))
    subprocess.run(["git", "-C", str(found.path), "update-ref", "refs/stray/x", kept], check=True)

    # Just fetched, both commits are held: a pin of a session whose record is not written yet stays, and so do
    # the objects younger than an hour that nothing reaches.
    done = gitsweep.sweep(data, set(), _only("live"))
    assert len(done) == 1 and done[0].startswith("compacted the mirror"), done
    assert sorted(gitmirror.pins(found.path)) == ["live", "purged"] and _has(found.path, dropped)

    done = gitsweep.sweep(data, set(), _only("live"), SweepOptions(settled_s=0))
    assert "unpinned the commit of purged session purged" in done and any("compacted" in line for line in done), done
    assert gitmirror.pins(found.path) == ["live"] and _has(found.path, kept) and not _has(found.path, dropped)
    assert not [ref for ref in _refs(found.path) if ref.startswith(("refs/stray/", gitmirror.HELD))]
    assert len(list((found.path / "objects" / "pack").glob("*.pack"))) == 1
    tree = gittree.checkout_tree(data, found.path, kept).path
    assert (tree / "kept.txt").read_bytes() == b"a live session's base\n"
    assert gitsweep.sweep(data, {str(tree)}, _only("live"), SweepOptions(settled_s=0)) == []  # nothing changed


def test_an_unpinned_idle_mirror_goes_and_a_pinned_or_recent_one_stays(git_server: GitServer, tmp_path: Path) -> None:
    for name in ("idle", "pinned", "recent"):
        git_server.create(name, INFLECTION)
    data = tmp_path / "data"
    mirrors = {
        name: gitmirror.mirror(data, git_server.url(name), None, _options(data, git_server))
        for name in ("idle", "pinned")
    }
    gitmirror.pin(mirrors["pinned"].path, mirrors["pinned"].commit, "live")

    done = gitsweep.sweep(data, set(), _only("live"), SweepOptions(idle_s=0))
    assert f"removed the mirror {mirrors['idle'].path.name[:12]}, which no session has used for a while" in done
    assert not mirrors["idle"].path.exists() and not gitmirror.lock_of(mirrors["idle"].path).exists()
    assert mirrors["pinned"].path.is_dir() and os.listdir(data / "git" / "tmp") == []

    recent = gitmirror.mirror(data, git_server.url("recent"), None, _options(data, git_server))
    gitsweep.sweep(data, set(), _only("live"), SweepOptions(idle_s=3600))
    assert recent.path.is_dir()
    again = gitmirror.mirror(data, git_server.url("idle"), None, _options(data, git_server))
    assert again.fetched and again.path == mirrors["idle"].path and again.commit == mirrors["idle"].commit


def test_a_mirror_whose_lock_is_held_is_not_touched(git_server: GitServer, tmp_path: Path) -> None:
    git_server.create(NAME, INFLECTION)
    data = tmp_path / "data"
    found = gitmirror.mirror(data, git_server.url(NAME), None, _options(data, git_server))
    gitmirror.pin(found.path, found.commit, "purged")
    with gitmirror.locked(gitmirror.lock_of(found.path), 5):  # a fetch or a push's lease is using it
        assert gitsweep.sweep(data, set(), _only("none"), SweepOptions(idle_s=0, settled_s=0)) == []
        assert found.path.is_dir() and gitmirror.pins(found.path) == ["purged"]
    done = gitsweep.sweep(data, set(), _only("none"), SweepOptions(idle_s=0, settled_s=0))
    assert done[0] == "unpinned the commit of purged session purged" and not found.path.exists(), done


def test_a_lock_file_unlinked_under_a_waiter_is_opened_anew(tmp_path: Path) -> None:
    """A mirror's removal unlinks its lock file while it holds it: a process already waiting on the old file must
    not take it for the lock, or two processes would hold "the" lock at once."""
    lock = tmp_path / "mirror.lock"
    took = threading.Event()
    release = threading.Event()

    def wait_then_hold() -> None:
        with gitmirror.locked(lock, 30):
            took.set()
            release.wait(30)

    with gitmirror.locked(lock, 5):
        waiter = threading.Thread(target=wait_then_hold)
        waiter.start()
        deadline = time.monotonic() + 30
        while _opened(lock) < 2 and time.monotonic() < deadline:  # until it has opened the file and waits on it
            time.sleep(0.01)
        lock.unlink()
    assert took.wait(30) and lock.exists()
    with gitmirror.if_free(lock) as held:
        assert not held  # the waiter holds the file now at the path
    release.set()
    waiter.join(30)
    with gitmirror.if_free(lock) as held:
        assert held


def test_what_unfinished_work_left_goes_once_old_and_nothing_beyond_a_link(
    git_server: GitServer, tmp_path: Path
) -> None:
    git_server.create(NAME, INFLECTION)
    data = tmp_path / "data"
    found = gitmirror.mirror(data, git_server.url(NAME), None, _options(data, git_server))
    spare, outside = data / "git" / "tmp", tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("not the controller's\n")
    (spare / "mirror-killed" / "objects").mkdir(parents=True)
    (spare / "mirror-killed" / "objects" / "pack.tmp").write_bytes(b"x" * 1000)
    os.symlink(outside, spare / "tree-link")
    (spare / "tree-in-progress").mkdir()
    killed_pack = found.path / "objects" / "pack" / "tmp_pack_abc123"
    killed_pack.write_bytes(b"half a pack")
    ref_lock = found.path / "refs" / "heads" / "main.lock"
    ref_lock.write_text("0" * 40 + "\n")
    lonely = data / "git" / "mirrors" / f"{'0' * 32}.lock"
    lonely.touch()
    for old in (spare / "mirror-killed", spare / "tree-link", killed_pack, ref_lock):
        os.utime(old, (LONG_AGO, LONG_AGO), follow_symlinks=False)

    done = gitsweep.sweep(data, set(), _only("none"))
    assert sorted(os.listdir(spare)) == ["tree-in-progress"], done
    assert (outside / "precious").read_text() == "not the controller's\n"
    assert not killed_pack.exists() and not ref_lock.exists() and not lonely.exists()
    assert found.path.is_dir()  # used just now
    again = gitmirror.mirror(data, git_server.url(NAME), None, _options(data, git_server, fresh_s=0))
    assert again.fetched and again.commit == found.commit  # a stale ref lock would have failed this fetch
