"""A session's changes pushed as a branch (``workspace.gitpush``), against a real smart-HTTP git server
(``bench.gitserver``) and a real layer: the server's repository mirrored, its commit checked out as the layer's
checkout (``gittree``), the agent's writes made through a real overlay mount as uid 1000. No Docker engine is used;
the mount needs root, as CI runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from bench.gitserver import GitServer, plain_git_env
from controller.errors import (
    GitAuthError,
    GitPushRejectedError,
    GitPushRequestError,
    GitRefError,
    GitTooLargeError,
)
from controller.workspace import gitmirror, gitpush, gittree
from controller.workspace import layer as layers
from controller.workspace.gitmirror import MirrorOptions
from controller.workspace.layer import Layer
from tests.integration.conftest import GIT_PASSWORD, INFLECTION

NAME = "inflection"
AUTHOR = ("Cubicle Agent", "agent@cubicle.invalid")
ATTRIBUTES = b"* text eol=crlf\n*.txt filter=rewrite\n"
WORKFLOW = ".github/workflows/x.yml"
AGENT = (
    "printf 'edited\\n' >> notes.txt; head -c 3000 /dev/urandom > new.bin; printf 'a\\r\\nb\\r\\n' > crlf.txt;"
    "printf 'a\\nb\\n' > lf.txt; chmod 755 tool.sh; ln -s inflection/__init__.py link-new; rm gone.txt;"
    "rm -rf olddir; rm was-file; ln -s notes.txt was-file; mkdir -p .github/workflows; echo 'on: push' > "
    + WORKFLOW
    + "; mkdir empty; mkdir -p .GIT; echo x > .GIT/config; echo evil >> .git/config; ln -s notes.txt .gitmodules;"
    "mkdir .git::stream; echo x > .git::stream/f; rm -rf dirfile; echo now a file > dirfile; rm filedir;"
    "mkdir filedir; echo inside > filedir/a.txt"
)


@dataclass
class Session:
    """A session on the server's repository: the data directory, the mirror, its base commit and its layer."""

    data: Path
    mirror: Path
    base: str
    layer: Layer
    url: str
    options: MirrorOptions


@pytest.fixture
def base_dir() -> Iterator[Path]:
    """A directory the agent (uid 1000) can walk into, for the data directory and the mount point."""
    if os.geteuid() != 0:
        pytest.fail("these tests mount overlayfs and need root (CI runs as root)")
    base = Path(tempfile.mkdtemp(prefix="cubicle-push-"))
    os.chmod(base, 0o755)
    yield base
    for layer_root in (base / "data" / "workspaces").glob("*"):
        layers.discard(layers.open_layer(base / "data", layer_root.name))
    shutil.rmtree(base, ignore_errors=True)


def _credentials(data: Path, server: GitServer, password: str = GIT_PASSWORD) -> Path:
    file = data / "credentials"
    file.write_text(f"http://tester:{password}@127.0.0.1:{server.port}\n")
    return file


def _session(server: GitServer, base_dir: Path, script: str = AGENT) -> Session:
    """The served repository with attributes, a script, a file, a directory and a file to delete; a session on
    it whose agent ran ``script`` in the overlay."""
    server.create(NAME, INFLECTION)
    files = {
        ".gitattributes": ATTRIBUTES,
        "notes.txt": b"first\n",
        "tool.sh": b"#!/bin/sh\necho tool\n",
        "gone.txt": b"to be deleted\n",
        "olddir/a.txt": b"in a directory to be deleted\n",
        "was-file": b"a file, a symlink soon\n",
        "dirfile/x.txt": b"a directory, a file soon\n",
        "filedir": b"a file, a directory soon\n",
    }
    server.commit(NAME, files, "Files the session changes")
    data = base_dir / "data"
    data.mkdir(mode=0o755)
    options = MirrorOptions(credentials=_credentials(data, server))
    found = gitmirror.mirror(data, server.url(NAME), "main", options)
    gitmirror.pin(found.path, found.commit, "s1")
    tree = gittree.checkout_tree(data, found.path, found.commit)
    layer = layers.create(data, "s1", tree.path)
    _agent(layer, base_dir / "mnt", script)
    return Session(data, found.path, found.commit, layer, found.url, options)


