"""OCI runtimes: which one a sandbox runs under, what each changes, and whether the engine has it.

``runc`` (the default) runs the sandbox on the host's kernel. ``runsc`` (gVisor) puts a
kernel of its own between the agent and the host's: a kernel bug reachable by ordinary
syscalls no longer crosses the boundary. Any other runtime the engine knows may be named
too; the server's ``allowed_runtimes`` says which a session may use.

What differs by runtime:

- Under ``runc`` and ``crun`` the host's kernel keeps every command out of the undumpable
  toolbox's ``/proc`` entries, so the container runs as the repository's owner throughout.
  Under any other runtime the container starts as root with CAP_SETUID, CAP_SETGID and
  CAP_SETPCAP only, and the toolbox's guardian (``toolbox/guardian.py``) starts the toolbox as the
  owner and gives up root before a request is read: gVisor lets a process open the
  ``/proc/<pid>/fd`` of an undumpable one of the same uid.
- Under ``runsc`` the engine's pids limit cannot count the agent's processes: the container's cgroup holds
  gVisor's own kernel, whose ptrace platform keeps a host thread per guest address space and sentry
  thread (``process_limits``). The agent's processes are counted inside gVisor instead.
- Under ``runsc`` the sandbox has no network but loopback (it is registered with
  ``--network=none``, see ``REGISTRATION``), so only the network policy ``none`` runs there, and
  commands get a small preload library: this gVisor rejects ``statx`` with
  ``AT_NO_AUTOMOUNT``, the flag coreutils' ``ls``, ``stat`` and ``cp`` pass, and the library
  drops it (the sandbox image's ``statx.c``).
"""

from __future__ import annotations

import json
from typing import Any

from ..config import Settings
from ..errors import InvalidRequestError, SandboxError
from ..wire.limits import Limits
from .egress import PROXY_PIDS

RUNC = "runc"
GVISOR = "runsc"
HOST_KERNEL = frozenset({"runc", "crun"})
"""Runtimes whose kernel is the host's, which honours an undumpable process's privacy."""
NETWORK_NONE_ONLY = frozenset({GVISOR})
SETUP = RUNC
"""The runtime of an environment's setup container, whatever the session's: setup needs a network."""
GUARDIAN_CAPABILITIES = ("SETUID", "SETGID", "SETPCAP")
"""What a guarded container starts with: to empty the bounding set, start the toolbox as the owner, drop root."""
READABLE_TINI = "/opt/cubicle/bin/tini-readable"
"""tini, readable, in every Cubicle image: a runtime that loads the entrypoint itself (gVisor) cannot run the
execute-only copy."""
GUARDED_INIT = READABLE_TINI
STATX_SHIM = "/opt/cubicle/lib/statx.so"
OWNER_VARIABLE = "CUBICLE_OWNER"
"""``uid:gid`` the guardian runs the toolbox as (the sandbox image's ``toolbox/guardian.py`` reads it)."""
TOOLBOX_COMMAND = ("/opt/cubicle/bin/python3", "-I", "-S", "-u", "/opt/cubicle/toolbox")
"""The toolbox's command in every Cubicle image (the sandbox image and each environment's)."""
REGISTRATION = {"runsc": {"path": "/usr/bin/runsc", "runtimeArgs": ["--platform=ptrace", "--network=none"]}}
"""How ``runsc`` is registered with the engine (``runtimes`` in /etc/docker/daemon.json). A literal: .ci/docker-up
reads it from this file to register runsc, before any Python environment exists.

ptrace: the KVM platform hung on the machines tried. ``--network=none``: without it runsc refuses to start a
container of Docker's ``--network none``. Not ``--oci-seccomp``: this runsc turns the profile's ENOSYS for
clone3 into EPERM, and glibc then cannot start a thread at all; the guardian installs a filter of its own
instead (the sandbox image's ``toolbox/seccomp.py``)."""


