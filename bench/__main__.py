"""`python -m bench`: measure Cubicle against baselines run side by side, and print a markdown table.

It needs a Docker engine and the sandbox image. It exits non-zero only when it cannot
run; targets that are missed are listed under the table.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
from pathlib import Path

from bench import context, flood, rows
from bench.measure import Report
from controller import engine, images, owners
from controller.config import DEFAULT_IMAGE, Settings
from controller.errors import CubicleError


def machine(client: object) -> str:
    memory_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    version = client.version()["Version"]  # type: ignore[attr-defined]
    return f"{os.cpu_count()} cores, {memory_gb:.0f} GiB memory, Docker {version}, Python {platform.python_version()}, {platform.machine()}"


async def run(args: argparse.Namespace) -> Report:
    client = engine.connect(Settings().docker_host)
    images.ensure(client, args.image, auto_build=True)
    report = Report()
    sizes = [10] if args.quick else [10, 50, 100]
    exec_sizes = [10] if args.quick else [10, 50]
    with rows.workdir() as tmp:
        root = Path(tmp)
        try:
            await rows.tool_overhead(report, client, args.image, root, args.quick)
            await rows.command_tail_latency(report, client, args.image, root, args.quick)
            await rows.ready_and_teardown(report, client, args.image, root, args.quick)
            await rows.output_flood(report, client, args.image, root)
            await rows.concurrency(report, client, args.image, root, sizes, exec_sizes)
            await rows.peer(report, client, args.image, root, args.quick)
            await asyncio.to_thread(flood.table, report, client, root)
            await context.table(report)
        finally:
            owners.sweep(client, rows.INSTANCE, everything=False)
            for container in client.containers.list(all=True, filters={"label": f"{owners.MANAGED}=bench"}):
                container.remove(force=True)
    print(f"Machine: {machine(client)}\n")
    return report


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions and only N=10 for concurrency")
    parser.add_argument("--image", default=DEFAULT_IMAGE, help="sandbox image")
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
