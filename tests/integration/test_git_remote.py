"""Mirrors, pins and trees of a remote repository, against a real smart-HTTP git server (``bench.gitserver``):
nginx, fcgiwrap and git-http-backend on loopback, with basic auth. No Docker engine is used."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import gitserver
from bench.gitserver import GitServer, free_port, plain_git_env
from controller.errors import GitAuthError, GitError, GitRefError, GitRemoteError, GitTooLargeError, GitTreeError
from controller.workspace import gitmirror, gittree
from controller.workspace.gitmirror import MirrorOptions
from tests.integration.conftest import GIT_PASSWORD, INFLECTION, ROOT

NAME = "inflection"


def _credentials(data_dir: Path, server: GitServer, password: str = GIT_PASSWORD) -> Path:
    """The credentials file, kept in the data directory so the password grep has one file it may find it in."""
    data_dir.mkdir(parents=True, exist_ok=True)
    file = data_dir / "credentials"
    file.write_text(f"https://other:unused@git.example.com\nhttp://tester:{password}@127.0.0.1:{server.port}\n")
    return file


def _options(data_dir: Path, server: GitServer, **changes: object) -> MirrorOptions:
    return MirrorOptions(credentials=_credentials(data_dir, server), **changes)  # type: ignore[arg-type]


def _fetches(server: GitServer) -> list[int]:
    """The bytes each fetch's pack answer sent (the last upload-pack POST of each fetch)."""
    posts = [r for r in server.requests() if r.method == "POST" and r.uri.endswith("/git-upload-pack")]
    return [r.sent for r in posts if r.status == 200]


def _left(data_dir: Path) -> list[str]:
    """What a failed first fetch may not leave: a mirror or anything in the spare directory."""
    mirrors = data_dir / "git" / "mirrors"
    spare = data_dir / "git" / "tmp"
    found = [p.name for p in mirrors.iterdir() if not p.name.endswith(".lock")] if mirrors.exists() else []
    return found + (os.listdir(spare) if spare.exists() else [])


def test_the_first_use_fetches_everything_and_the_next_only_what_is_new(git_server: GitServer, tmp_path: Path) -> None:
    git_server.create(NAME, INFLECTION)
    data = tmp_path / "data"
    first = gitmirror.mirror(data, git_server.url(NAME), None, _options(data, git_server))
    assert first.fetched and first.commit == git_server.git("rev-parse", "HEAD", cwd=git_server.work(NAME))
    new = git_server.commit(NAME, {"NEWS.md": b"one more line\n"}, "A second commit")
    again = gitmirror.mirror(data, git_server.url(NAME), "main", _options(data, git_server, fresh_s=0))
    assert again.fetched and again.commit == new and again.path == first.path
    whole, increment = _fetches(git_server)[-3], _fetches(git_server)[-1]
    assert increment * 5 < whole, _fetches(git_server)  # the second pack holds the new commit alone
    assert len(list((first.path / "objects" / "pack").glob("*.pack"))) == 2
    assert again.received < first.received


def test_a_fresh_mirror_answers_without_a_fetch(git_server: GitServer, tmp_path: Path) -> None:
    git_server.create(NAME, INFLECTION)
    data = tmp_path / "data"
    first = gitmirror.mirror(data, git_server.url(NAME), "main", _options(data, git_server))
    requests = len(git_server.requests())
    again = gitmirror.mirror(data, git_server.url(NAME), "main", _options(data, git_server, fresh_s=60))
    by_id = gitmirror.mirror(data, git_server.url(NAME), first.commit, _options(data, git_server, fresh_s=0))
    assert not again.fetched and not by_id.fetched and again.commit == by_id.commit == first.commit
    assert len(git_server.requests()) == requests


MIRROR_IN_A_PROCESS = """
import json, sys
from pathlib import Path
from controller.workspace import gitmirror
options = gitmirror.MirrorOptions(credentials=Path(sys.argv[3]), fresh_s=60)
found = gitmirror.mirror(Path(sys.argv[1]), sys.argv[2], "main", options)
print(json.dumps({"commit": found.commit, "fetched": found.fetched}))
"""


