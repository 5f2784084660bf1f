"""The keys of an environment's setup trees and images (``environment.cachekeys``), without Docker: a checkout's
stay what they were; a remote's are its URL's, so two commits whose definition inputs are the same share them, and
any change to an input, another URL or another owner does not."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from controller.environment import cachekeys, definition, setups
from controller.environment.definition import load, materials
from controller.wire.envspec import Environment
from controller.workspace.layer import Layer, LayerInfo

URL = "https://git.example.com/team/shop.git"
SETUP = ("sha256:image", "pip install -r requirements.txt", {"MODE": "test"}, "none")
DEFINITION = '[build_args]\nPY = "3.12"\n'
TOML = f'dockerfile = "Dockerfile"\nsetup = "./tools/setup.sh"\n{DEFINITION}'


def tree(root: Path, name: str, files: dict[str, str]) -> Path:
    """A commit's files, as ``gittree`` would write them: one directory per commit."""
    where = root / name
    for rel, text in files.items():
        (where / rel).parent.mkdir(parents=True, exist_ok=True)
        (where / rel).write_text(text)
    return where


def layer(repo: Path, uid: int = 1000, gid: int = 1000) -> Layer:
    info = os.stat(repo)
    return Layer(repo.parent / "layer", LayerInfo(repo=str(repo), uid=uid, gid=gid, dev=info.st_dev, ino=info.st_ino))


def key(repo: Path, url: str | None, inputs: str = "inputs", **owner: int) -> str:
    return cachekeys.setup_key(*SETUP, cachekeys.setup_origin(layer(repo, **owner), url), inputs)


def test_a_checkouts_setup_key_is_the_one_made_before_remotes_existed(tmp_path: Path) -> None:
    repo = tree(tmp_path, "checkout", {"README.md": "hi\n"})
    info = os.stat(repo)
    before = {
        "image": SETUP[0],
        "command": SETUP[1],
        "env": SETUP[2],
        "network": SETUP[3],
        "repo": str(repo),
        "dev": info.st_dev,
        "ino": info.st_ino,
        "inputs": "inputs",
    }
    assert key(repo, None) == hashlib.sha256(json.dumps(before, sort_keys=True).encode()).hexdigest()[:32]
    moved = tree(tmp_path, "copy", {"README.md": "hi\n"})
    assert key(moved, None) != key(repo, None)  # another checkout: its own setups


def test_a_remotes_setup_key_is_its_urls_for_every_commit_and_changes_with_what_decides_the_setup(
    tmp_path: Path,
) -> None:
    first = tree(tmp_path, "a" * 40, {"README.md": "one\n"})
    second = tree(tmp_path, "b" * 40, {"README.md": "two\n"})
    shared = key(first, URL)
    assert key(second, URL) == shared
    assert key(first, URL + "x") != shared  # another URL never shares a tree
    assert key(first, "https://git.example.com/team/other.git") != shared
    assert key(first, None) != shared  # nor does a checkout of the same path
    assert key(first, URL, inputs="other") != shared
    assert key(first, URL, uid=1001, gid=1000) != shared  # the tree's files belong to another user
    own = cachekeys.setup_origin(layer(first), URL, own_tree=True)
    assert cachekeys.setup_key(*SETUP, own, "inputs") != shared
    assert cachekeys.setup_key(*SETUP, cachekeys.setup_origin(layer(second), URL, own_tree=True), "inputs") not in (
        shared,
        cachekeys.setup_key(*SETUP, own, "inputs"),
    )


def test_the_setup_inputs_hash_is_the_same_for_two_commits_and_misses_on_any_input(tmp_path: Path) -> None:
    files = {
        ".cubicle/environment.toml": 'setup = "./tools/setup.sh"\n',
        "requirements.txt": "pytest\n",
        "tools/setup.sh": "pip install -r requirements.txt\n",
        "src/app.py": "print(1)\n",
    }
    first = tree(tmp_path, "one", files)
    second = tree(tmp_path, "two", {**files, "src/app.py": "print(2)\n"})  # not an input
    env = load(first)
    assert definition.setup_inputs_hash(env, second) == definition.setup_inputs_hash(env, first)
    changed = [
        {"requirements.txt": "pytest\nrequests\n"},  # a manifest
        {"tools/setup.sh": "pip install -e .\n"},  # the program the setup runs, matched by no glob
        {".cubicle/environment.toml": 'setup = "./tools/setup.sh"\n# a comment\n'},  # the definition
    ]
    for n, change in enumerate(changed):
        other = tree(tmp_path, f"changed-{n}", {**files, **change})
        assert definition.setup_inputs_hash(env, other) != definition.setup_inputs_hash(env, first), change
    executable = tree(tmp_path, "executable", files)
    (executable / "tools" / "setup.sh").chmod(0o755)  # the same bytes, another mode
    assert definition.setup_inputs_hash(env, executable) != definition.setup_inputs_hash(env, first)


