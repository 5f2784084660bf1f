"""Apply, conflicts and revert against a real checkout owned by uid 1000."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from controller.errors import LayerMissingError, NotFoundError, RepoChangedError
from controller.wire.changeset import FileType
from controller.workspace import apply, journal, open_layer, revert, scan
from controller.workspace import layer as layers
from controller.workspace.apply import open_checkout
from controller.workspace.checkout import NEW_DIR_MODE, Checkout
from tests.unit.workspace.overlay import OWNER, Workspace, repo_beside, snapshot

TURN = (
    "printf 'v2\\n' > src/app.py; echo new > new.txt; rm old/gone.txt; rm -rf docs; mkdir docs; echo d > docs/d.txt;"
    "chmod 755 src/util.py; cp /bin/true suid; chmod 6755 suid; mkfifo pipe; ln -s src/app.py link;"
    "ln -s ../outside/secret.txt escape; echo evil >> .git/config; mkdir -p sub/.GIT; echo x > sub/.GIT/config;"
    "mkdir -p empty; echo l > app.log"
)


def test_apply_writes_exactly_the_safe_changes(ws: Workspace) -> None:
    git_before, outside_before = snapshot(ws.repo / ".git"), snapshot(ws.outside)
    ws.agent(TURN)
    ws.stop()
    assert snapshot(ws.repo)["src/app.py"][4] != snapshot(ws.data / "workspaces/s1/upper")["src/app.py"][4]
    result = apply(ws.layer)
    assert result.conflicts == []
    assert sorted(result.applied) == sorted(
        [
            "src/app.py",
            "new.txt",
            "old/gone.txt",
            "docs/a.txt",
            "docs/sub",
            "docs/sub/b.txt",
            "docs/d.txt",
            "src/util.py",
            "suid",
            "link",
            "empty",
            "sub",
        ]
    )  # "sub" is created empty: its only entry is a discarded .GIT
    assert {c.path for c in result.skipped} >= {"pipe", "escape", ".git/config", "sub/.GIT", "app.log"}
    tree = snapshot(ws.repo)
    assert (ws.repo / "src/app.py").read_text() == "v2\n" and not (ws.repo / "old/gone.txt").exists()
    assert sorted(os.listdir(ws.repo / "docs")) == ["d.txt"]
    assert tree["suid"][1] == 0o755 and tree["src/util.py"][1] == 0o755
    assert os.readlink(ws.repo / "link") == "src/app.py"
    for name in ("pipe", "escape", "app.log", "sub/.GIT"):
        assert not os.path.lexists(ws.repo / name), name
    assert all(entry[2:4] == (OWNER, OWNER) for entry in tree.values())
    assert snapshot(ws.repo / ".git") == git_before and snapshot(ws.outside) == outside_before
    assert {c.path for c in scan(ws.layer)} == {c.path for c in result.skipped}


def test_revert_restores_the_checkout_byte_for_byte(ws: Workspace) -> None:
    os.chmod(ws.repo / "src/app.py", 0o4640)  # the user's own odd mode comes back as it was
    ws.restart()
    before = snapshot(ws.repo)
    ws.agent(TURN)
    ws.stop()
    assert apply(ws.layer).applied
    assert snapshot(ws.repo) != before
    result = revert(ws.layer)
    assert result.conflicts == [] and result.record == 1
    assert snapshot(ws.repo) == before
    assert os.stat(ws.repo / "src/app.py").st_mtime_ns == ws.layer.baseline().get("src/app.py").mtime_ns  # type: ignore[union-attr]


def test_a_user_edit_since_start_conflicts_and_nothing_is_written(ws: Workspace) -> None:
    ws.agent("echo agent > src/app.py; echo agent > new.txt")
    ws.stop()
    (ws.repo / "src/app.py").write_text("the user's edit\n")
    before = snapshot(ws.repo)
    result = apply(ws.layer)
    assert [c.path for c in result.conflicts] == ["src/app.py"] and result.applied == []
    assert snapshot(ws.repo) == before
    forced = apply(ws.layer, force=["src/app.py"])
    assert sorted(forced.applied) == ["new.txt", "src/app.py"]
    assert (ws.repo / "src/app.py").read_text() == "agent\n"


def test_a_second_apply_checks_against_what_the_first_wrote(ws: Workspace) -> None:
    ws.agent("echo one > new.txt")
    ws.stop()
    assert apply(ws.layer).applied == ["new.txt"]
    ws.agent("echo two > new.txt")
    ws.stop()
    assert apply(ws.layer).applied == ["new.txt"]
    (ws.repo / "new.txt").write_text("user\n")
    assert [c.path for c in revert(ws.layer).conflicts] == ["new.txt"]
    assert revert(ws.layer, force=["new.txt"]).reverted == ["new.txt"]
    assert (ws.repo / "new.txt").read_text() == "one\n"


def test_a_symlinked_parent_in_the_checkout_is_never_followed(ws: Workspace) -> None:
    ws.agent("echo agent > docs/a.txt; echo x > docs/new.txt")
    ws.stop()
    os.rename(ws.repo / "docs", ws.repo / "docs.real")
    os.symlink(ws.outside, ws.repo / "docs")
    outside = snapshot(ws.outside)
    result = apply(ws.layer)
    assert [c.path for c in result.conflicts] == ["docs", "docs/a.txt"] and result.applied == []
    forced = apply(ws.layer, force=["docs"])  # the user's symlink is replaced by the agent's directory
    assert sorted(forced.applied) == ["docs", "docs/a.txt", "docs/new.txt"]
    assert not os.path.islink(ws.repo / "docs") and snapshot(ws.outside) == outside
    assert revert(ws.layer).conflicts == [] and os.readlink(ws.repo / "docs") == str(ws.outside)


def test_a_symlink_through_a_checkout_symlink_is_skipped(ws: Workspace) -> None:
    os.symlink("../outside", ws.repo / "out")
    ws.agent("ln -s out/secret.txt via")
    ws.stop()
    result = apply(ws.layer)
    assert [c.path for c in result.skipped] == ["via"] and "through another symlink" in result.skipped[0].reason
    assert not os.path.lexists(ws.repo / "via")


def test_deleting_a_directory_the_user_added_to_conflicts(ws: Workspace) -> None:
    ws.agent("rm -rf docs")
    ws.stop()
    (ws.repo / "docs/mine.txt").write_text("keep\n")
    result = apply(ws.layer)
    assert [c.path for c in result.conflicts] == ["docs/mine.txt"]  # the agent's rm -rf now reaches it
    assert (ws.repo / "docs/mine.txt").exists() and (ws.repo / "docs/a.txt").exists()


def test_ignored_paths_apply_only_when_asked_and_paths_narrow_the_apply(ws: Workspace) -> None:
    ws.agent("mkdir -p build/x; echo o > build/x/out.o; echo a > a.txt; echo b > b.txt")
    ws.stop()
    assert apply(ws.layer, paths=["a.txt"]).applied == ["a.txt"]
    assert apply(ws.layer).applied == ["b.txt"]
    assert sorted(apply(ws.layer, include_ignored=True).applied) == ["build", "build/x", "build/x/out.o"]
    assert stat.S_ISREG(os.lstat(ws.repo / "build/x/out.o").st_mode)
    assert scan(ws.layer) == []


def test_paths_name_changes_exactly_or_as_printed_and_an_unknown_one_writes_nothing(ws: Workspace) -> None:
    ws.agent("mkdir -p sub; echo a > sub/a.txt; echo b > b.txt; printf z > \"$(printf 'odd\\377')\"")
    ws.stop()
    before = snapshot(ws.repo)
    with pytest.raises(NotFoundError, match=r"No change of this session is at 'nope\.txt'"):
        apply(ws.layer, paths=["b.txt", "nope.txt"])
    assert snapshot(ws.repo) == before  # the known path was not written either
    assert apply(ws.layer, paths=["sub/"]).applied == ["sub", "sub/a.txt"]  # a directory: all under it
    assert apply(ws.layer, paths=["odd\\xff"]).applied == ["odd\udcff"]  # as the listing prints a non-UTF-8 byte
    assert apply(ws.layer).applied == ["b.txt"]


def test_a_named_file_takes_along_only_the_directories_the_checkout_lacks(ws: Workspace) -> None:
    """The agent's mode on ``src`` (which the checkout has) is its own change: naming a file under it leaves it."""
    ws.agent("mkdir -p src/new; echo n > src/new/n.py; chmod 500 src")
    ws.stop()
    mode = stat.S_IMODE(os.stat(ws.repo / "src").st_mode)
    assert sorted(apply(ws.layer, paths=["src/new/n.py"]).applied) == ["src/new", "src/new/n.py"]
    assert stat.S_IMODE(os.stat(ws.repo / "src").st_mode) == mode
    assert [c.path for c in scan(ws.layer)] == ["src"]


