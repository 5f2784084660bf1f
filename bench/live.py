"""Live command output: what streaming a running command's output costs, each beside the same with it off.

Three measurements, each with its baseline in the same run:

- ``run_command("true")`` through the agent's recorded call (``run_call``), live output on, against the same
  call with ``live_output_bytes=0`` (the setting that switches it off), call by call in turn. Target: p50
  within 10 % of the baseline's.
- A command printing 1 GB with live output on: the controller's RSS growth, and what was shown live (capped
  at ``live_output_bytes``). Target: under 50 MB of growth, as with live output off.
- A chatty command (CHATTY_LINES lines over about CHATTY_S seconds) in a real ``cubicle serve`` session
  followed by FOLLOWERS SSE clients, against the same followed with live output off, and unfollowed. The
  server's CPU seconds over the session's wall time is the cores it used. Target: at most one core with
  FOLLOWERS followers and live output on.

``python -m bench.live`` prints these tables alone.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from pathlib import Path
from typing import Any

import httpx

from bench.flood import Controller
from bench.measure import Report, current_rss_mb, ms, repetitions, smoke, time_pair
from bench.rows import INSTANCE, LIMITS, make_repo, sandbox, section_main
from bench.viewer import Follower, ModelServer, cpu_seconds, frames
from controller.agent import tools
from controller.agent.liveoutput import LiveView
from controller.agent.loop import run_call
from controller.agent.scripted import Scenario
from controller.wire.events import CommandOutput, Event
from controller.wire.limits import Limits
from controller.wire.protocol import OutputFeed

FOLLOWERS = 50
CHATTY_LINES = 2000
CHATTY_S = 10


def chatty(lines: int, seconds: float) -> str:
    """A command printing ``lines`` lines over about ``seconds``."""
    return f'for i in $(seq {lines}); do echo "line $i of a chatty command"; sleep {seconds / lines}; done'


TRUE_TARGET = 1.10


def flooding(size: int) -> str:
    """A command printing ``size`` bytes."""
    return f"head -c {size} /dev/zero | tr '\\0' y"


RUN_TIMEOUT_S = 180


class Counting:
    """An event sink that keeps only counts (the flood must not be kept in this process's memory by the bench)."""

    def __init__(self) -> None:
        self.outputs = 0
        self.chars = 0
        self.truncated = False

    async def emit(self, event: Event) -> None:
        if isinstance(event, CommandOutput):
            self.outputs += 1
            self.chars += len(event.text)
            self.truncated = self.truncated or event.truncated


async def recorded(box: Any, limits: Limits, command: str, sink: Counting) -> tools.ToolOutcome:
    """One run_command as the agent makes it: recorded by run_call, its output live per ``limits``."""

    def execute(on_output: OutputFeed) -> Any:
        return tools.execute("run_command", {"command": command}, box, limits, on_output=on_output)

    view = LiveView(limits.live_output_bytes)
    return await run_call(sink, "bench", "call", "run_command", {"command": command}, execute, view)


async def in_sandbox(report: Report, client: Any, image: str, root: Path, quick: bool) -> None:
    """run_command("true") on and off, and the 1 GB flood with live output on."""
    on, off = LIMITS, LIMITS.model_copy(update={"live_output_bytes": 0})
    box = sandbox(client, image, make_repo(root, "live"))
    await box.start()
    try:
        sink = Counting()
        live, quiet = await time_pair(
            lambda: recorded(box, on, "true", sink),
            lambda: recorded(box, off, "true", sink),
            repetitions(50 if quick else 200),
        )
        flood, size = Counting(), 10**8 if smoke() else 10**9  # smoke: a tenth, to see that it runs
        rss_before = current_rss_mb()
        started = time.perf_counter()
        outcome = await recorded(box, on, flooding(size), flood)
        took, growth = time.perf_counter() - started, current_rss_mb() - rss_before
    finally:
        await box.stop()
    met = report.check(
        live.p50 <= TRUE_TARGET * quiet.p50,
        f"live output: run_command(true) p50 {ms(live.p50)} > {TRUE_TARGET} × {ms(quiet.p50)} with it off",
    )
    bounded = report.check(growth < 50, f"live output: the 1 GB flood grew the controller by {growth:.1f} MB")
    report.extra.append(
        (
            "Live output: a command's cost with it on, beside the same with it off (live_output_bytes=0)",
            ["measurement", "live output on", "off (baseline)", "target met"],
            [
                [
                    'run_command("true") p50 / p95',
                    f"{ms(live.p50)} / {ms(live.p95)}",
                    f"{ms(quiet.p50)} / {ms(quiet.p95)}",
                    "yes" if met else "**no**",
                ],
                [
                    f"{size / 10**9:g} GB of output: time, controller RSS growth",
                    f"{took:.2f} s, {growth:.1f} MB",
                    "(the output flood table)",
                    "yes" if bounded else "**no**",
                ],
                [
                    f"{size / 10**9:g} GB of output: shown live",
                    f"{flood.chars:,} chars in {flood.outputs} events, cut: {flood.truncated}",
                    "",
                    "",
                ],
                [f"{size / 10**9:g} GB of output: reached the model", f"{len(outcome.model_text):,} chars", "", ""],
            ],
        )
    )


async def chatty_run(
    api: httpx.AsyncClient, followers: list[Follower], pid: int, repo: Path, model: str, live: bool
) -> tuple[float, float, list[int]]:
    """One session running the chatty command: its wall time (server clock), the server's CPU seconds, and the
    command_output events each follower received."""
    cpu = cpu_seconds(pid)
    limits = {} if live else {"live_output_bytes": 0}
    body = {"repo": str(repo), "task": "chatter", "model": model, "limits": limits}
    record = (await api.post("/v1/sessions", json=body)).raise_for_status().json()
    following = [asyncio.create_task(follower.read(record["id"])) for follower in followers]
    try:
        async with asyncio.timeout(RUN_TIMEOUT_S):
            while (await api.get(f"/v1/sessions/{record['id']}")).json()["status"] == "running":
                await asyncio.sleep(0.1)
            streams = await asyncio.gather(*following)
    finally:
        for task in following:
            task.cancel()
    cpu = cpu_seconds(pid) - cpu
    seen = [[e for e in frames(data) if e["type"] in ("command_output", "session_finished")] for data, _ in streams]
    ends = [e[-1]["ts"] for e in seen if e and e[-1]["type"] == "session_finished"]
    (await api.delete(f"/v1/sessions/{record['id']}")).raise_for_status()
    wall = (max(ends) if ends else time.time()) - record["created_at"]
    return wall, cpu, [sum(1 for e in events if e["type"] == "command_output") for events in seen]


async def followed(report: Report, client: Any, image: str, root: Path, quick: bool) -> None:
    """The chatty command unfollowed, followed by FOLLOWERS with live output off, and with it on."""
    del client, quick  # the server makes its own sandboxes; one run of each is the measurement (tens of seconds)
    name = f"live-{secrets.token_hex(4)}"
    path = root / f"{name}.json"
    lines, seconds = (100, 1) if smoke() else (CHATTY_LINES, CHATTY_S)
    command = chatty(lines, seconds)
    turns = [
        {"content": [{"type": "tool_use", "name": "run_command", "input": {"command": command}}]},
        {"content": [{"type": "text", "text": "done"}]},
    ]
    path.write_text(Scenario.model_validate({"name": name, "turns": turns}).model_dump_json())
    repo = make_repo(root, "live-followed")
    model = ModelServer(path)
    try:
        server = Controller(model.url, root, INSTANCE, data="live-data", image=image)
        where = httpx.URL(server.url)
        followers = [Follower(where.host, where.port or 80, server.token) for _ in range(FOLLOWERS)]
        headers = {"Authorization": f"Bearer {server.token}"}
        try:
            async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=30) as api:
                pid = server.process.pid
                runs = [
                    ("no follower, live output on", await chatty_run(api, [], pid, repo, name, True)),
                    (
                        f"{FOLLOWERS} followers, live output off (baseline)",
                        await chatty_run(api, followers, pid, repo, name, False),
                    ),
                    (f"{FOLLOWERS} followers, live output on", await chatty_run(api, followers, pid, repo, name, True)),
                ]
        finally:
            server.close()
    finally:
        model.close()
    _followed_rows(report, runs, lines, seconds)


def _followed_rows(
    report: Report, runs: list[tuple[str, tuple[float, float, list[int]]]], lines: int, seconds: float
) -> None:
    rows = []
    for label, (wall, cpu, received) in runs:
        cores = cpu / wall if wall > 0 else 0.0
        met = ""
        if label.endswith("live output on") and received:
            met = "yes" if report.check(cores <= 1.0, f"live output: {label} used {cores:.2f} cores") else "**no**"
        events = f"{min(received)}–{max(received)}" if received else "(not followed)"
        rows.append([label, f"{wall:.1f} s", f"{cpu:.1f} s", f"{cores:.2f}", events, met])
    report.extra.append(
        (
            f"Live output followed: a command printing {lines:,} lines over ~{seconds} s in a `cubicle serve` session",
            [
                "run",
                "session wall time",
                "server CPU",
                "server cores",
                "command_output events per follower",
                "≤ 1 core",
            ],
            rows,
        )
    )


async def table(report: Report, client: Any, image: str, root: Path, quick: bool) -> None:
    await in_sandbox(report, client, image, root, quick)
    await followed(report, client, image, root, quick)


def main() -> int:
    return section_main("live", __doc__, "fewer run_command repetitions", table)


if __name__ == "__main__":
    raise SystemExit(main())
