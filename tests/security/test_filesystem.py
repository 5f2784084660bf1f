"""Filesystem attacks: traversal, symlinks, races, git hooks, device nodes, /proc, the read-only root."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from controller import workspace
from controller.sandbox import isolation as runtimes
from controller.sandbox.docker import DockerSandbox
from controller.wire.changeset import ApplyResult
from controller.wire.protocol import Failure, ListResult, ReadResult, WriteResult
from controller.workspace.baseline import is_git_path
from tests.integration.helpers import call, sh
from tests.sandbox_defaults import SECURE_LIMITS


@pytest.mark.parametrize(
    "path",
    [
        "../host-secret.txt",
        "../../host-secret.txt",
        "../../../../../../host-secret.txt",
        "./../host-secret.txt",
        "/etc/../../host-secret.txt",
    ],
)
async def test_relative_escape_reads(box: DockerSandbox, path: str, assert_clean: Callable[..., None]) -> None:
    """`..` resolves inside the container, where no such file exists."""
    outcome = await call(box, "read_file", path=path)
    assert isinstance(outcome, Failure) and outcome.kind == "not_found", outcome
    assert_clean(outcome)


async def test_absolute_host_path_read(box: DockerSandbox, tmp_path: Path, assert_clean: Callable[..., None]) -> None:
    outcome = await call(box, "read_file", path=str(tmp_path / "host-secret.txt"))
    assert isinstance(outcome, Failure) and outcome.kind == "not_found"
    assert_clean(outcome, await call(box, "list_files", path=str(tmp_path)))


async def test_symlink_to_root_and_host_dirs(
    box: DockerSandbox, tmp_path: Path, assert_clean: Callable[..., None]
) -> None:
    """Symlinks resolve inside the container: to its own root, and to host paths that do not exist there."""
    await sh(box, f"ln -s / r; ln -s {tmp_path} h; ln -s {tmp_path}/host-secret.txt s; ln -s /proc/1/root p1")
    reads = [
        await call(box, "read_file", path=p)
        for p in ("s", "h/host-secret.txt", f"r{tmp_path}/host-secret.txt", f"p1{tmp_path}/host-secret.txt")
    ]
    assert all(isinstance(o, Failure) for o in reads)
    root = await call(box, "list_files", path="r", depth=2)
    assert isinstance(root, ListResult) and any(e.path == "r/etc" for e in root.entries)
    assert_clean(
        *reads,
        root,
        await call(box, "list_files", path=".."),
        await call(box, "search", pattern="SENTINEL", path="r/tmp"),
        await call(box, "run_command", command="cat ../host-secret.txt s; ls -la .. /"),
    )


async def test_whole_container_holds_no_host_secret(box: DockerSandbox, assert_clean: Callable[..., None]) -> None:
    result = await sh(
        box, "grep -rsl --exclude-dir=proc --exclude-dir=sys SENTINEL- / | head; echo scanned", timeout_s=120
    )
    assert result.stdout.text.endswith("scanned\n")
    assert_clean(result)


# Whether a write through each path lands (in the container's own /tmp) or is refused; never on the host.
ESCAPE_WRITES = {
    "../escape.txt": False,
    "/escape.txt": False,
    "/tmp/escape.txt": True,
    "h/escape.txt": False,
    "r/escape2.txt": False,
    "r/tmp/escape.txt": True,
}


@pytest.mark.parametrize("path", list(ESCAPE_WRITES))
async def test_escape_writes_stay_in_the_container(box: DockerSandbox, tmp_path: Path, path: str) -> None:
    await sh(box, f"ln -s {tmp_path} h; ln -s / r")
    written = await call(box, "write_file", path=path, content="pwned")
    on_host = [tmp_path / "escape.txt", Path("/escape.txt"), Path("/escape2.txt"), Path("/tmp/escape.txt")]
    assert [p for p in on_host if p.exists()] == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "host-secret.txt", "repo"]
    read = await call(box, "read_file", path=path)
    landed = ESCAPE_WRITES[path]
    if path == "r/tmp/escape.txt" and box.limits.runtime == runtimes.GVISOR:
        # gVisor resolves "tmp" after a symlink to "/" to the root filesystem's own /tmp, not the tmpfs mounted
        # over it (read-only, root's): the write is refused there. It still lands nowhere else.
        landed = False
    assert (isinstance(written, WriteResult), isinstance(read, ReadResult)) == (landed, landed), (written, read)


async def test_symlink_swap_race_during_writes(
    box: DockerSandbox, tmp_path: Path, assert_clean: Callable[..., None]
) -> None:
    swapper = asyncio.create_task(
        call(
            box,
            "run_command",
            command=f"end=$((SECONDS+4)); while [ $SECONDS -lt $end ]; do rm -rf d; mkdir d; rm -rf d; ln -s {tmp_path} d; done",
            timeout_s=10,
        )
    )
    results = []
    while not swapper.done():
        results.append(await call(box, "write_file", path="d/raced.txt", content="race"))
        results.append(await call(box, "read_file", path="d/host-secret.txt"))
    await swapper
    assert not (tmp_path / "raced.txt").exists()
    assert len(results) > 20
    assert_clean(*results)


def git_tree(repo: Path) -> dict[str, tuple[int, bytes | str | None]]:
    """Every entry under the checkout's ``.git``: mode and bytes (or link target)."""
    found: dict[str, tuple[int, bytes | str | None]] = {}
    for path in [repo / ".git", *_walk(repo / ".git")]:
        st = path.lstat()
        body = path.read_bytes() if path.is_file() and not path.is_symlink() else None
        found[str(path.relative_to(repo))] = (st.st_mode, os.readlink(path) if path.is_symlink() else body)
    return found


