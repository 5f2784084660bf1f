"""Filesystem attacks: traversal, symlinks, races, git hooks, device nodes, /proc."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from controller.protocol import Failure
from controller.sandbox import DockerSandbox
from tests.integration.helpers import call, sh


@pytest.mark.parametrize(
    "path", ["../host-secret.txt", "../../host-secret.txt", "../../../../../../host-secret.txt", "./../host-secret.txt"]
)
async def test_relative_escape_reads(box: DockerSandbox, path: str, assert_clean: Callable[..., None]) -> None:
    outcome = await call(box, "read_file", path=path)
    assert isinstance(outcome, Failure)
    assert_clean(outcome)


async def test_absolute_host_path_read(box: DockerSandbox, tmp_path: Path, assert_clean: Callable[..., None]) -> None:
    outcome = await call(box, "read_file", path=str(tmp_path / "host-secret.txt"))
    assert isinstance(outcome, Failure) and outcome.kind == "not_found"
    assert_clean(outcome, await call(box, "list_files", path=str(tmp_path)))


async def test_symlink_to_root_and_host_dirs(
    box: DockerSandbox, tmp_path: Path, assert_clean: Callable[..., None]
) -> None:
    await sh(box, f"ln -s / r; ln -s {tmp_path} h; ln -s {tmp_path}/host-secret.txt s; ln -s /proc/1/root p1")
    outcomes = [
        await call(box, "read_file", path=p)
        for p in ("s", "h/host-secret.txt", f"r{tmp_path}/host-secret.txt", f"p1{tmp_path}/host-secret.txt")
    ]
    assert all(isinstance(o, Failure) for o in outcomes)
    assert_clean(*outcomes, await call(box, "search", pattern="SENTINEL", path="r/tmp"))


@pytest.mark.parametrize("path", ["../escape.txt", "/escape.txt", "/tmp/escape.txt", "h/escape.txt", "r/escape2.txt"])
async def test_escape_writes_stay_in_the_container(box: DockerSandbox, tmp_path: Path, path: str) -> None:
    await sh(box, f"ln -s {tmp_path} h; ln -s / r")
    await call(box, "write_file", path=path, content="pwned")
    assert (
        not (tmp_path / "escape.txt").exists()
        and not Path("/escape.txt").exists()
        and not Path("/escape2.txt").exists()
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["host-secret.txt", "repo"]


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
async def test_git_hooks_and_config_cannot_be_written(box: DockerSandbox, op: str, args: dict[str, Any]) -> None:
    await sh(box, "ln -s .git/hooks hooklink; ln -s .git/config cfglink")
    before = (box.repo / ".git/config").read_text()
    outcome = await call(box, op, **args)
    assert isinstance(outcome, Failure) and outcome.kind in ("read_only", "permission_denied")
    assert (box.repo / ".git/config").read_text() == before
    assert list((box.repo / ".git/hooks").iterdir()) == []


async def test_git_directory_cannot_be_replaced(box: DockerSandbox) -> None:
    result = await sh(box, "mv .git .g; mv .git/hooks .git/h; rm -rf .git/hooks; ln -sf /tmp .git/hooks; echo done")
    assert "Device or resource busy" in result.stderr.text
    assert (box.repo / ".git/hooks").is_dir() and not (box.repo / ".g").exists() and not (box.repo / ".git/h").exists()


async def test_mknod_fails(box: DockerSandbox) -> None:
    result = await sh(box, "mknod dev-sda b 8 0; echo $?; mknod null2 c 1 3; echo $?; mkfifo fifo; echo $?")
    assert result.stdout.text.split() == ["1", "1", "0"]
    assert not (box.repo / "dev-sda").exists() and not (box.repo / "null2").exists()


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
    await box.stop()
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


async def test_git_redirects_and_submodule_hooks_are_neutralised(box: DockerSandbox) -> None:
    await sh(
        box,
        "mkdir -p evil/hooks && printf '#!/bin/sh\\ntouch /tmp/pwned\\n' > evil/hooks/post-checkout && echo ../evil > .git/commondir",
    )
    modules = await sh(box, "mkdir -p .git/modules/sub/hooks; echo $?")
    assert modules.stdout.text == "1\n" and "Read-only" in modules.stderr.text
    await box.stop()
    assert not (box.repo / ".git/commondir").exists(), "git on the host would follow it to the agent's hooks"
    assert [p.name.startswith("commondir.quarantined-by-cubicle-") for p in (box.repo / ".git").glob("commondir*")] == [
        True
    ]
