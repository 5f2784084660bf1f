"""The egress proxy's configuration, generated from a policy, and what a sandbox behind it is created with (no Docker)."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from controller import workspace
from controller.config import Settings
from controller.errors import SandboxError
from controller.sandbox import egress, owners
from controller.sandbox.docker import container_options
from controller.sandbox.egress import LOOPBACK, Route, squid_config
from controller.wire.limits import Limits
from controller.wire.network import OPEN, SPECIAL, HostPattern, NetworkPolicy, is_special, parse
from tests.sandbox_defaults import owned_dir

SUBNET = "172.30.0.0/16"
NETWORKS = [ipaddress.ip_network(n) for n in SPECIAL]


def rules(config: str) -> list[str]:
    return [line for line in config.splitlines() if line.startswith("http_access")]


def acl(config: str, name: str) -> str:
    (line,) = [line for line in config.splitlines() if line.startswith(f"acl {name} ")]
    return line.split(" ", 2)[2]


def test_exact_entries_come_first_and_wildcards_are_refused_private_addresses() -> None:
    config = squid_config(parse("allow=*.example.org:8443,allowed.test,10.1.2.3:8080,[fd00::1]:9000"), SUBNET)
    assert rules(config) == [
        "http_access deny !cubicle_clients",
        "http_access deny manager",
        "http_access deny !cubicle_connect !cubicle_web",
        "http_access deny cubicle_loopback",
        "http_access allow cubicle_exact1_host cubicle_exact1_ports",
        "http_access allow cubicle_exact2_host cubicle_exact2_ports",
        "http_access allow cubicle_exact3_host cubicle_exact3_ports",
        "http_access deny cubicle_wild1_host cubicle_wild1_ports cubicle_special",
        "http_access allow cubicle_wild1_host cubicle_wild1_ports",
        "http_access deny all",
    ]
    assert acl(config, "cubicle_exact1_host") == "dstdomain -n allowed.test"
    assert acl(config, "cubicle_exact1_ports") == "port 80 443"
    assert acl(config, "cubicle_exact2_host") == "dstdomain -n 10.1.2.3"
    assert acl(config, "cubicle_exact3_host") == "dstdomain -n [fd00::1]"  # squid's form of an IPv6 URL host
    assert acl(config, "cubicle_wild1_host") == "dstdomain -n .example.org"
    assert acl(config, "cubicle_wild1_ports") == "port 8443"
    assert acl(config, "cubicle_clients") == f"src {SUBNET}"


def test_refusals_name_their_reason() -> None:
    config = squid_config(parse("allow=*.example.org"), SUBNET)
    assert "deny_info ERR_CUBICLE_PRIVATE_ADDRESS cubicle_special" in config
    assert "deny_info ERR_CUBICLE_LOOPBACK cubicle_loopback" in config
    assert "deny_info ERR_CUBICLE_NOT_ALLOWED all" in config
    pages = Path(egress.__file__).parents[1] / "proxy_image" / "errors"
    for page in re.findall(r"^deny_info (\S+) ", config, re.MULTILINE):
        text = (pages / page).read_text()
        assert text.startswith("blocked by Cubicle's egress policy: ") and "\n" not in text.rstrip("\n")
    assert "%H:%p is not on this session's allow-list" in (pages / "ERR_CUBICLE_NOT_ALLOWED").read_text()


def test_no_cache_no_disk_no_side_channels() -> None:
    config = squid_config(parse("allow=a.org"), SUBNET)
    for line in ("cache deny all", "cache_mem 0 MB", "pinger_enable off", "pid_filename none", "forwarded_for delete"):
        assert line in config.splitlines()
    assert "cache_dir" not in config and "http_access allow all" not in config
    assert f"error_directory {egress.ERRORS}" in config


def test_an_empty_list_refuses_everything() -> None:
    assert rules(squid_config(NetworkPolicy(level="allow"), SUBNET))[-1] == "http_access deny all"
    assert not [rule for rule in rules(squid_config(NetworkPolicy(level="allow"), SUBNET)) if " allow " in rule]


def test_only_allow_has_a_proxy() -> None:
    with pytest.raises(ValueError):
        squid_config(OPEN, SUBNET)
    with pytest.raises(ValueError):
        squid_config(parse("allow=a.org"), "not a subnet\nhttp_access allow all")


@pytest.mark.parametrize(
    "name",
    [
        "a.org\nhttp_access allow all",
        "a.org http_access",
        '"/etc/passwd"',
        "-n",
        "a.org#",
        "*.",
        "a..org",
        "\u0430.org",
        "*.0.0.1",
        "*.a.0x7f",
        "A.org",
    ],
)
def test_a_name_that_slipped_past_validation_never_reaches_the_configuration(name: str) -> None:
    forged = NetworkPolicy.model_construct(level="allow", hosts=(HostPattern.model_construct(name=name, ports=(80,)),))
    with pytest.raises(ValueError, match="cannot be written"):
        squid_config(forged, SUBNET)


@pytest.mark.parametrize("ports", [(), (0,), (70000,), ("80 http_access allow all",)])
def test_ports_that_slipped_past_validation_never_reach_the_configuration(ports: tuple[object, ...]) -> None:
    forged = NetworkPolicy.model_construct(
        level="allow", hosts=(HostPattern.model_construct(name="a.org", ports=ports),)
    )
    with pytest.raises(ValueError, match="are not ports"):
        squid_config(forged, SUBNET)


LINE = re.compile(r"^(#.*|[a-z_]+( [^\s]+)*)?$")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=30), min_size=1, max_size=5))
def test_whatever_the_api_sends_the_configuration_keeps_its_shape(names: list[str]) -> None:
    """Any host text either fails validation or becomes exactly the lines it should, each one directive."""
    try:
        policy = NetworkPolicy.model_validate({"level": "allow", "hosts": [{"name": n} for n in names]})
    except ValueError:
        return
    config = squid_config(policy, SUBNET)
    assert all(LINE.match(line) for line in config.splitlines()), config
    base = len(squid_config(NetworkPolicy(level="allow"), SUBNET).splitlines())
    per_host = sum(4 if host.wildcard else 3 for host in policy.hosts)  # two acls, one rule (two for a wildcard)
    assert len(config.splitlines()) == base + per_host


def _covered(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    special = is_special(address)  # the git remotes' check, which must agree with the proxy's list
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # squid keeps IPv4 addresses in this form: the IPv4 list applies
    covered = any(address in network for network in NETWORKS)
    assert special == covered, address
    return covered


@settings(max_examples=2000, deadline=None)
@given(st.one_of(st.ip_addresses(v=4), st.ip_addresses(v=6)))
def test_every_address_that_is_not_plainly_public_is_special(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> None:
    reserved = address.is_reserved and address.version == 4  # IPv6's are unallocated space that routes nowhere
    if not address.is_global or address.is_multicast or address.is_link_local or reserved:
        assert _covered(address), address


@pytest.mark.parametrize(
    "text",
    [
        "127.0.0.1",
        "10.0.0.1",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "224.0.0.1",
        "255.255.255.255",
        "::1",
        "::",
        "fd00::1",
        "fe80::1",
        "ff02::1",
        "::ffff:10.0.0.1",
        "64:ff9b::a00:1",
        "2002:a00:1::",
        "2001:db8::1",
        "fec0::1",
    ],
)
def test_the_usual_targets_of_an_attack_are_special(text: str) -> None:
    assert _covered(ipaddress.ip_address(text))


@pytest.mark.parametrize("text", ["93.184.215.14", "151.101.0.223", "2a04:4e42::223", "8.8.8.8"])
def test_public_addresses_are_not(text: str) -> None:
    assert not _covered(ipaddress.ip_address(text))


def test_the_proxy_loopback_list_is_special_too() -> None:
    for text in LOOPBACK:
        network = ipaddress.ip_network(text)
        assert any(network.version == s.version and network.subnet_of(s) for s in NETWORKS), text  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- the sandbox behind it


@pytest.fixture
def layer(tmp_path: Path) -> workspace.Layer:
    return workspace.create(tmp_path / "data", "s_egress", owned_dir(tmp_path / "repo"))


def options(layer: workspace.Layer, policy: NetworkPolicy, route: Route | None = None) -> dict[str, object]:
    labels = owners.labels("unit", "s_egress")
    return container_options("img", layer, Limits(network=policy), labels, route)


def test_none_and_open_keep_their_networks(layer: workspace.Layer) -> None:
    assert options(layer, NetworkPolicy())["network_mode"] == "none"
    assert options(layer, OPEN)["network_mode"] == "bridge"
    plain = options(layer, OPEN)
    assert "sysctls" not in plain and "dns" not in plain and plain["environment"] == {"HOME": "/home/agent"}


def test_allow_joins_only_its_network_with_the_proxy_in_the_environment(layer: workspace.Layer) -> None:
    made = options(layer, parse("allow=a.org"), Route("cubicle-net-s_egress", "172.30.0.2"))
    assert made["network_mode"] == "cubicle-net-s_egress"
    env = made["environment"]
    assert isinstance(env, dict)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        assert env[name] == "http://172.30.0.2:3128"
    assert env["NO_PROXY"] == env["no_proxy"] == "localhost,127.0.0.1"
    assert made["dns"] == ["172.30.0.2"]  # Docker's DNS may only ask the proxy, which serves none
    assert made["sysctls"] == {"net.ipv6.conf.all.disable_ipv6": "1"}
    mounts = made["mounts"]
    assert isinstance(mounts, list)
    resolv = [m for m in mounts if m["Target"] == "/etc/resolv.conf"]
    assert resolv == [{"Target": "/etc/resolv.conf", "Source": "/dev/null", "Type": "bind", "ReadOnly": True}]
    # the hardening is the same as any sandbox's
    plain = options(layer, NetworkPolicy())
    for key in ("user", "read_only", "cap_drop", "security_opt", "pids_limit", "mem_limit", "tmpfs", "devices"):
        assert made[key] == plain[key], key


def test_a_route_must_carry_its_policy(layer: workspace.Layer) -> None:
    with pytest.raises(SandboxError, match="needs its session's proxy"):
        options(layer, parse("allow=a.org"))
    with pytest.raises(SandboxError, match="does not carry"):
        options(layer, NetworkPolicy(), Route("cubicle-net-x", "172.30.0.2"))
    with pytest.raises(SandboxError, match="does not carry"):
        options(layer, NetworkPolicy(), egress.BRIDGE)
    with pytest.raises(SandboxError, match="does not carry"):
        options(layer, parse("allow=a.org"), egress.BRIDGE)


def test_the_proxy_runs_hardened() -> None:
    labels = owners.labels("unit", "s_egress")
    made = egress.proxy_options("cubicle-proxy:t", "s_egress", "cubicle-net-s_egress", labels, "conf")
    assert made["user"] == "13:13" and made["cap_drop"] == ["ALL"] and made["read_only"] is True
    assert made["security_opt"] == ["no-new-privileges:true"]
    assert made["mem_limit"] == made["memswap_limit"] and made["pids_limit"] == 64
    assert made["log_config"]["Config"] == {"max-size": "1m", "max-file": "1"}
    assert made["labels"] == {**labels, egress.ROLE: "proxy"}
    assert made["network_mode"] == "cubicle-net-s_egress" and made["name"] == "cubicle-proxy-s_egress"
    assert set(made["tmpfs"]) == {"/run/squid"}


def test_an_images_volumes_are_sized_tmpfs_and_core_dumps_are_off(layer: workspace.Layer) -> None:
    """A VOLUME would be an anonymous volume on the host's disk, outside the session's disk quota."""
    labels = owners.labels("unit", "s_egress")
    made = container_options("img", layer, Limits(tmpfs_mb=32), labels, None, ["/data", "/var/lib/db"])
    tmpfs = made["tmpfs"]
    assert tmpfs["/data"] == tmpfs["/var/lib/db"] == "rw,exec,nosuid,nodev,size=32m,mode=1777", tmpfs
    assert tmpfs["/tmp"] == "rw,exec,nosuid,nodev,size=32m,mode=1777"
    assert [(u["Name"], u["Soft"], u["Hard"]) for u in made["ulimits"]] == [("core", 0, 0)]


def test_the_proxy_asks_the_dns_servers_it_is_given_and_only_addresses_are_taken(monkeypatch: Any) -> None:
    assert "dns_nameservers" not in squid_config(parse("allow=a.org"), SUBNET)
    config = squid_config(parse("allow=a.org"), SUBNET, ("172.18.0.53", "fd00::53"))
    assert "dns_nameservers 172.18.0.53 fd00::53" in config.splitlines()
    monkeypatch.setenv("CUBICLE_EGRESS_DNS", "172.18.0.53, 10.0.0.2")
    assert Settings().outside().dns == ("172.18.0.53", "10.0.0.2")
    monkeypatch.setenv("CUBICLE_EGRESS_DNS", "dns.example.org")  # a name would need a resolver to find the resolver
    with pytest.raises(ValidationError):
        Settings()
