"""The controller while one sandbox floods its toolbox's stream: /healthz and a neighbour session.

A real `cubicle serve` runs as its own process. One session (the attacker) runs a long
command; a process on the host (root) then plays a sandbox that has reached the
toolbox's stdout: it opens the toolbox's fd 1 through /proc and writes ``{"id":`` and
63 MiB without a newline, then one byte per millisecond. Meanwhile a neighbour session runs 40 short steps and
/healthz is sampled every 10 ms. The same neighbour run without the attack is the
baseline. Used by ``python -m bench`` and by tests/security/test_channel_flood.py.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx

from bench.measure import Report, Sample, ms
from controller.agent.scripted import Scenario, ScriptedServer, free_port, serve_in_thread

T = TypeVar("T")
NEIGHBOUR_STEPS = 40
ATTACK_COMMAND_S = 10
TRICKLE_S = 6.0

FLOOD = r"""
import os, sys, time
fd = os.open(f"/proc/{sys.argv[1]}/fd/1", os.O_WRONLY)
os.write(fd, sys.argv[2].encode())
chunk = b"x" * (1 << 20)
for _ in range(63):
    os.write(fd, chunk)
end = time.monotonic() + float(sys.argv[3])
while time.monotonic() < end:
    os.write(fd, b"x")
    time.sleep(0.001)
"""


@dataclass
class FloodRun:
    health: Sample
    neighbour_steps: Sample
    attacker: dict[str, Any] | None = None
    """The attacker's tool_result event."""


HEALTH_P99_S = 0.1
STEP_RATIO = 2.0
"""The flood's targets: /healthz p99 during it, and a neighbour's step p50 against the same neighbour alone."""
READY_S = 120
"""How long a `cubicle serve` may take to answer /healthz before it counts as hung."""


class Controller:
    """A `cubicle serve` process with a scripted model, and the few API calls the measurement needs."""

    def __init__(
        self,
        model_url: str,
        root: Path,
        instance: str,
        data: str = "flood-data",
        image: str | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.token = secrets.token_hex(16)
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CUBICLE_", "ANTHROPIC_"))}
        env |= {
            "ANTHROPIC_API_KEY": "bench",
            "ANTHROPIC_BASE_URL": model_url,
            "CUBICLE_API_TOKEN": self.token,
            "CUBICLE_REPO_ROOTS": str(root),
            "CUBICLE_DATA_DIR": str(root / data),
            "CUBICLE_INSTANCE": instance,
        }
        if image is not None:
            env["CUBICLE_IMAGE"] = image
        env |= extra_env or {}
        self.instance = instance
        self.log = root / f"{instance}-{self.port}.log"
        """Its stderr: what it logged, for a measurement that fails to say (``said``)."""
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "controller", "serve", "--port", str(self.port)],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        self.url = f"http://127.0.0.1:{self.port}"
        self.http = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.token}"}, timeout=60)
        self._wait_ready()

    def _wait_ready(self) -> None:
        """Until /healthz answers: a bound against a hang (on a busy machine the imports alone take seconds)."""
        deadline = time.monotonic() + READY_S
        while time.monotonic() < deadline and self.process.poll() is None:
            with contextlib.suppress(httpx.HTTPError):
                if self.http.get("/healthz", timeout=5).status_code == 200:
                    return
            time.sleep(0.1)
        self.close()
        raise RuntimeError(f"cubicle serve did not come up (exit status {self.process.returncode})")

    def said(self, lines: int = 10) -> list[str]:
        """The last of what it logged above INFO (a takeover, a turn stopped, a traceback), as lines."""
        with contextlib.suppress(OSError):
            text = self.log.read_text(errors="replace")
            return [line for line in text.splitlines() if line.strip() and not line.startswith("INFO")][-lines:]
        return []

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(READY_S)  # a bound against a hang: it stops its sessions first
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()  # reaped: a Popen never waited for warns from its finalizer
        self.http.close()

    def start(self, repo: Path, model: str) -> str:
        response = self.http.post("/v1/sessions", json={"repo": str(repo), "task": "go", "model": model})
        response.raise_for_status()
        return str(response.json()["id"])

    def finished(self, sid: str, timeout: float = 120) -> list[dict[str, Any]]:
        """Wait for the session's turn to end; its events."""
        deadline = time.monotonic() + timeout
        while self.http.get(f"/v1/sessions/{sid}").json()["status"] == "running":
            if time.monotonic() > deadline:
                raise TimeoutError(f"session {sid} still running after {timeout}s")
            time.sleep(0.05)
        with self.http.stream("GET", f"/v1/sessions/{sid}/events") as response:
            return [json.loads(line[5:]) for line in response.iter_lines() if line.startswith("data:")]


