"""`python -m bench`: measure Cubicle against baselines run side by side, and print markdown tables.

It needs a Docker engine and the sandbox image (and root for the channel-flood table; a
PostgreSQL server for the stores' PostgreSQL rows, which say they were skipped without one). It
exits non-zero only when it cannot run; targets that are missed are listed under the
tables. Each section's wall time goes to stderr as it ends. The default run takes four to
five minutes on two busy cores; ``--full`` adds the 50- and 100-session and the
50-container concurrency rows (several minutes more).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from bench import (
    contents,
    context,
    disk,
    diskio,
    egress,
    environment,
    flood,
    layerwalk,
    live,
    mcp,
    page,
    rows,
    runtime,
    stores,
    viewer,
    workspace,
)
from bench.measure import Report
from controller.config import DEFAULT_IMAGE, Settings
from controller.errors import CubicleError
from controller.sandbox import engine, images, owners


def machine(client: object) -> str:
    memory_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    version = client.version()["Version"]  # type: ignore[attr-defined]
    return f"{os.cpu_count()} cores, {memory_gb:.0f} GiB memory, Docker {version}, Python {platform.python_version()}, {platform.machine()}"


async def run(args: argparse.Namespace) -> Report:
    client = engine.connect(Settings().docker_host)
    images.ensure(client, args.image, auto_build=True)
    report = Report()
    sizes = [10, 50, 100] if args.full else [10]
    exec_sizes = [10, 50] if args.full else [10]
    began = time.perf_counter()

    async def section(name: str, work: Awaitable[Any]) -> None:
        start = time.perf_counter()
        await work
        print(f"bench: {name} took {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)

    with rows.workdir() as tmp:
        root = Path(tmp)
        try:
            await section("tool overhead", rows.tool_overhead(report, client, args.image, root, args.quick))
            await section("MCP", mcp.table(report, client, args.image, root, args.quick))
            await section("command tail", rows.command_tail_latency(report, client, args.image, root, args.quick))
            await section("ready and teardown", rows.ready_and_teardown(report, client, args.image, root, args.quick))
            await section("environment", environment.table(report, client, args.image, root, args.quick))
            await section("workspace layer", workspace.table(report, client, args.image, root, args.quick))
            await section("session start, content ids", asyncio.to_thread(contents.table, report, args.quick))
            await section("disk quota", disk.table(report, client, args.image, root, args.quick))
            await section("disk I/O", diskio.table(report, client, args.image, root, args.quick))
            await section("output flood", rows.output_flood(report, client, args.image, root))
            await section("live output", live.table(report, client, args.image, root, args.quick))
            await section("concurrency", rows.concurrency(report, client, args.image, root, sizes, exec_sizes))
            await section("egress proxy", egress.table(report, client, args.image, root, args.quick))
            await section("peer", rows.peer(report, client, args.image, root, args.quick))
            await section("channel flood", asyncio.to_thread(flood.table, report, client, root))
            await section("layer walk", layerwalk.table(report, client, args.image, root, args.quick))
            await section("SSE followers", viewer.table(report, client, args.image, root, args.quick))
            await section("stores", stores.table(report, client, args.image, root, args.quick))
            await section("viewer page", asyncio.to_thread(page.table, report, args.quick))
            await section("context", context.table(report))
            if args.runtime:
                names = tuple(dict.fromkeys(["runc", *args.runtime]))
                await section("runtimes", runtime.table(report, client, args.image, root, args.quick, names))
        finally:
            owners.sweep(client, rows.INSTANCE, everything=False)
            for container in client.containers.list(all=True, filters={"label": f"{owners.MANAGED}=bench"}):
                container.remove(force=True)
    print(f"bench: everything took {time.perf_counter() - began:.0f} s", file=sys.stderr)
    print(f"Machine: {machine(client)}\n")
    return report


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument(
        "--full", action="store_true", help="also N=50 and N=100 sessions and 50 docker-exec containers"
    )
    parser.add_argument("--image", default=DEFAULT_IMAGE, help="sandbox image")
    parser.add_argument(
        "--runtime", action="append", default=[], metavar="NAME",
        help="also measure the sandbox under this OCI runtime (e.g. runsc), beside runc in the same run",
    )  # fmt: skip
    args = parser.parse_args()
    try:
        report = asyncio.run(run(args))
    except CubicleError as err:
        print(f"bench cannot run: {err}", file=sys.stderr)
        return 1
    print(report.render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
