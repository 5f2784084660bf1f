"""SSE followers: one running session followed by 50 clients, against the same session followed by none.

A real `cubicle serve` runs as its own process (token set, real sandbox containers), and so
does the scripted model (``cubicle scripted-server``), so that neither shares an interpreter
with the followers. The session runs STEPS steps, each a short text and a ``run_command``
(about six events a step). Runs alternate: no follower (the baseline), then FOLLOWERS
followers, each on a socket of its own connected right after the session is created and
reading the stream until it closes. A follower only keeps the bytes during the run (as a
browser on another machine would, it costs these two cores next to nothing); after the end
each follower's frames are parsed and checked to hold every event of the session exactly
once and in order, against a replay.

The session's wall time is the server's own: ``created_at`` of its record to the ``ts`` of its
``session_finished`` event; the container's start is in it. Both conditions poll the record
every 100 ms to see the end. The server's CPU time per run (utime + stime of its process,
from /proc) shows what the fan-out costs beside the wall time. ``python -m bench.viewer``
prints this table alone.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.flood import Controller
from bench.measure import Report, Row, Sample, ms, smoke
from bench.rows import INSTANCE, make_repo, section_main
from controller.agent.scripted import Scenario, free_port

FOLLOWERS = 50
STEPS = 40
TARGET = 1.2
"""With followers, the session's wall time p50 at most this many times its wall time without."""
POLL_S = 0.1
RUN_TIMEOUT_S = 120


def scenario(name: str) -> Scenario:
    """STEPS steps of a short text and a short command, then a closing text."""
    turns: list[dict[str, Any]] = [
        {
            "content": [
                {"type": "text", "text": f"Step {i}: listing the sources and counting the lines of the readme."},
                {
                    "type": "tool_use",
                    "name": "run_command",
                    "input": {"command": f"ls -la src && wc -l README.md && echo step {i}"},
                },
            ]
        }
        for i in range(STEPS)
    ]
    turns.append({"content": [{"type": "text", "text": "Done: every step ran."}]})
    return Scenario.model_validate({"name": name, "turns": turns})


