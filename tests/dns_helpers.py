"""Debian's dnsmasq as a DNS server of the tests' own, on a Docker network of theirs (the egress proxies'
``CUBICLE_EGRESS_DNS``): it answers from a hosts file, and, as a real resolver does, that any other name under
``.test`` does not exist."""

from __future__ import annotations

import io
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from docker.errors import ImageNotFound

from controller.sandbox import owners
from tests.sandbox_defaults import TEST_INSTANCE

DNSMASQ_IMAGE = "cubicle-test-dnsmasq:1"
DNSMASQ_DOCKERFILE = b"""FROM debian:bookworm-slim
RUN apt-get update \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends dnsmasq-base \\
 && rm -rf /var/lib/apt/lists/*
"""
HOSTS_FILE = "/run/dns/hosts"


@contextmanager
def dnsmasq(docker_client: Any, network: str, hosts: str = "", *flags: str) -> Iterator[tuple[Any, str]]:
    """A dnsmasq container on ``network`` answering ``hosts`` (hosts-file lines; the file is at ``HOSTS_FILE``
    for a test to rewrite, then ``kill -HUP 1``), with ``flags`` added; yields it and its address there."""
    try:
        docker_client.images.get(DNSMASQ_IMAGE)
    except ImageNotFound:
        docker_client.images.build(fileobj=io.BytesIO(DNSMASQ_DOCKERFILE), tag=DNSMASQ_IMAGE, rm=True)
    command = (
        f"mkdir -p /run/dns && printf '%s\\n' {shlex.quote(hosts)} > {HOSTS_FILE} && exec dnsmasq "
        f"--keep-in-foreground --no-resolv --no-hosts --addn-hosts={HOSTS_FILE} --user=root --log-facility=- "
        + " ".join(flags)
    )
    container = docker_client.containers.run(
        DNSMASQ_IMAGE,
        ["sh", "-c", command],
        detach=True,
        network=network,
        labels=owners.labels(TEST_INSTANCE, "test-dns"),
        cap_drop=["ALL"],
        cap_add=["NET_BIND_SERVICE", "SETUID", "SETGID", "KILL"],
        read_only=True,
        tmpfs={"/run": "size=1m"},
        mem_limit="64m",
    )
    try:
        container.reload()
        yield container, str(container.attrs["NetworkSettings"]["Networks"][network]["IPAddress"])
    finally:
        container.remove(force=True)
