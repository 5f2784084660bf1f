"""Labels that mark a container as Cubicle's, and the sweep that removes orphans.

Every sandbox carries ``org.cubicle.managed``, its session id, and an owner token
``instance:pid:start`` naming the controller process that made it. A container is an
orphan when that process is gone (same instance, pid dead or reused) or when its
owner is this very process but the session is no longer live. Containers made by
another instance (another host, another compose container) are left alone unless
asked, because we cannot see whether their owner still runs. A session's volume, and
the network and proxy of an ``allow`` policy (``egress``), carry the same labels and go
the same way.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # only the sweep and the removal talk to the engine: a controller's identity needs no SDK
    from docker.errors import APIError

log = logging.getLogger(__name__)

MANAGED = "org.cubicle.managed"
SESSION = "org.cubicle.session"
OWNER = "org.cubicle.owner"


def _start_ticks(pid: int) -> str:
    """The process start time in clock ticks since boot, so a reused pid is not mistaken for ours."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return "0"


def owner_token(instance: str) -> str:
    pid = os.getpid()
    return f"{instance}:{pid}:{_start_ticks(pid)}"


def labels(instance: str, session_id: str) -> dict[str, str]:
    return {MANAGED: "true", SESSION: session_id, OWNER: owner_token(instance)}


def owner_alive(token: str) -> bool:
    parts = token.rsplit(":", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return False
    pid = int(parts[1])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return _start_ticks(pid) == parts[2]


@dataclass(frozen=True)
class Sweep:
    removed: list[str]
    kept: list[str]


def is_orphan(
    container_labels: dict[str, str],
    instance: str,
    live_sessions: Collection[str],
    everything: bool,
    dead_only: bool = False,
) -> bool:
    """Whether to sweep the container: with ``dead_only``, only when its owner is a gone process of ``instance``
    (this process's own are never judged: a live controller's sweep runs beside its own sessions)."""
    token = container_labels.get(OWNER, "")
    if everything:
        return True
    if not token.startswith(instance + ":"):
        return False
    if token == owner_token(instance):
        return not dead_only and container_labels.get(SESSION, "") not in live_sessions
    return not owner_alive(token)


def sweep(
    client: Any, instance: str, live_sessions: Collection[str] = (), everything: bool = False, dead_only: bool = False
) -> Sweep:
    """Remove orphaned sandboxes and proxies (all Cubicle containers with ``everything``; only those of gone
    processes with ``dead_only``), then their workspace volumes and networks; blocking.

    A volume only names the overlay's directories (the layer itself is files in the data dir),
    so removing one loses nothing; the engine refuses to remove a volume or a network a container still uses.
    """
    removed, kept = [], []
    for item in _listed(client, {"label": f"{MANAGED}=true"}):
        labels = item.attrs.get("Labels") or {}
        name = f"{_name(item)} (session {labels.get(SESSION, '?')})"
        if not is_orphan(labels, instance, live_sessions, everything, dead_only):
            kept.append(name)
            continue
        try:
            _force(item)
            removed.append(name)
        except Exception as err:  # noqa: BLE001 - one stuck container must not stop the sweep
            log.warning("could not remove %s: %s", name, err)
            kept.append(name)
    return Sweep(removed, kept)


def remove_session(client: Any, session_id: str, wait_s: float = 30.0) -> None:
    """Remove every container, volume and network of one session, whoever made them; blocking.

    Another caller may be removing the same container (an idle timer's stop racing an
    ``apply``): then this waits until the engine has it gone, so that on return the
    session's overlay is unmounted and its volume can go too. A removal the engine refuses
    (a kill that got no exit event in time, as under load) is asked again each second until
    ``wait_s``; if containers are still there then, the engine's last refusal is raised (with none,
    they are new ones someone made meanwhile, not this call's to wait for).
    """
    from docker.errors import APIError

    found = {"label": f"{SESSION}={session_id}"}
    deadline = time.monotonic() + wait_s
    asked = float("-inf")
    refusal: APIError | None = None
    while left := client.containers.list(all=True, filters=found, sparse=True):
        if time.monotonic() >= deadline:
            if refusal is not None:
                raise refusal
            break
        if time.monotonic() - asked >= 1.0:
            asked = time.monotonic()
            for container in left:
                try:
                    _remove(container)
                except APIError as err:
                    log.warning("the engine did not remove %s yet: %s", _name(container), err)
                    refusal = err
        time.sleep(0.05)
    for volume in client.volumes.list(filters=found):
        _remove(volume)
    for network in client.networks.list(filters=found):
        _remove(network)


def _force(item: Any) -> None:
    """Remove a container, volume or network (which has no force: it goes once its containers have)."""
    from docker.models.containers import Container
    from docker.models.networks import Network

    if isinstance(item, Network):
        item.remove()
    elif isinstance(item, Container):
        item.remove(force=True, v=True)  # with its anonymous volumes
    else:
        item.remove(force=True)


def _remove(item: Any) -> None:
    """Remove a container, volume or network; one already gone, or already being removed by someone else, is fine."""
    from docker.errors import APIError, NotFound

    try:
        _force(item)
    except NotFound:
        pass
    except APIError as err:
        if "already in progress" not in str(err):
            raise


def _name(item: Any) -> str:
    """A volume's name, or a sparse container's (which has no ``.name``, only the list's ``Names``)."""
    return str(item.name or (item.attrs.get("Names") or [item.short_id])[0].lstrip("/"))


def _listed(client: Any, filters: dict[str, str]) -> list[Any]:
    """Containers, then volumes, then networks, matching ``filters``, as the engine's list shows them.

    Sparse: the SDK would otherwise inspect each listed container in turn, and one removed
    in between (by its own controller, any time) failed the whole listing with NotFound.
    """
    return [
        *client.containers.list(all=True, filters=filters, sparse=True),
        *client.volumes.list(filters=filters),
        *client.networks.list(filters=filters),
    ]
