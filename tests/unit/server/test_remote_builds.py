"""A remote repository's Dockerfile is built only when the operator allows it; an image it names is not a build."""

from __future__ import annotations

import pytest

from controller.errors import ImageNotAllowedError
from controller.server.origins import refuse_remote_build
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
