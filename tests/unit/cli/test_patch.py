"""The piped review diff is a patch of only what a plain apply writes (issue 44, finding 2), fed to a real
``git apply`` here; the end-to-end case (a real session, the real CLI) is in tests/integration/test_cli_names.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from controller.cli import patch
from controller.wire.changeset import Change, Disposition, FileType, Kind
from controller.workspace import textdiff

HOOK = "[core]\n\tfsmonitor = touch /tmp/pwned\n"


def _added(path: str, content: str, disposition: Disposition = Disposition.APPLY, reason: str = "") -> Change:
    return Change(
        path=path,
        kind=Kind.ADDED,
        type=FileType.FILE,
        size=len(content),
        disposition=disposition,
        reason=reason,
        diff=textdiff.unified(path, None, content.encode()),
    )


CHANGES = [
    _added(
        ".gitconfig", HOOK, Disposition.TRUSTED, "git runs files here (git's include.path): applied only when forced"
    ),
    _added("sub/HEAD", "ref: refs/heads/main\n", Disposition.UNSAFE, "would make a repository git finds"),
    _added(".github/workflows/ci.yml", "on: push\n", Disposition.TRUSTED, "a CI definition (GitHub Actions workflows)"),
    _added("build/out.txt", "x\n", Disposition.IGNORED, "ignored by the repository's ignore rules"),
    _added("notes.txt", "one\ntwo\n"),
    _added(".gitconfig 2010-01-01 00:00:00.000000000 +0000", HOOK),  # git apply would read `.gitconfig` from it
    _added("esc.txt", "a\x1b]0;x\x07\n"),
    Change(path="tool.bin", kind=Kind.ADDED, type=FileType.FILE, size=4, binary=True),
]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_apply_of_the_patch_writes_only_what_a_plain_apply_writes_and_the_trailer_says_the_rest(
    tmp_path: Path,
) -> None:
    text = patch.patch("s1", CHANGES)
    done = subprocess.run(["git", "apply", "-v"], cwd=tmp_path, input=text, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert written == ["notes.txt"]
    assert (tmp_path / "notes.txt").read_text() == "one\ntwo\n"
    comments = [line for line in text.splitlines() if line.startswith("#")]
    assert all(line.startswith("#") or line[:1] in "+-@ " for line in text.splitlines())
    held = "\n".join(comments)
    assert (
        "trusted: .gitconfig (git runs files here" in held and "cubicle apply s1 .gitconfig --force .gitconfig" in held
    )
    assert "unsafe: sub/HEAD (would make a repository git finds); never applied" in held
    assert "cubicle apply s1 .github/workflows/ci.yml --force .github/workflows/ci.yml" in held
    assert "cubicle apply s1 build/out.txt --include-ignored" in held
    assert ".gitconfig 2010-01-01 00:00:00.000000000 +0000: a name git apply could read as another" in held
    assert "cubicle apply s1 '.gitconfig 2010-01-01 00:00:00.000000000 +0000'" in held
    assert "esc.txt: it holds characters a terminal obeys" in held and "tool.bin: binary" in held
    assert "\x1b" not in text and "\x07" not in text


def test_a_patch_of_nothing_held_back_is_the_diffs_between_one_comment_line_and_the_note_on_trust() -> None:
    first, rest = patch.patch("s1", [_added("a.txt", "a\n")]).split("\n", 1)
    assert first.startswith("# cubicle changes s1 --diff: a patch")
    assert rest == textdiff.unified("a.txt", None, b"a\n") + patch.TRUST_NOTE + "\n"


def test_with_a_deletion_it_cannot_carry_the_patch_carries_no_entry_with_a_repository_name() -> None:
    """Apply judged ``sub`` no repository look-alike because it deletes the binary ``sub/HEAD``; a patch without
    that deletion would leave HEAD beside the new ``objects`` and ``refs``, so it carries neither."""
    gone = Change(path="sub/HEAD", kind=Kind.DELETED, type=FileType.FILE, previous=FileType.FILE, binary=True)
    text = patch.patch("s1", [gone, _added("sub/objects/a.txt", "a\n"), _added("sub/refs/b.txt", "b\n"), CHANGES[4]])
    assert "+++ b/notes.txt" in text and "+++ b/sub/" not in text
    assert "#   sub/objects/a.txt: a repository's name, and a deletion this patch cannot carry" in text
    assert "#   sub/HEAD: binary" in text


def _served(path: str, diff: str | None = None, kind: Kind = Kind.ADDED) -> Change:
    """A change as a hostile server lists it: ``apply``, whatever it is."""
    content = "x\n"
    return Change(
        path=path,
        kind=kind,
        type=FileType.FILE,
        size=2,
        disposition=Disposition.APPLY,
        diff=diff if diff is not None else textdiff.unified(path, None, content.encode()),
    )


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_what_a_hostile_server_calls_apply_is_judged_again_by_name_and_a_diff_must_be_its_own(tmp_path: Path) -> None:
    smuggled = textdiff.unified("ok.txt", None, b"fine\n") + textdiff.unified(".husky/pre-commit", None, b"evil\n")
    served = [
        _served(".husky/pre-commit"),
        _served(".github/workflows/x.yml"),
        _served(".gitconfig"),
        _served("src/.gitattributes"),
        _served(".git/hooks/post-checkout"),
        _served(".devcontainer/devcontainer.json"),
        _served("ok.txt", smuggled),  # a second file's diff after its own
        _served("named.txt", textdiff.unified("other.txt", None, b"x\n")),  # another file's headers
        _served("sql.txt", textdiff.unified("sql.txt", b"-- a comment\nkeep\n", b"keep\n"), Kind.MODIFIED),
    ]
    text = patch.patch("s1", served)
    (tmp_path / "sql.txt").write_text("-- a comment\nkeep\n")
    done = subprocess.run(["git", "apply", "-v"], cwd=tmp_path, input=text, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert written == ["sql.txt"] and (tmp_path / "sql.txt").read_text() == "keep\n"  # a removed `-- ` line is fine
    held = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    for path in (".husky/pre-commit", ".github/workflows/x.yml", ".gitconfig", "src/.gitattributes"):
        assert f"trusted: {path} (" in held and f"--force {path}" in held, path
    assert "discarded: .git/hooks/post-checkout (inside .git" in held
    assert "trusted: .devcontainer/devcontainer.json (the environment's definition" in held
    for path in ("ok.txt", "named.txt"):
        assert f"{path}: its diff is not a diff of exactly this file" in held, path
    assert patch.TRUST_NOTE in text


def test_a_patch_is_printed_only_when_it_is_inert() -> None:
    """`changes --patch` prints what it is given (a server's answer, with --server) only when a terminal would only
    draw it: what ``workspace.gitpatch`` makes always is."""
    from controller.cli.workspace import inert_patch
    from controller.workspace.gitpatch import Side, diff

    made = diff("a\x1b[2J.bin", None, Side("100644", b"\x1b]0;x\x07" + bytes(range(256))))
    assert inert_patch(("# c\n" + made + diff("crlf", None, Side("100644", b"a\r\n"))).encode())
    for hostile in (b"+\x1b[2J\n", b"+a\rb\n", b"\xff\n", "+\u202e\n".encode(), "+\u009b\n".encode()):
        assert not inert_patch(b"diff --git a/x b/x\n" + hostile), hostile


def _made() -> str:
    from controller.workspace.gitpatch import SYMLINK_MODE, Side, diff

    return "".join(
        [
            "# made by a server\n",
            diff("src/app.py", Side("100644", b"a\nb\n"), Side("100644", b"a\nc\n")),
            diff("data.bin", None, Side("100644", bytes(range(256)))),
            diff("run.sh", Side("100644", b"x\n"), Side("100755", b"x\n")),
            diff("link", None, Side(SYMLINK_MODE, b"src/app.py")),
            diff("gone.txt", Side("100644", b"bye\n"), None),
            diff('x b/q"u\tt\u00e9', None, Side("100644", b"hostile\n")),
            diff("sp ace", None, Side("100644", b"\n")),
            diff("x b/y", None, Side("100644", b"\n")),
            diff("trail ", None, Side("100644", b"\x00binary")),
        ]
    )


def test_a_servers_patch_passes_as_it_came_when_it_is_what_cubicle_makes() -> None:
    assert patch.served_patch("s1", _made()) == _made()


def test_a_servers_patch_loses_what_is_held_back_here_by_name() -> None:
    from controller.workspace.gitpatch import Side, diff

    extra = [
        diff(".github/workflows/ci.yml", None, Side("100644", b"on: push\n")),
        diff(".gitconfig", None, Side("100644", HOOK.encode())),
        diff(".git/hooks/pre-commit", None, Side("100755", b"#!/bin/sh\n")),
    ]
    served = patch.served_patch("s1", _made() + "".join(extra))
    assert served.endswith(_made().split("\n", 1)[1])  # the rest as it came
    head = served.split("\ndiff --git", 1)[0]
    assert "#   .github/workflows/ci.yml: " in head and "--force .github/workflows/ci.yml" in head
    assert "#   .gitconfig: " in head and "#   .git/hooks/pre-commit: " in head
    assert "fsmonitor" not in served and "pre-commit b/" not in served


@pytest.mark.parametrize(
    "smuggled",
    [
        "--- a/.gitconfig\n+++ b/.gitconfig\n@@ -0,0 +1 @@\n+x\n",  # a plain diff after a git one
        "diff --git a/x b/.gitconfig\nnew file mode 100644\n",  # two names
        "diff --git a/x b/x\nnew file mode 100644\nindex "
        + "0" * 40
        + ".."
        + "1" * 40
        + "\n--- /dev/null\n+++ b/x\n@@ -0,0 +1 @@\n+x\n+--- a/.gitconfig\n",  # a hunk past its count
        "diff --git a/x b/x\nrename from x\nrename to .gitconfig\n",
        "diff --git a/x b/x\nnew file mode 100644\nindex "
        + "0" * 40
        + ".."
        + "1" * 40
        + "\nGIT binary patch\nliteral 5\n",
    ],
)
def test_a_servers_patch_that_is_not_what_cubicle_makes_is_refused(smuggled: str) -> None:
    with pytest.raises(ValueError):
        patch.served_patch("s1", _made() + smuggled)


RED_TEAM_LINKS = (
    b"# hostile\n"
    b"diff --git a/etc-link b/etc-link\n"
    b"new file mode 120000\n"
    b"index 0000000000000000000000000000000000000000..34ed534fa65f0c6634f8606abb21db4120a3016c\n"
    b"--- /dev/null\n"
    b"+++ b/etc-link\n"
    b"@@ -0,0 +1 @@\n"
    b"+/etc\n"
    b"\\ No newline at end of file\n"
    b"diff --git a/up b/up\n"
    b"new file mode 120000\n"
    b"index 0000000000000000000000000000000000000000..dc9539742a07eb135a3ebc9a40c1c8efa377dde5\n"
    b"--- /dev/null\n"
    b"+++ b/up\n"
    b"@@ -0,0 +1 @@\n"
    b"+../../../../root\n"
    b"\\ No newline at end of file\n"
    b"diff --git a/hooks b/hooks\n"
    b"new file mode 120000\n"
    b"index 0000000000000000000000000000000000000000..cafb82e7f715f433dc6e3a20fd08fff176f28b0c\n"
    b"--- /dev/null\n"
    b"+++ b/hooks\n"
    b"@@ -0,0 +1 @@\n"
    b"+./.git/hooks\n"
    b"\\ No newline at end of file\n"
    b"diff --git a/wfl b/wfl\n"
    b"new file mode 120000\n"
    b"index 0000000000000000000000000000000000000000..58aef9b8cb23e31cec9594d47d059e05b5eec7a5\n"
    b"--- /dev/null\n"
    b"+++ b/wfl\n"
    b"@@ -0,0 +1 @@\n"
    b"+../.github/workflows\n"
    b"\\ No newline at end of file\n"
)
"""An independent red-team's served patch (issue 44): git-style links out of the tree and into ``.git``, which
``git apply`` writes as they are."""


def _sections(patch_text: str) -> list[str]:
    return ["diff --git" + part for part in patch_text.split("diff --git")[1:]]


def test_a_servers_patch_planting_links_a_plain_apply_never_writes_is_refused_whole_naming_each() -> None:
    text = RED_TEAM_LINKS.decode()
    with pytest.raises(ValueError, match="a symlink at etc-link that a plain apply never writes"):
        patch.served_patch("s1", text)
    said = {}
    for section in _sections(text):
        with pytest.raises(ValueError) as refused:
            patch.served_patch("s1", _made() + section)
        said[section.split()[2]] = str(refused.value)
    assert "(the symlink's target is absolute or empty)" in said["a/etc-link"]
    assert "at up " in said["a/up"] and "leaves the repository" in said["a/up"]
    assert "at hooks " in said["a/hooks"] and "points into .git" in said["a/hooks"]
    assert "at wfl " in said["a/wfl"] and "leaves the repository" in said["a/wfl"]


def _link(path: str, target: bytes, old: bytes | None = None) -> str:
    from controller.workspace.gitpatch import SYMLINK_MODE, Side, diff

    return diff(path, None if old is None else Side(SYMLINK_MODE, old), Side(SYMLINK_MODE, target))


@pytest.mark.parametrize(
    "links",
    [
        [_link("sub/x", b"../.Git/config")],  # .git in any case, reached by ..
        [_link("sub/x", b"./.GIT")],
        [_link("x", b"sub/../.git")],  # a climb after a name, which may be a link
        [_link("x", b"git~1/hooks")],  # .git's short name
        [_link("x", b".")],  # the root
        [_link("src/app.py", b"/etc/passwd", old=b"app.txt")],  # an existing link's target changed
        [_link("b", b"real"), _link("a", b"b/x")],  # through another link the patch makes
        [_link("B", b"real"), _link("a", b"b/x")],  # the same on a disk that folds case
        [_link("a", b"b"), _link("b", b"real")],  # at another link, whichever comes first
    ],
)
def test_a_servers_patch_with_a_link_apply_judges_unsafe_is_refused(links: list[str]) -> None:
    with pytest.raises(ValueError, match="that a plain apply never writes"):
        patch.served_patch("s1", _made() + "".join(links))


@pytest.mark.parametrize(
    "section",
    [
        "diff --git a/x b/x\nold mode 100644\nnew mode 120000\n",  # a file's old text becomes a target
        "diff --git a/x b/x\nindex "
        + "1" * 40
        + ".."
        + "2" * 40
        + " 120000\n--- a/x\n+++ b/x\n@@ -2 +2 @@\n-b\n+/etc\n",  # a hunk in the middle of a target
        "diff --git a/x b/x\nindex "
        + "1" * 40
        + ".."
        + "2" * 40
        + " 120000\n--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-a\n+ok\n /etc\n",  # context after: not the whole target
        "diff --git a/x b/x\nnew file mode 120000\nindex "
        + "0" * 40
        + ".."
        + "1" * 40
        + "\nGIT binary patch\nliteral 4\nHcmZ?d00001\n\nliteral 0\nHcmV?d00001\n\n",  # a target in base85
    ],
)
def test_a_servers_link_whose_target_the_patch_does_not_spell_whole_is_refused(section: str) -> None:
    with pytest.raises(ValueError, match="that a plain apply never writes"):
        patch.served_patch("s1", _made() + section)


def test_links_a_plain_apply_writes_pass_and_links_held_back_by_name_are_listed() -> None:
    fine = _link("docs/readme", b"../src/app.py") + _link("d/l", b"./f") + _link("d/e", b"../docs")
    assert patch.served_patch("s1", _made() + fine) == _made() + fine
    held = patch.served_patch("s1", _made() + _link(".github/workflows/x.yml", b"/etc/passwd"))
    assert "#   .github/workflows/x.yml: " in held and "/etc/passwd" not in held


def test_the_cli_prints_nothing_of_a_servers_patch_planting_links() -> None:
    import os
    import sys

    from tests.hostile_server import FakeServer, send

    routes = {"/v1/sessions/s1/changes": lambda writer: send(writer, "text/x-patch", RED_TEAM_LINKS)}
    with FakeServer(routes) as url:
        done = subprocess.run(
            [str(Path(sys.executable).parent / "cubicle"), "changes", "s1", "--patch", "--server", url],
            capture_output=True,
            env={**os.environ, "CUBICLE_API_TOKEN": "t", "COLUMNS": "200"},
            timeout=120,
            check=False,
        )
    said = " ".join(done.stderr.decode().split())
    assert done.returncode == 4 and done.stdout == b"", said
    assert "The server's patch was not printed: it makes a symlink at etc-link" in said and "Traceback" not in said


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_piped_diff_of_a_servers_listing_carries_no_link(tmp_path: Path) -> None:
    """A text diff makes a file, never a link: a listed link whose diff a server wrote spelling its target is left
    out and listed, so ``git apply`` writes nothing at its path."""
    link = Change(
        path="etc-link",
        kind=Kind.ADDED,
        type=FileType.SYMLINK,
        target="/etc",
        disposition=Disposition.APPLY,
        diff=textdiff.unified("etc-link", None, b"/etc"),
    )
    text = patch.patch("s1", [link, _served("ok.txt")])
    assert "#   etc-link: binary, a directory, a link" in text
    done = subprocess.run(["git", "apply"], cwd=tmp_path, input=text, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ok.txt"]