def scenarios(server: ScriptedServer) -> tuple[str, str]:
    """Register the neighbour's and the attacker's scenarios; their model names."""
    tag = secrets.token_hex(4)
    step = {"content": [{"type": "tool_use", "name": "run_command", "input": {"command": "true"}}]}
    done = {"content": [{"type": "text", "text": "done"}]}
    attack = {"type": "tool_use", "name": "run_command", "input": {"command": f"sleep {ATTACK_COMMAND_S}"}}
    neighbour = Scenario.model_validate({"name": f"neighbour-{tag}", "turns": [step] * NEIGHBOUR_STEPS + [done]})
    attacker = Scenario.model_validate({"name": f"attacker-{tag}", "turns": [{"content": [attack]}, done]})
    server.scenarios |= {neighbour.name: neighbour, attacker.name: attacker}
    return neighbour.name, attacker.name


@contextlib.contextmanager
def sampling(take: Callable[[], T], every_s: float, name: str) -> Iterator[list[T]]:
    """``take()`` every ``every_s`` on a thread of its own until the block ends; the samples, as they come."""
    samples: list[T] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append(take())
            stop.wait(every_s)

    thread = threading.Thread(target=sample, name=name, daemon=True)
    thread.start()
    try:
        yield samples
    finally:
        stop.set()
        thread.join(15)


@contextlib.contextmanager
def health_sampler(url: str) -> Iterator[list[float]]:
    """Time GET /healthz every 10 ms on a thread of its own until the block ends."""
    with httpx.Client(timeout=60) as http:  # a bound against a hang: how slow an answer is is the sample

        def timed() -> float:
            start = time.perf_counter()
            http.get(f"{url}/healthz").raise_for_status()
            return time.perf_counter() - start

        with sampling(timed, 0.01, "healthz-sampler") as samples:
            yield samples


def step_latencies(events: list[dict[str, Any]]) -> Sample:
    """Seconds between consecutive tool results (one model request and one command each; container start excluded)."""
    done = [e["ts"] for e in events if e["type"] in ("tool_result", "session_finished")]
    return Sample([later - earlier for earlier, later in itertools.pairwise(done)])