def test_a_setup_program_outside_the_repository_is_hashed_as_its_link_never_read(tmp_path: Path) -> None:
    secret = tmp_path / "host-secret.sh"
    secret.write_text("one\n")
    repo = tree(tmp_path, "repo", {"README.md": "hi\n"})
    (repo / "tools").mkdir()
    (repo / "tools" / "setup.sh").symlink_to(secret)
    env = Environment(setup="./tools/setup.sh", setup_inputs=())
    linked = definition.setup_inputs_hash(env, repo)
    secret.write_text("two\n")
    assert definition.setup_inputs_hash(env, repo) == linked  # the host's file is never read
    (repo / "tools" / "setup.sh").unlink()
    assert definition.setup_inputs_hash(env, repo) != linked  # missing now
    (repo / "tools" / "setup.sh").symlink_to("/opt/elsewhere.sh")
    assert definition.setup_inputs_hash(env, repo) != linked  # another target


@pytest.mark.parametrize("setup", [None, "pip install .", "/usr/local/bin/setup", "make deps"])
def test_a_setup_with_no_program_of_the_repository_hashes_its_inputs_only(tmp_path: Path, setup: str | None) -> None:
    repo = tree(tmp_path, "repo", {"requirements.txt": "pytest\n"})
    assert definition.setup_program(setup) is None
    with_setup = Environment(setup=setup, setup_inputs=("requirements.txt",))
    without = Environment(setup_inputs=("requirements.txt",))
    assert definition.setup_inputs_hash(with_setup, repo) == definition.setup_inputs_hash(without, repo)


def test_a_remotes_image_key_is_its_urls_for_every_commit_whose_build_is_the_same(tmp_path: Path) -> None:
    files = {".cubicle/environment.toml": TOML, "Dockerfile": "FROM base\nCOPY . /app\n", "src/app.py": "1\n"}
    first = tree(tmp_path, "one", files)
    second = tree(tmp_path, "two", {**files, ".cubicle/environment.toml": TOML.replace("setup.sh", "other.sh")})
    third = tree(tmp_path, "three", {**files, "src/app.py": "2\n"})  # in the build's context
    env = load(first)

    def image_key(repo: Path, url: str | None) -> str:
        found = materials(env, repo)
        return cachekeys.image_key(found.build_hash, "layer", "", "", cachekeys.image_scope(repo, url))

    assert image_key(second, URL) == image_key(first, URL)  # the setup is not part of the image
    assert image_key(third, URL) != image_key(first, URL)
    assert image_key(first, URL + "x") != image_key(first, URL)
    assert image_key(first, None) != image_key(second, None)  # a checkout's images are its own
    assert cachekeys.image_scope(first, None) == str(first) and cachekeys.image_scope(first, URL) == URL


def test_a_setup_tree_that_would_hide_a_file_of_another_commit_is_named_and_left_whole(tmp_path: Path) -> None:
    made = tree(tmp_path, "setup", {".venv/bin/python": "#!\n", "src/app.egg-info/PKG-INFO": "x\n"})
    (made / "src").mkdir(exist_ok=True)
    first = tree(tmp_path, "one", {"src/app.py": "1\n"})
    later = tree(tmp_path, "two", {"src/app.py": "1\n", "src/app.egg-info/PKG-INFO": "committed\n"})
    assert setups.shadowing(made, first) == []
    assert setups.shadowing(made, later) == ["src/app.egg-info/PKG-INFO"]
    assert (made / "src" / "app.egg-info" / "PKG-INFO").read_text() == "x\n"  # only named