async def apply_all(box: DockerSandbox) -> ApplyResult:
    """What the user does after the session: the sandbox goes, the layer is applied to the checkout."""
    await box.stop()
    result = workspace.apply(box.layer)
    assert result.conflicts == []
    assert not [p for p in result.applied if is_git_path(p)], "a path inside .git was applied"
    return result


@pytest.mark.parametrize(
    ("op", "args"),
    [
        ("write_file", {"path": ".git/hooks/post-checkout", "content": "#!/bin/sh\ntouch /tmp/pwned\n"}),
        ("write_file", {"path": ".git/config", "content": "[core]\n\thooksPath = /tmp\n"}),
        (
            "edit_file",
            {
                "path": ".git/config",
                "old_string": "repositoryformatversion",
                "new_string": "hooksPath = /x\n\trepositoryformatversion",
            },
        ),
        ("write_file", {"path": "hooklink/pre-commit", "content": "evil"}),
        ("write_file", {"path": "cfglink", "content": "evil"}),
    ],
)
async def test_git_hooks_and_config_writes_never_reach_the_checkout(
    box: DockerSandbox, op: str, args: dict[str, Any]
) -> None:
    """The layer takes the write (it is the agent's copy); the checkout's .git never does, not even by apply."""
    await sh(box, "ln -s .git/hooks hooklink; ln -s .git/config cfglink")
    before = git_tree(box.repo)
    await call(box, op, **args)
    assert git_tree(box.repo) == before
    result = await apply_all(box)
    assert git_tree(box.repo) == before and list((box.repo / ".git/hooks").iterdir()) == []
    assert not (box.repo / "hooklink").is_symlink() and not (box.repo / "cfglink").is_symlink()
    assert {c.path for c in result.skipped} >= {"hooklink", "cfglink"}


async def test_git_hooks_and_config_changed_by_commands_never_reach_the_checkout(box: DockerSandbox) -> None:
    before = git_tree(box.repo)
    await sh(box, "echo evil > .git/hooks/x; echo evil >> .git/config; rm -rf .git/hooks; echo README >> README.md")
    result = await apply_all(box)
    assert result.applied == ["README.md"]
    assert git_tree(box.repo) == before and (box.repo / ".git/hooks").is_dir()


async def test_git_directory_replaced_in_the_layer_leaves_the_checkouts_intact(box: DockerSandbox) -> None:
    """Moved aside, or emptied and rebuilt with hooks of the agent's own: the checkout's .git stays as it was."""
    before = git_tree(box.repo)
    result = await sh(
        box,
        "mv .git .g; echo $?; mkdir -p .git/hooks; echo evil > .git/hooks/post-checkout; echo $?;"
        "mv .git .h; cp -r .g .git; ln -sf /tmp .git/hooks; echo $?",
    )
    assert result.stdout.text.splitlines() == ["0", "0", "0"], result
    await apply_all(box)
    assert git_tree(box.repo) == before
    assert not (box.repo / ".git/hooks/post-checkout").exists()
    assert (box.repo / ".git/config").read_text().startswith("[core]")


async def test_a_missing_hooks_directory_stays_missing(
    make_repo: Callable[..., Path], sandbox_factory: Callable[..., DockerSandbox]
) -> None:
    repo = make_repo("nohooks")
    (repo / ".git/hooks").rmdir()
    box = sandbox_factory(repo, SECURE_LIMITS)
    result = await sh(box, "mkdir -p .git/hooks && echo evil > .git/hooks/post-checkout; echo $?")
    assert result.stdout.text == "0\n"  # the agent's own copy of .git, in its layer
    await apply_all(box)
    assert not (repo / ".git/hooks").exists()