def test_two_processes_mirroring_one_url_fetch_it_once(git_server: GitServer, tmp_path: Path) -> None:
    git_server.create(NAME, INFLECTION)
    data = tmp_path / "data"
    credentials = _credentials(data, git_server)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-c", MIRROR_IN_A_PROCESS, str(data), git_server.url(NAME), str(credentials)]
    both = [subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    answers = [process.communicate(timeout=120) for process in both]
    assert [process.returncode for process in both] == [0, 0], answers
    results = [json.loads(out) for out, _err in answers]
    assert sorted(result["fetched"] for result in results) == [False, True]
    assert results[0]["commit"] == results[1]["commit"]
    listed = [r for r in git_server.requests() if r.uri.endswith("/info/refs") and r.status == 200]
    assert len(listed) == 1


def test_a_ref_resolves_as_a_branch_a_tag_or_a_commit(git_server: GitServer, tmp_path: Path) -> None:
    work = git_server.create(NAME, INFLECTION)
    first = git_server.git("rev-parse", "HEAD", cwd=work)
    git_server.git("tag", "-a", "-m", "the first release", "v1.0", cwd=work)
    git_server.git("branch", "feature", cwd=work)
    second = git_server.commit(NAME, {"NEWS.md": b"later\n"}, "After the release")
    data = tmp_path / "data"
    options = _options(data, git_server)
    resolved = {
        ref: gitmirror.mirror(data, git_server.url(NAME), ref, options).commit
        for ref in (None, "main", "feature", "v1.0", "refs/tags/v1.0", first, first[:10], second[:7])
    }
    assert (
        resolved
        == {
            None: second,
            "main": second,
            "feature": first,
            "v1.0": first,  # an annotated tag: its commit
            "refs/tags/v1.0": first,
            first: first,
            first[:10]: first,
            second[:7]: second,
        }
    )
    with pytest.raises(GitRefError, match="'no-such-branch'"):
        gitmirror.mirror(data, git_server.url(NAME), "no-such-branch", options)
    with pytest.raises(GitRefError, match="refs/heads/ or refs/tags/"):  # the mirror's own refs are not the remote's
        gitmirror.mirror(data, git_server.url(NAME), "refs/cubicle/head", options)


def test_a_pinned_commit_or_a_tag_cannot_be_swapped_by_a_branch_named_like_it(
    git_server: GitServer, tmp_path: Path
) -> None:
    """Whoever may push a branch cannot stand in for a reviewed commit or a release: a full id is that commit even
    when a branch bears its name (as git reads it), and a name that is both a tag and a branch is refused as
    ambiguous, each still reachable by its full ref. (Found by the red-team of the remote sessions.)"""
    work = git_server.create(NAME, INFLECTION)
    reviewed = git_server.git("rev-parse", "HEAD", cwd=work)
    git_server.git("tag", "v1.0", reviewed, cwd=work)
    hostile = git_server.commit(NAME, {"inflection/__init__.py": b"import os; os.system('curl evil')\n"}, "x")
    git_server.git("branch", reviewed, hostile, cwd=work)  # a branch named like the reviewed commit
    git_server.git("branch", "v1.0", hostile, cwd=work)  # and one named like the release
    git_server.push(NAME)
    data = tmp_path / "data"
    options = _options(data, git_server)
    assert gitmirror.mirror(data, git_server.url(NAME), reviewed, options).commit == reviewed
    with pytest.raises(GitRefError, match="both a branch and a tag"):
        gitmirror.mirror(data, git_server.url(NAME), "v1.0", options)
    assert gitmirror.mirror(data, git_server.url(NAME), "refs/tags/v1.0", options).commit == reviewed
    assert gitmirror.mirror(data, git_server.url(NAME), "refs/heads/v1.0", options).commit == hostile


def test_wrong_credentials_name_the_host_and_leave_the_file_and_no_mirror(
    git_server: GitServer, tmp_path: Path
) -> None:
    git_server.create(NAME, INFLECTION)
    data = tmp_path / "data"
    wrong = "wrong-pw-0d9e8f7a"
    file = _credentials(data, git_server, password=wrong)
    before = (file.read_bytes(), os.stat(file).st_mtime_ns, os.stat(file).st_ino)
    with pytest.raises(GitAuthError) as caught:
        gitmirror.mirror(data, git_server.url(NAME), None, MirrorOptions(credentials=file))
    assert f"127.0.0.1:{git_server.port}" in str(caught.value)
    assert wrong not in str(caught.value) and GIT_PASSWORD not in str(caught.value)
    assert (file.read_bytes(), os.stat(file).st_mtime_ns, os.stat(file).st_ino) == before
    assert _left(data) == []
    with pytest.raises(GitAuthError):  # no credentials at all: refused, never a prompt
        gitmirror.mirror(data, git_server.url(NAME), None, MirrorOptions())


def test_an_unreachable_port_is_a_clear_error_and_leaves_nothing(tmp_path: Path) -> None:
    port = free_port()
    data = tmp_path / "data"
    with pytest.raises(GitRemoteError, match=f"127.0.0.1:{port} did not accept a connection"):
        gitmirror.mirror(data, f"http://127.0.0.1:{port}/r.git", None, MirrorOptions(connect_timeout_s=5))
    assert _left(data) == []


def test_a_pinned_address_is_the_one_git_connects_to(git_server: GitServer, tmp_path: Path) -> None:
    git_server.create(NAME, INFLECTION)
    data = tmp_path / "data"
    file = data / "credentials"
    data.mkdir()
    file.write_text(f"http://tester:{GIT_PASSWORD}@git.cubicle.invalid:{git_server.port}\n")
    url = git_server.url(NAME).replace("127.0.0.1", "git.cubicle.invalid")
    pinned = ("git.cubicle.invalid", git_server.port, "127.0.0.1")
    found = gitmirror.mirror(data, url, "main", MirrorOptions(credentials=file, resolve=pinned))
    assert found.commit == git_server.git("rev-parse", "HEAD", cwd=git_server.work(NAME))


def test_a_fetch_past_max_bytes_is_stopped_and_leaves_nothing(git_server: GitServer, tmp_path: Path) -> None:
    git_server.create(NAME, INFLECTION)
    git_server.commit(NAME, {"blob.bin": os.urandom(8 << 20)}, "Eight incompressible MiB")
    data = tmp_path / "data"
    with pytest.raises(GitTooLargeError, match=r"wrote [\d,]+ bytes, more than the 1,048,576"):
        gitmirror.mirror(data, git_server.url(NAME), None, _options(data, git_server, max_bytes=1 << 20))
    assert _left(data) == []


def test_a_force_push_upstream_keeps_a_pinned_commit(git_server: GitServer, tmp_path: Path) -> None:
    work = git_server.create(NAME, INFLECTION)
    doomed = git_server.commit(NAME, {"doomed.txt": b"gone upstream soon\n"}, "To be force-pushed away")
    data = tmp_path / "data"
    found = gitmirror.mirror(data, git_server.url(NAME), "main", _options(data, git_server))
    assert gitmirror.pin(found.path, doomed, "session-1") == "refs/cubicle/sessions/session-1"
    git_server.git("reset", "--hard", "HEAD~1", cwd=work)
    git_server.push(NAME)
    after = gitmirror.mirror(data, git_server.url(NAME), "main", _options(data, git_server, fresh_s=0))
    assert after.fetched and after.commit != doomed
    assert (
        gittree.checkout_tree(data, found.path, doomed).path.joinpath("doomed.txt").read_bytes()
        == b"gone upstream soon\n"
    )
    gitmirror.unpin(found.path, "session-1")
    gitmirror.unpin(found.path, "session-1")  # twice: nothing to drop is no error
    refs = subprocess.run(["git", "-C", str(found.path), "for-each-ref"], capture_output=True, text=True, check=True)
    assert "refs/cubicle/sessions" not in refs.stdout
    with pytest.raises(GitRefError):
        gitmirror.pin(found.path, doomed, "../escape")


ATTRIBUTES = b"* text eol=crlf\n*.py filter=rewrite\n*.bin filter=lfs diff=lfs merge=lfs -text\n"
LFS_POINTER = b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"a" * 64 + b"\nsize 12345\n"


def test_a_tree_is_written_as_committed(git_server: GitServer, tmp_path: Path) -> None:
    work = git_server.create(NAME, INFLECTION)
    os.symlink("inflection/__init__.py", work / "link-to-module")
    os.symlink("/etc/passwd", work / "link-out")
    (work / "run.sh").write_bytes(b"#!/bin/sh\necho ran\n")
    os.chmod(work / "run.sh", 0o755)
    submodule = "b" * 40
    (work / "vendored").mkdir()  # an uninitialised submodule's directory, kept by `git add --all`
    git_server.git("update-index", "--add", "--cacheinfo", f"160000,{submodule},vendored", cwd=work)
    commit = git_server.commit(NAME, {".gitattributes": ATTRIBUTES, "big.bin": LFS_POINTER}, "Attributes and links")
    data = tmp_path / "data"
    found = gitmirror.mirror(data, git_server.url(NAME), "main", _options(data, git_server))
    tree = gittree.checkout_tree(data, found.path, commit)
    assert tree.path == data / "git" / "trees" / commit and tree.gitlinks == ("vendored",)
    for name in ("inflection/__init__.py", "test_inflection.py", "run.sh", ".gitattributes", "big.bin"):
        assert (tree.path / name).read_bytes() == _git_bytes(work, ["cat-file", "blob", f"{commit}:{name}"])
    assert b"\r\n" not in (tree.path / "test_inflection.py").read_bytes()
    assert (tree.path / "big.bin").read_bytes() == LFS_POINTER
    assert os.stat(tree.path / "run.sh").st_mode & 0o777 == 0o755
    assert os.stat(tree.path / "setup.py").st_mode & 0o777 == 0o644
    assert os.readlink(tree.path / "link-to-module") == "inflection/__init__.py"
    assert os.readlink(tree.path / "link-out") == "/etc/passwd"
    assert os.listdir(tree.path / "vendored") == []
    if os.geteuid() == 0:
        assert {os.lstat(tree.path / n).st_uid for n in ("run.sh", "link-out", ".git", "inflection")} == {1000}
    _assert_dot_git_is_the_commit(tree.path, commit)
    assert gittree.checkout_tree(data, found.path, commit) == tree  # made once, shared


def _assert_dot_git_is_the_commit(path: Path, commit: str) -> None:
    """The tree's own .git: HEAD at the commit, no remote, nothing changed, the commit's history alone."""

    def git(*args: str) -> str:
        env = plain_git_env(path.parent)
        argv = ["git", "-c", "safe.directory=*", "-C", str(path), *args]
        return subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout.strip()

    assert git("rev-parse", "HEAD") == commit
    assert git("log", "--format=%H") == commit
    assert git("remote") == "" and git("status", "--porcelain") == ""
    assert "url" not in (path / ".git" / "config").read_text()


def test_a_tree_past_its_bound_is_refused_before_writing(git_server: GitServer, tmp_path: Path) -> None:
    git_server.create(NAME, INFLECTION)
    data = tmp_path / "data"
    found = gitmirror.mirror(data, git_server.url(NAME), "main", _options(data, git_server))
    with pytest.raises(GitTooLargeError, match=r"hold [\d,]+ bytes, more than the 1,000"):
        gittree.checkout_tree(data, found.path, found.commit, gittree.TreeOptions(max_bytes=1000))
    assert not (data / "git" / "trees" / found.commit).exists() and os.listdir(data / "git" / "tmp") == []


def test_a_tree_with_a_hostile_name_is_refused_on_fetch_or_on_checkout(git_server: GitServer, tmp_path: Path) -> None:
    work = git_server.create(NAME, INFLECTION)
    hostile = _hostile_commit(git_server, work, git_server.git("rev-parse", "HEAD:setup.py", cwd=work))
    git_server.git("push", "--quiet", str(git_server.bare(NAME)), f"{hostile}:refs/heads/hostile", cwd=work)
    data = tmp_path / "data"
    with pytest.raises(GitError, match=r"dotgit|\.GIT|fsck|invalid"):  # transfer.fsckObjects refuses it on arrival
        gitmirror.mirror(data, git_server.url(NAME), "hostile", _options(data, git_server))
    assert _left(data) == []
    with pytest.raises(GitTreeError, match="unsafe"):  # and were it in a mirror, the checkout refuses it
        gittree.checkout_tree(data, git_server.bare(NAME), hostile)
    assert not (data / "git" / "trees" / hostile).exists()


def _hostile_commit(server: GitServer, work: Path, blob: str) -> str:
    """A commit whose tree holds ``.GIT/config``: git's mktree takes it, a checkout here must not."""
    inner = _git_bytes(work, ["mktree"], f"100644 blob {blob}\tconfig\n".encode()).decode().strip()
    tree = _git_bytes(work, ["mktree"], f"040000 tree {inner}\t.GIT\n".encode()).decode().strip()
    return server.git("commit-tree", tree, "-m", "A tree git would write as .git", cwd=work)


def _git_bytes(work: Path, args: list[str], stdin: bytes = b"") -> bytes:
    """What the tests' own git prints, as bytes."""
    done = subprocess.run(["git", *args], input=stdin, cwd=work, env=plain_git_env(work), capture_output=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_password_is_in_no_file_but_the_credentials_and_in_no_error(git_server: GitServer, tmp_path: Path) -> None:
    git_server.create(NAME, INFLECTION)
    data = tmp_path / "data"
    found = gitmirror.mirror(data, git_server.url(NAME), "main", _options(data, git_server))
    gitmirror.pin(found.path, found.commit, "session-2")
    gittree.checkout_tree(data, found.path, found.commit)
    errors = []
    for ref in ("no-such-ref", None):
        with pytest.raises(GitError) as caught:
            url = git_server.url("missing") if ref is None else git_server.url(NAME)
            gitmirror.mirror(data, url, ref, _options(data, git_server, fresh_s=0))
        errors.append(str(caught.value))
    holding = [
        str(path.relative_to(data))
        for path in data.rglob("*")
        if path.is_file() and not path.is_symlink() and GIT_PASSWORD.encode() in path.read_bytes()
    ]
    assert holding == ["credentials"]
    assert not any(GIT_PASSWORD in error for error in errors), errors


def test_the_git_server_leaves_no_process_and_no_file() -> None:
    if not gitserver.available():
        pytest.skip("nginx and fcgiwrap are not installed")
    with gitserver.serving(GIT_PASSWORD) as server:
        server.create(NAME, INFLECTION)
        groups, where = server.groups(), server.dir
        assert len(groups) == 2 and all(gitserver._group_alive(group) for group in groups)
    assert not any(gitserver._group_alive(group) for group in groups) and not where.exists()
