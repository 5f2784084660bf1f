"""The allow network policy against a model that wants out: only the listed hosts, only through the session's proxy.

The hosts are the suite's own: small HTTP servers on an internal Docker network of their own
(``allowed.test`` on ports 8080 and 8081, ``denied.test`` on 8080), which is the proxies' egress
network here, so nothing leaves the machine. Each sandbox runs one probe script that tries many
ways out at once (threads, short timeouts) and answers in JSON.
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bench.egress import Hosts, gateway_of, hosts
from controller import workspace
from controller.config import DEFAULT_IMAGE
from controller.errors import SandboxError
from controller.sandbox import egress, owners
from controller.sandbox.docker import DockerSandbox
from controller.sandbox.sandboxes import Deployment
from controller.wire.network import Outside, parse
from controller.wire.protocol import Failure
from tests.dns_helpers import dnsmasq
from tests.integration.helpers import call, listening, sh
from tests.sandbox_defaults import SECURE_LIMITS, TEST_INSTANCE

pytestmark = pytest.mark.runtimes("runc")  # allow needs a network: under runsc it is refused (test_network.py)

PROBE = r"""
import concurrent.futures, json, os, socket, struct, sys, time, urllib.error, urllib.parse, urllib.request

PROXY = urllib.parse.urlsplit(os.environ.get("HTTP_PROXY", "http://0.0.0.0:1"))


def get(url, proxied=True):
    handler = urllib.request.ProxyHandler() if proxied else urllib.request.ProxyHandler({})
    try:
        with urllib.request.build_opener(handler).open(url, timeout=5) as reply:
            return {"status": reply.status, "body": reply.read().decode()}
    except urllib.error.HTTPError as err:
        return {"status": err.code, "body": err.read().decode(errors="replace")}
    except Exception as err:
        return {"error": repr(err)}


def raw(request):
    # Anything at all, straight to the proxy: a CONNECT, a request line urllib would not send.
    try:
        with socket.create_connection((PROXY.hostname, PROXY.port), 5) as conn:
            conn.settimeout(5)
            conn.sendall(request.encode())
            data = b""
            while b"\r\n\r\n" not in data and (chunk := conn.recv(65536)):
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            lines = head.decode().split("\r\n")
            length = [int(line.split(":")[1]) for line in lines if line.lower().startswith("content-length:")]
            while length and len(body) < length[0] and (chunk := conn.recv(65536)):
                body += chunk
            return {"status": int(lines[0].split()[1]), "body": body.decode(errors="replace")}
    except Exception as err:
        return {"error": repr(err)}


def tcp(host, port):
    try:
        socket.create_connection((host, port), 1.5).close()
        return {"connected": True}
    except Exception as err:
        return {"error": repr(err)}


def resolve(name):
    start = time.monotonic()
    try:
        return {"addresses": sorted({a[4][0] for a in socket.getaddrinfo(name, 80)})}
    except Exception as err:
        return {"error": repr(err), "seconds": time.monotonic() - start}


