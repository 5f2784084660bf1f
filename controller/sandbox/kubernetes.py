"""Kubernetes objects for a session's sandbox, generated from the Docker sandbox's own options.

Designed, not yet run against a cluster: ``docs/kubernetes.md`` says what is decided and what is
open. Nothing here talks to a cluster. The functions return plain dicts (Kubernetes objects);
``python -m controller.sandbox.kubernetes --out DIR`` writes them as JSON, which is YAML too.

Why a translation and not a Pod written by hand: ``sandbox.container_options`` and
``egress.proxy_options`` are where the hardening lives. ``pod`` maps every option they return
through ``OPTIONS``, one handler per Docker option, and an option it does not know raises. So a
hardening added to the Docker sandbox cannot go missing from the Pod without a test failing.
What Kubernetes cannot say per Pod is in ``NODE_LEVEL``, with what takes its place.
"""

from __future__ import annotations

import argparse
import hashlib
import ipaddress
import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..config import DEFAULT_IMAGE, DEFAULT_PROXY_IMAGE
from ..wire.limits import Limits
from ..wire.network import SPECIAL, NetworkPolicy
from ..workspace.layer import Layer, LayerInfo
from .docker import WORKSPACE, container_options
from .egress import PORT, RESOLV_CONF, ROLE, Route, proxy_options, squid_config
from .owners import MANAGED, OWNER, SESSION

Manifest = dict[str, Any]
Runtime = Literal["runc", "runsc"]

SANDBOX_NAMESPACE = "cubicle-sandboxes"
CONTROLLER_NAMESPACE = "cubicle"
CONTROLLER_ACCOUNT = "cubicle-controller"
SANDBOX_ACCOUNT = "cubicle-sandbox"
"""The sandboxes' ServiceAccount: bound to no role, and its token is never mounted."""
GVISOR = "gvisor"
"""The RuntimeClass of gVisor; its handler is ``runsc`` in the nodes' containerd configuration."""
GVISOR_NODE_LABEL = "org.cubicle.runsc"
PAUSE = ["/usr/bin/catatonit", "-P"]
"""Pid 1 of a sandbox: it reaps orphans and runs nothing. The toolbox is exec'd beside it, so the toolbox's
``kill(-1)`` (which spares pid 1) leaves the container running. Installed execute-only, it starts undumpable."""
TOOLBOX = ["/usr/bin/python3", "-I", "-S", "-u", "/opt/cubicle/toolbox"]
"""What the controller execs in the sandbox container (the image's CMD): one long-lived stream per toolbox."""
NO_RESOLVER = "127.0.0.1"
"""The only nameserver of a Pod without DNS: nothing listens there, so a lookup fails at once."""
EPHEMERAL_STORAGE = "64Mi"
"""Node disk a Pod may use: only its logs, since the root filesystem is read-only and its tmpfs are memory."""
GRACE_S = 1
PIDS_ANNOTATION = "org.cubicle.pids-limit"
"""What the node's podPidsLimit must not exceed for this Pod (Kubernetes has no per-Pod field for it)."""
KUBE_DNS_PORT = 53
EXAMPLE_PROXY_ADDRESS = "192.0.2.10"
"""Stands for the proxy Service's clusterIP in written examples: the cluster assigns it when the Service is made."""

NODE_LEVEL = {
    "pids_limit": "kubelet podPidsLimit on the sandbox nodes (one value per node); the Pod carries the wanted value "
    f"in the {PIDS_ANNOTATION} annotation",
    "ulimits": "RLIMIT_CORE 0 (and squid's nofile): the runtime's base OCI spec on the sandbox nodes (containerd "
    "base_runtime_spec), and the toolbox lowers RLIMIT_CORE for itself and its commands",
    "log_config": "kubelet containerLogMaxSize and containerLogMaxFiles; the sandbox writes nothing there: the "
    "toolbox talks over exec, pid 1 prints nothing",
    "sysctls": "IPv6 is not switched off in the Pod (an unsafe sysctl, refused by Pod Security 'restricted'); the "
    "NetworkPolicies cover both address families",
    "tmpfs": "emptyDir has no mount options: nosuid is moot under allowPrivilegeEscalation false, nodev under no "
    "capabilities (no CAP_MKNOD), an emptyDir is executable as the sandbox's tmpfs are (the proxy's noexec is "
    "dropped), mode and owner come from fsGroup",
    "runtime": "the Pod's RuntimeClass (gvisor for runsc, on the nodes labelled for it), chosen by the Pod's own "
    "runtime, not the Docker option",
}
"""Docker options with no per-Pod field, and what replaces each (docs/kubernetes.md lists them too)."""

