"""Privilege: the sandbox runs as the repo owner with nothing extra to escalate with."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from controller.errors import ForbiddenRepoError, SandboxError
from controller.sandbox import isolation as runtimes
from controller.sandbox import owners
from controller.sandbox.docker import DockerSandbox
from controller.workspace.manager import pin
from tests.integration.helpers import sh
from tests.sandbox_defaults import SECURE_LIMITS


async def test_uid_and_capabilities(box: DockerSandbox) -> None:
    result = await sh(
        box, "id -u; id -g; grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status"
    )
    lines = result.stdout.text.splitlines()
    assert lines[:2] == [str(box.repo.stat().st_uid), str(box.repo.stat().st_gid)]
    fields = dict(line.split(":\t") for line in lines[2:])
    if box.limits.runtime == runtimes.GVISOR:
        # gVisor's status has no CapAmb or NoNewPrivs (prctl answers). Ambient needs permitted ones: none here.
        # The seccomp filter is the toolbox's own (toolbox/seccomp.py): Docker's profile does not apply there.
        assert all(fields[k] == "0000000000000000" for k in ("CapInh", "CapPrm", "CapEff", "CapBnd"))
        no_new = await sh(box, "python3 -c 'import ctypes; print(ctypes.CDLL(None).prctl(39, 0, 0, 0, 0))'")
        assert no_new.stdout.text == "1\n" and fields["Seccomp"] == "2"  # PR_GET_NO_NEW_PRIVS
        return
    assert all(fields[k] == "0000000000000000" for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"))
    assert fields["NoNewPrivs"] == "1" and fields["Seccomp"] == "2"


@pytest.mark.skipif(os.geteuid() != 0, reason="a repository owned by root needs root to create")
async def test_a_root_owned_repo_is_refused_and_no_sandbox_runs_as_root(
    make_repo: Callable[..., Path], sandbox_factory: Callable[..., DockerSandbox], docker_client: Any
) -> None:
    repo = make_repo("rootrepo", uid=None)
    with pytest.raises(ForbiddenRepoError, match="owned by root"):
        pin(repo)  # what every session (API and CLI) does with its repository first
    box = sandbox_factory(repo, SECURE_LIMITS)  # a layer made past that check still never runs as uid 0
    with pytest.raises(SandboxError, match="root"):
        await box.start()
    assert docker_client.containers.list(all=True, filters={"label": f"{owners.SESSION}={box.session_id}"}) == []


async def test_setuid_binaries_do_not_raise_privileges(box: DockerSandbox) -> None:
    result = await sh(
        box,
        "ls -l /bin/su | cut -c1-10; su -c 'id -u' root </dev/null; echo rc=$?; python3 -c 'import os; os.setuid(0)'",
    )
    assert result.stdout.text.startswith("-rwsr-xr-x")
    assert "rc=0" not in result.stdout.text and "\n0\n" not in result.stdout.text
    assert "PermissionError" in result.stderr.text


async def test_a_home_made_setuid_binary_does_nothing(box: DockerSandbox) -> None:
    result = await sh(box, "cp /bin/id myid && chmod u+s myid && ./myid -u; stat -c %A myid")
    uid = str(box.repo.stat().st_uid)
    assert result.stdout.text.splitlines()[0] == uid


async def test_tmp_and_home_are_executable_yet_nosuid_and_nodev(box: DockerSandbox, docker_client: Any) -> None:
    """A tool installed under ~/.local/bin, and a script a test writes to /tmp, run (not ``Permission denied``, exit
    126: the engine's default ``noexec``); they stay ``nosuid,nodev``: a set-uid bit there gives nothing."""
    result = await sh(
        box,
        "mkdir -p ~/.local/bin; for dir in /tmp ~/.local/bin; do printf '#!/bin/sh\\necho ran in %s\\n' $dir "
        "> $dir/tool; chmod +x $dir/tool; $dir/tool; echo rc=$?; done; tool; "
        "cp /usr/bin/id /tmp/myid && chmod u+s /tmp/myid && /tmp/myid -u",
    )
    home = "/home/agent/.local/bin"
    uid = str(box.repo.stat().st_uid)
    assert result.stdout.text.splitlines() == ["ran in /tmp", "rc=0", f"ran in {home}", "rc=0", f"ran in {home}", uid]
    tmpfs = docker_client.containers.get(box.container.id).attrs["HostConfig"]["Tmpfs"]
    assert all({"exec", "nosuid", "nodev"} <= set(tmpfs[path].split(",")) for path in ("/tmp", "/home/agent")), tmpfs
    mounts = (await sh(box, "grep -E ' (/tmp|/home/agent) ' /proc/self/mountinfo")).stdout.text.splitlines()
    assert len(mounts) == 2, mounts
    # gVisor's mountinfo names neither nosuid nor nodev; its device nodes are its own emulations, never the host's.
    wanted = set() if box.limits.runtime == runtimes.GVISOR else {"nosuid", "nodev"}
    for line in mounts:
        options = set(line.split()[5].split(","))
        assert wanted <= options and "noexec" not in options, line


@pytest.mark.parametrize(
    "command",
    [
        "unshare -Ur id",
        "unshare -m true",
        "unshare -n true",
        "mount -t tmpfs none /tmp",
        "mount --bind /workspace /tmp",
        "chroot / true",
        "python3 -c 'import ctypes; assert ctypes.CDLL(None).unshare(0x10000000) == 0'",
        "nsenter -t 1 -m true",
        "python3 -c 'import socket; socket.socket(socket.AF_PACKET, socket.SOCK_RAW)'",
    ],
)
async def test_namespace_and_mount_tricks_fail(box: DockerSandbox, command: str) -> None:
    """Under runsc too: there the toolbox's own seccomp filter refuses namespaces, as Docker's profile does."""
    assert (await sh(box, command)).exit_code != 0


DEVICES = {
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
GVISOR_DEVICES = {"fuse", "net"}
"""gVisor's /dev always has /dev/fuse and /dev/net/tun; both need a capability no process there holds (below)."""


async def test_no_docker_socket_and_no_block_devices(box: DockerSandbox) -> None:
    result = await sh(
        box,
        "find / -xdev \\( -type s -o -type b -o -name 'docker.sock' \\) 2>/dev/null; find /dev -type b; ls /run /var/run;"
        " echo ---; ls /dev",
    )
    found, devices = result.stdout.text.split("---\n")
    assert "docker" not in found and "/dev/" not in found
    assert set(devices.split()) <= DEVICES | (GVISOR_DEVICES if box.limits.runtime == runtimes.GVISOR else set())
    if box.limits.runtime == runtimes.GVISOR:  # a FUSE mount or a tun interface needs CAP_SYS_ADMIN / CAP_NET_ADMIN
        used = await sh(box, f"python3 -c '{USE_GVISOR_DEVICES}'")
        assert used.stdout.text.split() == ["mount", "refused", "tun", "refused"], used


USE_GVISOR_DEVICES = """
import ctypes, fcntl, os, struct
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open("/dev/fuse", os.O_RDWR)
os.makedirs("/tmp/m", exist_ok=True)
ok = libc.mount(b"x", b"/tmp/m", b"fuse", 0, b"fd=%d,rootmode=40000,user_id=0,group_id=0" % fd) == 0
print("mount", "worked" if ok else "refused")
tun = os.open("/dev/net/tun", os.O_RDWR)
try:
    fcntl.ioctl(tun, 0x400454CA, struct.pack("16sH", b"cub0", 0x0001))  # TUNSETIFF, IFF_TUN
    print("tun worked")
except OSError:
    print("tun refused")
"""


async def test_host_environment_does_not_reach_the_sandbox(
    box: DockerSandbox, sentinel: str, monkeypatch: pytest.MonkeyPatch, docker_client: Any
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", sentinel)
    await box.stop()
    result = await sh(box, "env; cat /proc/1/environ | tr '\\0' '\\n'")
    assert sentinel not in result.model_dump_json()
    env = docker_client.api.inspect_container(box.container.id)["Config"]["Env"]
    assert not any(sentinel in item for item in env)
    assert os.environ["ANTHROPIC_API_KEY"] == sentinel


async def test_inspect_shows_exactly_the_hardening(box: DockerSandbox, docker_client: Any) -> None:
    attrs = docker_client.api.inspect_container(box.container.id)
    host, limits = attrs["HostConfig"], box.limits
    assert host["Privileged"] is False and host["CapDrop"] == ["ALL"]
    assert host["SecurityOpt"] == ["no-new-privileges:true"] and host["ReadonlyRootfs"] is True
    assert host["NetworkMode"] == "none" and not host["PortBindings"] and not host["Links"]
    assert host["PidMode"] in ("", "private") and host["IpcMode"] == "private" and host["UsernsMode"] == ""
    assert not host["Devices"] and not host["DeviceCgroupRules"] and not host["Binds"] and not host["VolumesFrom"]
    assert host["Memory"] == host["MemorySwap"] == limits.memory_mb * 1024 * 1024
    pids, nproc = runtimes.process_limits(limits)  # under runsc the agent's processes are counted inside gVisor
    assert host["NanoCpus"] == int(limits.cpus * 1e9) and host["PidsLimit"] == pids
    assert [u for u in host["Ulimits"] if u["Name"] == "nproc"] == (
        [] if nproc is None else [{"Name": "nproc", "Soft": limits.pids, "Hard": limits.pids}]
    )
    if runtimes.guarded(limits.runtime):  # root with three capabilities, until the guardian drops them (guardian.py)
        assert {cap.removeprefix("CAP_") for cap in host["CapAdd"]} == set(runtimes.GUARDIAN_CAPABILITIES)
        assert attrs["Config"]["Entrypoint"] == [runtimes.GUARDED_INIT, "--"] and attrs["Config"]["User"] == "0:0"
        assert attrs["Config"]["Env"].count(f"{runtimes.OWNER_VARIABLE}={box.layer.info.uid}:{box.layer.info.gid}") == 1
    else:
        assert not host["CapAdd"] and attrs["Config"]["Entrypoint"] == ["/usr/bin/tini", "--"]  # undumpable pid 1
        assert attrs["Config"]["User"] == f"{box.repo.stat().st_uid}:{box.repo.stat().st_gid}"
    assert host["Runtime"] == limits.runtime and not host.get("Init")
    assert host["LogConfig"] == {"Type": "none", "Config": {}}
    assert host["AutoRemove"] is False and host["RestartPolicy"]["Name"] in ("", "no")
    assert set(host["Tmpfs"]) == {"/tmp", "/home/agent"}
    assert all("size=" in opts and "nosuid" in opts for opts in host["Tmpfs"].values())
    (mount,) = attrs["Mounts"]  # the session's overlay volume, and nothing of the host's
    assert (mount["Destination"], mount["Type"], mount["RW"]) == ("/workspace", "volume", True)
    assert mount["Name"] == f"cubicle-ws-{box.session_id}"
    volume = box._client.volumes.get(mount["Name"]).attrs["Options"]
    # The checkout through the layer's own link: the options show in the sandbox's mountinfo.
    assert volume["type"] == "overlay" and f"lowerdir={box.layer.root}/lower," in volume["o"]
    assert os.readlink(box.layer.root / "lower") == str(box.repo) and str(box.repo) not in volume["o"]
    assert f"upperdir={box.layer.upper}," in volume["o"]
    assert not any("docker.sock" in m["Source"] for m in attrs["Mounts"])
    labels = attrs["Config"]["Labels"]
    assert labels[owners.MANAGED] == "true" and labels[owners.SESSION] == box.session_id
    assert attrs["Config"]["WorkingDir"] == "/workspace"
