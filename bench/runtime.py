"""`python -m bench.runtime` (and `python -m bench --runtime runsc`): the sandbox under each runtime, side by side.

For runc and runsc in the same run: session ready over the layer (toolbox answering) against a bare
``docker run --runtime R IMAGE true`` of the same image, read_file, run_command("true"), a Python start
the size of a test run's first step (``python3 -c 'import json, sqlite3'``), and teardown. Rounds
interleave the runtimes, so a busy moment of the machine costs both alike. Targets (runsc): read_file
p50 ≤ 2 ms, session ready ≤ 1.2 times its bare ``docker run``.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

from bench.measure import Report, Sample, ms, repetitions, time_async
from bench.rows import bare_run, make_repo, sandbox, section_main
from controller.sandbox import isolation as runtimes
from controller.wire.protocol import ReadFile, RunCommand

READ_TARGET_S = 0.002
READY_TARGET = 1.2
IMPORTS = "python3 -c 'import json, sqlite3'"


def _bare(client: Any, image: str, runtime: str) -> None:
    bare_run(client, image, runtime).remove(force=True)


async def table(report: Report, client: Any, image: str, root: Path, quick: bool, names: tuple[str, ...] = ()) -> None:
    names = names or (runtimes.RUNC, runtimes.GVISOR)
    repo = make_repo(root, "runtimes")
    rounds, calls, commands = (repetitions(n) for n in ((4, 200, 20) if quick else (8, 500, 50)))
    started = time.perf_counter()
    ready: dict[str, list[float]] = {name: [] for name in names}
    bare: dict[str, list[float]] = {name: [] for name in names}
    down: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(rounds):
        for name in names:
            box = sandbox(client, image, repo, runtime=name)
            start = time.perf_counter()
            await box.start()
            ready[name].append(time.perf_counter() - start)
            start = time.perf_counter()
            await box.stop()
            down[name].append(time.perf_counter() - start)
            start = time.perf_counter()
            await asyncio.to_thread(_bare, client, image, name)
            bare[name].append(time.perf_counter() - start)
    reads: dict[str, Sample] = {}
    trues: dict[str, Sample] = {}
    imports: dict[str, Sample] = {}
    for name in names:
        box = sandbox(client, image, repo, runtime=name)
        try:
            await box.start()
            reads[name] = await time_async(lambda b=box: b.call(ReadFile(args={"path": "README.md"}), 30), calls)
            trues[name] = await time_async(lambda b=box: b.call(RunCommand(args={"command": "true"}), 30), commands)
            imports[name] = await time_async(lambda b=box: b.call(RunCommand(args={"command": IMPORTS}), 60), commands)
        finally:
            await box.stop()
    rows = []
    for name in names:
        ours, base = Sample(ready[name]), Sample(bare[name])
        ready_met = read_met = ""
        if name == runtimes.GVISOR:
            ready_ok = report.check(
                ours.p50 <= READY_TARGET * base.p50,
                f"session ready under runsc {ms(ours.p50)} > {READY_TARGET} × docker run --runtime runsc {ms(base.p50)}",
            )
            read_ok = report.check(
                reads[name].p50 <= READ_TARGET_S, f"read_file under runsc p50 {ms(reads[name].p50)} > 2 ms"
            )
            ready_met, read_met = ("yes" if ready_ok else "**no**"), ("yes" if read_ok else "**no**")
        rows += [
            [
                name,
                "session ready (toolbox answering)",
                ms(ours.p50),
                ms(ours.p95),
                f"{ms(base.p50)} (bare docker run, ratio {ours.p50 / base.p50:.2f})",
                ready_met,
            ],
            [name, "read_file", ms(reads[name].p50), ms(reads[name].p95), "", read_met],
            [name, 'run_command("true")', ms(trues[name].p50), ms(trues[name].p95), "", ""],
            [name, f"run_command({IMPORTS!r})", ms(imports[name].p50), ms(imports[name].p95), "", ""],
            [name, "teardown", ms(Sample(down[name]).p50), ms(Sample(down[name]).p95), "", ""],
        ]  # fmt: skip - a table
    report.extra.append(
        (
            f"Runtimes: {rounds} starts each, {calls} reads, {commands} of each command "
            f"({time.perf_counter() - started:.0f} s in all)",
            ["runtime", "measurement", "p50", "p95", "baseline", "target met"],
            rows,
        )
    )


def main() -> int:
    return section_main("runtime", __doc__, "fewer rounds and calls", table)


if __name__ == "__main__":
    sys.exit(main())