RULES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("", "pods", ("create", "get", "list", "watch", "delete")),
    ("", "pods/exec", ("create", "get")),
    ("", "pods/log", ("get",)),
    ("", "services", ("create", "get", "list", "delete")),
    ("", "persistentvolumeclaims", ("create", "get", "list", "patch", "delete")),
    ("networking.k8s.io", "networkpolicies", ("create", "get", "list", "delete")),
    ("coordination.k8s.io", "leases", ("create", "get", "list", "update", "delete")),
)
"""Everything the controller's ServiceAccount may do, in the sandbox namespace only (docs/kubernetes.md says why)."""

API_VERSIONS = {
    "NetworkPolicy": "networking.k8s.io/v1",
    "Role": "rbac.authorization.k8s.io/v1",
    "RoleBinding": "rbac.authorization.k8s.io/v1",
    "RuntimeClass": "node.k8s.io/v1",
}
"""The kinds outside the core group; every other kind made here is core ``v1``."""
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
_MIB = re.compile(r"(\d+)m")


@dataclass(frozen=True)
class Cluster:
    """What the controller is told about its cluster; the defaults are the names docs/kubernetes.md uses."""

    namespace: str = SANDBOX_NAMESPACE
    controller_namespace: str = CONTROLLER_NAMESPACE
    storage_class: str = "cubicle-workspace"
    pod_cidr: str = "10.244.0.0/16"
    """Squid serves only clients from here; the NetworkPolicy narrows it to the session's sandbox."""
    dns_namespace: str = "kube-system"
    dns_labels: tuple[tuple[str, str], ...] = (("k8s-app", "kube-dns"),)


@dataclass(frozen=True)
class Owner:
    """The controller process's Lease: every object of its sessions but the workspace claim is owned by it, so
    deleting the Lease of a dead controller lets the garbage collector remove what it left (``owners.sweep``)."""

    name: str
    uid: str


@dataclass(frozen=True)
class SandboxImage:
    """The sandbox's image and its ``VOLUME`` paths (``docker.image_volumes``): each gets a memory-backed volume, as
    under Docker it gets a tmpfs."""

    name: str
    volumes: tuple[str, ...] = ()


@dataclass(frozen=True)
class CheckoutCopy:
    """The session's checkout as its Pod gets it, copied into the claim: its owner, whom the sandbox runs as (as the
    Docker sandbox does), and the MiB the copy takes there, on top of the disk quota."""

    uid: int
    gid: int
    mb: int = 0


@dataclass(frozen=True)
class Proxy:
    """The egress proxy of an ``allow`` policy: its image, and its Service's clusterIP, which the sandbox is given
    because it resolves no names (``allow`` needs it; the cluster assigns it when the Service is made)."""

    image: str = DEFAULT_PROXY_IMAGE
    address: str | None = None


EXAMPLE_PROXY = Proxy(address=EXAMPLE_PROXY_ADDRESS)
"""The proxy of the written examples (``manifests``)."""


# ----------------------------------------------------------------------------- names


def object_name(session_id: str) -> str:
    """A DNS label for the session's objects: its id in lower case, plus a hash of the exact id (ids may differ
    only in case or in characters a name cannot hold)."""
    slug = re.sub(r"[^a-z0-9]+", "-", session_id.lower()).strip("-")[:32].strip("-")
    digest = hashlib.sha256(session_id.encode()).hexdigest()[:8]
    return f"{slug}-{digest}" if slug else f"s-{digest}"