async def test_root_filesystem_is_read_only_and_only_tmp_and_home_are_writable(box: DockerSandbox) -> None:
    result = await sh(box, "touch /usr/evil; echo $?; touch /etc/evil; echo $?; touch /var/tmp/evil; echo $?")
    assert result.stdout.text == "1\n1\n1\n"
    # /var/tmp is the image's, writable by anyone (1777): only the read-only root refuses it. Linux says so for
    # root's directories too; gVisor checks their permissions first.
    refusals = 3 if box.limits.runtime != runtimes.GVISOR else 1
    assert result.stderr.text.count("Read-only file system") == refusals, result
    tmp = await sh(box, "echo ok > /tmp/x && cat /tmp/x && echo ok > $HOME/y && cat $HOME/y")
    assert tmp.stdout.text == "ok\nok\n"


async def test_mknod_fails(box: DockerSandbox) -> None:
    result = await sh(box, "mknod dev-sda b 8 0; echo $?; mknod null2 c 1 3; echo $?; mkfifo fifo; echo $?")
    assert result.stdout.text.split() == ["1", "1", "0"]
    for where in (box.repo, box.layer.upper):
        assert not (where / "dev-sda").exists() and not (where / "null2").exists()
    result = await apply_all(box)
    # gVisor keeps a FIFO made in a host directory in its own memory (nothing reaches the layer); runc's lands
    # there as a FIFO, which apply skips.
    fifo = [] if box.limits.runtime == runtimes.GVISOR else ["fifo"]
    assert result.applied == [] and [c.path for c in result.skipped] == fifo
    assert not (box.repo / "fifo").exists()


@pytest.mark.parametrize(
    "command",
    [
        "echo b > /proc/sysrq-trigger",
        "echo 1 > /proc/sys/kernel/sysrq",
        "echo 0 > /proc/sys/vm/overcommit_memory",
        "head -c 16 /proc/kcore",
        "cat /sys/kernel/mm/transparent_hugepage/enabled > /dev/null && echo x > /sys/kernel/mm/transparent_hugepage/enabled",
    ],
)
async def test_proc_and_sys_are_off_limits(box: DockerSandbox, command: str) -> None:
    result = await sh(box, command)
    assert result.exit_code != 0
    assert any(
        word in result.stderr.text
        for word in ("Read-only", "Permission denied", "No such file", "Operation not permitted")
    )


async def test_no_file_is_left_that_the_owner_cannot_remove(box: DockerSandbox) -> None:
    await sh(
        box,
        "mkdir -p a/b/c && touch a/b/c/f && chmod 000 a/b && mkdir -p /tmp/x && cp -r /etc/apt apt-copy; ln -s /etc/shadow sh-link; mkfifo p",
    )
    await call(box, "write_file", path="deep/er/file.txt", content="x")
    await call(box, "write_file", path="a/by-tool.txt", content="x")  # into a directory a command made
    await apply_all(box)
    owner = box.repo.stat().st_uid
    strangers = [str(p) for p in _walk(box.repo) if p.lstat().st_uid != owner]
    assert strangers == []
    if os.geteuid() == 0:
        for parent in box.repo.parents:  # let the owner reach its repo through pytest's private temp dirs
            if parent == Path("/tmp"):
                break
            parent.chmod(parent.stat().st_mode | 0o055)
        done = os.system(
            f"setpriv --reuid={owner} --regid={owner} --clear-groups sh -c 'chmod -R u+rwx {box.repo} && find {box.repo} -mindepth 1 -delete'"
        )
        assert done == 0 and list(box.repo.iterdir()) == []


def _walk(root: Path) -> list[Path]:
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        found += [Path(dirpath, n) for n in dirnames + filenames]
    return found


async def test_git_redirects_and_submodule_hooks_never_reach_the_checkout(box: DockerSandbox) -> None:
    before = git_tree(box.repo)
    await sh(
        box,
        "mkdir -p evil/hooks && printf '#!/bin/sh\\ntouch /tmp/pwned\\n' > evil/hooks/post-checkout && echo ../evil > .git/commondir;"
        "mkdir -p .git/modules/sub/hooks && cp evil/hooks/post-checkout .git/modules/sub/hooks/",
    )
    result = await apply_all(box)
    assert git_tree(box.repo) == before, "git on the host would follow a commondir to the agent's hooks"
    assert result.applied == ["evil", "evil/hooks", "evil/hooks/post-checkout"]


async def test_the_sandbox_reads_no_host_path_of_the_repository_in_its_mounts(box: DockerSandbox) -> None:
    """The overlay's options show in /proc/self/mountinfo: its lowerdir was the repository's own host path
    (the user's name, their projects' layout); it is now a link in the layer's folder (red-team finding)."""
    shown = await sh(box, "cat /proc/self/mountinfo /proc/mounts")
    assert shown.exit_code == 0 and "/workspace" in shown.stdout.text
    assert str(box.repo) not in shown.stdout.text
