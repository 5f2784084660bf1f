"""The controller while it walks a hostile layer at a turn's end: its memory, /healthz and a neighbour session.

A real `cubicle serve` runs as its own process. One session (the attacker, at ``cpus=1``) runs
one command that makes LINKS hard links, its files carrying XATTR_BYTES of user xattrs each
(a name costs the agent a few bytes of disk and no inode), and ends its turn: the controller
then checkpoints the layer and lists its changes. As soon as the attacker's command has
returned, a neighbour session runs 40 short steps, and /healthz is sampled every 10 ms. The
same neighbour run without the attacker is the baseline. The controller's memory is read from
/proc: the server process's peak (VmHWM) and, sampled every 50 ms, the resident memory of the
server with all its children (where the walk runs). ``python -m bench.layerwalk`` prints this
table alone.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.flood import Controller, health_sampler, sampling, small_repo, step_latencies
from bench.measure import Report, Sample, ms, smoke
from bench.rows import section_main
from controller.agent.scripted import Scenario, ScriptedServer, serve_in_thread

LINKS = 150_000
XATTR_BYTES = 4000
"""As much as one ext4 xattr block holds beside its header: 4 KB."""
NEIGHBOUR_STEPS = 40


def links() -> int:
    """LINKS, or 2,000 in smoke mode (the walk then proves it runs, not what it costs)."""
    return 2000 if smoke() else LINKS


TARGET_RSS_MB = 200
TARGET_HEALTH_S = 0.25
TARGET_NEIGHBOUR = 1.5


def make_links(count: int) -> str:
    """The attacker's command: ``count`` hard links, their files carrying the xattrs."""
    return f"""python3 - <<'EOF'
import os
os.mkdir("links")
source = None
for i in range({count}):
    if i % 60000 == 0:  # ext4 allows 65,000 links to one inode
        source = f"links/{{i}}"
        with open(source, "w") as f:
            f.write("x")
        os.setxattr(source, "user.pad", b"p" * {XATTR_BYTES})
        continue
    os.link(source, f"links/{{i}}")
print("made", {count}, "names")
EOF"""


@dataclass
class WalkRun:
    health: Sample
    neighbour: float
    """Seconds from the neighbour's first tool result to its end: its 40 steps."""
    server_peak_mb: float = 0.0
    """The server process's VmHWM growth over the run."""
    tree_peak_mb: float = 0.0
    """The peak growth of the server's and its children's resident memory, sampled."""
    walk_s: float = 0.0
    """The attacker's turn end: its command's result to its changes event."""
    attacker: str = ""


