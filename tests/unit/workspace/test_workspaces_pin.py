"""Which checkouts a session may pin, decided when the session is created (not when its sandbox starts)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from controller.errors import ForbiddenRepoError, RepoError
from controller.workspace.manager import pin


def owned(path: Path) -> Path:
    path.mkdir(parents=True)
    if os.geteuid() == 0:
        os.chown(path, 1000, 1000)
    return path


def test_pin_resolves_symlinks_to_the_real_path(tmp_path: Path) -> None:
    repo = owned(tmp_path / "repo")
    (tmp_path / "link").symlink_to(repo)
    assert pin(tmp_path / "link") == repo


def test_a_space_is_fine(tmp_path: Path) -> None:
    assert pin(owned(tmp_path / "my project")) == tmp_path / "my project"


@pytest.mark.parametrize("name", ["a,b", "a:b", "a=b", "tab\there", "back\\slash"])
def test_a_path_overlay_options_cannot_carry_is_refused_at_once(tmp_path: Path, name: str) -> None:
    with pytest.raises(RepoError, match="mount options"):
        pin(owned(tmp_path / name))


def test_a_plain_link_to_such_a_path_does_not_help(tmp_path: Path) -> None:
    (tmp_path / "plain").symlink_to(owned(tmp_path / "has,comma"))
    with pytest.raises(RepoError, match="mount options"):
        pin(tmp_path / "plain")


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can make a root-owned directory here")
def test_a_root_owned_repository_is_refused(tmp_path: Path) -> None:
    repo = tmp_path / "rooted"
    repo.mkdir()
    with pytest.raises(ForbiddenRepoError, match="owned by root"):
        pin(repo)
