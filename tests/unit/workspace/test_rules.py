"""Pieces that need no mount: ignore rules, baseline, diffs, symlink judgement, volume options."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from controller.errors import WorkspaceError
from controller.sandbox.docker import volume_kwargs
from controller.workspace import textdiff
from controller.workspace.baseline import is_git_path, record
from controller.workspace.changes import symlink_problem
from controller.workspace.ignore import EXCLUDE, IgnoreRules
from controller.workspace.layer import Layer, LayerInfo


def test_ignore_rules_follow_git_precedence() -> None:
    rules = IgnoreRules(
        {"": "*.log\nbuild/\n!keep.log\n", "sub": "!*.log\nlocal/\n", EXCLUDE: "secret.txt\nkeep.log\n"}
    )
    assert rules.ignored("a.log", False) and not rules.ignored("keep.log", False)
    assert not rules.ignored("sub/a.log", False)  # the deeper file re-includes
    assert rules.ignored("build", True) and rules.ignored("build/x/y.c", False)
    assert not rules.ignored("build", False)  # "build/" matches directories only
    assert rules.ignored("sub/local/x", False) and not rules.ignored("local/x", False)
    assert rules.ignored("secret.txt", False) and rules.ignored("deep/secret.txt", False)


def test_git_paths_in_any_case() -> None:
    for path in (".git", ".git/config", "a/.GIT/hooks/x", "a/b/.Git", ".g\u200cit/config", ".git. ", "GIT~1/hooks"):
        assert is_git_path(path)
    for path in (".gitignore", "a/.git2/x", "git"):
        assert not is_git_path(path)


@pytest.mark.parametrize(
    ("link", "target", "ok"),
    [
        ("a/l", "b", True),
        ("a/l", "../c", True),
        ("l", "../x", False),
        ("a/l", "../../x", False),
        ("l", "/etc/passwd", False),
        ("l", "", False),
        ("l", ".", False),
        ("a/l", "../.git/config", False),
        ("a/l", "x/.GIT", False),
        ("a/l", "./../c", True),
        ("a/l", "./b/../c", False),  # b may be a symlink: "b/.." climbs from where it leads
        ("l", "sub/deep/up/../..", False),  # with sub/deep/up -> .., this is the repository's parent
    ],
)
def test_symlink_targets_judged_by_their_text(link: str, target: str, ok: bool) -> None:
    assert (symlink_problem(link, target) == "") is ok


def test_baseline_records_everything_but_git_without_following_links(tmp_path: Path) -> None:
    (tmp_path / ".git/info").mkdir(parents=True)
    (tmp_path / ".git/info/exclude").write_text("*.tmp\n")
    (tmp_path / "sub/.GIT").mkdir(parents=True)
    (tmp_path / "sub/.GIT/config").write_text("x")
    (tmp_path / "sub/.gitignore").write_text("out/\n")
    (tmp_path / "f").write_text("hello")
    os.symlink("/etc", tmp_path / "etc-link")
    base = record(tmp_path)
    assert sorted(base.paths()) == ["etc-link", "f", "sub", "sub/.gitignore"]
    assert base.get("etc-link").target == "/etc"  # type: ignore[union-attr]
    assert base.get("f").size == 5  # type: ignore[union-attr]
    rules = IgnoreRules(base.ignore_files)
    assert rules.ignored("a.tmp", False) and rules.ignored("sub/out/x", False)


def test_diffs_are_bounded() -> None:
    big = b"x\n" * (textdiff.MAX_LINES + 1)  # past difflib's bound: all removals, then all additions
    assert (textdiff.unified("f", b"", big) or "").endswith("@@ -0,0 +1,5001 @@\n" + "+x\n" * 5001)
    assert textdiff.unified("f", b"\0" * (textdiff.MAX_INPUT + 1), b"") is None, "too large to read whole"
    wide = b"".join(b"%040d\n" % i for i in range(4000))
    diff = textdiff.unified("f", None, wide)
    assert diff is not None and len(diff) <= textdiff.MAX_OUTPUT + 100 and diff.endswith("[diff truncated]\n")
    assert (
        textdiff.is_binary(b"a\0b") and textdiff.is_binary(b"\xff\0\xfe bad") and not textdiff.is_binary("é".encode())
    )
    assert not textdiff.is_binary(b"\xff\xfe bad") and not textdiff.is_binary(b"\x01" * 400 + b"\nrun()\n"), "no NUL"


def test_volume_options_name_the_checkout_through_the_layers_link_and_refuse_what_they_cannot_carry(
    tmp_path: Path,
) -> None:
    (tmp_path / "s").mkdir()
    layer = Layer(tmp_path / "s", LayerInfo(repo=str(tmp_path / "repo"), uid=1000, gid=1000, dev=0, ino=0))
    opts = volume_kwargs(layer, "v", {"a": "b"})
    assert opts["driver"] == "local" and opts["driver_opts"]["type"] == "overlay"
    assert opts["driver_opts"]["o"].endswith(",userxattr,redirect_dir=nofollow,metacopy=off,index=off")
    assert opts["driver_opts"]["o"].startswith(f"lowerdir={tmp_path}/s/lower,"), "never the repository's own path"
    for odd in ("my repo", "re,po", "re:po", "re=po", "re\npo"):  # the link carries any name the kernel takes
        oddly = Layer(tmp_path / "s", LayerInfo(repo=str(tmp_path / odd), uid=0, gid=0, dev=0, ino=0))
        assert volume_kwargs(oddly, "v", {})["driver_opts"]["o"].startswith(f"lowerdir={tmp_path}/s/lower,")
        assert os.readlink(tmp_path / "s" / "lower") == str(tmp_path / odd)
    for bad in ("s,x", "s:x", "s\tx"):  # the layer's own folder is named in the options as it is
        (tmp_path / bad).mkdir()
        with pytest.raises(WorkspaceError):
            volume_kwargs(
                Layer(tmp_path / bad, LayerInfo(repo=str(tmp_path / "repo"), uid=0, gid=0, dev=0, ino=0)), "v", {}
            )