def _status_kb(pid: int, field: str) -> int:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _tree_rss_kb(pid: int) -> int:
    """Resident memory of ``pid`` and every process below it."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
                children.setdefault(int(stat[1]), []).append(int(entry))
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        total += _status_kb(current, "VmRSS")
        todo += children.get(current, [])
    return total


def scenarios(server: ScriptedServer, tag: str) -> tuple[str, str]:
    step = {"content": [{"type": "tool_use", "name": "run_command", "input": {"command": "true"}}]}
    done = {"content": [{"type": "text", "text": "done"}]}
    attack = {"content": [{"type": "tool_use", "name": "run_command", "input": {"command": make_links(links())}}]}
    neighbour = Scenario.model_validate({"name": f"walk-n-{tag}", "turns": [step] * NEIGHBOUR_STEPS + [done]})
    attacker = Scenario.model_validate({"name": f"walk-a-{tag}", "turns": [attack, done]})
    server.scenarios |= {neighbour.name: neighbour, attacker.name: attacker}
    return neighbour.name, attacker.name


def _neighbour_time(events: list[dict[str, Any]]) -> float:
    return sum(step_latencies(events).values)


def _wait_for_result(controller: Controller, sid: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with controller.http.stream("GET", f"/v1/sessions/{sid}/events") as response:
            for line in response.iter_lines():
                if line.startswith("event: tool_result"):
                    return
        time.sleep(0.05)
    raise TimeoutError(f"the attacker's command never returned in session {sid}")


def measure(controller: Controller, repos: tuple[Path, Path], models: tuple[str, str]) -> tuple[WalkRun, WalkRun]:
    neighbour_model, attacker_model = models
    pid = controller.process.pid
    with health_sampler(controller.url) as health:
        events = controller.finished(controller.start(repos[0], neighbour_model))
    baseline = WalkRun(Sample(list(health)), _neighbour_time(events))
    hwm, rss = _status_kb(pid, "VmHWM"), _tree_rss_kb(pid)
    response = controller.http.post(
        "/v1/sessions", json={"repo": str(repos[1]), "task": "go", "model": attacker_model, "limits": {"cpus": 1}}
    )
    response.raise_for_status()
    attacker = str(response.json()["id"])
    with (
        sampling(lambda: _tree_rss_kb(pid), 0.05, "memory-sampler") as memory,
        health_sampler(controller.url) as health,
    ):
        _wait_for_result(controller, attacker)
        events = controller.finished(controller.start(repos[0], neighbour_model))
        attacked_events = controller.finished(attacker, timeout=600)
    attacked = WalkRun(Sample(list(health)), _neighbour_time(events))
    attacked.server_peak_mb = (_status_kb(pid, "VmHWM") - hwm) / 1024
    attacked.tree_peak_mb = (max(memory, default=rss) - rss) / 1024
    result = next(e for e in attacked_events if e["type"] == "tool_result")
    changes = next((e for e in attacked_events if e["type"] == "changes"), None)
    attacked.walk_s = (changes["ts"] - result["ts"]) if changes else float("nan")
    finished = attacked_events[-1]
    files = changes["summary"]["files"] if changes else 0
    if files < links():
        raise RuntimeError(f"the attacker's command made {files} files, not {links()}: {result['output'][-500:]!r}")
    attacked.attacker = f"{finished.get('reason')}, {files:,} files listed"
    return baseline, attacked


async def table(report: Report, client: Any, image: str, root: Path, quick: bool) -> None:
    """Add the layer-walk table to ``report``."""
    del client, quick  # the server process makes its own sandboxes; one run is the measurement
    title = (
        f"Turn-end walk of a hostile layer: {links():,} hard links with {XATTR_BYTES:,} bytes of xattrs "
        f"(attacker at cpus=1), beside a neighbour's {NEIGHBOUR_STEPS} steps"
    )
    header = [
        "",
        "neighbour's steps",
        "/healthz p50",
        "/healthz p99",
        "server RSS growth",
        "server + children RSS growth",
        "attacker's turn end",
        "attacker",
    ]
    server = ScriptedServer([Scenario(name="default", turns=[])])
    with serve_in_thread(server.app) as url:
        controller = Controller(url, root, "bench", data="walk-data", image=image)
        try:
            models = scenarios(server, os.urandom(4).hex())
            baseline, attacked = measure(controller, (small_repo(root, "walk-n"), small_repo(root, "walk-a")), models)
        finally:
            controller.close()
    rows = [
        [
            "neighbour alone (baseline)",
            f"{baseline.neighbour:.2f} s",
            ms(baseline.health.p50),
            ms(baseline.health.pct(0.99)),
            "",
            "",
            "",
            "",
        ],
        [
            "during the attacker's turn end",
            f"{attacked.neighbour:.2f} s",
            ms(attacked.health.p50),
            ms(attacked.health.pct(0.99)),
            f"{attacked.server_peak_mb:.0f} MB",
            f"{attacked.tree_peak_mb:.0f} MB",
            f"{attacked.walk_s:.1f} s",
            attacked.attacker,
        ],
    ]  # fmt: skip - a table
    report.extra.append((title, header, rows))
    ratio = attacked.neighbour / baseline.neighbour
    report.check(ratio <= TARGET_NEIGHBOUR, f"layer walk: neighbour's steps {ratio:.2f}× alone (target ≤ 1.5×)")
    p99 = attacked.health.pct(0.99)
    report.check(p99 <= TARGET_HEALTH_S, f"layer walk: /healthz p99 {ms(p99)} (target ≤ 250 ms)")
    report.check(
        attacked.tree_peak_mb <= TARGET_RSS_MB,
        f"layer walk: controller RSS growth {attacked.tree_peak_mb:.0f} MB with its walk's child (target ≤ 200 MB)",
    )


def main() -> int:
    return section_main("layerwalk", __doc__, "the same (one run is the measurement)", table)


if __name__ == "__main__":
    sys.exit(main())
