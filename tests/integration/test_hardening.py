"""The container's hardening, seen from inside the sandbox and from `docker inspect`."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from controller import owners
from controller.config import Limits
from controller.protocol import CommandResult, Failure
from controller.sandbox import DockerSandbox
from tests.conftest import AGENT_UID
from tests.integration.helpers import call, sh

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="repos owned by another uid need root to create")


@needs_root
async def test_runs_as_repo_owner(sandbox: DockerSandbox) -> None:
    result = await sh(sandbox, "id -u; id -g")
    assert result.stdout.text == f"{AGENT_UID}\n{AGENT_UID}\n"


@needs_root
async def test_root_owned_repo_runs_as_root_without_capabilities(
    make_repo: Callable[..., Path], sandbox_factory: Callable[..., DockerSandbox]
) -> None:
    box = sandbox_factory(make_repo("rootrepo", uid=None))
    result = await sh(box, "id -u; grep -E '^(CapEff|CapPrm|CapBnd)' /proc/self/status; touch /usr/x")
    lines = result.stdout.text.splitlines()
    assert lines[0] == "0"
    assert all(line.endswith("0000000000000000") for line in lines[1:])
    assert "Read-only file system" in result.stderr.text


async def test_no_capabilities_and_no_new_privileges(sandbox: DockerSandbox) -> None:
    result = await sh(sandbox, "grep -E '^(CapEff|CapPrm|CapInh|CapAmb|NoNewPrivs)' /proc/self/status")
    fields = dict(line.split(":\t") for line in result.stdout.text.splitlines())
    assert fields["CapEff"] == fields["CapPrm"] == fields["CapInh"] == fields["CapAmb"] == "0000000000000000"
    assert fields["NoNewPrivs"] == "1"


async def test_root_filesystem_is_read_only(sandbox: DockerSandbox) -> None:
    result = await sh(sandbox, "touch /usr/evil; echo $?; touch /etc/evil; echo $?")
    assert result.stdout.text == "1\n1\n"
    assert result.stderr.text.count("Read-only file system") == 2
    tmp = await sh(sandbox, "echo ok > /tmp/x && cat /tmp/x && echo ok > $HOME/y && cat $HOME/y")
    assert tmp.stdout.text == "ok\nok\n"


async def test_only_loopback_without_network(sandbox: DockerSandbox) -> None:
    result = await sh(sandbox, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
    assert result.stdout.text == "lo\n"


async def test_memory_limit_kills_the_hog_not_the_toolbox(sandbox: DockerSandbox) -> None:
    hog = await sh(sandbox, "python3 -c \"x = bytearray(2 * 1024**3); print('survived')\"")
    assert hog.exit_code != 0 and "survived" not in hog.stdout.text
    assert (await sh(sandbox, "echo alive")).stdout.text == "alive\n"
    assert sandbox.restarts == 0


async def test_fork_bomb_is_contained(sandbox: DockerSandbox) -> None:
    bomb = await call(sandbox, "run_command", command="bomb() { bomb | bomb & }; bomb", timeout_s=5)
    assert isinstance(bomb, CommandResult | Failure)
    after = await sh(sandbox, "echo alive; ps -e --no-headers | wc -l")
    assert after.stdout.text.startswith("alive\n")
    assert int(after.stdout.text.split()[1]) < 10


async def test_files_written_belong_to_repo_owner(sandbox: DockerSandbox) -> None:
    await sh(sandbox, "mkdir -p made/by && echo x > made/by/command.txt")
    await call(sandbox, "write_file", path="made/tool.txt", content="y")
    owner = sandbox.repo.stat().st_uid
    for rel in ("made", "made/by", "made/by/command.txt", "made/tool.txt"):
        assert (sandbox.repo / rel).stat().st_uid == owner, rel


async def test_git_hooks_and_config_are_read_only(sandbox: DockerSandbox) -> None:
    result = await sh(
        sandbox, "echo evil > .git/hooks/x; echo $?; echo evil >> .git/config; echo $?; rm -rf .git/hooks; echo $?"
    )
    assert result.stdout.text.splitlines()[:2] == ["1", "1"]
    assert not (sandbox.repo / ".git/hooks/x").exists()
    assert "evil" not in (sandbox.repo / ".git/config").read_text()
    assert (sandbox.repo / ".git/hooks").is_dir()


async def test_git_directory_cannot_be_swapped_for_one_with_writable_hooks(sandbox: DockerSandbox) -> None:
    result = await sh(
        sandbox,
        "mv .git .git-old; echo $?; rm -rf .git 2>/dev/null; mkdir -p .git/hooks; echo evil > .git/hooks/post-checkout; echo $?",
    )
    assert result.stdout.text.splitlines() == ["1", "1"]
    assert not (sandbox.repo / ".git-old").exists()
    assert not (sandbox.repo / ".git/hooks/post-checkout").exists()
    assert (sandbox.repo / ".git/config").read_text().startswith("[core]")


async def test_missing_hooks_directory_is_created_and_protected(
    make_repo: Callable[..., Path], sandbox_factory: Callable[..., DockerSandbox]
) -> None:
    repo = make_repo("nohooks")
    (repo / ".git/hooks").rmdir()
    box = sandbox_factory(repo)
    result = await sh(box, "echo evil > .git/hooks/post-checkout; echo $?")
    assert result.stdout.text == "1\n"
    assert not (repo / ".git/hooks/post-checkout").exists()


async def test_inspect_shows_the_hardening(sandbox: DockerSandbox, docker_client: Any) -> None:
    attrs = docker_client.api.inspect_container(sandbox.container.id)
    host = attrs["HostConfig"]
    limits: Limits = sandbox.limits
    assert host["CapDrop"] == ["ALL"] and not host["CapAdd"]
    assert host["SecurityOpt"] == ["no-new-privileges:true"]
    assert host["ReadonlyRootfs"] is True and host["Privileged"] is False
    assert host["Memory"] == host["MemorySwap"] == limits.memory_mb * 1024 * 1024
    assert host["NanoCpus"] == int(limits.cpus * 1e9) and host["PidsLimit"] == limits.pids
    assert host["NetworkMode"] == "none" and not host.get("Init")  # the image's own tini is pid 1, not Docker's
    assert attrs["Config"]["Entrypoint"] == ["/usr/bin/tini", "--"]
    assert host["LogConfig"]["Type"] == "none"
    assert not host["Devices"] and host["IpcMode"] == "private"
    assert set(host["Tmpfs"]) == {"/tmp", "/home/agent"}
    assert all("size=" in opts and "nosuid" in opts for opts in host["Tmpfs"].values())
    mounts = {m["Destination"]: m for m in attrs["Mounts"]}
    assert set(mounts) == {
        "/workspace",
        "/workspace/.git",
        "/workspace/.git/hooks",
        "/workspace/.git/config",
        "/workspace/.git/modules",
    }
    assert mounts["/workspace"]["RW"] is True and mounts["/workspace/.git"]["RW"] is True
    assert mounts["/workspace/.git/hooks"]["RW"] is False and mounts["/workspace/.git/config"]["RW"] is False
    assert not any("docker.sock" in m["Source"] for m in attrs["Mounts"])
    labels = attrs["Config"]["Labels"]
    assert labels[owners.MANAGED] == "true" and labels[owners.SESSION] == sandbox.session_id
    assert attrs["Config"]["User"] == f"{sandbox.repo.stat().st_uid}:{sandbox.repo.stat().st_gid}"


async def test_no_docker_socket_or_block_devices_inside(sandbox: DockerSandbox) -> None:
    result = await sh(sandbox, "find / -xdev \\( -name 'docker.sock' -o -type b \\) 2>/dev/null; ls /dev")
    assert "docker.sock" not in result.stdout.text
    devices = set(result.stdout.text.split())
    assert devices <= {
        "core",
        "fd",
        "full",
        "mqueue",
        "null",
        "ptmx",
        "pts",
        "random",
        "shm",
        "stderr",
        "stdin",
        "stdout",
        "tty",
        "urandom",
        "zero",
    }


async def test_network_can_be_enabled_per_session(
    make_repo: Callable[..., Path], sandbox_factory: Callable[..., DockerSandbox]
) -> None:
    box = sandbox_factory(make_repo("net"), Limits(memory_mb=512, network=True))
    result = await sh(box, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort")
    assert result.stdout.text == "eth0\nlo\n"
