"""What a remote session notes and refuses: a Dockerfile built only when allowed, the submodules it leaves empty."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.config import Settings
from controller.errors import ForbiddenRepoError, ImageNotAllowedError
from controller.server.origins import Origins, noting_submodules, refuse_remote_build
from controller.wire.bodies import PushRequest
from controller.wire.envspec import Environment
from controller.wire.sessionrecord import Source

SOURCE = Source(url="https://git.example.com/team/app.git", ref=None, commit="a" * 40)


def test_a_remote_dockerfile_is_refused_naming_the_setting_unless_allowed() -> None:
    building = Environment(dockerfile=".cubicle/Dockerfile")
    with pytest.raises(ImageNotAllowedError, match="builds no remote") as refused:
        refuse_remote_build(building, SOURCE, allowed=False)
    assert "CUBICLE_GIT_ALLOW_BUILDS" in refused.value.hint
    refuse_remote_build(building, SOURCE, allowed=True)


def test_an_image_packages_or_the_default_need_no_permission() -> None:
    for environment in (Environment(), Environment(image="python:3.12-slim"), Environment(packages=["make"])):
        refuse_remote_build(environment, SOURCE, allowed=False)


def test_the_submodules_a_tree_leaves_empty_are_named_in_a_warning() -> None:
    environment = Environment(warnings=("an ignored key",))
    assert noting_submodules(environment, ()) is environment
    many = tuple(f"vendor/lib{n}" for n in range(25))
    noted = noting_submodules(environment, ("third\x1bparty", *many))
    assert noted.warnings[0] == "an ignored key"
    assert "third\\x1bparty" in noted.warnings[1] and "vendor/lib18" in noted.warnings[1]
    assert "vendor/lib19" not in noted.warnings[1] and noted.warnings[1].endswith("and 6 more")


async def test_a_push_through_the_server_is_admitted_by_its_list_as_a_fetch_is(tmp_path: Path) -> None:
    """A pattern the operator removed since the session began stops its pushes through the server: nothing is
    built or sent. (The CLI's own user, ``typed``, may push where it fetched.)"""
    origins = Origins(Settings(data_dir=tmp_path, git_remotes=[]))  # type: ignore[call-arg]
    with pytest.raises(ForbiddenRepoError, match="CUBICLE_GIT_REMOTES"):
        await origins.push(None, "s_1", SOURCE, "task", PushRequest(branch="cubicle/x"))  # type: ignore[arg-type]