def pod_name(session_id: str) -> str:
    return f"cubicle-{object_name(session_id)}"


def claim_name(session_id: str) -> str:
    return f"cubicle-ws-{object_name(session_id)}"


def proxy_name(session_id: str) -> str:
    """The proxy's Pod and its Service."""
    return f"cubicle-proxy-{object_name(session_id)}"


def session_labels(session_id: str) -> dict[str, str]:
    """``owners.labels`` without the owner token, which names a process (``Owner`` does that job here)."""
    if len(session_id) > 63 or not _LABEL_VALUE.fullmatch(session_id):
        raise ValueError(f"The session id {session_id!r} cannot be a label value (63 characters, alphanumeric ends).")
    return {MANAGED: "true", SESSION: session_id}


def _meta(kind: str, name: str, namespace: str | None, labels: dict[str, str], owner: Owner | None) -> Manifest:
    api = API_VERSIONS.get(kind, "v1")
    meta: dict[str, Any] = {"name": name, "labels": labels}
    if namespace is not None:
        meta["namespace"] = namespace
    if owner is not None:
        meta["ownerReferences"] = [
            {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "name": owner.name, "uid": owner.uid}
        ]
    return {"apiVersion": api, "kind": kind, "metadata": meta}


# ----------------------------------------------------------------------------- Docker options -> Pod


@dataclass
class _Draft:
    """The Pod being built from one container's Docker options."""

    claim: str | None
    container: dict[str, Any] = field(default_factory=dict)
    security: dict[str, Any] = field(default_factory=dict)
    pod_security: dict[str, Any] = field(default_factory=dict)
    resources: dict[str, str] = field(default_factory=dict)
    volumes: list[dict[str, Any]] = field(default_factory=list)
    mounts: list[dict[str, Any]] = field(default_factory=list)
    annotations: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    spec: dict[str, Any] = field(default_factory=dict)
    resolver: bool = True


def _refuse(what: str) -> ValueError:
    return ValueError(f"{what} has no Pod counterpart yet: map it in controller/sandbox/kubernetes.py before using it.")


def _user(value: str, draft: _Draft) -> None:
    uid, gid = (int(part) for part in value.split(":"))
    if uid == 0:
        raise _refuse("a sandbox user of 0")
    draft.security |= {"runAsUser": uid, "runAsGroup": gid, "runAsNonRoot": True}
    draft.pod_security |= {
        "fsGroup": gid,
        "fsGroupChangePolicy": "OnRootMismatch",
        "supplementalGroupsPolicy": "Strict",
    }


def _mib(text: str) -> int:
    match = _MIB.fullmatch(text)
    if match is None:
        raise _refuse(f"the size {text!r}")
    return int(match.group(1))


def _memory(value: str, draft: _Draft) -> None:
    draft.resources["memory"] = f"{_mib(value)}Mi"


def _swap(value: str, draft: _Draft) -> None:
    """Swap equal to memory means none; a Guaranteed Pod gets no swap under any kubelet swap setting."""
    if draft.resources.get("memory") != f"{_mib(value)}Mi":
        raise _refuse(f"swap beyond memory ({value})")


def _cpus(value: int, draft: _Draft) -> None:
    draft.resources["cpu"] = f"{max(1, math.ceil(value / 1_000_000))}m"  # the same CFS quota, in millicores


def _tmpfs(value: dict[str, str], draft: _Draft) -> None:
    """Each tmpfs becomes a memory-backed emptyDir of the same size, charged to the container's memory as tmpfs is."""
    for number, (path, options) in enumerate(value.items()):
        size: int | None = None
        for option in options.split(","):
            key, _, setting = option.partition("=")
            if key == "size":
                size = _mib(setting)
            elif key not in ("rw", "exec", "nosuid", "nodev", "noexec", "mode", "uid", "gid"):
                raise _refuse(f"the tmpfs option {option!r} of {path}")
        if size is None:
            raise _refuse(f"a tmpfs without a size ({path})")
        name = f"tmpfs-{number}"
        draft.volumes.append({"name": name, "emptyDir": {"medium": "Memory", "sizeLimit": f"{size}Mi"}})
        draft.mounts.append({"name": name, "mountPath": path})