def _agent(layer: Layer, mnt: Path, script: str) -> None:
    """Run ``script`` as the agent (uid 1000) in the layer's overlay, then unmount it."""
    mnt.mkdir(exist_ok=True)
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o", layers.mount_options(layer), str(mnt)], check=True)
    try:
        cmd = ["setpriv", "--reuid=1000", "--regid=1000", "--clear-groups", "sh", "-ec", script]
        subprocess.run(cmd, cwd=mnt, check=True, env={"PATH": os.environ["PATH"]})
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def _clone(server: GitServer, branch: str, into: Path) -> Path:
    """A bare clone of ``branch`` from the server's public URL (what anyone fetching the branch gets)."""
    server.git("clone", "--quiet", "--bare", "--branch", branch, server.url(NAME, public=True), str(into))
    return into


def _tree(server: GitServer, repo: Path, rev: str) -> dict[str, tuple[str, bytes]]:
    """Each path of ``rev``'s tree: its mode and its blob's bytes as stored (no checkout, no attribute)."""
    listed = _bytes(repo, "ls-tree", "-r", "-z", "--full-tree", rev)
    found = {}
    for record in listed.split(b"\0"):
        if record:
            meta, path = record.split(b"\t", 1)
            mode, _kind, oid = meta.decode().split()
            found[path.decode()] = (mode, _bytes(repo, "cat-file", "blob", oid))
    return found


