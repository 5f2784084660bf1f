"""The egress proxy of ``allow``: a download through it against the same download direct, and the test hosts.

``hosts`` starts small HTTP servers (the sandbox image's python3) on a Docker network: the
benchmark's on the engine's bridge, the tests' (tests/security/test_egress.py) on an internal
network of their own, where each server has a name (``allowed.test``) that only containers on
that network resolve. Nothing leaves the machine.

The row: a sandbox on the ``open`` network downloads 1 MiB from a server on the bridge, and a
sandbox whose policy is ``allow=<that server>`` downloads it through its proxy, each way twice:
a plain GET (squid relays it through its memory store) and a GET inside a CONNECT tunnel (how
HTTPS travels; squid copies bytes). A third row is the floor under any proxy: the allow sandbox
downloads through a bare TCP forwarder (``FORWARDER``) on the same two networks as its proxy, against
the same raw download direct. The two sandboxes alternate in batches, timed inside them (the tool
call's round trip is not part of either).
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import secrets
import shlex
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.measure import Report, ms, smoke
from bench.rows import INSTANCE, give_away, standalone
from controller import workspace
from controller.config import DEFAULT_IMAGE, DEFAULT_PROXY_IMAGE
from controller.sandbox import images, owners
from controller.sandbox.docker import DockerSandbox
from controller.sandbox.egress import network_name
from controller.sandbox.sandboxes import Deployment
from controller.wire import protocol
from controller.wire.limits import Limits
from controller.wire.network import OPEN, Outside, parse
from controller.wire.protocol import CommandResult

SERVER = r"""
import http.server, sys, threading
name, ports = sys.argv[1], [int(p) for p in sys.argv[2:]]
MIB = b"x" * (1 << 20)

class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def do_GET(self):
        body = MIB if self.path == "/1m" else f"{name}:{self.server.server_port}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

servers = [http.server.ThreadingHTTPServer(("0.0.0.0", port), Handler) for port in ports]
for server in servers:
    threading.Thread(target=server.serve_forever, daemon=True).start()
print("serving", flush=True)
threading.Event().wait()
"""
"""A host: answers ``NAME:PORT`` on each of its ports, and 1 MiB at ``/1m``."""

FORWARDER = r"""
import os, socket, sys, threading
upstream = (sys.argv[1], int(sys.argv[2]))

def pump(source, sink):
    inlet, outlet = os.pipe()
    try:
        while size := os.splice(source.fileno(), outlet, 1 << 16):
            while size:
                size -= os.splice(inlet, sink.fileno(), size)
    except OSError:
        pass
    finally:
        os.close(inlet)
        os.close(outlet)
        try:
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass

def serve(client):
    with client, socket.create_connection(upstream) as server:
        for end in (client, server):
            end.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        back = threading.Thread(target=pump, args=(server, client))
        back.start()
        pump(client, server)
        back.join()

listener = socket.create_server(("0.0.0.0", 8080), backlog=128)
print("serving", flush=True)
while True:
    threading.Thread(target=serve, args=(listener.accept()[0],), daemon=True).start()
"""
"""The floor under any proxy: a bare TCP forwarder to one upstream, bytes moved by the kernel (``splice``), no HTTP.

It runs on the proxy's two networks, so the difference to a direct download is what the extra hop costs by itself.
The benchmark's baseline only, never part of Cubicle.
"""

HOST_LABEL = "org.cubicle.test-host"
"""Marks the hosts and their network (beside ``owners`` labels, so a sweep removes what a killed run left)."""


@dataclass
class Hosts:
    network: str
    addresses: dict[str, str] = field(default_factory=dict)
    """Each host's name and its IP on ``network``."""
    gateway: str | None = None


def gateway_of(network: dict[str, Any]) -> str | None:
    """The address of the host on a Docker network (its inspected attributes): the gateway the engine records,
    or, where it records none (seen once for the default bridge during a CI run), the subnet's first address,
    which is the one the engine gives the host."""
    for config in network["IPAM"]["Config"] or []:
        if config.get("Gateway"):
            return str(config["Gateway"])
        if config.get("Subnet") and ":" not in config["Subnet"]:
            return str(next(ipaddress.ip_network(config["Subnet"]).hosts()))
    return None


