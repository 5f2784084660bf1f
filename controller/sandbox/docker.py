"""The Docker backend's sandbox: the hardened container a session's toolbox runs in.

``DockerLauncher`` makes the container, its overlay volume (the session's layer over the
checkout, ``workspace``) and, for ``allow`` policies, its proxy (``egress``), and hands the
toolbox's attach stream (``attach``) to the backend-neutral ``toolboxes.ToolboxSandbox``,
which speaks the toolbox protocol, keeps the deadlines and replaces a sandbox that failed.
``DockerSandbox`` is the two together. ``container_options`` is the hardening, in one place.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import posixpath
import socket
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from docker.errors import APIError, DockerException, NotFound
from docker.types import LogConfig, Mount, Ulimit

from .. import workspace
from ..errors import SandboxError
from ..wire.envspec import PATH_VARIABLE
from ..wire.limits import Limits
from ..workspace import Layer, headroom
from . import egress, images, owners
from . import isolation as runtimes
from .attach import AttachStream
from .egress import Egress, Route
from .sandboxes import Deployment, LayerHolder, Prepared, Preparer
from .toolboxes import ToolboxSandbox

log = logging.getLogger(__name__)

WORKSPACE = "/workspace"
HOME = "/home/agent"
DOCKER_CALL_TIMEOUT_S = 30.0


def volume_name(session_id: str) -> str:
    """The Docker volume that mounts a session's overlay; it lives exactly as long as the session's container."""
    return f"cubicle-ws-{session_id}"


def volume_kwargs(layer: Layer, name: str, labels: dict[str, str], seeded: bool = False) -> dict[str, Any]:
    """Arguments for ``client.volumes.create``: a ``local`` volume that mounts the layer's overlay
    (``workspace.mount_options``).

    The engine mounts it when the first container using it starts and unmounts it when the
    last one stops. The paths are the engine's paths: a controller in a container must see
    its data dir and the repository at the same paths as the host does.
    """
    return overlay_volume(name, workspace.mount_options(layer, seeded), labels)


def overlay_volume(name: str, options: str, labels: dict[str, str]) -> dict[str, Any]:
    """A ``local`` volume named ``name`` that mounts an overlay of ``options`` (``workspace.layer.overlay_options``)."""
    opts = {"type": "overlay", "device": "overlay", "o": options}
    return {"name": name, "driver": "local", "driver_opts": opts, "labels": labels}


def container_options(
    image: str,
    layer: Layer,
    limits: Limits,
    labels: dict[str, str],
    route: Route | None = None,
    volumes: Iterable[str] = (),
) -> dict[str, Any]:
    """Everything a sandbox container is created with; the hardening lives here and in the helpers below, only.

    ``/workspace`` is the session's overlay volume (``workspace.layer``): the agent reads the
    checkout and writes only the layer. It runs as the checkout's owner, never as root.

    ``route`` is where its network leads (``egress``): without one, the route of ``limits.network``
    when that needs no proxy (``none``: loopback only; ``open``: the bridge). An ``allow`` policy's
    route is its session's internal network, with the proxy's address in the environment, no
    resolver (an empty ``/etc/resolv.conf``: names are the proxy's to resolve) and no IPv6.

    Under a runtime whose kernel is not the host's (``runtimes.guarded``) the container starts as root
    with CAP_SETUID, CAP_SETGID and CAP_SETPCAP alone, and the toolbox's guardian runs the toolbox as
    the owner and gives root up before any request; under runsc commands also get the statx shim.

    ``volumes`` are the image's ``VOLUME`` paths (``image_volumes``): each gets a sized tmpfs, as ``/tmp``
    has, so the engine makes no anonymous volume there, on the host's disk and outside the disk quota.
    Core dumps are off: a host whose ``core_pattern`` pipes them to a program would store them outside too.
    """
    route = _checked_route(route, limits)
    uid, gid = _owner(layer)
    options: dict[str, Any] = {
        **_process(image, uid, gid, limits, labels, route),
        "tmpfs": _tmpfs(limits.tmpfs_mb, volumes, uid, gid),
        **_confinement(limits, route.network),
    }
    if runtimes.guarded(limits.runtime):
        _guarded(options, uid, gid)
    options.update(io_limits(block_device(layer.upper), limits))
    if route.proxy:
        _without_resolver(options, route.proxy)
    return options


def _checked_route(route: Route | None, limits: Limits) -> Route:
    """``route``, or the direct one of ``limits.network``, once it is known to carry that policy and the runtime can
    give it: a route of another policy would open (or close) the sandbox's network behind its session's back."""
    route = route or egress.direct(limits.network)
    if (route.proxy is not None) != (limits.network.level == "allow") or (
        route.proxy is None and route != egress.direct(limits.network)
    ):
        raise SandboxError(f"The sandbox's route ({route.network}) does not carry its policy ({limits.network}).")
    if limits.runtime in runtimes.NETWORK_NONE_ONLY and limits.network.level != "none":
        raise SandboxError(runtimes.no_network(limits))
    return route


def _owner(layer: Layer) -> tuple[int, int]:
    """The checkout owner's uid and gid, whom the sandbox runs as: never root, whoever the caller is."""
    uid, gid = layer.info.uid, layer.info.gid
    if uid == 0:  # sessions refuse such checkouts (``workspaces.pin``); this holds for any caller
        raise SandboxError(f"The repository {layer.repo} is owned by root; a sandbox never runs as root.")
    return uid, gid


def _process(image: str, uid: int, gid: int, limits: Limits, labels: dict[str, str], route: Route) -> dict[str, Any]:
    """What runs and as whom: the image as the owner in ``/workspace`` (the session's overlay volume), its stdio
    attached for the toolbox's stream, with ``HOME``, the route's proxy variables and under gVisor the statx shim."""
    shim = {"LD_PRELOAD": runtimes.STATX_SHIM} if limits.runtime == runtimes.GVISOR else {}
    return {
        "image": image,
        "user": f"{uid}:{gid}",
        "working_dir": WORKSPACE,
        "stdin_open": True,
        "tty": False,
        "environment": {"HOME": HOME, **route.environment(), **shim},
        "runtime": limits.runtime,
        "labels": labels,
        "hostname": "cubicle",
        "mounts": [Mount(WORKSPACE, volume_name(labels[owners.SESSION]), type="volume", no_copy=True)],
    }


def _tmpfs(size_mb: int, volumes: Iterable[str], uid: int, gid: int) -> dict[str, str]:
    """The writable places of a read-only root besides ``/workspace``, each sized: the image's volumes and ``/tmp``
    for anyone, ``HOME`` for the owner alone. Executable (the engine would add ``noexec``): a tool installed under
    ``~/.local/bin`` or a script a test writes to ``/tmp`` runs, as anything the agent writes to ``/workspace`` does;
    ``nosuid,nodev`` keep a set-uid bit or a device node there from meaning anything."""
    tmpfs_opts = f"rw,exec,nosuid,nodev,size={size_mb}m"
    return {
        **{path: f"{tmpfs_opts},mode=1777" for path in volumes},
        "/tmp": f"{tmpfs_opts},mode=1777",
        HOME: f"{tmpfs_opts},mode=0700,uid={uid},gid={gid}",
    }


def _confinement(limits: Limits, network: str) -> dict[str, Any]:
    """What the container may not do (no capabilities, no new privileges, no writes to its root, no devices, no
    core dumps, no logs on the host) and how much it may use (memory without swap, CPU, processes)."""
    memory = f"{limits.memory_mb}m"
    pids, nproc = runtimes.process_limits(limits)
    return {
        "ulimits": [Ulimit(name="core", soft=0, hard=0), *_nproc(nproc)],
        "read_only": True,
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges:true"],
        "network_mode": network,
        "mem_limit": memory,
        "memswap_limit": memory,
        "nano_cpus": int(limits.cpus * 1e9),
        "pids_limit": pids,
        "ipc_mode": "private",
        "devices": [],
        "log_config": LogConfig(type=LogConfig.types.NONE),
    }


def _nproc(limit: int | None) -> list[Ulimit]:
    """RLIMIT_NPROC at ``limit``, soft and hard, where the runtime counts the agent's processes that way."""
    return [] if limit is None else [Ulimit(name="nproc", soft=limit, hard=limit)]


def _guarded(options: dict[str, Any], uid: int, gid: int) -> None:
    """Start as root under the guardian, which starts the toolbox as the owner and drops root before a request:
    a runtime whose kernel is not the host's may let a command of the owner's uid into the toolbox's ``/proc``."""
    options.update(
        user="0:0",
        cap_add=list(runtimes.GUARDIAN_CAPABILITIES),
        entrypoint=[runtimes.GUARDED_INIT, "--"],
        command=list(runtimes.TOOLBOX_COMMAND),  # an entrypoint given clears the image's CMD
    )
    options["environment"][runtimes.OWNER_VARIABLE] = f"{uid}:{gid}"


def _without_resolver(options: dict[str, Any], proxy: str) -> None:
    """Behind its proxy the sandbox resolves no names (they are the proxy's to resolve) and has no IPv6."""
    # No resolver: resolv.conf is the host's /dev/null, so a lookup fails at once. Docker's DNS
    # at 127.0.0.11 still answers a query sent to it, but for names outside the network it can
    # only ask the server named here, from inside this container: the proxy, which serves no DNS.
    options["mounts"].append(Mount(egress.RESOLV_CONF, "/dev/null", type="bind", read_only=True))
    options["dns"] = [proxy]
    options["sysctls"] = {"net.ipv6.conf.all.disable_ipv6": "1"}


def io_limits(device: str | None, limits: Limits) -> dict[str, Any]:
    """The engine's throttles of ``device`` at the session's ``io_mbps`` and ``io_iops``; none without a device."""
    if device is None:
        return {}
    rate = limits.io_mbps << 20
    return {
        "device_read_bps": [{"Path": device, "Rate": rate}],
        "device_write_bps": [{"Path": device, "Rate": rate}],
        "device_read_iops": [{"Path": device, "Rate": limits.io_iops}],
        "device_write_iops": [{"Path": device, "Rate": limits.io_iops}],
    }


def block_device(path: Path) -> str | None:
    """The disk that holds ``path``: its filesystem's device (a quota's loop device), or for a partition the
    whole disk, whose queue the engine's throttles act on; None on a filesystem of no block device (tmpfs,
    an overlay, a btrfs subvolume) or when this process cannot see the device's node."""
    try:
        dev = os.stat(path).st_dev
    except OSError:
        return None
    sysfs = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
    if (sysfs / "partition").exists():
        sysfs = sysfs.resolve().parent
    try:
        fields = dict(line.split("=", 1) for line in (sysfs / "uevent").read_text().splitlines() if "=" in line)
    except OSError:
        return None
    node = f"/dev/{fields.get('DEVNAME', '')}"
    return node if fields.get("DEVNAME") and os.path.exists(node) else None


def image_volumes(image: Any) -> list[str]:
    """The ``VOLUME`` paths of ``image`` (the SDK's ``Image``; an environment's Dockerfile may declare some, as
    database images do)."""
    config = image.attrs.get("Config") or {}
    # The engine matches a tmpfs to a VOLUME by the cleaned path: ``/data/`` or ``/a//b`` must be given cleaned,
    # or the volume is made anyway (on the host's disk) and may even be mounted over the tmpfs.
    cleaned = {posixpath.normpath(path) for path in (config.get("Volumes") or {}) if path.startswith("/")}
    return sorted(cleaned - {"/", WORKSPACE, "/tmp", HOME})  # those are mounted already (or cannot be)


def raw_socket(attached: Any) -> socket.socket:
    """Take over the socket under the SDK's attach wrapper: a private duplicate, the original closed."""
    sock = attached if isinstance(attached, socket.socket) else getattr(attached, "_sock", None)
    if not isinstance(sock, socket.socket):
        raise SandboxError("Attaching to the sandbox needs a unix or plain tcp DOCKER_HOST.")
    own = sock.dup()
    with contextlib.suppress(OSError):
        attached.close()
        sock.close()
    return own


class DockerLauncher:
    """Starts a session's toolbox in a hardened container and hands over its attach stream (``attach``).

    ``connect`` returns the docker client; it is called once, off the event loop, when
    the engine is first needed, so a controller can run before Docker answers.
    """

    errors: tuple[type[Exception], ...] = (DockerException,)

    def __init__(
        self,
        connect: Callable[[], Any],
        *,
        layer: Layer,
        session_id: str,
        limits: Limits,
        deployment: Deployment,
        holder: LayerHolder | None = None,
    ) -> None:
        self._connect = connect
        self._client: Any = None
        self.layer = layer
        self.repo = layer.repo
        self.session_id = session_id
        self.limits = limits
        self.deployment = deployment
        self.image = deployment.image
        self.env: dict[str, str] = {}
        self.auto_build = deployment.auto_build  # turns off for an environment's image (``adopt``), not the proxy's
        self.container: Any = None
        self._egress: Egress | None = None
        self._holder = holder
        self._holding = False  # the layer is held from its volume's creation until the container is gone
        self._seeded = False  # this container's overlay has the seed layer on top
        self._held = False  # the preparer left a hold on the environment's image (images.hold)

    async def client(self) -> Any:
        """The engine's client, connected on first use (off the event loop)."""
        if self._client is None:
            self._client = await asyncio.to_thread(self._connect)
        return self._client

    async def prepare(self, preparer: Preparer) -> Prepared:
        return await preparer(await self.client())

    def adopt(self, ready: Prepared) -> None:
        if ready.image != self.image:  # an environment's image: held (images.hold) until a container runs it;
            self.auto_build = False  # if gc removes it later, the next start fails clearly instead of building
            self._held = True  # the sandbox image under its tag

    async def unprepare(self) -> None:
        await self._release_holds()

    async def launch(self, image: str, env: dict[str, str]) -> AttachStream:
        """Create the container, attach to its stdio, start it; its stream, before the toolbox has answered."""
        self.image, self.env = image, env
        client = await self.client()
        pulled = await asyncio.to_thread(images.ensure, client, image, self.auto_build)
        labels = owners.labels(self.deployment.instance, self.session_id)
        route = await self._route(labels)
        await asyncio.to_thread(self._make_volume, labels)
        options = self._options(labels, route, image_volumes(pulled))
        self.container = await asyncio.to_thread(client.containers.create, **options)
        attached = await asyncio.to_thread(
            client.api.attach_socket, self.container.id, {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
        )
        stream = await AttachStream.open(raw_socket(attached))
        try:
            await asyncio.to_thread(self.container.start)
        except BaseException:
            stream.close()
            raise
        return stream

    async def ready(self) -> None:
        if self._held:  # the container holds the image now
            self._held = False
            await asyncio.to_thread(images.release, self._client, f"{owners.SESSION}={self.session_id}")

    def refusal(self, err: Exception) -> SandboxError | None:
        return runtimes.unknown_runtime(err, self.limits.runtime) if isinstance(err, APIError) else None

    async def _route(self, labels: dict[str, str]) -> Route:
        """Where the container's network leads; for ``allow``, the session's proxy, started once and kept."""
        if self.limits.network.level != "allow":
            return egress.direct(self.limits.network)
        if self._egress is None:
            deployment = self.deployment  # its auto_build, not ours: ours turns off for an environment's image only
            self._egress = Egress(
                self._client,
                session_id=self.session_id,
                policy=self.limits.network,
                labels=labels,
                image=deployment.proxy_image,
                outside=deployment.outside,
                auto_build=deployment.auto_build,
            )
        return await asyncio.to_thread(self._egress.start)

    async def abandon(self) -> None:
        """After ``discard``: the image holds if the prepared image never ran, then the proxy and its network."""
        if self._held:  # prepared, never run: nothing else removes the hold
            await self._release_holds()
        proxy, self._egress = self._egress, None
        if proxy is None:
            return
        try:
            await asyncio.wait_for(asyncio.to_thread(proxy.stop), DOCKER_CALL_TIMEOUT_S)
        except (APIError, DockerException, OSError, TimeoutError) as err:
            log.warning("could not remove the egress proxy of %s: %s", self.session_id, err)

    async def _release_holds(self) -> None:
        """Remove this session's holds on an environment image (``images.hold``), if it made any."""
        self._held = False
        if self._client is not None:
            try:
                await asyncio.to_thread(images.release, self._client, f"{owners.SESSION}={self.session_id}")
            except (APIError, DockerException, OSError) as err:
                log.warning("could not remove the image holds of %s: %s", self.session_id, err)

    async def discard(self) -> None:
        """Remove the container and its overlay volume and let go of the layer; the proxy stays for the next one."""
        container, self.container = self.container, None
        if container is not None:
            await _remove(container)
        if self._client is not None:
            await remove_volume(self._client, self.session_id)
        if self._holding and self._holder is not None:
            self._holding = False
            try:
                await asyncio.to_thread(self._holder.release, self.layer)
            except Exception as err:  # noqa: BLE001 - a layer left mounted is swept later; the sandbox is gone
                log.warning("could not release the layer of %s: %s", self.session_id, err)

    def _options(self, labels: dict[str, str], route: Route, volumes: Iterable[str] = ()) -> dict[str, Any]:
        """The container's options (a seam for the benchmark's bind-mount baseline, nothing else)."""
        options = container_options(self.image, self.layer, self.limits, labels, route, volumes)
        options["environment"] = {**self.env, **options["environment"]}  # ours (HOME, proxy) win over the environment's
        options["environment"].pop(headroom.SEED_VARIABLE, None)  # never the environment's to set
        options["environment"].pop(PATH_VARIABLE, None)
        if self.env.get("PATH"):  # kept from the login shell's profile by the toolbox, before every command
            options["environment"][PATH_VARIABLE] = self.env["PATH"]
        if self._seeded:  # the toolbox deletes the seed as it starts (see ``workspace.headroom``)
            options["environment"][headroom.SEED_VARIABLE] = "1"
        return options

    def _make_volume(self, labels: dict[str, str]) -> None:
        """A fresh overlay volume for this container, after checking the checkout is still the one pinned."""
        workspace.check_repo(self.layer)
        if self._holder is not None and not self._holding:
            self._holder.hold(self.layer)
            self._holding = True
        with contextlib.suppress(NotFound):
            self._client.volumes.get(volume_name(self.session_id)).remove(force=True)
        self._seeded = headroom.prepare(self.layer)  # the old volume is gone: nothing mounts the overlay now
        kwargs = volume_kwargs(self.layer, volume_name(self.session_id), labels, seeded=self._seeded)
        self._client.volumes.create(**kwargs)


class DockerSandbox(ToolboxSandbox):
    """A session's sandbox on a Docker engine: the toolbox-speaking sandbox over a ``DockerLauncher``."""

    launcher = DockerLauncher
    """The launcher's class (a seam for the benchmark's bind-mount baseline, nothing else)."""

    def __init__(
        self,
        connect: Callable[[], Any],
        *,
        layer: Layer,
        session_id: str,
        limits: Limits,
        deployment: Deployment,
        preparer: Preparer | None = None,
        holder: LayerHolder | None = None,
    ) -> None:
        self.docker = self.launcher(
            connect, layer=layer, session_id=session_id, limits=limits, deployment=deployment, holder=holder
        )
        super().__init__(
            self.docker,
            layer=layer,
            session_id=session_id,
            limits=limits,
            deployment=deployment,
            preparer=preparer,
            holder=holder,
        )

    @property
    def container(self) -> Any:
        """The running container (the SDK's ``Container``), None between containers."""
        return self.docker.container

    @property
    def _client(self) -> Any:
        """The engine's client, once connected."""
        return self.docker._client


async def _remove(container: Any) -> None:
    """Force-remove (SIGKILL + delete) without letting a stuck engine hang the caller."""
    try:
        await asyncio.wait_for(asyncio.to_thread(container.remove, force=True, v=True), DOCKER_CALL_TIMEOUT_S)
    except NotFound:
        pass
    except (APIError, DockerException, OSError) as err:  # the engine may be gone; the container with it
        if "already in progress" not in str(err):
            log.warning("could not remove sandbox %s: %s", container.short_id, err)


async def remove_volume(client: Any, session_id: str) -> None:
    """Remove the session's overlay volume (the engine unmounts it when its container goes); idempotent."""
    await remove_named_volume(client, volume_name(session_id))


async def remove_named_volume(client: Any, name: str) -> None:
    """Remove the volume ``name`` if it is there, without letting a stuck engine hang the caller."""

    def remove() -> None:
        with contextlib.suppress(NotFound):
            client.volumes.get(name).remove(force=True)

    try:
        await asyncio.wait_for(asyncio.to_thread(remove), DOCKER_CALL_TIMEOUT_S)
    except (APIError, DockerException, OSError, TimeoutError) as err:
        log.warning("could not remove the volume %s: %s", name, err)


def clear_as_root(client: Any, image: str, directory: Path) -> None:
    """Empty ``directory`` (a layer being discarded) as root, in a throwaway container; blocking.

    The kernel leaves overlay's ``work/work`` owned by root at mode 000, sometimes with
    whiteouts inside, and copies up directories still owned by root: a controller that is
    not root cannot remove them. The container sees only that directory, has no network and
    only the capability to pass file modes; ``find -delete`` follows no symlink.
    """
    client.containers.run(
        image,
        ["find", "/w", "-mindepth", "1", "-delete"],
        entrypoint=[],
        user="0:0",
        remove=True,
        mounts=[Mount("/w", str(directory), type="bind")],
        network_mode="none",
        cap_drop=["ALL"],
        cap_add=["DAC_OVERRIDE"],
        security_opt=["no-new-privileges:true"],
        log_config=LogConfig(type=LogConfig.types.NONE),
    )