class ModelServer:
    """``cubicle scripted-server`` in a process of its own, serving one scenario file."""

    def __init__(self, path: Path, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "controller", "scripted-server", str(path), "--port", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or self.process.poll() is not None:
                self.close()
                raise RuntimeError("the scripted model server did not come up")
            time.sleep(0.1)

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()  # reaped: a Popen never waited for warns from its finalizer


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process (all its threads) so far."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def sse(client: httpx.AsyncClient, sid: str) -> list[dict[str, Any]]:
    """The session's events from its first, live until the stream closes; each frame's id and name checked."""
    return frames(await raw(client, sid))


async def raw(client: httpx.AsyncClient, sid: str) -> bytes:
    """The stream's bytes, read with ``client`` (the replay after a run)."""
    chunks: list[bytes] = []
    async with client.stream("GET", f"/v1/sessions/{sid}/events", timeout=RUN_TIMEOUT_S) as response:
        response.raise_for_status()
        async for chunk in response.aiter_raw():
            chunks.append(chunk)
    return b"".join(chunks)


@dataclass
class Follower:
    """One SSE follower on a socket of its own: it only keeps the bytes during the run, as a browser on
    another machine would (an HTTP client library parsing every chunk cost these two cores a second of
    CPU per run); the response is de-chunked, parsed and checked after the session has ended."""

    host: str
    port: int
    token: str

    async def read(self, sid: str) -> tuple[bytes, int]:
        """The stream's body, and the number of chunks it came in (one per write of the server's)."""
        reader, writer = await asyncio.open_connection(self.host, self.port)
        try:
            writer.write(
                f"GET /v1/sessions/{sid}/events HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                f"Authorization: Bearer {self.token}\r\nAccept: text/event-stream\r\nConnection: close\r\n\r\n".encode()
            )
            chunks: list[bytes] = []
            while data := await reader.read(1 << 16):
                chunks.append(data)
        finally:
            writer.close()
        return body(b"".join(chunks))


def body(response: bytes) -> tuple[bytes, int]:
    """The body of a whole HTTP/1.1 response (200 only), de-chunked if it was sent in chunks, and the chunks."""
    head, _, rest = response.partition(b"\r\n\r\n")
    status_line, *headers = head.decode("latin-1").split("\r\n")
    if " 200 " not in f"{status_line} ":
        raise RuntimeError(f"the event stream answered {status_line!r}")
    if not any(h.lower().replace(" ", "") == "transfer-encoding:chunked" for h in headers):
        return rest, 1
    out: list[bytes] = []
    while True:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            return b"".join(out), len(out)
        out.append(rest[:size])
        rest = rest[size + 2 :]


def frames(data: bytes) -> list[dict[str, Any]]:
    """SSE frames as events (keep-alive comments skipped), checking that each frame's id and name match its data."""
    events: list[dict[str, Any]] = []
    fields: dict[str, str] = {}
    for line in data.decode().replace("\r\n", "\n").split("\n"):
        if line:
            if not line.startswith(":"):
                name, _, value = line.partition(":")
                fields[name] = value[1:] if value.startswith(" ") else value
            continue
        if "data" in fields:
            event = json.loads(fields["data"])
            if str(event["seq"]) != fields.get("id") or event["type"] != fields.get("event"):
                raise AssertionError(f"a frame whose id or name does not match its data: {fields}")
            events.append(event)
        fields = {}
    return events


@dataclass
class Run:
    wall: float
    """created_at to session_finished, on the server's clock."""
    cpu: float
    """The server process's CPU seconds from create to the end of the stream."""
    client_cpu: float
    """This process's CPU seconds over the same span: the followers' own cost, on the same cores."""
    events: int
    received: list[int] = field(default_factory=list)
    """Events each follower received."""
    exact: int = 0
    """Followers that received every event exactly once, in seq order."""
    writes: list[int] = field(default_factory=list)
    """The chunks each follower's stream came in: the server's writes to it."""


async def run_once(api: httpx.AsyncClient, followers: list[Follower], pid: int, repo: Path, model: str) -> Run:
    cpu, client_cpu = cpu_seconds(pid), time.process_time()
    response = await api.post(
        "/v1/sessions", json={"repo": str(repo), "task": "work through the steps", "model": model}
    )
    response.raise_for_status()
    record = response.json()
    sid = record["id"]
    following = [asyncio.create_task(follower.read(sid)) for follower in followers]
    try:
        async with asyncio.timeout(RUN_TIMEOUT_S):
            while (await api.get(f"/v1/sessions/{sid}")).json()["status"] == "running":
                await asyncio.sleep(POLL_S)
            streams = await asyncio.gather(*following)
    finally:
        for task in following:
            task.cancel()
    cpu, client_cpu = cpu_seconds(pid) - cpu, time.process_time() - client_cpu
    received = [[event["seq"] for event in frames(data)] for data, _ in streams]
    replay = await sse(api, sid)
    finished = replay[-1]
    if finished["type"] != "session_finished" or finished["reason"] != "end_turn":
        raise RuntimeError(f"session {sid} did not end with end_turn: {finished}")
    expected = [event["seq"] for event in replay]
    if expected != list(range(1, len(expected) + 1)):
        raise RuntimeError(f"session {sid}: the replay's seqs are not 1..{len(expected)}")
    (await api.delete(f"/v1/sessions/{sid}")).raise_for_status()
    return Run(
        wall=finished["ts"] - record["created_at"],
        cpu=cpu,
        client_cpu=client_cpu,
        events=len(expected),
        received=[len(r) for r in received],
        exact=sum(1 for r in received if r == expected),
        writes=[n for _, n in streams],
    )


async def measure(url: str, token: str, pid: int, repo: Path, model: str, rounds: int) -> tuple[list[Run], list[Run]]:
    """One warm-up run, then ``rounds`` of (no follower, FOLLOWERS followers), alternating."""
    headers = {"Authorization": f"Bearer {token}"}
    api = httpx.AsyncClient(
        base_url=url, headers=headers, timeout=120
    )  # a bound against a hang: a session start under load takes tens of seconds
    where = httpx.URL(url)
    followers = [Follower(where.host, where.port or 80, token) for _ in range(FOLLOWERS)]
    alone: list[Run] = []
    followed: list[Run] = []
    try:
        await run_once(api, [], pid, repo, model)
        for _ in range(rounds):
            alone.append(await run_once(api, [], pid, repo, model))
            followed.append(await run_once(api, followers, pid, repo, model))
    finally:
        await api.aclose()
    return alone, followed


async def table(report: Report, client: Any, image: str, root: Path, quick: bool) -> None:
    """Add the row and the followers' table to ``report``."""
    del client  # the server process makes its own sandboxes
    name = f"viewer-{secrets.token_hex(4)}"
    path = root / f"{name}.json"
    path.write_text(scenario(name).model_dump_json())
    repo = make_repo(root, "viewer")
    rounds = 1 if smoke() else 3 if quick else 7
    model = ModelServer(path)
    try:
        server = Controller(model.url, root, INSTANCE, data="viewer-data", image=image)
        try:
            alone, followed = await measure(server.url, server.token, server.process.pid, repo, name, rounds)
        finally:
            server.close()
    finally:
        model.close()
    base, ours = Sample([r.wall for r in alone]), Sample([r.wall for r in followed])
    ratio = ours.p50 / base.p50
    events = {r.events for r in alone + followed}
    exact = sum(r.exact for r in followed)
    total = FOLLOWERS * len(followed)
    met = report.check(
        ratio <= TARGET,
        f"{FOLLOWERS} SSE followers: session wall time p50 {ms(ours.p50)} > {TARGET} × {ms(base.p50)} without",
    )
    report.check(exact == total, f"{FOLLOWERS} SSE followers: {total - exact} of {total} streams were not exact")
    report.rows.append(
        Row(
            f"session of {STEPS} steps, {FOLLOWERS} SSE followers (wall time)",
            ours,
            "the same session, no follower",
            base,
            f"≤ {TARGET}×",
            met,
        )
    )
    report.rows.append(
        Row(
            f"  server CPU per session, {FOLLOWERS} SSE followers",
            Sample([r.cpu for r in followed]),
            "the same session, no follower",
            Sample([r.cpu for r in alone]),
        )
    )
    received = sorted(n for r in followed for n in r.received)
    writes = Sample([float(n) for r in followed for n in r.writes])
    rows = [
        ["no follower (baseline)", *_cells(alone), "", "", ""],
        [
            f"{FOLLOWERS} followers",
            *_cells(followed),
            f"{received[0]}–{received[-1]}",
            f"{writes.p50:.0f}",
            f"{exact} of {total}",
        ],
    ]  # fmt: skip - a table
    report.extra.append(
        (
            f"SSE fan-out: one session of {STEPS} steps ({'/'.join(str(n) for n in sorted(events))} events), "
            f"{len(alone)} runs each way, alternating",
            [
                "",
                "wall time each run",
                "wall p50",
                "server CPU each run",
                "server CPU p50",
                "bench process CPU p50",
                "events per follower",
                "writes per follower p50",
                "followers exact (all, once, in order)",
            ],
            rows,
        )
    )


def _cells(runs: list[Run]) -> list[str]:
    walls, cpus = [r.wall for r in runs], [r.cpu for r in runs]
    return [
        ", ".join(f"{w:.2f}" for w in walls) + " s",
        ms(Sample(walls).p50),
        ", ".join(f"{c:.2f}" for c in cpus) + " s",
        ms(Sample(cpus).p50),
        ms(Sample([r.client_cpu for r in runs]).p50),
    ]


def main() -> int:
    return section_main("viewer", __doc__, "3 runs each way instead of 7", table)


if __name__ == "__main__":
    sys.exit(main())
