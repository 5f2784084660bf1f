"""The layer made ready for deletions at the quota (``workspace.headroom``), on a real overlay mount.

Mirroring the checkout's directories and sowing the seed must change nothing anyone sees:
the merged tree, the listed changes. The exact quota itself is tested on a real engine
(tests/integration/test_disk_quota.py); here, what the kernel makes of the prepared layer.
"""

from __future__ import annotations

import os
import shutil
import stat

import pytest

from controller.errors import WorkspaceError
from controller.workspace import apply, changes, headroom, revert
from controller.workspace import layer as layers
from controller.workspace.baseline import load_rules
from controller.workspace.layer import SEED
from tests.unit.workspace.overlay import OWNER, Workspace, chown_tree, snapshot
from tests.unit.workspace.test_setup_layer import run_setup

MIRRORED = ["docs", "docs/sub", "old", "src"]  # every directory of the checkout but .git


def test_a_ready_layer_shows_the_checkout_as_it_is_and_lists_no_change(ws: Workspace) -> None:
    ws.seeded = headroom.ready(ws.layer)
    assert ws.seeded and ws.layer.info.mirrored
    made = sorted(str(p.relative_to(ws.layer.upper)) for p in ws.layer.upper.rglob("*"))
    assert made == MIRRORED
    for rel in MIRRORED:
        up, low = os.lstat(ws.layer.upper / rel), os.lstat(ws.repo / rel)
        assert [up.st_mode, up.st_uid, up.st_gid, up.st_mtime_ns] == [
            low.st_mode,
            low.st_uid,
            low.st_gid,
            low.st_mtime_ns,
        ]

    ws.agent(f"test -f {SEED} && rm {SEED}")  # what the toolbox does as it starts
    assert snapshot(ws.mnt) == snapshot(ws.repo)
    assert changes.scan(ws.layer) == []


def test_deletions_after_the_seed_share_its_whiteout_and_are_listed_alone(ws: Workspace) -> None:
    ws.seeded = headroom.ready(ws.layer)
    parents = [os.lstat(ws.layer.upper / rel).st_ino for rel in ("docs/sub", "old")]
    ws.agent(f"rm {SEED} && rm docs/sub/b.txt old/gone.txt README.md")
    listed = {(c.path, c.kind.value) for c in changes.scan(ws.layer)}
    assert listed == {("docs/sub/b.txt", "deleted"), ("old/gone.txt", "deleted"), ("README.md", "deleted")}
    whiteouts = [os.lstat(ws.layer.upper / rel) for rel in (SEED, "docs/sub/b.txt", "old/gone.txt", "README.md")]
    assert all(stat.S_ISCHR(st.st_mode) and st.st_rdev == 0 for st in whiteouts)
    assert len({st.st_ino for st in whiteouts}) == 1, "one inode: overlay links each whiteout to the first"
    # no parent was copied up for them: the upper directories made ahead hold the whiteouts
    assert [os.lstat(ws.layer.upper / rel).st_ino for rel in ("docs/sub", "old")] == parents


def test_the_next_mount_sees_the_seed_again_and_the_agent_s_deletions_still(ws: Workspace) -> None:
    ws.seeded = headroom.ready(ws.layer)
    ws.agent(f"rm {SEED} src/util.py")
    ws.stop()
    assert headroom.ready(ws.layer)
    assert not os.path.lexists(ws.layer.upper / SEED), "the last mount's whiteout of the seed is cleared"
    ws.agent(f"test -f {SEED} && rm {SEED} && test ! -e src/util.py")
    assert [(c.path, c.kind.value) for c in changes.scan(ws.layer)] == [("src/util.py", "deleted")]


def test_the_agent_s_own_file_by_the_seed_s_name_is_kept_and_no_seed_is_sown(ws: Workspace) -> None:
    ws.seeded = headroom.ready(ws.layer)
    ws.agent(f"rm {SEED} && echo mine > {SEED}")
    ws.stop()
    ws.seeded = headroom.ready(ws.layer)
    assert not ws.seeded
    ws.agent(f"grep -qx mine {SEED}")
    assert [(c.path, c.kind.value) for c in changes.scan(ws.layer)] == [(SEED, "added")]


def test_a_checkout_with_a_file_by_the_seed_s_name_gets_no_seed(ws: Workspace) -> None:
    (ws.repo / SEED).write_text("the user's\n")
    assert not headroom.ready(ws.layer)
    assert ws.layer.info.mirrored  # the directories still are


def test_mirroring_leaves_what_the_agent_did_and_makes_nothing_beneath_it(ws: Workspace) -> None:
    ws.agent("rm -r docs old && echo x > old && rm -r src && mkdir src && touch src/new.py")  # src: opaque
    before = sorted((c.path, c.kind.value) for c in changes.scan(ws.layer))
    merged = snapshot(ws.mnt)
    ws.stop()
    ws.seeded = headroom.ready(ws.layer)
    assert not (ws.layer.upper / "docs").is_dir() and not os.path.lexists(ws.layer.upper / "docs/sub")
    ws.agent(f"rm {SEED}")
    assert snapshot(ws.mnt) == merged
    assert sorted((c.path, c.kind.value) for c in changes.scan(ws.layer)) == before