def test_type_changes_apply_and_revert(ws: Workspace) -> None:
    before = snapshot(ws.repo)
    ws.agent("rm README.md; mkdir README.md; echo in > README.md/x; rm -rf old; echo file > old")
    ws.stop()
    result = apply(ws.layer)
    assert result.conflicts == []
    assert (ws.repo / "README.md/x").read_text() == "in\n" and (ws.repo / "old").read_text() == "file\n"
    assert {c.type for c in scan(ws.layer)} <= {FileType.DIR}  # nothing left but, at most, kept merge dirs
    assert revert(ws.layer).conflicts == []
    assert snapshot(ws.repo) == before


def test_hostile_names_apply_and_revert_and_state_survives_a_restart(ws: Workspace) -> None:
    before = snapshot(ws.repo)
    ws.agent("echo x > \"$(printf 'bad\\377name')\"; echo y > \"$(printf 'new\\nline\\033[2J')\"")
    ws.stop()
    assert sorted(os.fsencode(p) for p in apply(ws.layer).applied) == [b"bad\xffname", b"new\nline\x1b[2J"]
    assert (ws.repo / os.fsdecode(b"bad\xffname")).read_text() == "x\n"
    reopened = open_layer(ws.data, "s1")  # a restarted controller knows only what is on disk
    assert len(revert(reopened).reverted) == 2
    assert snapshot(ws.repo) == before
    with pytest.raises(LayerMissingError):
        revert(reopened)