def start_flood(client: Any, sid: str, prefix: str, trickle_s: float, timeout: float = 30) -> subprocess.Popen[bytes]:
    """Once the attacker's long command runs, write into its toolbox's stdout from the host (needs root)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for container in client.containers.list(filters={"label": f"org.cubicle.session={sid}"}):
            top = container.top(ps_args="-o pid,args -ww")  # -ww: whole command lines
            processes = [dict(zip(top["Titles"], p, strict=True)) for p in top["Processes"] or []]
            toolbox = [p["PID"] for p in processes if p["COMMAND"].startswith("/usr/bin/python3 -I -S")]
            if toolbox and any(f"sleep {ATTACK_COMMAND_S}" in p["COMMAND"] for p in processes):
                return subprocess.Popen([sys.executable, "-c", FLOOD, toolbox[0], prefix, str(trickle_s)])
        time.sleep(0.05)
    raise TimeoutError(f"the attacker's command never started in session {sid}")


def measure(
    controller: Controller, client: Any, repos: tuple[Path, Path], models: tuple[str, str]
) -> tuple[FloodRun, FloodRun]:
    """The neighbour alone (baseline), then the neighbour beside the flooding attacker."""
    neighbour_model, attacker_model = models
    with health_sampler(controller.url) as health:
        events = controller.finished(controller.start(repos[0], neighbour_model))
    baseline = FloodRun(Sample(list(health)), step_latencies(events))
    attacker = controller.start(repos[1], attacker_model)
    writer = start_flood(client, attacker, '{"id":', TRICKLE_S)
    with health_sampler(controller.url) as health:
        events = controller.finished(controller.start(repos[0], neighbour_model))
        with contextlib.suppress(subprocess.TimeoutExpired):
            writer.wait(TRICKLE_S + 30)
    writer.kill()
    writer.wait()
    attacked = FloodRun(Sample(list(health)), step_latencies(events))
    results = [e for e in controller.finished(attacker) if e["type"] == "tool_result"]
    attacked.attacker = results[0] if results else {"is_error": False, "output": "(the attacker's call never ended)"}
    return baseline, attacked


def small_repo(root: Path, name: str) -> Path:
    """A repository of one README, owned by the sandbox's user when we are root."""
    repo = root / name
    repo.mkdir()
    (repo / "README.md").write_text(f"# {name}\n")
    if os.geteuid() == 0:
        os.chown(repo, 1000, 1000)
        os.chown(repo / "README.md", 1000, 1000)
    return repo


def table(report: Report, client: Any, root: Path) -> None:
    """Add the flood table to ``report``: the neighbour and /healthz, without and during the attack."""
    title = "Channel flood: one sandbox writes 63 MiB without a newline into its toolbox's stream, then 1 byte/ms"
    header = ["", "neighbour step p50", "neighbour step p95", "/healthz p50", "/healthz p99", "attacker's call"]
    if os.geteuid() != 0:
        report.extra.append((title, header, [["not measured: writing into the toolbox from the host needs root"]]))
        return
    server = ScriptedServer([Scenario(name="default", turns=[])])
    with serve_in_thread(server.app) as url:
        controller = Controller(url, root, "bench")
        try:
            baseline, attacked = measure(
                controller, client, (small_repo(root, "flood-n"), small_repo(root, "flood-a")), scenarios(server)
            )
        finally:
            controller.close()
    rows = []
    for name, run in (("neighbour alone (baseline)", baseline), ("during the flood", attacked)):
        outcome = "" if run.attacker is None else ("error result" if run.attacker["is_error"] else "**no error**")
        steps, health = run.neighbour_steps, run.health
        rows.append([name, ms(steps.p50), ms(steps.p95), ms(health.p50), ms(health.pct(0.99)), outcome])
    report.extra.append(
        (title + f" (targets: /healthz p99 ≤ {ms(HEALTH_P99_S)}, neighbour p50 ≤ {STEP_RATIO}×)", header, rows)
    )
    p99, ratio = attacked.health.pct(0.99), attacked.neighbour_steps.p50 / baseline.neighbour_steps.p50
    report.check(p99 <= HEALTH_P99_S, f"/healthz p99 {ms(p99)} during the channel flood > {ms(HEALTH_P99_S)}")
    report.check(ratio <= STEP_RATIO, f"a neighbour's steps took {ratio:.2f}× as long (p50) during the flood")
    ratio = attacked.neighbour_steps.p50 / baseline.neighbour_steps.p50
    report.check(ratio <= 2.0, f"channel flood: neighbour step p50 {ratio:.2f}× its baseline (target ≤ 2×)")
    p99 = attacked.health.pct(0.99)
    report.check(p99 < 0.1, f"channel flood: /healthz p99 {ms(p99)} (target < 100 ms)")
