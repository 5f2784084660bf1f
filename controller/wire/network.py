"""Network policies: ``none`` < ``allow`` (an HTTP(S) proxy that permits listed hosts) < ``open``.

A policy is written ``none``, ``open`` or ``allow=host1,host2:8443,*.example.org`` on the
command line and in environment files, and as that string or ``{"level": ..., "hosts": [...]}``
in the API. A host pattern is a name or IP literal, optionally ``*.`` in front (the domain and
every name under it), optionally ``:port`` after (else ports 80 and 443). Policies are ordered
like the other limits: ``clamp`` lowers a requested policy to a server's maximum.

Old records stored the network as a boolean: ``false`` reads as ``none``, ``true`` as ``open``.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_serializer,
    model_validator,
)

Level = Literal["none", "allow", "open"]
RANK: dict[str, int] = {"none": 0, "allow": 1, "open": 2}
DEFAULT_PORTS = (80, 443)
MAX_HOSTS = 64

SPECIAL = (
    # IPv4: this network, private, shared (CGNAT), loopback, link-local (metadata services),
    # IETF protocol assignments, documentation, 6to4 relay, benchmarking, multicast, reserved, broadcast
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.0.2.0/24",
    "192.31.196.0/24",
    "192.52.193.0/24",
    "192.88.99.0/24",
    "192.168.0.0/16",
    "192.175.48.0/24",
    "198.18.0.0/15",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "224.0.0.0/4",
    "240.0.0.0/4",
    # IPv6: unspecified, loopback and IPv4-compatible, NAT64, discard, IETF protocol assignments (Teredo among them),
    # documentation, 6to4, segment routing, unique local, link-local, site-local, multicast.
    # Not ::ffff:0:0/96: squid keeps every IPv4 address in that form, so the IPv4 list covers it.
    "::/96",
    "64:ff9b::/96",
    "64:ff9b:1::/48",
    "100::/64",
    "2001::/23",
    "2001:db8::/32",
    "2002::/16",
    "3fff::/20",
    "5f00::/16",
    "fc00::/7",
    "fe80::/10",
    "fec0::/10",
    "ff00::/8",
)
"""Every address that is not plainly public, v4 and v6: what an allow policy's ``*.`` entry never reaches (the
egress proxy's rule) and what a git remote reaches only when the operator names its host exactly (``gitremote``).
Both judge addresses by this one list, so a range added here is refused by both."""
_SPECIAL_NETWORKS = tuple(ipaddress.ip_network(cidr) for cidr in SPECIAL)


def is_special(address: str | ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether ``address`` lies in ``SPECIAL``. An IPv4-mapped IPv6 address (``::ffff:10.0.0.1``) is judged as the
    IPv4 address it carries, as squid judges it: the list leaves that range out for that reason."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip in network for network in _SPECIAL_NETWORKS)


_LABEL = r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)"
_NAME = re.compile(rf"^(\*\.)?{_LABEL}(\.{_LABEL})*\.?$")
_NUMERIC = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")
"""A label the resolver would read as part of an IPv4 address (``1.0x7f`` is 1.0.0.127)."""


class HostPattern(BaseModel):
    """One allow-list entry: ``name`` (a host, or ``*.domain``) and the ports it may be reached on."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Lower-case host name or IP literal; ``*.example.org`` covers every name under it.")
    ports: tuple[int, ...] = Field(DEFAULT_PORTS, description="Ports that may be reached on it.")

    @field_validator("name")
    @classmethod
    def _checked_name(cls, value: str) -> str:
        """Every way in (the text form, the API's objects) gets the same check: the proxy's
        configuration is written from these names, so nothing else may pass."""
        name = value.lower().rstrip(".")
        if is_ip(name) and "%" not in name:
            return str(ipaddress.ip_address(name))  # one spelling per address
        if not _NAME.fullmatch(name):
            raise ValueError(f"{value!r} is not a host name, *.domain or IP address")
        if name.startswith("*.") and _NUMERIC.match(name.rsplit(".", 1)[-1]):
            raise ValueError(f"{value!r} ends in a number, so it would cover IP addresses")
        return name

    @field_validator("ports")
    @classmethod
    def _checked_ports(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if not value or not all(0 < port < 65536 for port in value):
            raise ValueError(f"ports must be 1 to 65535, at least one: {value}")
        return value

    @property
    def wildcard(self) -> bool:
        return self.name.startswith("*.")

    @property
    def domain(self) -> str:
        """The name without ``*.``."""
        return self.name[2:] if self.wildcard else self.name

    def covers(self, host: str, port: int) -> bool:
        """Whether a request to ``host:port`` is inside this entry."""
        host = host.lower().rstrip(".")
        if port not in self.ports:
            return False
        return host == self.domain or (self.wildcard and host.endswith("." + self.domain))

    def within(self, other: HostPattern) -> bool:
        """Whether everything this entry permits is permitted by ``other`` too."""
        if not set(self.ports) <= set(other.ports):
            return False
        if other.wildcard:
            return self.domain == other.domain or self.domain.endswith("." + other.domain)
        return not self.wildcard and self.name == other.name

    def __str__(self) -> str:
        host = f"[{self.name}]" if ":" in self.name else self.name
        return host if self.ports == DEFAULT_PORTS else f"{host}:{','.join(map(str, self.ports))}"


def parse_host(text: str) -> HostPattern:
    """``host``, ``host:port``, ``*.domain``, ``[v6]:port``; anything else is a ValueError naming the entry."""
    raw = text.strip()
    host, port = raw, ""
    if raw.startswith("["):
        host, _, rest = raw[1:].partition("]")
        if rest and not rest.startswith(":"):
            raise ValueError(f"{text!r} is not a host pattern")
        port = rest[1:]
    elif raw.count(":") == 1:
        host, port = raw.split(":")
    host = host.lower().rstrip(".")
    if not is_ip(host) and not _NAME.match(host):
        raise ValueError(f"{text!r} is not a host name, *.domain or IP address")
    if not port:
        return HostPattern(name=host)
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{text!r} has an invalid port")
    return HostPattern(name=host, ports=(int(port),))


def is_ip(text: str) -> bool:
    """Whether ``text`` is an IPv4 or IPv6 address as Python's ``ipaddress`` reads one."""
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _host_items(value: Any) -> Any:
    """A list of hosts as given (text or parsed) as a tuple of parsed ones; anything else left to the model."""
    if isinstance(value, list | tuple):
        return tuple(parse_host(item) if isinstance(item, str) else item for item in value)
    return value


class NetworkPolicy(BaseModel):
    """What a container may reach: nothing, listed hosts through the proxy, or whatever the bridge reaches."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    level: Level = Field("none", description="none: loopback only; allow: listed hosts via a proxy; open: the bridge.")
    hosts: tuple[HostPattern, ...] = Field((), description="With allow: the hosts (and ports) the proxy permits.")

    @model_validator(mode="before")
    @classmethod
    def _from_short_forms(cls, value: Any) -> Any:
        if isinstance(value, bool):  # records from before levels existed
            return {"level": "open" if value else "none"}
        if isinstance(value, str):
            return _parse(value)
        return value

    @field_validator("hosts", mode="before")
    @classmethod
    def _parse_hosts(cls, value: Any) -> Any:
        return _host_items(value)

    @model_validator(mode="after")
    def _hosts_only_with_allow(self) -> NetworkPolicy:
        if self.level != "allow" and self.hosts:
            raise ValueError(f"hosts are only for the allow level, not {self.level}")
        if len(self.hosts) > MAX_HOSTS:
            raise ValueError(f"at most {MAX_HOSTS} hosts may be allowed")
        return self

    @model_serializer(mode="plain")
    def _as_text(self) -> str:
        return str(self)

    def __str__(self) -> str:
        return f"allow={','.join(map(str, self.hosts))}" if self.level == "allow" else self.level

    @property
    def rank(self) -> int:
        return RANK[self.level]

    def permits(self, host: str, port: int) -> bool:
        """Whether this policy lets a connection to ``host:port`` out (``allow`` through its proxy)."""
        if self.level != "allow":
            return self.level == "open"
        return any(pattern.covers(host, port) for pattern in self.hosts)

    def clamp(self, ceiling: NetworkPolicy) -> NetworkPolicy:
        """This policy lowered to ``ceiling``: a lower level, and under an ``allow`` ceiling with
        hosts only the entries that ceiling covers (an ``open`` request gets the ceiling's list).
        An ``allow`` ceiling without hosts limits the level only.
        """
        if self.rank < ceiling.rank or (self.rank == ceiling.rank and ceiling.level != "allow"):
            return self
        if ceiling.level != "allow":
            return ceiling
        if self.level == "open":
            return ceiling
        if not ceiling.hosts:
            return self
        kept = tuple(pattern for pattern in self.hosts if any(pattern.within(top) for top in ceiling.hosts))
        return NetworkPolicy(level="allow", hosts=kept)


NONE = NetworkPolicy(level="none")
OPEN = NetworkPolicy(level="open")

DEFAULTS = "defaults"


class DefaultsPlus(BaseModel):
    """A setup's network that adds to the server's default one instead of replacing it: written ``defaults`` or
    ``defaults,allow=HOST[,HOST...]`` (the package registries by default, and these hosts too)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    hosts: tuple[HostPattern, ...] = Field(
        (), max_length=MAX_HOSTS, description="The hosts (and ports) added to the default network's."
    )

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, value: Any) -> Any:
        return _parse_defaults(value) if isinstance(value, str) else value

    @field_validator("hosts", mode="before")
    @classmethod
    def _parse_hosts(cls, value: Any) -> Any:
        return _host_items(value)

    @model_serializer(mode="plain")
    def _as_text(self) -> str:
        return str(self)

    def __str__(self) -> str:
        return f"{DEFAULTS},allow={','.join(map(str, self.hosts))}" if self.hosts else DEFAULTS

    def over(self, defaults: NetworkPolicy) -> NetworkPolicy:
        """The policy these hosts and ``defaults`` make together: ``open`` stays open, ``none`` becomes these
        hosts alone; a ValueError when the two lists hold more than ``MAX_HOSTS`` entries between them."""
        if defaults.level == "open":
            return defaults
        joined = {str(pattern): pattern for pattern in (*defaults.hosts, *self.hosts)}
        if not joined:
            return defaults
        if len(joined) > MAX_HOSTS:
            raise ValueError(
                f"{self} and the default setup network ({defaults}) allow {len(joined)} hosts together; "
                f"at most {MAX_HOSTS} may be allowed"
            )
        return NetworkPolicy(level="allow", hosts=tuple(joined.values()))


def _parse_defaults(text: str) -> dict[str, Any]:
    head, _, rest = text.strip().partition(",")
    if head.strip().lower() != DEFAULTS:
        raise ValueError(f"{text!r}: adding to the default network is written defaults,allow=HOST[,HOST...]")
    if not rest.strip():
        return {"hosts": []}
    try:
        policy = _parse(rest)
    except ValueError:
        policy = {"level": "?"}
    if policy["level"] != "allow":
        raise ValueError(f"{text!r}: only hosts are added to the defaults (defaults,allow=HOST[,HOST...])")
    return {"hosts": policy["hosts"]}


def _setup_form(value: Any) -> str:
    """Which of the two a setup's network is: ``defaults`` (``DefaultsPlus``) or a ``policy`` of its own."""
    if isinstance(value, DefaultsPlus):
        return DEFAULTS
    if isinstance(value, str):
        return DEFAULTS if value.strip().lower().split(",", 1)[0].strip() == DEFAULTS else "policy"
    if isinstance(value, dict) and "level" not in value and "hosts" in value:
        return DEFAULTS
    return "policy"


SetupNetwork = Annotated[
    Annotated[NetworkPolicy, Tag("policy")] | Annotated[DefaultsPlus, Tag(DEFAULTS)],
    Discriminator(_setup_form),
]
"""What a setup asks to reach: a policy of its own (``none``, ``open``, ``allow=...``: the server's default setup
network is replaced), or ``defaults[,allow=...]`` (``DefaultsPlus``: added to it)."""


def _parse(text: str) -> dict[str, Any]:
    level, sep, rest = text.strip().partition("=")
    level = level.strip().lower()
    if level not in RANK:
        raise ValueError(f"{text!r}: the network is none, open or allow=HOST[,HOST...]")
    if sep and level != "allow":
        raise ValueError(f"{text!r}: only allow takes hosts (allow=HOST[,HOST...])")
    hosts = [part for part in rest.split(",") if part.strip()]
    return {"level": level, "hosts": hosts}


def parse(text: str) -> NetworkPolicy:
    """``none``, ``open`` or ``allow=h1,h2``; a ValueError that says which form is expected."""
    return NetworkPolicy.model_validate(_parse(text))


def briefing(policy: NetworkPolicy) -> str:
    """What the agent is told of its container's network, so it neither wastes steps on what cannot work nor
    misses what can. Only the level and a count: an allow-list may come from the repository's own definition,
    and a host name is text enough to carry instructions, so none reaches the system prompt."""
    if policy.level == "none":
        return (
            "The container has no network: names do not resolve and no connection leaves it, so nothing can be "
            "downloaded or installed. Work with what the environment already provides."
        )
    if policy.level == "allow":
        return (
            f"The container reaches only the {len(policy.hosts)} hosts its allow-list names, through the HTTP(S) "
            "proxy its environment variables name; nothing else resolves or connects."
        )
    return "The container has network access."


@dataclass(frozen=True)
class Outside:
    """Where the egress proxies reach out: the Docker network they are attached to, and the DNS servers they
    ask (addresses; none: the resolver the engine gives them)."""

    network: str = "bridge"
    dns: tuple[str, ...] = ()


DIRECT = Outside()
"""The engine's default bridge and its resolver."""