def test_revert_refuses_to_remove_a_directory_the_user_filled_since(ws: Workspace) -> None:
    ws.agent("mkdir -p made; echo a > made/a")
    ws.stop()
    apply(ws.layer)
    (ws.repo / "made/mine.txt").write_text("mine\n")
    result = revert(ws.layer)
    assert [c.path for c in result.conflicts] == ["made"] and (ws.repo / "made/a").exists()


@pytest.mark.parametrize("swap", ["directory", "symlink"])
def test_a_checkout_replaced_since_start_is_neither_read_nor_written(ws: Workspace, swap: str) -> None:
    """The layer pinned the checkout's device and inode: another directory at its path is not it."""
    ws.agent("echo new > new.txt")
    ws.stop()
    ws.repo.rename(ws.base / "moved")
    stranger = ws.base / "stranger"
    stranger.mkdir()
    if swap == "symlink":
        ws.repo.symlink_to(stranger)
    else:
        stranger.rename(ws.repo)
        stranger = ws.repo
    with pytest.raises(RepoChangedError, match="no longer leads"):
        scan(ws.layer)
    with pytest.raises(RepoChangedError, match="no longer leads"):
        apply(ws.layer)
    assert list(stranger.iterdir()) == []


TWO_FILES = "mkdir -p made; echo a > made/a; echo b > b.txt"