def _bytes(repo: Path, *args: str) -> bytes:
    done = subprocess.run(["git", *args], cwd=repo, env=plain_git_env(repo), capture_output=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _remote_branch(server: GitServer, branch: str) -> str:
    return server.git("rev-parse", "--verify", "--quiet", f"refs/heads/{branch}", cwd=server.bare(NAME))


def _push(session: Session, commit: str, branch: str, **flags: Any) -> gitpush.Pushed:
    return gitpush.push(session.data, session.mirror, session.url, commit, branch, options=session.options, **flags)


def test_a_session_is_pushed_as_a_branch_of_what_apply_writes(git_server: GitServer, base_dir: Path) -> None:
    session = _session(git_server, base_dir)
    built = gitpush.session_commit(
        session.layer, "s1", session.mirror, session.base, author=AUTHOR, message="The agent's work\n\nIn detail."
    )
    pushed = _push(session, built.commit, "cubicle/s1")
    assert (pushed.branch, pushed.commit, pushed.url, pushed.status) == (
        "cubicle/s1",
        built.commit,
        git_server.url(NAME),
        "created",
    )
    clone = _clone(git_server, "cubicle/s1", base_dir / "clone.git")
    before, after = _tree(git_server, clone, session.base), _tree(git_server, clone, "cubicle/s1")
    upper = session.layer.upper
    assert after["notes.txt"] == ("100644", b"first\nedited\n")
    assert after["new.bin"] == ("100644", (upper / "new.bin").read_bytes())
    assert after["crlf.txt"] == ("100644", b"a\r\nb\r\n") and after["lf.txt"] == ("100644", b"a\nb\n")
    assert after["tool.sh"] == ("100755", before["tool.sh"][1])
    assert after["link-new"] == ("120000", b"inflection/__init__.py")
    assert after["was-file"] == ("120000", b"notes.txt")
    assert after["dirfile"] == ("100644", b"now a file\n") and after["filedir/a.txt"] == ("100644", b"inside\n")
    for absent in ("gone.txt", "olddir/a.txt", WORKFLOW, ".GIT/config", "empty", ".gitmodules", ".git::stream/f"):
        assert absent not in after, absent
    changed = {
        "notes.txt",
        "tool.sh",
        "was-file",
        "new.bin",
        "crlf.txt",
        "lf.txt",
        "link-new",
        "dirfile",
        "filedir/a.txt",
    }
    unchanged = set(before) - {
        "notes.txt",
        "tool.sh",
        "gone.txt",
        "olddir/a.txt",
        "was-file",
        "dirfile/x.txt",
        "filedir",
    }
    assert {p: after[p] for p in unchanged} == {p: before[p] for p in unchanged}
    assert set(after) == unchanged | changed
    shown = _bytes(clone, "log", "-1", "--format=%P%n%an <%ae>%n%cn <%ce>%n%B", "cubicle/s1").decode()
    who = "Cubicle Agent <agent@cubicle.invalid>"
    assert shown == f"{session.base}\n{who}\n{who}\nThe agent's work\n\nIn detail.\n\n"
    assert [c.path for c in built.held if c.path == WORKFLOW] == [WORKFLOW]
    assert any(c.path.startswith(".git/") for c in built.held)
    left = {x.change.path: x.why for x in built.left}
    assert "empty" in left and "git keeps files only" in left["empty"]
    held = {c.path: c.disposition.value for c in built.held}
    assert held.get(".GIT/config") == "discarded" and held.get(".gitmodules") == "trusted", held
    assert "git refuses" in left[".git::stream/f"]
    assert {e.path for e in built.written} == changed
    assert set(built.removed) == {"gone.txt", "olddir/a.txt", "dirfile/x.txt", "filedir"} and built.conflicts == ()
    assert os.listdir(session.data / "git" / "tmp") == []  # the scratch index is gone
    _assert_password_only_in_credentials(session.data)


def _assert_password_only_in_credentials(data: Path) -> None:
    holding = [
        str(path.relative_to(data))
        for path in data.rglob("*")
        if path.is_file() and not path.is_symlink() and GIT_PASSWORD.encode() in path.read_bytes()
    ]
    assert holding == ["credentials"]


def test_a_branch_is_never_overwritten_unless_leased(git_server: GitServer, base_dir: Path) -> None:
    session = _session(git_server, base_dir)
    plain = gitpush.session_commit(session.layer, "s1", session.mirror, session.base, author=AUTHOR, message="One")
    _push(session, plain.commit, "cubicle/s1")
    assert _push(session, plain.commit, "cubicle/s1").status == "unchanged"  # the same commit again: nothing to do
    forced = gitpush.session_commit(
        session.layer, "s1", session.mirror, session.base, author=AUTHOR, message="Two", force=(WORKFLOW,)
    )
    assert WORKFLOW in {e.path for e in forced.written} and WORKFLOW not in {c.path for c in forced.held}
    with pytest.raises(GitPushRejectedError) as caught:
        _push(session, forced.commit, "cubicle/s1")
    assert caught.value.reason == "exists" and f"127.0.0.1:{git_server.port}" in str(caught.value)
    assert "cubicle/s1" in str(caught.value) and GIT_PASSWORD not in str(caught.value)
    assert _remote_branch(git_server, "cubicle/s1") == plain.commit
    git_server.commit(NAME, {"elsewhere.txt": b"someone else's\n"}, "Pushed to main meanwhile")  # the mirror is stale
    replaced = _push(session, forced.commit, "cubicle/s1", lease=gitpush.Lease())
    assert replaced.status == "replaced" and _remote_branch(git_server, "cubicle/s1") == forced.commit
    clone = _clone(git_server, "cubicle/s1", base_dir / "clone.git")
    assert _tree(git_server, clone, "cubicle/s1")[WORKFLOW] == ("100644", b"on: push\n")
    assert _bytes(clone, "rev-parse", "cubicle/s1^").decode().strip() == session.base
    # An exact lease: replaced while the branch names the commit expected, refused once another push moved it
    # (a fetch just before the push would have taken that other push for the one to replace).
    again = _push(session, plain.commit, "cubicle/s1", lease=gitpush.Lease(forced.commit))
    assert again.status == "replaced" and _remote_branch(git_server, "cubicle/s1") == plain.commit
    with pytest.raises(GitPushRejectedError) as moved:
        _push(session, forced.commit, "cubicle/s1", lease=gitpush.Lease(forced.commit))
    assert moved.value.reason == "moved", moved.value
    assert _remote_branch(git_server, "cubicle/s1") == plain.commit
    _assert_password_only_in_credentials(session.data)


def test_a_branch_refused_by_its_name_sends_nothing(git_server: GitServer, base_dir: Path) -> None:
    session = _session(git_server, base_dir, script="echo x > new.txt")
    built = gitpush.session_commit(session.layer, "s1", session.mirror, session.base, author=AUTHOR, message="m")
    requests = len(git_server.requests())
    for branch in ("main", "feature/x", "cubicle/", "cubicle/a..b", "cubicle/x.lock", "cubicle/x\x1b[2J", "-cubicle/x"):
        with pytest.raises(GitPushRequestError):
            _push(session, built.commit, branch)
    assert len(git_server.requests()) == requests
    assert not [r for r in git_server.requests() if "receive-pack" in r.uri]


def test_a_branch_a_hook_declines_is_refused_and_nothing_is_lost(git_server: GitServer, base_dir: Path) -> None:
    session = _session(git_server, base_dir, script="echo x > new.txt")
    hook = git_server.bare(NAME) / "hooks" / "pre-receive"
    hook.parent.mkdir(exist_ok=True)
    hook.write_text("#!/bin/sh\necho 'cubicle/protected is protected' >&2\nexit 1\n")
    hook.chmod(0o755)
    built = gitpush.session_commit(session.layer, "s1", session.mirror, session.base, author=AUTHOR, message="m")
    with pytest.raises(GitPushRejectedError) as caught:
        _push(session, built.commit, "cubicle/protected")
    assert caught.value.reason == "refused" and "cubicle/protected" in str(caught.value)
    assert "hook declined" in str(caught.value)
    assert (session.layer.upper / "new.txt").read_bytes() == b"x\n"


def test_a_commit_is_built_on_the_session_s_pin_and_within_its_bound(git_server: GitServer, base_dir: Path) -> None:
    session = _session(git_server, base_dir, script="echo x > new.txt")
    other = git_server.commit(NAME, {"later.txt": b"later\n"}, "Not the session's base")
    gitmirror.mirror(session.data, session.url, "main", replace(session.options, fresh_s=0))
    with pytest.raises(GitRefError, match="pin"):
        gitpush.session_commit(session.layer, "s1", session.mirror, other, author=AUTHOR, message="m")
    with pytest.raises(GitTooLargeError):
        gitpush.session_commit(session.layer, "s1", session.mirror, session.base, author=AUTHOR, message="m", limit=1)
    assert os.listdir(session.data / "git" / "tmp") == []


def test_wrong_credentials_name_the_host_and_branch_and_leave_the_file(git_server: GitServer, base_dir: Path) -> None:
    session = _session(git_server, base_dir, script="echo x > new.txt")
    built = gitpush.session_commit(session.layer, "s1", session.mirror, session.base, author=AUTHOR, message="m")
    wrong = "wrong-pw-51c0ffee"
    file = _credentials(session.data, git_server, password=wrong)
    before = (file.read_bytes(), os.stat(file).st_mtime_ns, os.stat(file).st_ino)
    with pytest.raises(GitAuthError) as caught:
        gitpush.push(
            session.data,
            session.mirror,
            session.url,
            built.commit,
            "cubicle/s1",
            options=MirrorOptions(credentials=file),
        )
    said = str(caught.value)
    assert f"127.0.0.1:{git_server.port}" in said and "cubicle/s1" in said
    assert wrong not in said and GIT_PASSWORD not in said
    assert (file.read_bytes(), os.stat(file).st_mtime_ns, os.stat(file).st_ino) == before
    assert _remote_branch_absent(git_server, "cubicle/s1")


def _remote_branch_absent(server: GitServer, branch: str) -> bool:
    done = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"],
        cwd=server.bare(NAME),
        env=plain_git_env(server.dir / "home"),
        capture_output=True,
    )
    return done.returncode != 0
