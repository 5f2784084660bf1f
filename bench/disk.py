"""Disk-quota rows: a session whose layer is its own loop-mounted filesystem, against its baselines.

Session ready: each round starts one of each, interleaved, to the toolbox's first answer and
stops it again:

* a sandbox whose layer has a disk quota (the filesystem is mounted at the start and
  unmounted at the stop, as in a session; ``CUBICLE_DISK_QUOTA``'s ``auto`` picks who mounts);
* the same sandbox without a quota (the layer a plain directory of the data directory);
* a bare ``docker run`` of the image (``true``, to its exit).

Write throughput: ``dd`` of 256 MiB with ``conv=fsync`` into ``/workspace``, inside the quota and
without one, alternating, on sandboxes started once.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.measure import Report, Row, Sample, ms, repetitions, smoke
from bench.rows import INSTANCE, LIMITS, READY_TARGET, bare_run, make_repo, section_main
from controller.config import Settings
from controller.environment.inputs import definition_files
from controller.sandbox import mounters
from controller.sandbox.docker import DockerSandbox
from controller.sandbox.sandboxes import Deployment
from controller.wire import protocol
from controller.wire.limits import Limits
from controller.wire.protocol import CommandResult
from controller.workspace.layer import DiskQuota
from controller.workspace.manager import Workspaces

THROUGHPUT_TARGET = 0.8
QUOTA = DiskQuota(mb=1024, inodes=100_000)
WRITE = "dd if=/dev/zero of=/workspace/blob bs=1M count=256 conv=fsync 2>&1 | tail -n 1; rm -f /workspace/blob"


def sandbox(
    client: Any, image: str, repo: Path, workspaces: Workspaces, quota: DiskQuota | None, limits: Limits = LIMITS
) -> DockerSandbox:
    """A sandbox over a fresh layer of ``repo`` (with ``quota``, on its own filesystem), as a session gets one."""
    session_id = "bench-" + secrets.token_hex(4)
    layer = workspaces.create(session_id, repo, quota, definition=definition_files(repo))
    return DockerSandbox(
        lambda: client,
        layer=layer,
        session_id=session_id,
        limits=limits,
        deployment=Deployment(image, INSTANCE),
        holder=workspaces,
    )


async def table(report: Report, client: Any, image: str, root: Path, quick: bool) -> None:
    repo = make_repo(root, "disk")
    data = root / "disk-data"
    quotas = mounters.choose("auto", lambda: client, image, data, Settings().docker_host)
    assert quotas is not None
    workspaces = Workspaces(data, None, quotas)
    quota_box = sandbox(client, image, repo, workspaces, QUOTA)
    plain_box = sandbox(client, image, repo, workspaces, None)
    try:
        await _ready(report, client, image, quota_box, plain_box, quotas.mounter.name, repetitions(6 if quick else 10))
        await _throughput(report, quota_box, plain_box, 1 if smoke() else 2 if quick else 4)
    finally:
        for box in (quota_box, plain_box):
            await box.stop()
            await asyncio.to_thread(workspaces.discard, box.session_id)
        await asyncio.to_thread(workspaces.close)


async def _ready(
    report: Report, client: Any, image: str, quota_box: DockerSandbox, plain_box: DockerSandbox, mounter: str, n: int
) -> None:
    ready: dict[str, list[float]] = {"quota": [], "plain": [], "bare": []}
    for _ in range(n):
        for name, box in (("quota", quota_box), ("plain", plain_box)):
            start = time.perf_counter()
            await box.start()
            ready[name].append(time.perf_counter() - start)
            await box.stop()
        start = time.perf_counter()
        container = await asyncio.to_thread(bare_run, client, image)
        ready["bare"].append(time.perf_counter() - start)
        await asyncio.to_thread(container.remove, force=True)
    ours, plain, base = Sample(ready["quota"]), Sample(ready["plain"]), Sample(ready["bare"])
    met = report.check(
        ours.p50 <= READY_TARGET * base.p50,
        f"session ready with a disk quota {ms(ours.p50)} > {READY_TARGET} × bare docker run {ms(base.p50)}",
    )
    report.rows.append(
        Row(
            f"session ready with a disk quota (mounted by: {mounter})",
            ours,
            "docker run image true",
            base,
            f"≤ {READY_TARGET}×",
            met,
        )
    )
    report.rows.append(Row("session ready without a quota (same run)", plain, "docker run image true", base))


async def _throughput(report: Report, quota_box: DockerSandbox, plain_box: DockerSandbox, rounds: int) -> None:
    speeds: dict[str, list[float]] = {"quota": [], "plain": []}
    for _ in range(rounds):
        for name, box in (("quota", quota_box), ("plain", plain_box)):
            speeds[name].append(await _write_mb_s(box))
    ours, plain = statistics.median(speeds["quota"]), statistics.median(speeds["plain"])
    ratio = ours / plain
    met = report.check(
        ratio >= THROUGHPUT_TARGET,
        f"write throughput in the quota {ours:.0f} MB/s < {THROUGHPUT_TARGET:.0%} of without one ({plain:.0f} MB/s)",
    )
    report.extra.append(
        (
            f"Disk quota: write throughput into /workspace (dd 256 MiB, conv=fsync; median of {rounds})",
            ["", "MB/s", "baseline", "baseline MB/s", "ratio", "target", "met"],
            [
                [
                    "inside a 1 GiB quota (loop-mounted ext4)",
                    f"{ours:.0f}",
                    "the same layer without a quota",
                    f"{plain:.0f}",
                    f"{ratio:.2f}",
                    f"≥ {THROUGHPUT_TARGET:.0%}",
                    "yes" if met else "**no**",
                ]
            ],
        )
    )


async def _write_mb_s(box: DockerSandbox) -> float:
    """dd's own rate (it prints bytes and seconds) of one 256 MiB write, fsync included."""
    result = await box.call(protocol.call("run_command", command=WRITE, timeout_s=120), 150)
    assert isinstance(result, CommandResult) and result.exit_code == 0, result
    found = re.search(r"(\d+) bytes .* copied, ([\d.]+) s", result.stdout.text)
    assert found, result.stdout.text
    return int(found.group(1)) / float(found.group(2)) / 1e6


def main() -> int:
    return section_main("disk", __doc__, "6 starts and 2 writes instead of 10 and 4", table)


if __name__ == "__main__":
    sys.exit(main())