def _killed_apply(ws: Workspace) -> journal.ApplyRecord:
    """The state a kill leaves after an apply has written the checkout but before its record says so: the
    record still ``pending``, and the layer still holding the changes (they are retired after the record)."""
    ws.agent(TWO_FILES)
    ws.stop()
    apply(ws.layer)
    ws.agent(TWO_FILES)  # the same bytes into the layer again, as before the retire
    ws.stop()
    record = journal.newest_unreverted(ws.layer)
    record.status = journal.Status.PENDING
    journal.write(ws.layer, record)
    return record


def test_what_a_killed_apply_left_under_a_temporary_name_is_removed_and_does_not_block_revert(ws: Workspace) -> None:
    """A kill between writing a temporary file and renaming it leaves ``<prefix><hex>.tmp`` in the checkout,
    beside a record still ``pending``; revert (and the next apply) remove exactly those."""
    (prefix,) = _killed_apply(ws).temp_prefixes
    for leftover in (f"made/{prefix}0123456789abcdef.tmp", f"{prefix}fedcba9876543210.tmp"):
        (ws.repo / leftover).write_text("half written")
    (ws.repo / f"{prefix}kept").write_text("not a temporary name")
    (ws.repo / ".cubicle-0123456789ab-00.tmp").write_text("another apply's, or the user's")
    result = revert(ws.layer)
    assert result.conflicts == [] and not (ws.repo / "made").exists() and not (ws.repo / "b.txt").exists()
    # A set: the prefix is random, so where it sorts beside the fixed name is chance (one run in 250 failed).
    assert {n for n in os.listdir(ws.repo) if n.startswith(".cubicle")} == {
        ".cubicle-0123456789ab-00.tmp",
        f"{prefix}kept",
    }


def test_after_a_killed_apply_revert_never_overwrites_what_the_user_changed_since(ws: Workspace) -> None:
    _killed_apply(ws)
    (ws.repo / "b.txt").write_text("the user's own, written after the kill\n")
    result = revert(ws.layer)
    assert [c.path for c in result.conflicts] == ["b.txt"] and result.reverted == []
    assert (ws.repo / "b.txt").read_text() == "the user's own, written after the kill\n"
    assert (ws.repo / "made/a").exists(), "nothing was written"


def test_a_revert_cut_short_by_a_kill_can_be_run_again(ws: Workspace) -> None:
    before = snapshot(ws.repo)
    ws.agent(TWO_FILES + "; printf 'v2\\n' > src/app.py")
    ws.stop()
    apply(ws.layer)
    record = journal.newest_unreverted(ws.layer)
    folder = ws.layer.applies / str(record.number)
    with open_checkout(ws.layer) as checkout:  # what the killed revert got done: its first two restores
        for step in list(reversed(record.steps))[:2]:
            checkout.restore(step.path, step.prior, folder)
    result = revert(ws.layer)
    assert result.conflicts == [] and snapshot(ws.repo) == before


def test_apply_never_opens_the_checkout_to_other_users(ws: Workspace) -> None:
    """The agent's write bits for group and others reach the checkout only where the user's entry had them."""
    os.chmod(ws.repo / "README.md", 0o664)  # the user's own group-writable file
    os.chmod(ws.repo / "docs", 0o1777)  # and a shared directory: its sticky bit stays
    ws.restart()
    ws.agent(
        "chmod 666 src/app.py; chmod 777 src; mkdir -m 777 tools; echo 'echo hi' > tools/run.sh;"
        "chmod 777 tools/run.sh; echo more >> README.md; chmod 666 README.md; chmod 777 docs"
    )
    ws.stop()
    assert apply(ws.layer).conflicts == []
    modes = {
        rel: stat.S_IMODE(os.lstat(ws.repo / rel).st_mode)
        for rel in ("src", "src/app.py", "tools", "tools/run.sh", "README.md", "docs")
    }
    assert modes == {
        "src": 0o755,
        "src/app.py": 0o644,
        "tools": 0o755,
        "tools/run.sh": 0o755,
        "README.md": 0o664,
        "docs": 0o1777,
    }
    assert scan(ws.layer) == [], "what was applied is no change any more"


