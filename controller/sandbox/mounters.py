"""The Docker backend's ways of mounting a session layer's quota filesystem (``workspace.quota``'s ``Mounter``).

- ``HelperMounter`` runs the commands in a short-lived container with ``CAP_SYS_ADMIN`` (and
  ``CAP_DAC_OVERRIDE``, to open the controller's image file) whose mounts propagate to the
  host; for a controller that is not root, or runs in a container. The Docker socket already
  gives such a controller root's power, so this adds none. A controller in a container must
  see the mounts, so its data directory is mounted with ``rslave`` propagation (see
  ``compose.yaml``).
- ``AutoMounter`` picks ``workspace.quota.HostMounter`` when this process is root in the
  engine's mount namespace, else the helper.
"""

from __future__ import annotations

import os
import shlex
import socket
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import DiskError
from ..workspace.layer import DiskQuota
from ..workspace.quota import Disks, HostMounter, Mounter, mkfs_argv, mount_script, unmount_argv


class HelperMounter:
    """Runs the same commands in a short-lived container that may mount, whose mounts reach the host.

    The layers' directory is bind-mounted into it at its own path with ``rshared`` propagation:
    what it mounts there appears in the host's mount namespace (where the engine mounts the
    overlay) and in a controller container that mounts the data directory ``rslave``. That
    needs the host's mount of the data directory to be shared, as systemd makes ``/``. The
    container has ``CAP_SYS_ADMIN`` and ``CAP_DAC_OVERRIDE`` only (no ``--privileged``), the host's ``/dev`` for the loop
    devices the kernel creates, access to those devices only, no network, and is removed when done.
    """

    name = "helper"
    linger_s = 30.0

    def __init__(self, connect: Callable[[], Any], image: str, workspaces: Path) -> None:
        self._connect = connect
        self.image = image
        self.workspaces = workspaces

    def make(self, image: Path, target: Path, quota: DiskQuota) -> None:
        mkfs = shlex.join(mkfs_argv(image, quota, os.geteuid(), os.getegid()))
        self._run(f"{mkfs} && {mount_script(image, target)}", "make the filesystem of")

    def mount(self, image: Path, target: Path) -> None:
        self._run(mount_script(image, target), "mount the filesystem of")

    def unmount(self, target: Path) -> None:
        self._run(shlex.join(unmount_argv(target)), "unmount the filesystem of")

    def detach_loop(self, device: str) -> None:
        self._run(shlex.join(["losetup", "-d", device]), "detach the loop device of")

    def _run(self, script: str, what: str) -> None:
        from docker.errors import ContainerError, DockerException
        from docker.types import Mount

        workspaces = str(self.workspaces)
        try:
            self._connect().containers.run(
                self.image,
                ["sh", "-c", script],
                entrypoint=[],
                user="0:0",
                remove=True,
                network_mode="none",
                cap_drop=["ALL"],
                cap_add=["SYS_ADMIN", "DAC_OVERRIDE"],  # DAC: the image is the controller user's, 0600
                security_opt=[
                    "no-new-privileges:true",
                    "apparmor=unconfined",
                ],  # docker-default's AppArmor denies mount
                device_cgroup_rules=[f"b {LOOP_MAJOR}:* rwm", f"c {MISC_MAJOR}:{LOOP_CONTROL_MINOR} rwm"],
                mounts=[
                    Mount("/dev", "/dev", type="bind"),
                    Mount(workspaces, workspaces, type="bind", propagation="rshared"),
                ],
            )
        except ContainerError as err:
            detail = (err.stderr or b"").decode(errors="replace").strip()[-500:]
            raise DiskError(f"Could not {what} a workspace layer (in a helper container): {detail}") from None
        except (DockerException, OSError) as err:
            raise DiskError(f"Could not {what} a workspace layer (in a helper container): {err}") from None


LOOP_MAJOR, MISC_MAJOR, LOOP_CONTROL_MINOR = 7, 10, 237
"""The device numbers of the loop devices and of /dev/loop-control (fixed by the kernel)."""


def engine_shares_mounts(docker_host: str) -> bool | None:
    """Whether the engine behind ``docker_host`` runs in this process's mount namespace; None when unknown.

    The unix socket's peer credentials name the engine's pid (0 when it is in another pid
    namespace, as from a container); its ``/proc/<pid>/ns/mnt`` is compared with ours. Unknown:
    a tcp engine, or one that does not answer.
    """
    if not docker_host.startswith("unix://"):
        return None
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(5)
            sock.connect(docker_host.removeprefix("unix://"))
            creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    pid = struct.unpack("3i", creds)[0]
    try:
        return pid > 0 and os.readlink(f"/proc/{pid}/ns/mnt") == os.readlink("/proc/self/ns/mnt")
    except OSError:
        return False


class AutoMounter:
    """``host`` when this process is root in the engine's mount namespace, else ``helper``; decided at first use."""

    def __init__(self, helper: HelperMounter, docker_host: str) -> None:
        self._helper = helper
        self._docker_host = docker_host
        self._chosen: Mounter | None = None

    @property
    def name(self) -> str:
        return self._choose().name

    @property
    def linger_s(self) -> float:
        return self._choose().linger_s

    def make(self, image: Path, target: Path, quota: DiskQuota) -> None:
        self._choose().make(image, target, quota)

    def mount(self, image: Path, target: Path) -> None:
        self._choose().mount(image, target)

    def unmount(self, target: Path) -> None:
        self._choose().unmount(target)

    def detach_loop(self, device: str) -> None:
        self._choose().detach_loop(device)

    def _choose(self) -> Mounter:
        """Decided once the engine answers; until then the helper, which says the engine is missing."""
        if self._chosen is None:
            if os.geteuid() != 0:
                self._chosen = self._helper
            else:
                shares = engine_shares_mounts(self._docker_host)
                if shares is None:
                    return self._helper
                self._chosen = HostMounter() if shares else self._helper
        return self._chosen


def choose(mode: str, connect: Callable[[], Any], image: str, data_dir: Path, docker_host: str) -> Disks | None:
    """The data directory's ``Disks`` for ``CUBICLE_DISK_QUOTA``: ``host``, ``helper``, ``auto`` (``AutoMounter``)
    or ``off`` (None: layers without a quota)."""
    if mode == "off":
        return None
    workspaces = data_dir / "workspaces"
    helper = HelperMounter(connect, image, workspaces)
    mounter: Mounter = AutoMounter(helper, docker_host)
    if mode == "host":
        mounter = HostMounter()
    elif mode == "helper":
        mounter = helper
    return Disks(mounter, workspaces)