@contextlib.contextmanager
def hosts(
    client: Any, image: str, ports: dict[str, tuple[int, ...]], instance: str, network: str | None = None
) -> Iterator[Hosts]:
    """Servers named ``ports``' keys, each on its ports; on ``network``, or on an internal network made for them.

    They carry ``instance``'s owner labels, so its sweep removes them if the run is killed.
    """
    tag = secrets.token_hex(4)
    labels = {**owners.labels(instance, f"test-hosts-{tag}"), HOST_LABEL: tag}
    made = None
    if network is None:
        made = client.networks.create(f"cubicle-test-hosts-{tag}", internal=True, labels=labels)
        network = str(made.name)
    found = Hosts(network)
    containers = []
    try:
        for name, served in ports.items():
            aliases = [name] if made is not None else None  # the name resolves on this network only
            container = _helper(client, image, [SERVER, name, *map(str, served)], labels, network, aliases)
            containers.append(container)
            container.start()
        for container, name in zip(containers, ports, strict=True):
            _wait_serving(container)
            container.reload()
            found.addresses[name] = container.attrs["NetworkSettings"]["Networks"][network]["IPAddress"]
        found.gateway = gateway_of(client.networks.get(network).attrs)
        yield found
    finally:
        for container in containers:
            container.remove(force=True)
        if made is not None:
            made.remove()


def _helper(
    client: Any, image: str, program: list[str], labels: dict[str, str], network: str, aliases: list[str] | None = None
) -> Any:
    """A small unprivileged python3 container (a test host or the forwarder) on ``network``, created, not started."""
    return client.containers.create(
        image,
        ["/usr/bin/python3", "-u", "-c", *program],
        user="1000:1000",
        labels=labels,
        network=network,
        read_only=True,
        cap_drop=["ALL"],
        security_opt=["no-new-privileges:true"],
        mem_limit="128m",
        pids_limit=64,
        networking_config={network: client.api.create_endpoint_config(aliases=aliases)},
    )