def test_revert_keeps_a_directory_mode_the_user_set_since_the_apply(ws: Workspace) -> None:
    """A directory's mode counts like a file's bytes: revert reports the user's chmod instead of undoing it."""
    ws.agent("chmod 700 docs; echo x > docs/x.txt")
    ws.stop()
    assert "docs" in apply(ws.layer).applied
    os.chmod(ws.repo / "docs", 0o750)  # the user's own, after the apply
    result = revert(ws.layer)
    assert [c.path for c in result.conflicts] == ["docs"] and result.reverted == []
    assert stat.S_IMODE(os.stat(ws.repo / "docs").st_mode) == 0o750 and (ws.repo / "docs/x.txt").exists()
    os.chmod(ws.repo / "docs", 0o700)  # as the apply left it: no conflict, and the original mode returns
    assert revert(ws.layer).conflicts == []
    assert stat.S_IMODE(os.stat(ws.repo / "docs").st_mode) == 0o755 and not (ws.repo / "docs/x.txt").exists()


def test_a_name_like_an_applys_temporary_file_is_never_applied(ws: Workspace) -> None:
    """The agent may learn a prefix from a killed apply's leftovers; a file it names so would be removed by the
    sweep after the user applied it."""
    ws.agent("echo x > .cubicle-0123456789ab-payload.tmp; mkdir -p d; echo y > d/.cubicle-0123456789ab-.tmp")
    ws.stop()
    result = apply(ws.layer)
    assert {c.path for c in result.skipped} >= {".cubicle-0123456789ab-payload.tmp", "d/.cubicle-0123456789ab-.tmp"}
    assert not (ws.repo / ".cubicle-0123456789ab-payload.tmp").exists()


def test_a_write_whose_rename_fails_leaves_no_temporary_file(tmp_path: Path) -> None:
    (tmp_path / "taken" / "inside").mkdir(parents=True)  # a directory raced into place: the rename fails
    (tmp_path / "source").write_text("new")
    root = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    src = os.open(tmp_path / "source", os.O_RDONLY)
    try:
        with pytest.raises(OSError):
            Checkout(root, None).write_file("taken", src, 0o644, None)
        Checkout(root, None).write_symlink("link", "source")
        with pytest.raises(OSError):
            Checkout(root, None).write_symlink("taken", "source")
    finally:
        os.close(src)
        os.close(root)
    assert sorted(os.listdir(tmp_path)) == ["link", "source", "taken"]


REVERT_UNPRIVILEGED = """
import sys
from pathlib import Path
from controller.workspace import open_layer, revert
print(revert(open_layer(Path(sys.argv[1]), "s1")).model_dump_json())
"""


