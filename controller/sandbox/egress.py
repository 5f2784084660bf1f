"""The egress proxy of an ``allow`` network policy: per session, an internal network and a squid on it.

A sandbox whose policy is ``allow=HOST,...`` is attached to one network only: its session's own
internal Docker network, on which the host has no address (``inhibit_ipv4``) and the only other
member is the session's proxy, Debian's squid in a hardened container that is attached to the
egress network too (``Settings.egress_network``, the engine's ``bridge`` by default; it asks the DNS
servers of ``Settings.egress_dns`` when set). The sandbox
is given ``HTTP_PROXY`` and its kin naming the proxy by IP, and an empty ``/etc/resolv.conf``: it
resolves no name itself (a lookup fails at once), the proxy resolves for it.

Squid's configuration is generated from the policy by ``squid_config``, a pure function: only the
listed hosts on their listed ports, as plain HTTP or CONNECT; a name under a ``*.`` pattern only
while it resolves to public addresses; a raw IP only when that IP is listed; never the proxy's
own loopback; no cache and no disk; and refusals that say why, in words a model can act on. Its access log
(the engine's log of the proxy) ends each line with the address connected to, the error page, the host and the
port asked for: ``refusals`` reads from it what was refused or unreachable, for a client that showed only a status.

Lifetime: ``Egress.start`` makes the network and the proxy at a sandbox's first start and finds
them again on later starts, so a replaced container keeps its proxy; ``Egress.stop`` removes both.
A start that fails removes what it made. Both carry the session's ``owners.labels``, so
``owners.remove_session`` and ``owners.sweep`` find them as they find containers.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from docker.errors import APIError, NotFound
from docker.types import LogConfig, Ulimit

from ..errors import SandboxError
from ..wire.network import DEFAULT_PORTS, SPECIAL, HostPattern, NetworkPolicy, Outside
from . import images

PROXY_PIDS = 64
"""The engine's pids limit of a session's egress proxy (squid and its helpers)."""

PORT = 3128
ROLE = "org.cubicle.role"
"""Label naming what a Cubicle object is for (the proxy container and the session's network carry it)."""
PROXY_UID = 13
"""Debian's ``proxy`` user (fixed by base-passwd): squid runs as it and owns the tmpfs it writes to."""
READY = "Accepting HTTP Socket connections"
READY_TIMEOUT_S = 30.0
RESOLV_CONF = "/etc/resolv.conf"
NO_PROXY = "localhost,127.0.0.1"
ERRORS = "/usr/share/cubicle-proxy/errors"
"""Where the proxy image keeps squid's error pages and Cubicle's refusals (``proxy_image/errors``)."""

LOOPBACK = ("127.0.0.0/8", "0.0.0.0/8", "::1/128", "::/128")
"""The proxy's own loopback, which no entry reaches (a listed ``localhost`` would be the proxy, not the host)."""

_NAME = re.compile(r"(\*\.)?[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*")
_NUMERIC = re.compile(r"0x[0-9a-f]*|[0-9]+")
"""A last label that would make ``*.`` cover IP addresses (``1.0x7f`` reads as 1.0.0.127)."""


def network_name(session_id: str) -> str:
    """The session's internal network: the sandbox and its proxy, nothing else."""
    return f"cubicle-net-{session_id}"


def proxy_name(session_id: str) -> str:
    return f"cubicle-proxy-{session_id}"


@dataclass(frozen=True)
class Route:
    """How a sandbox container is attached: a Docker network (mode) and, for ``allow``, its proxy's address."""

    network: str
    proxy: str | None = None
    """The proxy's IP address on ``network``."""

    @property
    def url(self) -> str | None:
        return None if self.proxy is None else f"http://{self.proxy}:{PORT}"

    def environment(self) -> dict[str, str]:
        """The variables that send HTTP clients through the proxy (both spellings: tools read either)."""
        if self.url is None:
            return {}
        names = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")
        return {**dict.fromkeys(names, self.url), "NO_PROXY": NO_PROXY, "no_proxy": NO_PROXY}


NO_NETWORK = Route("none")
BRIDGE = Route("bridge")


def direct(policy: NetworkPolicy) -> Route:
    """The route of a policy that needs no proxy: ``none`` or ``open``."""
    if policy.level == "allow":
        raise SandboxError("An allow network policy needs its session's proxy (egress.Egress), which was not started.")
    return BRIDGE if policy.level == "open" else NO_NETWORK


# ----------------------------------------------------------------------------- squid's configuration


def _token(pattern: HostPattern) -> str:
    """The entry as squid's ``dstdomain -n`` reads it; anything but a checked name or IP is refused.

    ``network.HostPattern`` validates names already; this checks again, because the text goes
    into a configuration file where a space or a newline would be a directive of its own.
    """
    name = pattern.name
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        if not _NAME.fullmatch(name) or (pattern.wildcard and _NUMERIC.fullmatch(name.rsplit(".", 1)[-1])):
            raise ValueError(f"{name!r} cannot be written into the proxy's configuration") from None
        return "." + pattern.domain if pattern.wildcard else name
    return f"[{address.compressed}]" if address.version == 6 else str(address)


def _ports(pattern: HostPattern) -> str:
    if not pattern.ports or not all(isinstance(p, int) and 0 < p < 65536 for p in pattern.ports):
        raise ValueError(f"{pattern.ports!r} are not ports")
    return " ".join(str(port) for port in sorted(set(pattern.ports)))


def squid_config(policy: NetworkPolicy, clients: str, dns: tuple[str, ...] = ()) -> str:
    """Squid's whole configuration for ``policy``, serving only ``clients`` (the session's internal subnet).

    Rules, first match wins: clients outside the subnet, the cache manager and schemes other than
    http(s) and CONNECT are refused; then anything resolving to the proxy's loopback; then each
    exact entry (a name, or an IP the request names literally) is allowed on its ports, whatever
    it resolves to; then each ``*.`` entry on its ports, unless any address it resolves to is in
    ``SPECIAL``; everything else is refused as not on the list. ``dstdomain -n`` compares the
    request's host as written (a raw IP never matches a name by reverse DNS). ``dns``: the name
    servers squid asks (addresses), instead of the container's resolver.
    """
    if policy.level != "allow":
        raise ValueError(f"only an allow policy has a proxy, not {policy.level}")
    subnet = ipaddress.ip_network(clients, strict=False)
    return "\n".join(
        [
            "# Generated by Cubicle (controller/sandbox/egress.py) for one session's allow-list.",
            *_squid_settings(dns),
            *_squid_refusals(subnet),
            *_squid_entries(policy),
            "deny_info ERR_CUBICLE_PRIVATE_ADDRESS cubicle_special",
            "deny_info ERR_CUBICLE_NOT_ALLOWED all",
            "http_access deny all",
            "",
        ]
    )


def _squid_settings(dns: tuple[str, ...]) -> list[str]:
    """Squid as a forwarder and nothing more: it caches nothing, writes no file (its logs go to the engine), tells
    no one the client's address or its own version, and asks ``dns`` (when given), not the container's resolver."""
    return [
        f"http_port {PORT}",
        "max_filedescriptors 4096",
        "pid_filename none",
        "cache deny all",
        "cache_mem 0 MB",
        "cache_store_log none",
        # squid's own fields, then what ``refusals`` reads: the address connected to, the error page, the host and
        # the port asked for.
        "logformat cubicle %ts.%03tu %6tr %>a %Ss/%03>Hs %<st %rm %ru %<a %err_code %>rd %>rP",
        "access_log stdio:/dev/stdout cubicle",
        "cache_log /dev/stderr",
        "logfile_rotate 0",
        "coredump_dir none",
        "pinger_enable off",
        "digest_generation off",
        "shutdown_lifetime 0 seconds",
        "forwarded_for delete",
        "visible_hostname cubicle-proxy",
        "httpd_suppress_version_string on",
        f"error_directory {ERRORS}",
        # An answer is kept at least this long, so the address a rule checked is the one connected to.
        "negative_dns_ttl 1 minute",
        *([f"dns_nameservers {' '.join(str(ipaddress.ip_address(a)) for a in dns)}"] if dns else []),
    ]


def _squid_refusals(subnet: ipaddress.IPv4Network | ipaddress.IPv6Network) -> list[str]:
    """The rules before any entry, so no entry can undo them: clients outside ``subnet``, the cache manager,
    schemes other than http(s) and CONNECT, and anything resolving to the proxy's loopback are refused."""
    return [
        f"acl cubicle_clients src {subnet}",
        "acl cubicle_connect method CONNECT",
        "acl cubicle_web proto HTTP HTTPS",
        f"acl cubicle_loopback dst {' '.join(LOOPBACK)}",
        f"acl cubicle_special dst {' '.join(SPECIAL)}",
        "http_access deny !cubicle_clients",
        "http_access deny manager",
        "http_access deny !cubicle_connect !cubicle_web",
        "deny_info ERR_CUBICLE_SCHEME cubicle_web",
        "http_access deny cubicle_loopback",
        "deny_info ERR_CUBICLE_LOOPBACK cubicle_loopback",
    ]


def _squid_entries(policy: NetworkPolicy) -> list[str]:
    """The policy's entries, every exact one before any ``*.`` one: an exact entry is allowed whatever it resolves
    to, a ``*.`` entry only when none of its addresses is in ``SPECIAL``."""
    lines: list[str] = []
    exact = [p for p in policy.hosts if not p.wildcard]
    wild = [p for p in policy.hosts if p.wildcard]
    for number, pattern in enumerate(exact, 1):
        lines += _entry(f"cubicle_exact{number}", pattern, ["allow"])
    for number, pattern in enumerate(wild, 1):
        lines += _entry(f"cubicle_wild{number}", pattern, ["deny", "allow"])
    return lines


def _entry(acl: str, pattern: HostPattern, actions: Iterable[str]) -> list[str]:
    lines = [f"acl {acl}_host dstdomain -n {_token(pattern)}", f"acl {acl}_ports port {_ports(pattern)}"]
    for action in actions:
        special = " cubicle_special" if action == "deny" else ""
        lines.append(f"http_access {action} {acl}_host {acl}_ports{special}")
    return lines


# ----------------------------------------------------------------------------- what the proxy refused

REFUSED = {
    "ERR_CUBICLE_NOT_ALLOWED": "not on the allow-list",
    "ERR_CUBICLE_PRIVATE_ADDRESS": "a private or special address, which only a host listed by its exact name reaches",
    "ERR_CUBICLE_LOOPBACK": "the proxy's own loopback, never reachable",
    "ERR_DNS_FAIL": "its name does not resolve",
    "ERR_CONNECT_FAIL": "no connection could be made to it",
    "ERR_READ_ERROR": "no answer came from it",
    "ERR_READ_TIMEOUT": "no answer came from it in time",
}
"""The error pages (``%err_code`` in the proxy's log) that say a host was refused or could not be reached, and why."""
MAX_REFUSALS = 8
_LOGGED_HOST = re.compile(r"[A-Za-z0-9._-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\]|[0-9A-Fa-f:.]{2,45}")


@dataclass(frozen=True)
class Refusal:
    """A host and port a request through the proxy asked for, and why it got no answer from there."""

    host: str
    port: int
    code: str
    """The proxy's error page: a key of ``REFUSED``."""

    @property
    def not_listed(self) -> bool:
        """Whether listing the host would let the request through (else it was listed, and failed out there)."""
        return self.code == "ERR_CUBICLE_NOT_ALLOWED"

    @property
    def pattern(self) -> str:
        """The host as an allow-list entry names it: its port only when it is not one of the default ports."""
        host = f"[{self.host.strip('[]')}]" if ":" in self.host else self.host
        return host if self.port in DEFAULT_PORTS else f"{host}:{self.port}"

    def __str__(self) -> str:
        return f"{self.pattern} ({REFUSED[self.code]})"


def refusals(log: str, most: int = MAX_REFUSALS) -> list[Refusal]:
    """The distinct hosts the proxy's access ``log`` (``squid_config``'s format) shows refused or unreachable, first
    seen first, at most ``most``. Only plain host names, addresses and ports are read: what a request names is the
    requester's text, so anything else in those fields is passed over."""
    found: dict[tuple[str, int], Refusal] = {}
    for line in log.splitlines():
        fields = line.rsplit(" ", 4)
        if len(fields) != 5 or fields[2] not in REFUSED or not fields[4].isdigit():
            continue
        server, code, host, port = fields[1], fields[2], fields[3].lower(), int(fields[4])
        if code == "ERR_READ_ERROR" and server == "-":  # squid 5's answer when the name did not resolve
            code = "ERR_DNS_FAIL"
        if _LOGGED_HOST.fullmatch(host) and 0 < port < 65536 and (host, port) not in found:
            found[(host, port)] = Refusal(host, port, code)
            if len(found) >= most:
                break
    return list(found.values())


# ----------------------------------------------------------------------------- the proxy container


def proxy_options(image: str, session_id: str, network: str, labels: dict[str, str], config: str) -> dict[str, Any]:
    """The proxy container's options: the proxy user, no capabilities, read-only, bounded.

    Squid writes only its configuration, to a small tmpfs; logs go to the engine, capped at 1 MiB.
    IPv6 stays on inside the proxy: squid 5 aborts on an IPv6 destination when the stack is off.
    """
    return {
        "image": image,
        "name": proxy_name(session_id),
        "user": f"{PROXY_UID}:{PROXY_UID}",
        "environment": {"CUBICLE_SQUID_CONF": config},
        "labels": {**labels, ROLE: "proxy"},
        "hostname": "cubicle-proxy",
        "network_mode": network,
        "read_only": True,
        "tmpfs": {"/run/squid": f"rw,nosuid,nodev,noexec,size=1m,mode=0700,uid={PROXY_UID},gid={PROXY_UID}"},
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges:true"],
        "sysctls": {"net.ipv6.conf.all.disable_ipv6": "0"},
        "mem_limit": "192m",
        "memswap_limit": "192m",
        "nano_cpus": 1_000_000_000,
        "pids_limit": PROXY_PIDS,
        "ulimits": [Ulimit(name="nofile", soft=4096, hard=4096)],
        "ipc_mode": "private",
        "devices": [],
        "log_config": LogConfig(type=LogConfig.types.JSON, config={"max-size": "1m", "max-file": "1"}),
    }


class Egress:
    """One session's internal network and proxy. Blocking methods (call them in a thread), safe to race."""

    def __init__(
        self,
        client: Any,
        *,
        session_id: str,
        policy: NetworkPolicy,
        labels: dict[str, str],
        image: str,
        outside: Outside,
        auto_build: bool = True,
    ) -> None:
        self.client = client
        self.session_id = session_id
        self.policy = policy
        self.labels = labels
        self.image = image
        self.outside = outside
        self.auto_build = auto_build
        self.network = network_name(session_id)
        self._route: Route | None = None
        self._lock = threading.Lock()

    def start(self) -> Route:
        """The route to this session's proxy: the running one, or a network and proxy made now."""
        with self._lock:
            if self._route is not None and self._proxy_running():
                return self._route
            try:
                self._route = self._make()
            except BaseException:
                self._remove()
                raise
            return self._route

    def stop(self) -> None:
        """Remove the proxy and the network (idempotent)."""
        with self._lock:
            self._remove()

    def refusals(self) -> list[Refusal]:
        """What this session's proxy refused, or could not reach, so far (``refusals``); none without a proxy."""
        try:
            proxy = self.client.containers.get(proxy_name(self.session_id))
            log = proxy.logs(stdout=True, stderr=False)
        except (NotFound, APIError):
            return []
        return refusals(bytes(log).decode("utf-8", "replace"))

    def _proxy_running(self) -> bool:
        try:
            proxy = self.client.containers.get(proxy_name(self.session_id))
        except NotFound:
            return False
        return bool(proxy.status == "running")

    def _make(self) -> Route:
        images.ensure(self.client, self.image, self.auto_build, context=images.PROXY)
        try:
            outside = self.client.networks.get(self.outside.network)
        except NotFound:
            raise SandboxError(
                f"The egress network {self.outside.network!r} does not exist (CUBICLE_EGRESS_NETWORK names it)."
            ) from None
        self._remove()  # a proxy that died, or what a controller that crashed left
        network = self.client.networks.create(
            self.network,
            driver="bridge",
            internal=True,
            labels={**self.labels, ROLE: "egress"},
            options={"com.docker.network.bridge.inhibit_ipv4": "true"},  # no address of the host's on it
        )
        network.reload()
        subnet = next(c["Subnet"] for c in network.attrs["IPAM"]["Config"] if ":" not in c["Subnet"])
        config = squid_config(self.policy, subnet, self.outside.dns)
        proxy = self.client.containers.create(
            **proxy_options(self.image, self.session_id, self.network, self.labels, config)
        )
        outside.connect(proxy)
        proxy.start()
        _wait_ready(proxy)
        proxy.reload()
        address = proxy.attrs["NetworkSettings"]["Networks"][self.network]["IPAddress"]
        return Route(self.network, str(ipaddress.ip_address(address)))

    def _remove(self) -> None:
        self._route = None
        with contextlib.suppress(NotFound):
            self.client.containers.get(proxy_name(self.session_id)).remove(force=True)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            try:
                self.client.networks.get(self.network).remove()
                return
            except NotFound:
                return
            except APIError as err:  # endpoints still going away with a container being removed
                if "active endpoints" not in str(err) or time.monotonic() > deadline:
                    raise
            time.sleep(0.05)


def _wait_ready(proxy: Any) -> None:
    """Until squid says it accepts connections; a proxy that exits or stays silent is a SandboxError."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        logs = proxy.logs(stdout=False, stderr=True).decode(errors="replace")
        if READY in logs:
            return
        proxy.reload()
        if proxy.status not in ("created", "running") or time.monotonic() > deadline:
            tail = "\n".join(logs.strip().splitlines()[-5:])
            raise SandboxError(f"The egress proxy did not start ({proxy.status}): {tail}")
        time.sleep(0.05)