def test_an_apply_keeps_the_directories_made_ahead(ws: Workspace) -> None:
    ws.seeded = headroom.ready(ws.layer)
    ws.agent(f"rm {SEED} docs/sub/b.txt && echo new > docs/sub/c.txt")
    ws.stop()
    assert sorted(apply(ws.layer).applied) == ["docs/sub/b.txt", "docs/sub/c.txt"]
    assert (ws.layer.upper / "docs/sub").is_dir() and not any((ws.layer.upper / "docs/sub").iterdir())
    assert changes.scan(ws.layer) == []


def test_a_mirror_cut_short_leaves_only_right_directories_even_without_write_permission(ws: Workspace) -> None:
    os.chmod(ws.repo / "docs", 0o555)
    rules = load_rules(ws.layer.baseline_file)
    fds = [os.open(path, os.O_RDONLY | os.O_DIRECTORY) for path in (ws.repo, ws.layer.upper, ws.layer.work)]
    try:
        headroom.Mirror(rules, 2, fds[2]).walk(fds[0], fds[1], None, "")  # docs and docs/sub, then the budget is used
    finally:
        for fd in fds:
            os.close(fd)
    assert os.listdir(ws.layer.work) == [], "each was made there, then moved into place"
    assert sorted(str(p.relative_to(ws.layer.upper)) for p in ws.layer.upper.rglob("*")) == ["docs", "docs/sub"]
    assert stat.S_IMODE(os.lstat(ws.layer.upper / "docs").st_mode) == 0o555
    assert changes.scan(ws.layer) == []


def test_ignored_directories_are_not_made_ahead(ws: Workspace) -> None:
    (ws.repo / "build" / "out").mkdir(parents=True)  # build/ is in the checkout's .gitignore
    ws.restart()  # a baseline with it
    assert headroom.ready(ws.layer)
    assert not (ws.layer.upper / "build").exists() and (ws.layer.upper / "docs").is_dir()


def test_a_directory_with_the_setup_s_mode_is_no_change(ws: Workspace) -> None:
    tree, _ = run_setup(ws, "chmod 0777 docs && echo made > docs/made.txt")
    layers.set_setup(ws.layer, tree)
    assert stat.S_IMODE(os.lstat(tree / "docs").st_mode) == 0o777, "setup's tree keeps the directory's new mode"
    ws.seeded = headroom.ready(ws.layer)
    assert stat.S_IMODE(os.lstat(ws.layer.upper / "docs").st_mode) == 0o777, "as the merged view showed it"
    ws.agent(f"rm {SEED}")
    assert changes.scan(ws.layer) == []


def test_a_file_the_user_adds_by_the_seed_s_name_shows_as_hidden_and_is_never_deleted(ws: Workspace) -> None:
    ws.seeded = headroom.ready(ws.layer)
    (ws.repo / SEED).write_text("the user's, made during the session\n")
    ws.agent(f"rm {SEED}")  # the toolbox's unlink: the seed hid the user's file, the whiteout hides it now
    listed = changes.scan(ws.layer)
    assert [(c.path, c.kind.value) for c in listed] == [(SEED, "deleted")], "the review shows what the agent sees"
    ws.stop()
    assert apply(ws.layer).conflicts, "not in the baseline: the user made it, so applying its deletion conflicts"
    assert (ws.repo / SEED).read_text() == "the user's, made during the session\n"
    assert not headroom.ready(ws.layer), "the next mount has no seed: the checkout has the name now"


def test_a_setup_goes_beneath_mirrored_directories_but_not_beneath_the_agent_s_own(ws: Workspace) -> None:
    tree, _ = run_setup(ws, "echo a > made.txt")
    other, _ = run_setup(ws, "echo b > other.txt", "setup2")
    layers.set_setup(ws.layer, tree)
    headroom.ready(ws.layer)
    layers.set_setup(ws.layer, other)  # only mirrored directories: nothing was written over the first setup
    for script in ("rm -r old && mkdir old", "chmod 0700 docs"):  # an opaque directory; a mode of the agent's
        layers.set_setup(ws.layer, tree)
        ws.agent(script)
        ws.stop()
        with pytest.raises(WorkspaceError, match="keeps that one"):
            layers.set_setup(ws.layer, other)
        ws.restart()