def _wait_serving(container: Any, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while b"serving" not in container.logs():
        container.reload()
        if container.status == "exited" or time.monotonic() > deadline:
            raise RuntimeError(f"test host did not start: {container.logs()[-500:]!r}")
        time.sleep(0.05)


# ----------------------------------------------------------------------------- the benchmark row

LIMITS = Limits(memory_mb=512, pids=256, tmpfs_mb=64)
RATIO_TARGET = 1.5
DOWNLOAD = r"""
import json, os, socket, sys, time, urllib.parse, urllib.request
url, n = sys.argv[1], int(sys.argv[2])
forwarder = sys.argv[3] if len(sys.argv) > 3 else None
target = urllib.parse.urlsplit(url)
proxy = os.environ.get("HTTP_PROXY")


def get():
    with urllib.request.urlopen(url, timeout=30) as reply:  # the proxy, if any, from the environment
        return len(reply.read())


def raw(host, port, connect):
    # A GET on a socket of its own, to the server (connect=False) or, with connect=True, inside a
    # CONNECT tunnel through the proxy at host:port (as HTTPS travels; here plain HTTP is inside).
    with socket.create_connection((host, port), 30) as conn:
        if connect:
            conn.sendall(f"CONNECT {target.netloc} HTTP/1.1\r\nHost: {target.netloc}\r\n\r\n".encode())
            head = b""
            while b"\r\n\r\n" not in head:
                head += conn.recv(4096)
            assert b" 200 " in head.split(b"\r\n")[0], head
        conn.sendall(f"GET {target.path} HTTP/1.1\r\nHost: {target.netloc}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := conn.recv(1 << 20):
            data += chunk
        return len(data.partition(b"\r\n\r\n")[2])


def tunnel():
    where = urllib.parse.urlsplit(proxy) if proxy else target
    return raw(where.hostname, where.port, bool(proxy))


kinds = {"get": get, "tunnel": tunnel}
if forwarder:
    kinds["forward"] = lambda: raw(forwarder, target.port, False)
times = {kind: [] for kind in kinds}
for _ in range(n):
    for kind, fetch in kinds.items():
        start = time.perf_counter()
        size = fetch()
        times[kind].append(time.perf_counter() - start)
        assert size == 1 << 20, size
print(json.dumps(times))
"""
"""n downloads of 1 MiB each way, each on a new connection: a plain GET, a GET inside a tunnel and, given the
forwarder's address, a GET through it (the socket the tunnel's direct twin opens, to the forwarder instead)."""
KINDS = {"get": "plain HTTP GET", "tunnel": "inside a CONNECT tunnel (as HTTPS travels)"}


def _sandbox(client: Any, image: str, root: Path, policy: Any, egress_network: str, proxy_image: str) -> DockerSandbox:
    session_id = "bench-" + secrets.token_hex(4)
    repo = root / f"egress-{session_id}"
    (repo / ".git").mkdir(parents=True)
    give_away(repo)
    layer = workspace.create(root / "layers", session_id, repo)
    limits = LIMITS.model_copy(update={"network": policy})
    deployment = Deployment(image, INSTANCE, proxy_image=proxy_image, outside=Outside(egress_network))
    return DockerSandbox(lambda: client, layer=layer, session_id=session_id, limits=limits, deployment=deployment)


async def _downloads(box: DockerSandbox, url: str, n: int, forwarder: str = "") -> dict[str, list[float]]:
    command = f"python3 -c {shlex.quote(DOWNLOAD)} {shlex.quote(url)} {n} {forwarder}"
    result = await box.call(protocol.call("run_command", command=command, timeout_s=120), 180)
    assert isinstance(result, CommandResult) and result.exit_code == 0, result
    return {kind: [float(v) for v in values] for kind, values in json.loads(result.stdout.text).items()}


async def table(
    report: Report, client: Any, image: str, root: Path, quick: bool, proxy_image: str = DEFAULT_PROXY_IMAGE
) -> None:
    """1 MiB through the session's proxy against the same download on the open network."""
    images.ensure(client, proxy_image, auto_build=True, context=images.PROXY)
    rounds, per_round = (1, 2) if smoke() else (3, 10) if quick else (5, 20)
    with hosts(client, image, {"files": (8080,)}, INSTANCE, network="bridge") as served:
        address = served.addresses["files"]
        url = f"http://{address}:8080/1m"
        direct = _sandbox(client, image, root, OPEN, "bridge", proxy_image)
        proxied = _sandbox(client, image, root, parse(f"allow={address}:8080"), "bridge", proxy_image)
        started = time.perf_counter()
        await proxied.start()
        proxy_start = time.perf_counter() - started
        started = time.perf_counter()
        await direct.start()
        direct_start = time.perf_counter() - started
        timings: dict[str, dict[str, list[float]]] = {"direct": {k: [] for k in KINDS}, "proxy": {}}
        try:
            with _forwarder(client, image, network_name(proxied.session_id), address) as forwarder:
                for _ in range(rounds):
                    for way, box, via in (("direct", direct, ""), ("proxy", proxied, forwarder)):
                        for kind, values in (await _downloads(box, url, per_round, via)).items():
                            timings[way].setdefault(kind, []).extend(values)
        finally:
            await direct.stop()
            await proxied.stop()
    rows = []
    for kind, name in KINDS.items():
        through, plain = (statistics.median(timings[way][kind]) for way in ("proxy", "direct"))
        ratio = through / plain
        met = report.check(
            ratio <= RATIO_TARGET,
            f"1 MiB {name} through the egress proxy {ms(through)} > {RATIO_TARGET} × direct {ms(plain)}",
        )
        rows.append(
            [
                f"1 MiB, {name}",
                ms(through),
                ms(_p95(timings["proxy"][kind])),
                ms(plain),
                ms(_p95(timings["direct"][kind])),
                f"{ratio:.2f}",
                "yes" if met else "**no**",
            ]
        )
    floor, plain = statistics.median(timings["proxy"]["forward"]), statistics.median(timings["direct"]["tunnel"])
    rows.append(
        [
            f"1 MiB through {FLOOR}",
            ms(floor),
            ms(_p95(timings["proxy"]["forward"])),
            ms(plain),
            ms(_p95(timings["direct"]["tunnel"])),
            f"{floor / plain:.2f}",
            "",
        ]
    )
    rows.append(
        [
            "first start of a sandbox (allow: with its network and proxy)",
            ms(proxy_start),
            "",
            ms(direct_start),
            "",
            f"{proxy_start / direct_start:.2f}",
            "",
        ]
    )
    n = rounds * per_round
    report.extra.append(
        (
            f"Egress proxy: a server on the bridge, {n} downloads each way, alternating in batches of {per_round} "
            f"(target: ≤ {RATIO_TARGET}× direct)",
            ["", "allow (proxy) p50", "p95", "open (direct) p50", "p95", "ratio (p50)", "met"],
            rows,
        )
    )


FLOOR = "a bare TCP forwarder on the proxy's two networks (the floor under any proxy)"


@contextlib.contextmanager
def _forwarder(client: Any, image: str, network: str, upstream: str) -> Iterator[str]:
    """FORWARDER on ``network`` (the proxied sandbox's) and the bridge, to ``upstream``:8080; yields its address."""
    labels = {**owners.labels(INSTANCE, f"forwarder-{secrets.token_hex(4)}"), HOST_LABEL: "forwarder"}
    container = _helper(client, image, [FORWARDER, upstream, "8080"], labels, network)
    try:
        client.networks.get("bridge").connect(container)
        container.start()
        _wait_serving(container)
        container.reload()
        yield str(container.attrs["NetworkSettings"]["Networks"][network]["IPAddress"])
    finally:
        container.remove(force=True)


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.egress", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="3 batches of 10 instead of 5 of 20")
    parser.add_argument("--image", default=DEFAULT_IMAGE, help="sandbox image")
    parser.add_argument("--proxy-image", default=DEFAULT_PROXY_IMAGE, help="egress proxy image")
    args = parser.parse_args()
    return standalone(
        args.image,
        lambda report, client, root: table(report, client, args.image, root, args.quick, args.proxy_image),
    )


if __name__ == "__main__":
    sys.exit(main())
