"""Responsiveness: how soon Cubicle acts when it must act at once, each beside a baseline measured in the same run.

Every row was once a test's wall-clock assertion (a cancel within a second, a stop within 2 s, /healthz under a
second while a sandbox forks without end). On a shared machine a test can only say that these happen, so the tests
now do, with deadlines against hangs alone; the bound each asserted is its row's target here, where the machine's
load shows in the baseline beside it. A target is met when the p95 is within it.

- **Sandbox** (one runc sandbox): a running command cancelled, until its answer; a command that closes its output
  and exits 10 ms later (how soon the toolbox sees the exit); a TERM-ignoring loop past its 2 s timeout; the
  container killed from outside mid-call, until the call's answer; a silent toolbox past the controller's 1 s
  deadline; ``stop`` of a sandbox with a process left in the background; ``true`` beside a zombie another command
  left; a command whose background child holds its pipes.
- **Controller** (a ``cubicle serve`` with a scripted model): ``POST /cancel`` of a session mid-command, until the
  answer; /healthz while a session's sandbox (one CPU) runs a fork bomb, 16 CPU spinners, or fills its tmpfs.
- **CLI**: Ctrl-C typed at ``cubicle run --approve``'s prompt, until the process exits (its sandbox removed).

``python -m bench.responsiveness`` prints this table alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.measure import Report, ms
from bench.responsiveness import prompt, sandbox, serve
from bench.responsiveness.measured import Measured


async def table(report: Report, client: Any, image: str, root: Path, quick: bool) -> None:
    """Add the responsiveness table to ``report``."""
    measured: list[Measured] = []
    for part in (sandbox.rows, serve.api_cancel, serve.health_during_attacks, prompt.ctrl_c):
        measured += await part(client, image, root, quick)
    report.extra.append(
        (
            "Responsiveness: what the tests once timed (target: p95 within the bound)",
            ["", "p50", "p95", "baseline", "baseline p50", "bound", "met"],
            [_cells(report, m) for m in measured],
        )
    )


def _cells(report: Report, m: Measured) -> list[str]:
    p95 = m.ours.p95
    met = report.check(p95 <= m.target_s, f"{m.name}: p95 {ms(p95)} > {ms(m.target_s)}")
    baseline = ms(m.baseline.p50) if m.baseline is not None else ""
    return [
        m.name,
        ms(m.ours.p50),
        ms(p95),
        m.baseline_name,
        baseline,
        f"≤ {ms(m.target_s)}",
        "yes" if met else "**no**",
    ]