def test_what_an_apply_wrote_and_a_revert_took_back_does_not_come_back_as_a_change(ws: Workspace) -> None:
    ws.seeded = headroom.ready(ws.layer)
    ws.agent(f"rm {SEED} && mkdir newdir && echo x > newdir/f && chmod 700 docs")
    ws.stop()
    assert sorted(apply(ws.layer).applied) == ["docs", "newdir", "newdir/f"]
    assert changes.scan(ws.layer) == []
    assert revert(ws.layer).conflicts == []
    assert changes.scan(ws.layer) == [], "reverted changes stay out of the layer"
    assert stat.S_IMODE(os.lstat(ws.layer.upper / "docs").st_mode) == 0o755 and not (ws.layer.upper / "newdir").exists()


def test_a_directory_made_in_a_setgid_one_settles_after_its_apply(ws: Workspace) -> None:
    os.chmod(ws.repo / "src", 0o2755)
    ws.restart()
    ws.seeded = headroom.ready(ws.layer)
    ws.agent(f"rm {SEED} && mkdir src/pkg && touch src/pkg/__init__.py")
    ws.stop()
    apply(ws.layer)
    assert changes.scan(ws.layer) == []


def test_what_the_user_does_to_the_checkout_s_directories_meanwhile_is_no_change_of_the_agent_s(ws: Workspace) -> None:
    ws.seeded = headroom.ready(ws.layer)
    ws.agent(f"rm {SEED} && echo mine > docs/new.txt")
    ws.stop()
    os.chmod(ws.repo / "docs", 0o700)
    shutil.rmtree(ws.repo / "old")
    assert [(c.path, c.kind.value) for c in changes.scan(ws.layer)] == [("docs/new.txt", "added")]


def test_a_setup_switch_after_a_seeded_mount_makes_the_directories_again_over_the_new_tree(ws: Workspace) -> None:
    first, _ = run_setup(ws, "echo a > made.txt")
    second, _ = run_setup(ws, "chmod 0777 docs && echo b > docs/made.txt", "setup2")
    layers.set_setup(ws.layer, first)
    ws.seeded = headroom.ready(ws.layer)
    ws.agent(f"rm {SEED}")
    ws.stop()
    layers.set_setup(ws.layer, second)  # the seed's whiteout and the mirror are not the agent's writing
    assert os.listdir(ws.layer.upper) == [] and not ws.layer.info.mirrored
    ws.seeded = headroom.ready(ws.layer)
    assert stat.S_IMODE(os.lstat(ws.layer.upper / "docs").st_mode) == 0o777
    ws.agent(f"rm {SEED} && test -f docs/made.txt")
    assert changes.scan(ws.layer) == []


def test_a_seed_the_setup_tree_has_gets_no_seed(ws: Workspace) -> None:
    tree, _ = run_setup(ws, f"echo from-setup > {SEED}")
    layers.set_setup(ws.layer, tree)
    assert not headroom.ready(ws.layer)


def test_a_revert_after_the_agent_removed_the_applied_directory_ends_whole(ws: Workspace) -> None:
    ws.seeded = headroom.ready(ws.layer)
    ws.agent(f"rm {SEED} && echo new > docs/new.txt")
    ws.stop()
    apply(ws.layer)
    ws.agent("rm -rf docs")  # a whiteout where the revert's step has its parent
    ws.stop()
    assert revert(ws.layer).conflicts == [] and not (ws.repo / "docs/new.txt").exists()
    with pytest.raises(WorkspaceError):
        revert(ws.layer)  # nothing left to revert: the first one was recorded whole
    assert ("docs", "deleted") in {(c.path, c.kind.value) for c in changes.scan(ws.layer)}


def test_a_revert_keeps_a_mode_the_agent_gave_after_the_apply(ws: Workspace) -> None:
    ws.seeded = headroom.ready(ws.layer)
    ws.agent(f"rm {SEED} && chmod 700 docs")
    ws.stop()
    apply(ws.layer)
    ws.agent("chmod 750 docs")
    ws.stop()
    revert(ws.layer)
    assert [(c.path, c.kind.value, c.mode) for c in changes.scan(ws.layer)] == [("docs", "modified", 0o750)]


def test_an_opaque_directory_whose_own_change_stays_unapplied_still_shows_what_was_applied_in_it(ws: Workspace) -> None:
    (ws.repo / ".devcontainer").mkdir()
    (ws.repo / ".devcontainer/devcontainer.json").write_text('{"image": "old"}\n')
    chown_tree(ws.repo, OWNER)
    ws.restart()
    ws.seeded = headroom.ready(ws.layer)
    script = "rm -rf .devcontainer && mkdir .devcontainer && chmod 700 .devcontainer"
    ws.agent(f'rm {SEED} && {script} && echo \'{{"image": "new"}}\' > .devcontainer/devcontainer.json')
    ws.stop()
    assert apply(ws.layer, force=[".devcontainer/devcontainer.json"]).applied == [".devcontainer/devcontainer.json"]
    listed = [(c.path, c.kind.value) for c in changes.scan(ws.layer)]
    assert listed == [(".devcontainer", "modified")], "the unapplied mode only, never a deletion of the applied file"