def _mounts(value: list[dict[str, Any]], draft: _Draft) -> None:
    """The workspace volume becomes the session's claim; the empty resolv.conf becomes a Pod without a resolver."""
    for mount in value:
        if mount["Type"] == "volume" and mount["Target"] == WORKSPACE and draft.claim is not None:
            draft.volumes.append({"name": "workspace", "persistentVolumeClaim": {"claimName": draft.claim}})
            draft.mounts.append({"name": "workspace", "mountPath": WORKSPACE})
        elif mount["Type"] == "bind" and mount["Source"] == "/dev/null" and mount["Target"] == RESOLV_CONF:
            draft.resolver = False
        else:
            raise _refuse(f"the mount {mount['Type']} {mount['Source']} -> {mount['Target']}")


def _network(value: str, draft: _Draft) -> None:
    """``none`` has no resolver; the rest (open's bridge, the proxy's side of allow) resolve through kube-dns.
    What a Pod may reach is its session's NetworkPolicies' to say, never a host's network."""
    draft.spec["hostNetwork"] = False
    if value == "none":
        draft.resolver = False


def _security_opt(value: list[str], draft: _Draft) -> None:
    for option in value:
        if option not in ("no-new-privileges", "no-new-privileges:true"):
            raise _refuse(f"the security option {option!r}")
        draft.security["allowPrivilegeEscalation"] = False


def _ulimits(value: list[dict[str, Any]], draft: _Draft) -> None:
    for limit in value:
        if (limit["Name"], limit["Soft"], limit["Hard"]) not in (("core", 0, 0), ("nofile", 4096, 4096)):
            raise _refuse(f"the ulimit {limit['Name']}={limit['Soft']}:{limit['Hard']}")


def _log(value: dict[str, Any], draft: _Draft) -> None:
    if value["Type"] not in ("none", "json-file"):
        raise _refuse(f"the log driver {value['Type']!r}")


def _sysctls(value: dict[str, str], draft: _Draft) -> None:
    if set(value) != {"net.ipv6.conf.all.disable_ipv6"}:
        raise _refuse(f"the sysctls {sorted(value)}")


def _exactly(expected: Any, then: Callable[[_Draft], None] = lambda draft: None) -> Callable[[Any, _Draft], None]:
    def handle(value: Any, draft: _Draft) -> None:
        if value != expected:
            raise _refuse(f"the value {value!r} (only {expected!r} is mapped)")
        then(draft)

    return handle


def _set(target: str, key: str, convert: Callable[[Any], Any] = lambda v: v) -> Callable[[Any, _Draft], None]:
    def handle(value: Any, draft: _Draft) -> None:
        getattr(draft, target)[key] = convert(value)

    return handle


OPTIONS: dict[str, Callable[[Any, _Draft], None]] = {
    "image": _set("container", "image"),
    "name": lambda value, draft: None,  # the Pod is named by the session (``pod_name``, ``proxy_name``)
    "user": _user,
    "working_dir": _set("container", "workingDir"),
    "stdin_open": _exactly(True, lambda d: d.container.update(stdin=False)),  # the toolbox's stdin comes with its exec
    "tty": _exactly(False, lambda d: d.container.update(tty=False)),
    "environment": _set("container", "env", lambda env: [{"name": k, "value": v} for k, v in env.items()]),
    "labels": lambda value, draft: draft.labels.update({k: v for k, v in value.items() if k != OWNER}),
    "hostname": _set("spec", "hostname"),
    "mounts": _mounts,
    "tmpfs": _tmpfs,
    "ulimits": _ulimits,
    "read_only": _exactly(True, lambda d: d.security.update(readOnlyRootFilesystem=True)),
    "cap_drop": _exactly(["ALL"], lambda d: d.security.update(capabilities={"drop": ["ALL"]})),
    "security_opt": _security_opt,
    "network_mode": _network,
    "dns": lambda value, draft: setattr(draft, "resolver", False),  # the proxy, which serves no DNS
    "sysctls": _sysctls,
    "mem_limit": _memory,
    "memswap_limit": _swap,
    "nano_cpus": _cpus,
    "pids_limit": lambda value, draft: draft.annotations.update({PIDS_ANNOTATION: str(value)}),
    "ipc_mode": _exactly("private", lambda d: d.spec.update(hostIPC=False)),
    "devices": _exactly([]),
    "log_config": _log,
    "runtime": lambda value, draft: None,  # a Pod's runtime is its RuntimeClass (``pod``'s ``runtime``)
}
"""One handler per Docker option of ``container_options`` and ``proxy_options``; any other option raises."""