GVISOR_HOST_TASKS_PER_PID = 8
"""Under runsc, the engine's pids limit per process the session may run: the envelope of gVisor's own host tasks.

The container's pids cgroup holds gVisor's kernel (the sentry), not the agent's processes: under the ptrace
platform the sentry keeps a stub process per guest address space with a host thread in it for each of its own
threads that ran there, and pools them after the guest process exits. Measured on runsc 20221219, one CPU: six
shells each running ``/bin/true`` 30 times, 591 host tasks for about a dozen guest processes; twenty such
shells, 2592; a fork bomb held at 256 guest processes, 4645. When the sentry cannot make a stub it panics ("error
initializing first thread: resource temporarily unavailable", exit 2) and the sandbox dies with it: at an engine
limit of 256, three such commands at once did that.

Eight times is the trade: twenty such shells at once fit (2,048 host tasks for the tests' 256, 4,096 for the default
512), while a runsc sandbox can never take more than that of the host's pids (``kernel.pid_max`` is 32,768 on many
machines: at 32 times, two fork bombs could have exhausted it for everyone). A fork bomb past it ends its own
sandbox, as an out-of-memory kill does under runsc, and the next call gets a fresh one."""


def process_limits(limits: Limits) -> tuple[int, int | None]:
    """The engine's pids limit, and the RLIMIT_NPROC (soft and hard) that caps the agent's processes and threads
    instead, if any: under runsc gVisor's kernel counts them per uid (the agent's are all one uid, which cannot
    raise its hard limit), and the engine's limit is only the envelope of the sentry's own host tasks."""
    if limits.runtime == GVISOR:
        return limits.pids * GVISOR_HOST_TASKS_PER_PID, limits.pids
    return limits.pids, None


def host_pids(limits: Limits) -> int:
    """The host's process ids a session's containers may hold at once: what admission charges it.

    The sandbox's engine pids limit, with its egress proxy's where the runtime can have a network; never less than
    its environment's setup, which runs before it under runc with the session's pids and a proxy. Under runsc that
    is 8 times ``pids``: gVisor's pooled host tasks fill the envelope whatever the agent's own count. Any runtime
    whose kernel is not the host's is charged so too, whatever its engine limit: gVisor may be registered under
    another name, and what such a runtime keeps on the host is its own."""
    engine, _ = process_limits(limits)
    if limits.runtime not in HOST_KERNEL:
        engine = max(engine, limits.pids * GVISOR_HOST_TASKS_PER_PID)
    setup = limits.pids + PROXY_PIDS
    if limits.runtime in NETWORK_NONE_ONLY:
        return max(engine, setup)
    return engine + PROXY_PIDS


def guarded(runtime: str) -> bool:
    """Whether the container starts as root behind the guardian (see the module's docstring)."""
    return runtime not in HOST_KERNEL


def install_hint(runtime: str) -> str:
    """What to do when the engine lacks ``runtime``."""
    if runtime == GVISOR:
        config = json.dumps({"runtimes": REGISTRATION})
        return (
            "Install gVisor (Debian: `apt-get install runsc`), register it with the engine by adding "
            f"{config} to /etc/docker/daemon.json, and reload dockerd (`kill -HUP $(pidof dockerd)`); "
            "`cubicle doctor` then lists it."
        )
    return f"Register {runtime} with the engine (`runtimes` in /etc/docker/daemon.json) or choose another runtime."


def check(limits: Limits, settings: Settings) -> None:
    """Refuse a runtime the server does not allow, and a network its runtime cannot give; InvalidRequestError."""
    runtime = limits.runtime
    if runtime not in settings.allowed_runtimes:
        raise InvalidRequestError(
            f"The runtime {runtime!r} is not allowed on this server; allowed: {', '.join(settings.allowed_runtimes)}.",
            hint="Choose one of them, or add it to CUBICLE_ALLOWED_RUNTIMES.",
        )
    if runtime in NETWORK_NONE_ONLY and limits.network.level != "none":
        raise InvalidRequestError(
            no_network(limits),
            hint="Use --network none (an environment's setup, which needs a network, runs under runc anyway), "
            "or --runtime runc.",
        )


def no_network(limits: Limits) -> str:
    return f"Sessions under {limits.runtime} have no network: the network {limits.network} needs the runc runtime."


def engine_runtimes(client: Any) -> list[str]:
    """The runtimes the engine knows (``docker info``), default first; blocking."""
    info = client.info()
    known = sorted(info.get("Runtimes") or {})
    default = info.get("DefaultRuntime") or RUNC
    return sorted(known, key=lambda name: name != default)


def unknown_runtime(err: Exception, runtime: str) -> SandboxError | None:
    """The clear error for an engine's refusal to create a container under a runtime it lacks, else None."""
    text = str(err).lower()
    if "unknown runtime" not in text or runtime.lower() not in text:
        return None
    return SandboxError(f"The Docker engine has no runtime {runtime!r}.", hint=install_hint(runtime))