def test_revert_without_root_powers_restores_inside_a_read_only_directory(tmp_path: Path) -> None:
    """An agent's ``chmod 555`` on a directory holding its files is applied last, so the apply works; a controller
    without root's powers (here root with CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH and CAP_FOWNER dropped, over a
    checkout root owns: what the checkout's owner may do) must still be able to revert it (red-team finding)."""
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "src/a.py").write_text("1\n")
    layer = layers.create(tmp_path / "data", "s1", repo)
    for rel in ("newdir", "src"):
        (layer.upper / rel).mkdir(exist_ok=True)
        (layer.upper / rel / "x.py").write_text("evil\n")
        os.chmod(layer.upper / rel, 0o555)
    assert sorted(apply(layer).applied) == ["newdir", "newdir/x.py", "src", "src/x.py"]
    drop = "--bounding-set=-dac_override,-dac_read_search,-fowner"
    done = subprocess.run(
        ["setpriv", drop, sys.executable, "-c", REVERT_UNPRIVILEGED, str(tmp_path / "data")],
        capture_output=True,
        text=True,
        cwd=Path(__file__).parents[3],
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["conflicts"] == []
    assert sorted(str(p.relative_to(repo)) for p in repo.rglob("*")) == ["src", "src/a.py"]
    assert stat.S_IMODE(os.stat(repo / "src").st_mode) == 0o755


def test_after_a_kill_before_a_new_directory_got_its_mode_revert_still_removes_it(ws: Workspace) -> None:
    """Apply makes a directory 0700 and gives it its mode last; a kill in between leaves it so, and the user
    changed nothing: no conflict."""
    record = _killed_apply(ws)
    made = next(step for step in record.steps if step.path == "made")
    assert made.prior.type is None
    os.chmod(ws.repo / "made", NEW_DIR_MODE)
    result = revert(ws.layer)
    assert result.conflicts == [] and not (ws.repo / "made").exists()


def test_applying_only_some_paths_cannot_leave_a_repository_behind(ws: Workspace) -> None:
    """The deletion of ``objects`` made ``HEAD`` and ``config`` beside it safe in the listing; applied without
    that deletion, they would make a bare repository (red-team finding)."""
    ws.start_with({"d/objects/keep": "", "d/refs/keep": ""})
    ws.agent("rm -r d/objects; " + repo_beside("d"))
    ws.stop()
    assert {c.path: c.disposition for c in scan(ws.layer)}["d/HEAD"] == "apply"  # with the deletion, no repository
    result = apply(ws.layer, paths=["d/HEAD", "d/config"])
    assert result.applied == [] and {"d/HEAD", "d/config"} <= {c.path for c in result.skipped}
    assert sorted(os.listdir(ws.repo / "d")) == ["objects", "refs"]
    assert sorted(apply(ws.layer).applied) == ["d/HEAD", "d/config", "d/objects", "d/objects/keep"]


def test_a_revert_that_fails_midway_leaves_the_modes_it_opened_as_they_were(tmp_path: Path) -> None:
    """Revert opens the agent's read-only directories to restore inside them; when a later restore fails (here a
    directory the user made read-only since), it closes them again, so the next revert sees no conflict."""
    repo = tmp_path / "repo"
    (repo / "p").mkdir(parents=True)
    (repo / "p/a.txt").write_text("1\n")
    layer = layers.create(tmp_path / "data", "s1", repo)
    (layer.upper / "q").mkdir()
    (layer.upper / "q/f").write_text("agent\n")
    os.chmod(layer.upper / "q", 0o555)
    (layer.upper / "p").mkdir()
    (layer.upper / "p/new.txt").write_text("n\n")
    assert sorted(apply(layer).applied) == ["p/new.txt", "q", "q/f"]
    os.chmod(repo / "p", 0o555)  # the user's own, after the apply
    drop = "--bounding-set=-dac_override,-dac_read_search,-fowner"
    run = ["setpriv", drop, sys.executable, "-c", REVERT_UNPRIVILEGED, str(tmp_path / "data")]
    failed = subprocess.run(run, capture_output=True, text=True, cwd=Path(__file__).parents[3], timeout=60)
    assert failed.returncode != 0 and "PermissionError" in failed.stderr
    assert stat.S_IMODE(os.stat(repo / "q").st_mode) == 0o555
    os.chmod(repo / "p", 0o755)
    done = subprocess.run(run, capture_output=True, text=True, cwd=Path(__file__).parents[3], timeout=60)
    assert done.returncode == 0 and json.loads(done.stdout)["conflicts"] == [], done.stderr
    assert sorted(str(p.relative_to(repo)) for p in repo.rglob("*")) == ["p", "p/a.txt"]
