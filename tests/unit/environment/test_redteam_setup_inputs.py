"""Red-team findings (setup step): the setup's cache key must read the checkout boundedly.

The key once hashed its inputs through ``pathlib.glob``, which follows a symlinked directory
named by a pattern: a cloned repository with ``host -> /`` and ``setup_inputs = ["host/**/x"]``
made the controller walk the host's whole filesystem (11 s, then a RecursionError), and one
matching file was read into memory whole. The key now hashes ``environment.setup_inputs_hash``,
the bounded walker; these tests hold it to that.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from controller.environment import setup_inputs_hash
from controller.environment.definition import MAX_INPUT_BYTES
from controller.errors import DefinitionError
from controller.wire.envspec import Environment


def test_setup_inputs_never_walk_out_of_the_repository_through_a_symlink(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, outside = tmp_path / "repo", tmp_path / "outside"
    (outside / "deep/er").mkdir(parents=True)
    (outside / "deep/er/secret.txt").write_text("host\n")
    repo.mkdir()
    (repo / "pyproject.toml").write_text("[project]\n")
    os.symlink(outside, repo / "host")  # a repository may hold any symlink; git clones them
    listed: list[str] = []
    scandir = os.scandir

    def spy(path: object = ".") -> object:
        listed.append(os.fspath(path))  # type: ignore[arg-type]
        return scandir(path)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "scandir", spy)
    setup_inputs_hash(Environment(setup_inputs=("pyproject.toml", "host/**/*.txt")), repo)
    walked = sorted({p for p in listed if os.path.realpath(p).startswith(str(outside))})
    assert not walked, f"the setup's inputs were looked for outside the repository: {walked}"


def test_one_setup_input_larger_than_the_bound_is_refused_not_read_whole(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    big = repo / "requirements-big.txt"  # matched by the default inputs' requirements*.txt
    with open(big, "wb") as f:
        f.truncate(MAX_INPUT_BYTES + (16 << 20))  # an agent can apply up to 1 GiB; sparse here to save disk
    with pytest.raises(DefinitionError):
        setup_inputs_hash(Environment(setup_inputs=("requirements*.txt",)), repo)
