"""The rules a push and a session's commit follow before git sends or writes anything: which branch names a push
takes, which names a commit leaves out, that git's own index refuses the hostile ones, and the author and message
it writes. Real git, on a bare repository of the test's; the push itself is in tests/integration/test_git_push.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError

from controller.errors import GitError, GitPushRequestError
from controller.wire.bodies import PushRequest
from controller.workspace import gitpush
from controller.workspace.gitpush import CommitEntry, _add, _identity, _message, check_branch, refused_name
from controller.workspace.gitrun import Git, home

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


@pytest.fixture
def git(tmp_path: Path) -> Git:
    return Git(home(tmp_path / "data"))


@pytest.mark.parametrize(
    "branch", ["cubicle/s1", "cubicle/feature/x-1", "cubicle/caf\u00e9", "cubicle/-x", "cubicle/a.b"]
)
def test_a_branch_under_the_prefix_is_taken(git: Git, branch: str) -> None:
    assert check_branch(git, branch) == f"refs/heads/{branch}"


@pytest.mark.parametrize(
    "branch",
    [
        "main",
        "refs/heads/cubicle/x",
        "feature/cubicle/x",
        "cubicle",
        "cubicle/",
        "Cubicle/x",
        "-cubicle/x",
        "cubicle/a..b",
        "cubicle/x.lock",
        "cubicle/x.lock/y",
        "cubicle/x/",
        "cubicle//x",
        "cubicle/.x",
        "cubicle/x ",
        "cubicle/a b",
        "cubicle/x~1",
        "cubicle/x^",
        "cubicle/x:y",
        "cubicle/x?",
        "cubicle/x*",
        "cubicle/x[",
        "cubicle/x\\y",
        "cubicle/x@{1}",
        "cubicle/@",
        "cubicle/x\x1b[31m",
        "cubicle/x\x7f",
        "cubicle/x\u0085",
        "cubicle/x\u202egnp.exe",
        "cubicle/x\u200b",
        "cubicle/x\nrefs/heads/main",
        "cubicle/" + "x" * 200,
    ],
)
def test_a_branch_outside_the_rules_is_refused(git: Git, branch: str) -> None:
    with pytest.raises(GitPushRequestError) as caught:
        check_branch(git, branch)
    assert "\x1b" not in str(caught.value) and "\n" not in str(caught.value)  # the name shown escaped


def test_the_prefix_is_the_caller_s(git: Git) -> None:
    assert check_branch(git, "team/x", prefix="team/") == "refs/heads/team/x"
    with pytest.raises(GitPushRequestError, match="not under 'team/'"):
        check_branch(git, "cubicle/x", prefix="team/")
    assert check_branch(git, "main", prefix="") == "refs/heads/main"
    for refused in ("HEAD", "@"):
        with pytest.raises(GitPushRequestError):
            check_branch(git, refused, prefix="")


@pytest.mark.parametrize(
    ("path", "symlink"),
    [
        (".git/config", False),
        (".GIT/config", False),
        ("sub/.Git/hooks/x", False),
        (".git./x", False),
        (".git /x", False),
        ("git~1/config", False),
        ("GIT~1", False),
        (".g\u200cit/config", False),
        (".git::$INDEX_ALLOCATION/x", False),
        (".git\\x", False),
        ("a/../b", False),
        ("a/./b", False),
        ("a//b", False),
        (".gitmodules", True),
        ("sub/.GITMODULES.", True),
        ("gitmod~1", True),
    ],
)
def test_names_git_refuses_are_left_out(path: str, symlink: bool) -> None:
    assert refused_name(path, symlink)


@pytest.mark.parametrize(
    ("path", "symlink"),
    [("src/app.py", False), (".gitignore", True), (".gitmodules", False), (".github/workflows/x.yml", False)],
)
def test_other_names_are_taken(path: str, symlink: bool) -> None:
    assert refused_name(path, symlink) == ""


def _bare(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "repo.git"
    subprocess.run(["git", "init", "--quiet", "--bare", str(repo)], check=True)
    blob = subprocess.run(
        ["git", "hash-object", "-w", "--stdin"], cwd=repo, input=b"x\n", capture_output=True, check=True
    )
    return repo, blob.stdout.decode().strip()


@pytest.mark.parametrize(
    "path",
    [".GIT/config", ".git/config", "git~1/config", ".git./x", "a/../b", "a//b", ".g\u200cit/x", ".git::$DATA/x"],
)
def test_git_s_index_refuses_a_hostile_name_whole(tmp_path: Path, git: Git, path: str) -> None:
    """The last line: were ``refused_name`` to miss one, ``update-index --cacheinfo`` (with the hardening's
    protectNTFS and protectHFS) fails the whole commit rather than write it."""
    repo, blob = _bare(tmp_path)
    index = tmp_path / "index"
    indexed = Git(git.home, variables=(("GIT_INDEX_FILE", str(index)),))
    with pytest.raises(GitError, match="cannot add"):
        _add(indexed, repo, [CommitEntry("fine.txt", "100644", blob), CommitEntry(path, "100644", blob)])
    _add(indexed, repo, [CommitEntry("fine.txt", "100644", blob), CommitEntry("dir/ok.txt", "100755", blob)])
    listed = subprocess.run(
        ["git", "ls-files", "-s"],
        cwd=repo,
        env={"GIT_INDEX_FILE": str(index), "PATH": "/usr/bin:/bin"},
        capture_output=True,
    )
    assert listed.stdout.decode().splitlines() == [f"100755 {blob} 0\tdir/ok.txt", f"100644 {blob} 0\tfine.txt"]


def test_a_symlink_named_gitmodules_is_refused_by_git_too(tmp_path: Path, git: Git) -> None:
    repo, blob = _bare(tmp_path)
    indexed = Git(git.home, variables=(("GIT_INDEX_FILE", str(tmp_path / "index")),))
    with pytest.raises(GitError):
        _add(indexed, repo, [CommitEntry(".gitmodules", "120000", blob)])


def test_many_entries_go_in_batches(tmp_path: Path, git: Git) -> None:
    repo, blob = _bare(tmp_path)
    index = tmp_path / "index"
    indexed = Git(git.home, variables=(("GIT_INDEX_FILE", str(index)),))
    entries = [CommitEntry(f"d/file-{n:04d}", "100644", blob) for n in range(3000)]
    _add(indexed, repo, entries)  # ~230 KB of arguments: several runs of update-index
    listed = subprocess.run(
        ["git", "ls-files"], cwd=repo, env={"GIT_INDEX_FILE": str(index), "PATH": "/usr/bin:/bin"}, capture_output=True
    )
    assert len(listed.stdout.splitlines()) == 3000


@pytest.mark.parametrize(
    "author",
    [("", "a@b.c"), ("Name", ""), ("Na<me", "a@b.c"), ("Name", "a@b.c>"), ("Na\nme", "a@b.c"), ("N\x1b", "a@b.c")],
)
def test_an_author_git_would_mangle_is_refused(author: tuple[str, str]) -> None:
    with pytest.raises(GitPushRequestError):
        _identity(author)


def test_the_author_is_given_as_git_s_variables() -> None:
    assert _identity(("A B", "ab@example.invalid"), "COMMITTER") == (
        ("GIT_COMMITTER_NAME", "A B"),
        ("GIT_COMMITTER_EMAIL", "ab@example.invalid"),
    )


def test_a_message_ends_with_one_newline_and_holds_no_control_character() -> None:
    assert _message("Subject\n\nBody\twith a tab\n\n\n") == b"Subject\n\nBody\twith a tab\n"
    for bad in ("", "\n\n", "nul\x00", "esc \x1b[2J", "x" * (gitpush.MAX_MESSAGE + 1)):
        with pytest.raises(GitPushRequestError):
            _message(bad)


def test_a_leases_expected_commit_is_a_full_id_given_with_the_lease() -> None:
    commit = "a" * 40
    assert PushRequest(branch="cubicle/x", force_with_lease=True, expected=commit).expected == commit
    for bad in [{"expected": commit}, {"force_with_lease": True, "expected": "a" * 12}]:
        with pytest.raises(ValidationError):
            PushRequest(branch="cubicle/x", **bad)


def test_a_message_with_a_bidi_control_is_refused_and_a_default_one_never_is() -> None:
    """A bidi control reorders what ``git log`` shows (the "trojan source" trick); a message the controller makes
    from the task spells such characters as U+FFFD instead of failing the push."""
    with pytest.raises(GitPushRequestError):
        _message("Fix \u202egnp.exe")
    assert _message("Fix the cart 🛒\twith a tab\n") == "Fix the cart 🛒\twith a tab\n".encode()
    assert gitpush.plain_line("Fix \x1b[31mred\u202e") == "Fix \ufffd[31mred\ufffd"