def pod(
    options: dict[str, Any],
    *,
    name: str,
    role: str,
    namespace: str,
    runtime: Runtime = "runc",
    claim: str | None = None,
    owner: Owner | None = None,
) -> Manifest:
    """The Pod that runs a container created with the Docker ``options``, hardened the same way and more."""
    draft = _drafted(options, claim)
    manifest = _meta("Pod", name, namespace, draft.labels, owner)
    manifest["metadata"]["annotations"] = draft.annotations
    manifest["spec"] = _pod_spec(draft, _container(role, draft), runtime)
    return manifest


def _drafted(options: dict[str, Any], claim: str | None) -> _Draft:
    """The Pod's parts, each Docker option read by its handler in ``OPTIONS``; an option it has none for raises."""
    draft = _Draft(claim)
    for key, value in options.items():
        if key not in OPTIONS:
            raise _refuse(f"The Docker option {key!r}")
        try:
            OPTIONS[key](value, draft)
        except ValueError as err:
            raise ValueError(f"{key}: {err}") from None
    return draft


def _container(role: str, draft: _Draft) -> dict[str, Any]:
    limits = {**draft.resources, "ephemeral-storage": EPHEMERAL_STORAGE}
    return {
        "name": role,
        "imagePullPolicy": "IfNotPresent",
        **draft.container,
        "resources": {"limits": limits, "requests": dict(limits)},  # equal: Guaranteed QoS, so no swap
        "securityContext": {**draft.security, "privileged": False, "procMount": "Default"},
        "volumeMounts": draft.mounts,
    }


def _pod_spec(draft: _Draft, container: dict[str, Any], runtime: Runtime) -> dict[str, Any]:
    return {
        **draft.spec,
        "hostPID": False,
        "shareProcessNamespace": False,
        "restartPolicy": "Never",
        "serviceAccountName": SANDBOX_ACCOUNT,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": GRACE_S,
        "containers": [container],
        "volumes": draft.volumes,
        "securityContext": {
            **draft.pod_security,
            "seccompProfile": {"type": "RuntimeDefault"},
            "appArmorProfile": {"type": "RuntimeDefault"},
        },
        **_dns(draft.resolver),
        **_runtime(runtime),
    }


def _dns(resolver: bool) -> dict[str, Any]:
    if resolver:
        return {"dnsPolicy": "ClusterFirst"}
    return {"dnsPolicy": "None", "dnsConfig": {"nameservers": [NO_RESOLVER], "searches": [], "options": []}}


def _runtime(runtime: Runtime) -> dict[str, Any]:
    """gVisor's own kernel is the boundary under runsc; under runc the Pod gets a user namespace of its own."""
    return {"runtimeClassName": GVISOR} if runtime == "runsc" else {"hostUsers": False}


# ----------------------------------------------------------------------------- a session's objects


