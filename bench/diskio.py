"""Disk I/O: the host's fsync latency while one sandbox writes as fast as it can, throttled and not.

A probe on the host writes 4 KiB and fsyncs it, in a loop, into a file beside the sessions' layers
(the same disk as their quota images), and records each fsync's latency: alone (the baseline), then
while a sandbox with a disk quota runs ``dd`` in a loop: with ``conv=fsync`` under the default
limits (``io_mbps``, ``io_iops``), the same with the limits at the server's maximum (unthrottled, for
comparison), and buffered (no fsync) under the default limits, which cgroup v1 cannot throttle.
``python -m bench.diskio`` prints this table alone.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

from bench.disk import sandbox
from bench.measure import Report, Sample, ms, smoke
from bench.rows import LIMITS, make_repo, section_main
from controller.config import Settings
from controller.sandbox import mounters
from controller.sandbox.docker import DockerSandbox
from controller.wire import protocol
from controller.workspace.layer import DiskQuota
from controller.workspace.manager import Workspaces

QUOTA = DiskQuota(mb=2048, inodes=10_000)
TARGET = 3.0
"""Host fsync p99 while a throttled sandbox writes flat out, at most this many times the idle p99."""
FSYNC_LOOP = "while true; do dd if=/dev/zero of=/workspace/blob bs=1M count=256 conv=fsync 2>/dev/null; done"
BUFFERED_LOOP = "while true; do dd if=/dev/zero of=/workspace/blob bs=1M count=256 2>/dev/null; done"


def _probe(path: Path, seconds: float) -> Sample:
    """4 KiB written and fsynced to ``path`` again and again for ``seconds``; each fsync's latency."""
    latencies: list[float] = []
    block = os.urandom(4096)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            os.pwrite(fd, block, 0)
            start = time.perf_counter()
            os.fsync(fd)
            latencies.append(time.perf_counter() - start)
            time.sleep(0.005)
    finally:
        os.close(fd)
    return Sample(latencies)


async def _while_writing(box: DockerSandbox, loop: str, probe: Path, seconds: float) -> Sample:
    """The probe's latencies while ``loop`` runs in the sandbox (started a second before, stopped after)."""
    writing = asyncio.create_task(
        box.call(protocol.call("run_command", command=loop, timeout_s=int(seconds) + 30), 120)
    )
    await asyncio.sleep(1.0)
    try:
        return await asyncio.to_thread(_probe, probe, seconds)
    finally:
        writing.cancel()
        await asyncio.gather(writing, return_exceptions=True)


async def table(report: Report, client: Any, image: str, root: Path, quick: bool) -> None:
    """Add the disk I/O table to ``report``."""
    seconds = 1.0 if smoke() else 5.0 if quick else 10.0
    repo = make_repo(root, "diskio")
    data = root / "diskio-data"
    quotas = mounters.choose("auto", lambda: client, image, data, Settings().docker_host)
    assert quotas is not None
    workspaces = Workspaces(data, None, quotas)
    top = Settings().max_limits
    limited = sandbox(client, image, repo, workspaces, QUOTA)
    at_maximum = LIMITS.model_copy(update={"io_mbps": top.io_mbps, "io_iops": top.io_iops})
    unlimited = sandbox(client, image, repo, workspaces, QUOTA, at_maximum)
    probe = data / "fsync-probe"
    rows = []
    try:
        await asyncio.gather(limited.start(), unlimited.start())
        idle = await asyncio.to_thread(_probe, probe, seconds)
        runs = [
            (f"dd conv=fsync, throttled ({LIMITS.io_mbps} MiB/s, {LIMITS.io_iops} IOPS)", limited, FSYNC_LOOP),
            ("dd conv=fsync, limits at the server's maximum", unlimited, FSYNC_LOOP),
            ("buffered dd, throttled (cgroup v1 cannot bound it)", limited, BUFFERED_LOOP),
        ]
        rows.append(["host idle (baseline)", ms(idle.p50), ms(idle.pct(0.99)), "1.0×"])
        measured = {}
        for name, box, loop in runs:
            sample = await _while_writing(box, loop, probe, seconds)
            measured[name] = sample
            rows.append([name, ms(sample.p50), ms(sample.pct(0.99)), f"{sample.pct(0.99) / idle.pct(0.99):.1f}×"])
    finally:
        await asyncio.gather(limited.stop(), unlimited.stop(), return_exceptions=True)
        for box in (limited, unlimited):
            workspaces.discard(box.session_id)
        workspaces.close()
    title = "Disk I/O: the host's fsync of 4 KiB (beside the layers) while one sandbox with a quota writes flat out"
    report.extra.append((title, ["", "host fsync p50", "host fsync p99", "p99 against idle"], rows))
    ratio = measured[runs[0][0]].pct(0.99) / idle.pct(0.99)
    report.check(
        ratio <= TARGET, f"disk I/O: host fsync p99 {ratio:.1f}× idle while a throttled sandbox writes (target ≤ 3×)"
    )


def main() -> int:
    return section_main("diskio", __doc__, "5 s per row instead of 10", table)


if __name__ == "__main__":
    sys.exit(main())