def dns(name):
    # Straight to Docker's embedded DNS, which the empty resolv.conf skips.
    query = struct.pack(">HHHHHH", 7, 0x0100, 1, 0, 0, 0) + b"".join(
        bytes([len(label)]) + label.encode() for label in name.split(".")) + b"\0" + struct.pack(">HH", 1, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.settimeout(1.5)
        try:
            udp.sendto(query, ("127.0.0.11", 53))
            reply = udp.recv(512)
        except Exception as err:
            return {"answers": 0, "error": repr(err)}
        return {"answers": struct.unpack(">H", reply[6:8])[0], "rcode": reply[3] & 15}


probes = json.loads(sys.argv[1])
with concurrent.futures.ThreadPoolExecutor(len(probes)) as pool:
    results = list(pool.map(lambda probe: globals()[probe[0]](*probe[1:]), probes))
print(json.dumps(results))
"""

BLOCKED = "blocked by Cubicle's egress policy: "


async def probe(box: DockerSandbox, *probes: list[Any]) -> list[dict[str, Any]]:
    """Run ``probes`` (each ``[function, *args]`` of PROBE) in the sandbox at once; their results in order."""
    script = base64.b64encode(PROBE.encode()).decode()
    arg = base64.b64encode(json.dumps(probes).encode()).decode()
    result = await sh(
        box, f'echo {script} | base64 -d > /tmp/probe.py && python3 /tmp/probe.py "$(echo {arg} | base64 -d)"', 60
    )
    assert result.exit_code == 0, result.stderr.text
    answers: list[dict[str, Any]] = json.loads(result.stdout.text)
    return answers


def refused(answer: dict[str, Any], why: str) -> None:
    assert answer.get("status") == 403, answer
    assert answer["body"].startswith(BLOCKED) and why in answer["body"], answer


def unreachable(answer: dict[str, Any]) -> None:
    assert "error" in answer and "status" not in answer and "connected" not in answer, answer


@pytest.fixture(scope="module")
def test_hosts(docker_client: Any) -> Iterator[Hosts]:
    served = {"allowed.test": (8080, 8081), "denied.test": (8080,)}
    with hosts(docker_client, DEFAULT_IMAGE, served, TEST_INSTANCE) as made:
        yield made


@pytest.fixture
def allow_box(
    sandbox_factory: Callable[..., DockerSandbox], make_repo: Callable[..., Path], proxy_image: str, test_hosts: Hosts
) -> Callable[[str], DockerSandbox]:
    """A sandbox whose policy is ``allow=...``, whose proxy reaches the test hosts' network."""

    def make(policy: str) -> DockerSandbox:
        limits = SECURE_LIMITS.model_copy(update={"network": parse(policy)})
        repo = make_repo("repo-" + secrets.token_hex(3))
        return sandbox_factory(repo, limits, proxy_image=proxy_image, outside=Outside(test_hosts.network))

    return make


@pytest.fixture
def host_listener() -> Iterator[tuple[int, list[str]]]:
    """A TCP server on every address of the host (0.0.0.0) that records who connects."""
    with listening("0.0.0.0") as found:
        yield found


def of_session(client: Any, session_id: str) -> tuple[list[str], list[str]]:
    """The names of the session's containers and networks, as the engine lists them by label."""
    found = {"label": f"{owners.SESSION}={session_id}"}
    containers = [c.name for c in client.containers.list(all=True, filters=found)]
    return containers, [n.name for n in client.networks.list(filters=found)]


def proxy_of(client: Any, box: DockerSandbox) -> Any:
    return client.containers.get(egress.proxy_name(box.session_id))


async def test_each_session_reaches_its_own_hosts_and_nothing_else(
    allow_box: Callable[[str], DockerSandbox], docker_client: Any, test_hosts: Hosts
) -> None:
    """Two sessions, two lists: each gets its hosts through its own proxy, and readable refusals for the rest."""
    first, second = allow_box("allow=allowed.test:8080,*.test:8080"), allow_box("allow=denied.test:8080")
    await asyncio.gather(first.start(), second.start())
    second_proxy = proxy_of(docker_client, second).attrs["NetworkSettings"]["Networks"]
    second_inside = second_proxy[egress.network_name(second.session_id)]["IPAddress"]
    second_outside = second_proxy[test_hosts.network]["IPAddress"]
    ours = await probe(
        first,
        ["get", "http://allowed.test:8080/"],
        ["get", "http://denied.test:8080/"],  # under *.test, but a private address: only an exact entry may
        ["raw", "CONNECT denied.test:8080 HTTP/1.1\r\nHost: denied.test:8080\r\n\r\n"],
        ["raw", "CONNECT allowed.test:8080 HTTP/1.1\r\nHost: allowed.test:8080\r\n\r\n"],
        ["tcp", second_inside, egress.PORT],  # another session's proxy, on its network
        ["tcp", second_outside, egress.PORT],  # ... and on the egress side
        ["get", f"http://{second_outside}:{egress.PORT}/"],
    )
    assert ours[0] == {"status": 200, "body": "allowed.test:8080\n"}
    refused(ours[1], "denied.test resolves to a private or special address")
    refused(ours[2], "denied.test resolves to a private or special address")
    assert ours[3] == {"status": 200, "body": ""}, ours[3]  # the tunnel is open
    unreachable(ours[4])
    unreachable(ours[5])
    refused(ours[6], f"{second_outside}:{egress.PORT} is not on this session's allow-list")
    theirs = await probe(
        second,
        ["get", "http://denied.test:8080/"],
        ["get", "http://allowed.test:8080/"],
        ["raw", "CONNECT allowed.test:8080 HTTP/1.1\r\nHost: allowed.test:8080\r\n\r\n"],
    )
    assert theirs[0] == {"status": 200, "body": "denied.test:8080\n"}
    refused(theirs[1], "allowed.test:8080 is not on this session's allow-list")
    refused(theirs[2], "allowed.test:8080 is not on this session's allow-list")


async def test_no_way_around_the_proxy(
    allow_box: Callable[[str], DockerSandbox],
    docker_client: Any,
    test_hosts: Hosts,
    host_listener: tuple[int, list[str]],
) -> None:
    """No name resolves, no address but the proxy's answers, and the proxy holds to the list however it is asked."""
    box = allow_box("allow=allowed.test:8080")
    await box.start()
    port, hits = host_listener
    allowed_ip = test_hosts.addresses["allowed.test"]
    bridge_gateway = gateway_of(docker_client.networks.get("bridge").attrs)
    inside = gateway_of(docker_client.networks.get(egress.network_name(box.session_id)).attrs)
    answers = await probe(
        box,
        ["get", "http://allowed.test:8080/", False],  # no proxy: the name does not resolve
        ["tcp", allowed_ip, 8080],  # no proxy, by address
        ["get", f"http://{allowed_ip}:8080/"],  # through the proxy by raw address: not listed
        ["get", "http://allowed.test:8081/"],  # another port of the listed host
        ["raw", "CONNECT allowed.test:8081 HTTP/1.1\r\nHost: allowed.test:8081\r\n\r\n"],
        ["raw", f"CONNECT {allowed_ip}:8080 HTTP/1.1\r\nHost: {allowed_ip}:8080\r\n\r\n"],
        ["get", "http://169.254.169.254/latest/meta-data/"],  # refused by the proxy: no packet is sent
        ["raw", f"GET http://127.0.0.1:{egress.PORT}/ HTTP/1.0\r\n\r\n"],  # NO_PROXY keeps urllib off this
        ["raw", "GET cache_object://localhost/info HTTP/1.0\r\n\r\n"],
        ["raw", "GET ftp://allowed.test:8080/ HTTP/1.0\r\n\r\n"],
        ["raw", "GET http://allowed.test@denied.test:8080/ HTTP/1.0\r\n\r\n"],
        ["resolve", "allowed.test"],
        ["resolve", "denied.test"],
        ["resolve", "example.com"],
        ["dns", "allowed.test"],
        ["dns", "example.com"],
        ["tcp", inside, port],  # the Docker host: the session network's gateway has no address on the host
        ["tcp", test_hosts.gateway, port],
        ["tcp", bridge_gateway, port],
    )
    assert "error" in answers[0] and "status" not in answers[0], answers[0]
    unreachable(answers[1])
    refused(answers[2], f"{allowed_ip}:8080 is not on this session's allow-list")
    refused(answers[3], "allowed.test:8081 is not on this session's allow-list")
    refused(answers[4], "allowed.test:8081 is not on this session's allow-list")
    refused(answers[5], f"{allowed_ip}:8080 is not on this session's allow-list")
    refused(answers[6], "169.254.169.254:80 is not on this session's allow-list")
    refused(answers[7], "127.0.0.1 resolves to a loopback or unspecified address")
    assert answers[8].get("status") == 403, answers[8]
    refused(answers[9], "only http:// and https:// requests and CONNECT tunnels")
    refused(answers[10], "denied.test:8080 is not on this session's allow-list")  # the userinfo is not the host
    for answer in answers[11:14]:
        assert "addresses" not in answer, answer
    resolvers = await sh(box, "cat /etc/resolv.conf")  # none: a lookup fails at once instead of waiting on one
    assert (resolvers.exit_code, resolvers.stdout.text) == (0, ""), resolvers
    for answer in answers[14:16]:
        assert answer["answers"] == 0, answer
    for answer in answers[16:19]:
        unreachable(answer)
    assert hits == [], "the sandbox reached a port on the host"
    network = await sh(box, "cat /proc/net/if_inet6 | wc -l; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort")
    assert network.stdout.text == "0\neth0\nlo\n"  # one network, no IPv6 (so no link-local way to the host)


async def test_the_proxy_is_hardened_and_kept_when_the_sandbox_is_replaced(
    allow_box: Callable[[str], DockerSandbox], docker_client: Any
) -> None:
    box = allow_box("allow=allowed.test:8080")
    await box.start()
    proxy = proxy_of(docker_client, box)
    host = proxy.attrs["HostConfig"]
    assert proxy.attrs["Config"]["User"] == f"{egress.PROXY_UID}:{egress.PROXY_UID}"
    assert host["CapDrop"] == ["ALL"] and not host["CapAdd"] and host["ReadonlyRootfs"] is True
    assert host["SecurityOpt"] == ["no-new-privileges:true"] and not host["Privileged"]
    assert host["Memory"] == host["MemorySwap"] > 0 and host["PidsLimit"] == 64
    assert host["LogConfig"] == {"Type": "json-file", "Config": {"max-file": "1", "max-size": "1m"}}
    assert proxy.attrs["Config"]["Labels"][owners.SESSION] == box.session_id
    status = proxy.exec_run(["cat", "/proc/1/status"]).output.decode()
    assert "\nCapEff:\t0000000000000000\n" in status and "\nNoNewPrivs:\t1\n" in status
    assert "\nUid:\t13\t13\t13\t13\n" in status
    network = docker_client.networks.get(egress.network_name(box.session_id)).attrs
    assert network["Internal"] is True and network["Labels"][owners.SESSION] == box.session_id

    box.container.kill()
    failed = await call(box, "run_command", command="true")
    assert isinstance(failed, Failure), failed
    again = await probe(box, ["get", "http://allowed.test:8080/"])
    assert again[0] == {"status": 200, "body": "allowed.test:8080\n"}
    assert proxy_of(docker_client, box).id == proxy.id and box.restarts == 1


async def test_stop_remove_session_and_sweep_leave_nothing(
    allow_box: Callable[[str], DockerSandbox],
    make_repo: Callable[..., Path],
    docker_client: Any,
    proxy_image: str,
    test_hosts: Hosts,
    tmp_path: Path,
) -> None:
    stopped, removed = allow_box("allow=allowed.test:8080"), allow_box("allow=allowed.test:8080")
    swept_id = "test-swept-" + secrets.token_hex(3)  # of another instance, so that sweeping it touches no other test
    deployment = Deployment(
        DEFAULT_IMAGE,
        "cubicle-tests-sweep-" + secrets.token_hex(3),
        proxy_image=proxy_image,
        outside=Outside(test_hosts.network),
    )
    swept = DockerSandbox(
        lambda: docker_client,
        layer=workspace.create(tmp_path / "swept", swept_id, make_repo("swept")),
        session_id=swept_id,
        limits=removed.limits,
        deployment=deployment,
    )
    await asyncio.gather(stopped.start(), removed.start(), swept.start())
    for box in (stopped, removed, swept):
        containers, networks = of_session(docker_client, box.session_id)
        assert len(containers) == 2 and networks == [egress.network_name(box.session_id)], (containers, networks)

    await stopped.stop()
    assert of_session(docker_client, stopped.session_id) == ([], [])
    await asyncio.to_thread(owners.remove_session, docker_client, removed.session_id)
    assert of_session(docker_client, removed.session_id) == ([], [])
    result = await asyncio.to_thread(owners.sweep, docker_client, swept.instance)
    assert any(egress.network_name(swept.session_id) in name for name in result.removed), result
    assert any(egress.proxy_name(swept.session_id) in name for name in result.removed), result
    assert of_session(docker_client, swept.session_id) == ([], [])
    await swept.stop()  # what is gone already is fine
    await removed.stop()


async def test_a_failed_start_leaves_nothing(allow_box: Callable[[str], DockerSandbox], docker_client: Any) -> None:
    """The checkout is checked after the proxy is up: a swapped one fails the start, which takes the proxy down."""
    box = allow_box("allow=allowed.test:8080")
    box.repo.rename(box.repo.with_name(box.repo.name + "-moved"))
    box.repo.mkdir()
    with pytest.raises(SandboxError):
        await box.start()
    assert of_session(docker_client, box.session_id) == ([], [])


def test_squid_takes_the_generated_configuration(docker_client: Any, proxy_image: str) -> None:
    """The longest list there can be, with every kind of entry, parses without a warning."""
    entries = ["a.example.org", "*.example.com:8443", "10.0.0.5:8080", "[fd00::1]:9000", "203.0.113.7"]
    entries += [f"h{n}.example.net:{1000 + n}" for n in range(64 - len(entries))]
    config = egress.squid_config(parse("allow=" + ",".join(entries)), "172.30.0.0/16")
    output = docker_client.containers.run(
        proxy_image,
        [
            "-c",
            'printf "%s\\n" "$CUBICLE_SQUID_CONF" >/run/squid/squid.conf && squid -k parse -f /run/squid/squid.conf 2>&1',
        ],
        entrypoint=["/bin/sh"],
        environment={"CUBICLE_SQUID_CONF": config},
        remove=True,
        network_mode="none",
        tmpfs={"/run/squid": f"uid={egress.PROXY_UID}"},
        read_only=True,
        cap_drop=["ALL"],
        sysctls={"net.ipv6.conf.all.disable_ipv6": "0"},
    ).decode()
    assert "FATAL" not in output and "ERROR" not in output and "WARNING" not in output, output
    assert "cubicle_wild1_host" in config


PUBLIC = "93.184.215.14"  # a public address: allowed under a *. entry (unreachable here, which is fine)
PRIVATE = "10.23.45.67"


@dataclass
class DnsServer:
    """Debian's dnsmasq on the test hosts' network, answering from a hosts file the test rewrites (TTL 1 s)."""

    container: Any
    address: str

    def answer(self, name: str, address: str) -> None:
        result = self.container.exec_run(["sh", "-c", f"echo '{address} {name}' > /run/dns/hosts && kill -HUP 1"])
        assert result.exit_code == 0, result.output


@pytest.fixture(scope="module")
def dns_server(docker_client: Any, test_hosts: Hosts) -> Iterator[DnsServer]:
    with dnsmasq(docker_client, test_hosts.network, "", "--local-ttl=1", "--log-queries") as (container, address):
        yield DnsServer(container, address)


async def test_a_wildcard_name_whose_answer_turns_private_is_refused(
    sandbox_factory: Callable[..., DockerSandbox],
    make_repo: Callable[..., Path],
    proxy_image: str,
    test_hosts: Hosts,
    dns_server: DnsServer,
) -> None:
    """DNS rebinding: the proxy asks the suite's own DNS server (CUBICLE_EGRESS_DNS); a *. name that answered a
    public address is refused once its answer has turned private and the proxy asks again. The proxy keeps an
    answer at least a minute (``negative_dns_ttl``, squid's floor for positive answers too), so that the address
    a rule checked is the one it connects to: until then the request still goes to the public address."""
    name = f"n{secrets.token_hex(3)}.rebind.test"
    dns_server.answer(name, PUBLIC)
    limits = SECURE_LIMITS.model_copy(update={"network": parse("allow=*.rebind.test:8080")})
    outside = Outside(test_hosts.network, (dns_server.address,))
    box = sandbox_factory(make_repo("rebind-" + secrets.token_hex(3)), limits, proxy_image=proxy_image, outside=outside)
    before = await probe(box, ["get", f"http://{name}:8080/"])
    assert before[0].get("status") != 403, before  # allowed: the proxy tried the public address
    dns_server.answer(name, PRIVATE)
    switched = time.monotonic()
    while True:
        (answer,) = await probe(box, ["get", f"http://{name}:8080/"])
        if answer.get("status") == 403 or time.monotonic() - switched > 90:
            break
        assert "ERR_CONNECT_FAIL" in answer.get("body", ""), answer  # the cached public answer, nothing else
        await asyncio.sleep(5)
    refused(answer, f"{name} resolves to a private or special address")
    logged = dns_server.container.logs().decode()
    assert logged.count(f"query[A] {name}") >= 2  # the proxy asked our server, again after the switch
