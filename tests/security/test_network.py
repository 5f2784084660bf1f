"""Network: with network none only the container's own loopback exists, and nothing resolves; a session may opt in."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from controller.errors import SandboxError
from controller.sandbox import isolation as runtimes
from controller.sandbox.docker import DockerSandbox
from controller.wire.limits import Limits
from controller.wire.network import OPEN
from tests.integration.helpers import listening, sh


@pytest.fixture
def host_listener() -> Iterator[int]:
    """A TCP server on the host's loopback that records any connection."""
    with listening("127.0.0.1") as (port, hits):
        yield port
    assert hits == [], "the sandbox reached a port on the host's loopback"


async def test_only_loopback_interface(box: DockerSandbox) -> None:
    result = await sh(box, "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '; cat /proc/net/route | wc -l")
    assert result.stdout.text == "lo\n1\n"


async def test_host_loopback_port_is_unreachable(box: DockerSandbox, host_listener: int) -> None:
    script = f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {host_listener}), 2)\n    print('connected')\nexcept OSError as e:\n    print('refused', e.errno)"
    result = await sh(box, f'python3 -c "{script}"')
    assert result.stdout.text.startswith("refused")


async def test_no_dns(box: DockerSandbox) -> None:
    result = await sh(
        box,
        "getent hosts deb.debian.org; echo rc=$?; python3 -c \"import socket; socket.getaddrinfo('pypi.org', 443)\"",
    )
    assert "rc=2" in result.stdout.text and "gaierror" in result.stderr.text


async def test_no_route_out(box: DockerSandbox) -> None:
    result = await sh(
        box, "python3 -c \"import socket; s=socket.socket(); s.settimeout(1); s.connect(('192.0.2.1', 80))\""
    )
    # gVisor's loopback-only stack answers "No route to host" where Linux's says "Network is unreachable"
    assert "Network is unreachable" in result.stderr.text or (
        box.limits.runtime == runtimes.GVISOR and "No route to host" in result.stderr.text
    ), result


async def test_network_can_be_enabled_per_session(
    make_repo: Callable[..., Path], sandbox_factory: Callable[..., DockerSandbox]
) -> None:
    box = sandbox_factory(make_repo("net"), Limits(memory_mb=512, network=OPEN))
    if box.limits.runtime in runtimes.NETWORK_NONE_ONLY:  # refused before any container is made (and by sessions)
        with pytest.raises(SandboxError, match="no network"):
            await box.start()
        return
    result = await sh(box, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort")
    assert result.stdout.text == "eth0\nlo\n"