def session_manifests(
    session_id: str,
    image: SandboxImage,
    limits: Limits,
    *,
    checkout: CheckoutCopy,
    runtime: Runtime = "runc",
    cluster: Cluster | None = None,
    proxy: Proxy | None = None,
    owner: Owner | None = None,
) -> list[Manifest]:
    """The objects of one session: its workspace claim, its sandbox Pod, its NetworkPolicy, and for ``allow`` the
    proxy's Pod, Service and NetworkPolicy.

    The sandbox runs as the ``checkout``'s owner, as the Docker sandbox does, and its claim holds the copy and the
    disk quota. ``proxy`` is the proxy's image and its Service's clusterIP, needed for ``allow`` (the sandbox
    resolves no names).
    """
    cluster = cluster or Cluster()
    proxy = proxy or Proxy()
    policy = limits.network
    labels = {**session_labels(session_id), ROLE: "sandbox"}
    layer, route = _owner_only(checkout.uid, checkout.gid), _route(session_id, policy, proxy.address)
    options = container_options(image.name, layer, limits, labels, route, image.volumes)
    name, claim = pod_name(session_id), claim_name(session_id)
    sandbox = pod(
        options, name=name, role="sandbox", namespace=cluster.namespace, runtime=runtime, claim=claim, owner=owner
    )
    sandbox["spec"]["containers"][0]["command"] = PAUSE
    objects = [workspace_claim(session_id, limits, checkout.mb, cluster), sandbox]
    objects.append(sandbox_policy(session_id, policy, cluster, owner))
    if policy.level == "allow":
        objects += proxy_manifests(session_id, policy, proxy.image, runtime, cluster, owner)
    return objects


def _owner_only(uid: int, gid: int) -> Layer:
    """What ``container_options`` reads of a layer: the checkout's owner. The checkout is copied into the Pod's
    claim, never mounted, so no layer directory takes part."""
    return Layer(Path("/nonexistent"), LayerInfo(repo="(copied into the claim)", uid=uid, gid=gid, dev=0, ino=0))


def _route(session_id: str, policy: NetworkPolicy, proxy_address: str | None) -> Route | None:
    if policy.level != "allow":
        return None
    if proxy_address is None:
        raise ValueError("An allow policy's sandbox names its proxy by address: pass the Service's clusterIP.")
    return Route(proxy_name(session_id), proxy_address)


def workspace_claim(session_id: str, limits: Limits, checkout_mb: int, cluster: Cluster) -> Manifest:
    """The session's /workspace: the checkout copied in plus room for the disk quota, one Pod at a time. It outlives
    Pods (a replaced sandbox finds its files) and goes with the session's layer."""
    claim = _meta("PersistentVolumeClaim", claim_name(session_id), cluster.namespace, session_labels(session_id), None)
    claim["spec"] = {
        "accessModes": ["ReadWriteOncePod"],
        "storageClassName": cluster.storage_class,
        "volumeMode": "Filesystem",
        "resources": {"requests": {"storage": f"{checkout_mb + limits.disk_mb}Mi"}},
    }
    return claim


def _selector(session_id: str, role: str) -> dict[str, Any]:
    return {"matchLabels": {SESSION: session_id, ROLE: role}}


def _dns_rule(cluster: Cluster) -> dict[str, Any]:
    peer = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": cluster.dns_namespace}},
        "podSelector": {"matchLabels": dict(cluster.dns_labels)},
    }
    return {"to": [peer], "ports": [{"protocol": p, "port": KUBE_DNS_PORT} for p in ("UDP", "TCP")]}


def public_peers() -> list[dict[str, Any]]:
    """Every address that is plainly public: the internet less ``network.SPECIAL`` (private ranges, the metadata
    service, loopback...), in both families. Pod and Service addresses of a usual cluster fall in the exceptions."""
    v4 = [cidr for cidr in SPECIAL if ":" not in cidr]
    v6 = [cidr for cidr in SPECIAL if ":" in cidr]
    return [{"ipBlock": {"cidr": "0.0.0.0/0", "except": v4}}, {"ipBlock": {"cidr": "::/0", "except": v6}}]


def _policy(session_id: str, role: str, cluster: Cluster, owner: Owner | None) -> Manifest:
    name = f"{pod_name(session_id)}-{role}"
    policy = _meta("NetworkPolicy", name, cluster.namespace, session_labels(session_id), owner)
    policy["spec"] = {"podSelector": _selector(session_id, role), "policyTypes": ["Ingress", "Egress"]}
    return policy


