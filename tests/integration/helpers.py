"""Small helpers shared by the integration tests."""

from __future__ import annotations

import contextlib
import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

from docker.errors import APIError, NotFound

from controller.sandbox import isolation as runtimes
from controller.sandbox import owners
from controller.sandbox.docker import DockerSandbox
from controller.wire import protocol
from controller.wire.protocol import CommandResult, Failure, Outcome, Strict

T = TypeVar("T", bound=Strict)
ROOT = Path(__file__).resolve().parents[2]


def doc_example(page: str, heading: str, language: str = "python") -> str:
    """The first fenced ``language`` block under ``heading`` of ``page`` (README.md or a page of docs/), before
    the next heading: the examples the documentation shows are the ones the tests run."""
    text = (ROOT / page).read_text()
    section = text[text.index(heading) + len(heading) :]
    section = re.split(r"^#{1,3} ", section, maxsplit=1, flags=re.MULTILINE)[0]
    match = re.search(rf"^```{language}\n(.*?)^```$", section, flags=re.MULTILINE | re.DOTALL)
    assert match, f"no {language} block under {heading!r} in {page}"
    return match.group(1)


def expect(outcome: Outcome, kind: type[T]) -> T:
    assert isinstance(outcome, kind), outcome
    return outcome


def failure(outcome: Outcome, kind: str) -> Failure:
    assert isinstance(outcome, Failure), outcome
    assert outcome.kind == kind, outcome
    return outcome


async def call(box: DockerSandbox, op: str, **args: Any) -> Outcome:
    return await box.call(protocol.call(op, **args), 60)


async def sh(box: DockerSandbox, command: str, timeout_s: int = 30) -> CommandResult:
    return expect(await call(box, "run_command", command=command, timeout_s=timeout_s), CommandResult)


def containers_of(client: Any, session_id: str) -> list[Any]:
    """Every container (running or not) labelled with the session ``session_id``.

    One list call (sparse: no inspect per container), so a container being removed meanwhile
    cannot make it fail with 404.
    """
    return list(client.containers.list(all=True, sparse=True, filters={"label": f"{owners.SESSION}={session_id}"}))


EXEC_TIMEOUT_S = 20


def container_running(client: Any, needle: str) -> Any:
    """The Cubicle sandbox whose processes include ``needle`` (a command line), or None.

    Other tests' containers come and go meanwhile: one that stops between the listing and
    ``top`` (409, or 404 once removed) simply is not the one.
    """
    for container in client.containers.list(sparse=True, filters={"label": "org.cubicle.managed=true"}):
        try:
            processes = [" ".join(p) for p in container.top()["Processes"] or []]
            if client.api.inspect_container(container.id)["HostConfig"]["Runtime"] == runtimes.GVISOR:
                # gVisor's `top` shows command names only, no arguments: ask inside, for a bounded time (an exec
                # into a container gVisor is tearing down once never answered)
                processes = _processes_inside(container)
        except (APIError, NotFound):
            continue
        if any(needle in line for line in processes):
            return container
    return None


def _processes_inside(container: Any) -> list[str]:
    """``ps`` in ``container`` as root; none when it fails or does not answer within ``EXEC_TIMEOUT_S``."""
    found: list[str] = []

    def ask() -> None:
        with contextlib.suppress(APIError, NotFound):
            listed = container.exec_run(["ps", "-eo", "args"], user="0:0")
            found.extend(listed.output.decode(errors="replace").splitlines())

    asking = threading.Thread(target=ask, daemon=True)  # a hung exec must not hold up the test's end either
    asking.start()
    asking.join(EXEC_TIMEOUT_S)
    return list(found) if not asking.is_alive() else []


@contextlib.contextmanager
def listening(address: str) -> Iterator[tuple[int, list[str]]]:
    """A TCP server of the host's on ``address`` (port chosen) that records each peer that connects: (port, peers)."""
    server = socket.socket()
    server.bind((address, 0))
    server.listen()
    server.settimeout(0.2)
    hits: list[str] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, peer = server.accept()
            except OSError:
                continue
            hits.append(peer[0])
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], hits
    finally:
        stop.set()
        thread.join()
        server.close()
