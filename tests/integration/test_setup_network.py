"""A setup's network as a definition adds to the server's default, and what its proxy refused, said to the user.

The hosts are the suite's own (``bench.egress.hosts``): small HTTP servers on an internal Docker network,
which is the egress network of the proxies here, so nothing leaves the machine. The server's default setup
network is ``allow=default.test:8080`` (``CUBICLE_SETUP_NETWORK``), in place of this machine's registries.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.egress import Hosts, hosts
from controller.config import DEFAULT_IMAGE
from tests.dns_helpers import dnsmasq
from tests.integration.cli_helpers import cubicle
from tests.integration.pty_helpers import owned_by, scenario_file
from tests.sandbox_defaults import TEST_INSTANCE

pytestmark = pytest.mark.integration
INSTANCE = f"{TEST_INSTANCE}-setupnet"  # the test hosts are TEST_INSTANCE's: this run's containers are told apart

FETCH = (
    "import sys, urllib.request as u; print(sys.argv[1], u.urlopen(sys.argv[1], timeout=30).read().decode().strip())"
)
SCENARIO = {"name": "after-setup", "turns": [{"content": [{"type": "text", "text": "done"}]}]}


@pytest.fixture(scope="module")
def test_hosts(docker_client: Any) -> Iterator[Hosts]:
    served = {"default.test": (8080,), "extra.test": (8080,), "other.test": (8080,)}
    with hosts(docker_client, DEFAULT_IMAGE, served, TEST_INSTANCE) as made:
        yield made


@pytest.fixture(scope="module")
def dns_server(docker_client: Any, test_hosts: Hosts) -> Iterator[str]:
    """The tests' dnsmasq on the test hosts' network, the proxies' DNS server (``CUBICLE_EGRESS_DNS``): it answers
    the test hosts' names and, as a real resolver does, that any other name under ``.test`` does not exist."""
    names = "\n".join(f"{address} {name}" for name, address in test_hosts.addresses.items())
    with dnsmasq(docker_client, test_hosts.network, names, "--local=/test/") as (_, address):
        yield address


def fetch(host: str, scheme: str = "http") -> str:
    return f"python3 -c '{FETCH}' {scheme}://{host}:8080/"


def _run(
    make_repo: Callable[..., Path], tmp_path: Path, test_hosts: Hosts, dns: str, proxy_image: str, files: dict[str, str]
) -> tuple[int, list[dict[str, Any]], str]:
    repo = make_repo("repo", files={"README.md": "# demo\n", **files})
    settings = {
        "CUBICLE_DATA_DIR": str(tmp_path / "data"),
        "CUBICLE_INSTANCE": INSTANCE,
        "CUBICLE_EGRESS_NETWORK": test_hosts.network,
        "CUBICLE_EGRESS_DNS": dns,
        "CUBICLE_PROXY_IMAGE": proxy_image,
        "CUBICLE_SETUP_NETWORK": "allow=default.test:8080",
    }
    scenario = scenario_file(tmp_path, SCENARIO)
    done = cubicle("run", str(repo), "go", "--json", "--no-apply", "--scenario", scenario, env=settings, timeout=300)
    return done.returncode, [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")], done.stderr


def test_a_definition_adds_a_host_to_the_defaults_and_the_proxy_refuses_any_other(
    make_repo: Callable[..., Path], tmp_path: Path, test_hosts: Hosts, dns_server: str, proxy_image: str
) -> None:
    setup = f"{fetch('default.test')}; {fetch('extra.test')}; {fetch('other.test', 'https')} || echo other-refused"
    toml = f'setup = """{setup}"""\nsetup_network = "defaults,allow=extra.test:8080"\n'
    code, events, stderr = _run(
        make_repo, tmp_path, test_hosts, dns_server, proxy_image, {".cubicle/environment.toml": toml}
    )
    assert code == 0, stderr[-2000:]
    said = {phase: "".join(e["text"] for e in events if e.get("phase") == phase) for phase in ("setup", "environment")}
    assert "http://default.test:8080/ default.test:8080" in said["setup"]  # the server's default
    assert "http://extra.test:8080/ extra.test:8080" in said["setup"]  # and the definition's host, added
    # a CONNECT, as npm's and pip's HTTPS requests are: the client sees only the status, never the proxy's page
    assert "Tunnel connection failed: 403 Forbidden" in said["setup"] and "other-refused" in said["setup"]
    assert (
        "The setup's network refused or could not reach: other.test:8080 (not on the allow-list)."
        in said["environment"]
    )
    assert (
        'setup_network = "defaults,allow=extra.test:8080,other.test:8080" in .cubicle/environment.toml'
        in (said["environment"])
    )


@pytest.mark.parametrize("where", ["setup", "build"])
def test_a_failed_setup_or_build_names_the_hosts_its_proxy_refused_and_the_setting_that_allows_them(
    make_repo: Callable[..., Path],
    tmp_path: Path,
    test_hosts: Hosts,
    dns_server: str,
    proxy_image: str,
    docker_client: Any,
    where: str,
) -> None:
    steps = f"{fetch('nowhere.test')} || true; {fetch('other.test')}"  # listed but unresolvable; not listed
    definition = 'setup_network = "defaults,allow=nowhere.test:8080"\n'
    if where == "setup":
        files = {".cubicle/environment.toml": f'{definition}setup = """{steps}"""\n'}
    else:
        dockerfile = f"FROM {DEFAULT_IMAGE}\nRUN {steps}\n"
        files = {".cubicle/environment.toml": f'{definition}dockerfile = "Dockerfile"\n', "Dockerfile": dockerfile}
    code, events, stderr = _run(make_repo, tmp_path, test_hosts, dns_server, proxy_image, files)
    assert code == 4, stderr[-2000:]
    error = next(e for e in events if e["type"] == "error")
    assert error["kind"] == "setup", error
    message = error["message"]
    assert "nowhere.test:8080 (its name does not resolve)" in message, message
    assert "other.test:8080 (not on the allow-list)" in message, message
    assert 'setup_network = "defaults,allow=nowhere.test:8080,other.test:8080" in .cubicle/' in message, message
    assert owned_by(docker_client, INSTANCE) == []