def sandbox_policy(session_id: str, network: NetworkPolicy, cluster: Cluster, owner: Owner | None) -> Manifest:
    """What the sandbox may reach: nothing (``none``: no rule at all), its proxy's port (``allow``), or the public
    internet and kube-dns (``open``). Nothing may connect to it: the controller comes in through exec."""
    policy = _policy(session_id, "sandbox", cluster, owner)
    if network.level == "allow":
        to_proxy = {"podSelector": _selector(session_id, "proxy")}
        policy["spec"]["egress"] = [{"to": [to_proxy], "ports": [{"protocol": "TCP", "port": PORT}]}]
    elif network.level == "open":
        policy["spec"]["egress"] = [_dns_rule(cluster), {"to": public_peers()}]
    return policy


def proxy_policy(session_id: str, network: NetworkPolicy, cluster: Cluster, owner: Owner | None) -> Manifest:
    """The proxy takes connections from its sandbox only, and reaches kube-dns and public addresses on the listed
    ports, plus each listed IP address on its own ports (a listed private address stays reachable, as under Docker)."""
    policy = _policy(session_id, "proxy", cluster, owner)
    from_sandbox = {"podSelector": _selector(session_id, "sandbox")}
    policy["spec"]["ingress"] = [{"from": [from_sandbox], "ports": [{"protocol": "TCP", "port": PORT}]}]
    egress = [_dns_rule(cluster)]
    ports = sorted({port for host in network.hosts for port in host.ports})
    if ports:  # an empty list would mean every port
        egress.append({"to": public_peers(), "ports": _tcp(ports)})
    for host in network.hosts:
        if (address := _address(host.name)) is not None:
            cidr = f"{address}/{address.max_prefixlen}"
            egress.append({"to": [{"ipBlock": {"cidr": cidr}}], "ports": _tcp(host.ports)})
    policy["spec"]["egress"] = egress
    return policy


def _tcp(ports: Iterable[int]) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": port} for port in ports]


def _address(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return None


def proxy_manifests(
    session_id: str, network: NetworkPolicy, image: str, runtime: Runtime, cluster: Cluster, owner: Owner | None
) -> list[Manifest]:
    """The egress proxy of an ``allow`` policy: its Pod (from ``egress.proxy_options``), Service and NetworkPolicy.

    A Pod of its own, not a container beside the sandbox: a Pod shares one network namespace, so the agent could
    use the proxy's way out directly.
    """
    config = squid_config(network, cluster.pod_cidr)
    name = proxy_name(session_id)
    options = proxy_options(image, session_id, name, session_labels(session_id), config)
    proxy = pod(options, name=name, role="proxy", namespace=cluster.namespace, runtime=runtime, owner=owner)
    container = proxy["spec"]["containers"][0]
    container["ports"] = [{"name": "proxy", "containerPort": PORT, "protocol": "TCP"}]
    container["readinessProbe"] = {"tcpSocket": {"port": PORT}, "periodSeconds": 1}
    service = _meta("Service", name, cluster.namespace, session_labels(session_id), owner)
    service["spec"] = {
        "type": "ClusterIP",
        "selector": _selector(session_id, "proxy")["matchLabels"],
        "ports": [{"name": "proxy", "port": PORT, "targetPort": PORT, "protocol": "TCP"}],
    }
    return [service, proxy, proxy_policy(session_id, network, cluster, owner)]


# ----------------------------------------------------------------------------- the cluster's objects


def cluster_manifests(cluster: Cluster | None = None) -> list[Manifest]:
    """What an operator applies once: the sandbox namespace (Pod Security 'restricted' enforced), its deny-all
    default, both ServiceAccounts, the controller's Role and RoleBinding there, and gVisor's RuntimeClass."""
    cluster = cluster or Cluster()
    level = {f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "audit", "warn")}
    namespace = _meta("Namespace", cluster.namespace, None, {MANAGED: "true", **level}, None)
    deny = _meta("NetworkPolicy", "cubicle-deny-all", cluster.namespace, {MANAGED: "true"}, None)
    deny["spec"] = {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    sandbox_account = _meta("ServiceAccount", SANDBOX_ACCOUNT, cluster.namespace, {MANAGED: "true"}, None)
    sandbox_account["automountServiceAccountToken"] = False
    controller = _meta("ServiceAccount", CONTROLLER_ACCOUNT, cluster.controller_namespace, {MANAGED: "true"}, None)
    return [namespace, deny, sandbox_account, controller, *rbac(cluster), runtime_class()]


def rbac(cluster: Cluster) -> list[Manifest]:
    """The controller's Role in the sandbox namespace (``RULES``) and its binding to the controller's account."""
    role = _meta("Role", CONTROLLER_ACCOUNT, cluster.namespace, {MANAGED: "true"}, None)
    role["rules"] = [{"apiGroups": [group], "resources": [res], "verbs": list(verbs)} for group, res, verbs in RULES]
    binding = _meta("RoleBinding", CONTROLLER_ACCOUNT, cluster.namespace, {MANAGED: "true"}, None)
    binding["roleRef"] = {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": CONTROLLER_ACCOUNT}
    subject = {"kind": "ServiceAccount", "name": CONTROLLER_ACCOUNT, "namespace": cluster.controller_namespace}
    binding["subjects"] = [subject]
    return [role, binding]


def runtime_class() -> Manifest:
    """gVisor: Pods naming it run under runsc, only on nodes labelled as having it. The overhead is an estimate of
    the sentry's own memory and CPU, added to each Pod's requests and limits; to be measured."""
    runtime = _meta("RuntimeClass", GVISOR, None, {MANAGED: "true"}, None)
    runtime["handler"] = "runsc"
    runtime["overhead"] = {"podFixed": {"memory": "64Mi", "cpu": "100m"}}
    runtime["scheduling"] = {"nodeSelector": {GVISOR_NODE_LABEL: "true"}}
    return runtime


def manifests(
    session_id: str,
    image: SandboxImage,
    limits: Limits,
    *,
    checkout: CheckoutCopy,
    runtime: Runtime = "runc",
    cluster: Cluster | None = None,
    proxy: Proxy = EXAMPLE_PROXY,
) -> list[Manifest]:
    """The cluster's objects and one session's, as an example to read or apply to a test cluster."""
    own = session_manifests(session_id, image, limits, checkout=checkout, runtime=runtime, cluster=cluster, proxy=proxy)
    return [*cluster_manifests(cluster), *own]


def write(objects: Sequence[Manifest], out: Path) -> list[Path]:
    """One JSON file per object (JSON is YAML too: ``kubectl apply -f DIR`` reads them), numbered in apply order."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for number, manifest in enumerate(objects):
        path = out / f"{number:02d}-{manifest['kind'].lower()}-{manifest['metadata']['name']}.json"
        path.write_text(json.dumps(manifest, indent=2) + "\n")
        paths.append(path)
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m controller.sandbox.kubernetes",
        description="Write example Kubernetes objects of a Cubicle session.",
    )
    parser.add_argument("--out", type=Path, required=True, help="directory to write the JSON files to")
    parser.add_argument("--session", default="s_0123456789abcdef", help="the session id")
    parser.add_argument("--image", default=DEFAULT_IMAGE)
    parser.add_argument(
        "--limits", default="{}", help='the session\'s limits as JSON, e.g. {"network": "allow=pypi.org"}'
    )
    parser.add_argument("--runtime", choices=("runc", "runsc"), default="runc")
    parser.add_argument("--uid", type=int, default=1000, help="the checkout owner's uid (never 0)")
    parser.add_argument("--gid", type=int, default=1000)
    args = parser.parse_args(argv)
    limits = Limits.model_validate_json(args.limits)
    checkout = CheckoutCopy(uid=args.uid, gid=args.gid)
    objects = manifests(args.session, SandboxImage(args.image), limits, checkout=checkout, runtime=args.runtime)
    for path in write(objects, args.out):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
