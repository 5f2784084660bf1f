"""`python -m bench`: measure Cubicle against baselines run side by side, and print markdown tables.

Each section prints its tables as it ends (its wall time goes to stderr). ``--list`` names the
sections; ``--section NAME`` (repeatable) runs only those; ``--json PATH`` also writes every row
with a stable id, its unit, p50/p95/p99 where it has them, the baseline measured in the same run,
the ratio, the target and whether it was met. Most sections need a Docker engine and the sandbox
image (the channel flood also root, the stores' PostgreSQL rows a server at
``CUBICLE_BENCH_DATABASE_URL``, the viewer page Chromium, the git remotes Debian's nginx and fcgiwrap); ``cli``, ``contents``, ``context`` and
``page`` need none. It exits non-zero when it cannot run or a section fails (the others still
run and print their tables); targets that are missed are listed under each section's tables and
again at the end. The default run takes four to five minutes on two busy cores; ``--quick`` does
fewer repetitions, ``--full`` adds the 50- and 100-session and the 50-container concurrency rows,
and ``--smoke`` runs every section with a few repetitions and small sizes, to show that each still
runs (CI runs it; its numbers mean nothing).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import (
    cli,
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
    remotes,
    responsiveness,
    rows,
    runtime,
    stores,
    viewer,
    workspace,
)
from bench.measure import Report, set_smoke
from controller.config import DEFAULT_IMAGE, Settings
from controller.errors import CubicleError
from controller.sandbox import engine, images, owners


@dataclass
class Run:
    """What every section is given: the report, the engine's client (None when no chosen section needs it), the
    image, a work directory and the flags."""

    report: Report
    client: Any
    image: str
    root: Path
    args: argparse.Namespace

    @property
    def quick(self) -> bool:
        return bool(self.args.quick or self.args.smoke)


@dataclass(frozen=True)
class Section:
    name: str
    """Its stable id: ``--section NAME``, and the first part of each of its rows' ids in ``--json``."""
    title: str
    engine: bool
    """Whether it needs the Docker engine and the sandbox image."""
    measure: Callable[[Run], Awaitable[Any]]


def _sandboxed(table: Callable[..., Awaitable[None]]) -> Callable[[Run], Awaitable[None]]:
    """A section of the usual form ``table(report, client, image, root, quick)``."""
    return lambda r: table(r.report, r.client, r.image, r.root, r.quick)


SECTIONS = (
    Section(
        "cli",
        "CLI start: cubicle --version, --help, sessions, show, changes",
        False,
        lambda r: asyncio.to_thread(cli.table, r.report, r.quick),
    ),
    Section("tool-overhead", "tool overhead", True, _sandboxed(rows.tool_overhead)),
    Section("mcp", "MCP", True, _sandboxed(mcp.table)),
    Section("command-tail", "command tail", True, _sandboxed(rows.command_tail_latency)),
    Section("ready", "ready and teardown", True, _sandboxed(rows.ready_and_teardown)),
    Section("environment", "environment", True, _sandboxed(environment.table)),
    Section("workspace", "workspace layer", True, _sandboxed(workspace.table)),
    Section("remotes", "sessions on a git remote", True, _sandboxed(remotes.table)),
    Section(
        "contents", "session start, content ids", False, lambda r: asyncio.to_thread(contents.table, r.report, r.quick)
    ),
    Section("disk", "disk quota", True, _sandboxed(disk.table)),
    Section("diskio", "disk I/O", True, _sandboxed(diskio.table)),
    Section("output-flood", "output flood", True, lambda r: rows.output_flood(r.report, r.client, r.image, r.root)),
    Section("live", "live output", True, _sandboxed(live.table)),
    Section(
        "concurrency",
        "concurrency",
        True,
        lambda r: rows.concurrency(
            r.report,
            r.client,
            r.image,
            r.root,
            *(([2], [2]) if r.args.smoke else ([10, 50, 100], [10, 50]) if r.args.full else ([10], [10])),
        ),
    ),
    Section("egress", "egress proxy", True, _sandboxed(egress.table)),
    Section("peer", "peer (llm-sandbox)", True, _sandboxed(rows.peer)),
    Section(
        "channel-flood",
        "channel flood (root)",
        True,
        lambda r: asyncio.to_thread(flood.table, r.report, r.client, r.root),
    ),
    Section("layerwalk", "layer walk", True, _sandboxed(layerwalk.table)),
    Section("sse-followers", "SSE followers", True, _sandboxed(viewer.table)),
    Section("stores", "stores", True, _sandboxed(stores.table)),
    Section(
        "responsiveness", "responsiveness (the speeds tests no longer assert)", True, _sandboxed(responsiveness.table)
    ),
    Section("page", "viewer page (Chromium)", False, lambda r: asyncio.to_thread(page.table, r.report, r.quick)),
    Section("context", "context", False, lambda r: context.table(r.report)),
    Section(
        "runtimes",
        "runtimes (with --runtime NAME)",
        True,
        lambda r: runtime.table(
            r.report, r.client, r.image, r.root, r.quick, tuple(dict.fromkeys(["runc", *r.args.runtime]))
        ),
    ),
)  # fmt: skip - a table
"""Every section, in the order a whole run takes them (a table reads better as one line per section)."""
BY_NAME = {section.name: section for section in SECTIONS}


def chosen(args: argparse.Namespace) -> list[Section]:
    """The sections to run: those named, or all of them (runtimes only with --runtime)."""
    if args.section:
        return [BY_NAME[name] for name in dict.fromkeys(args.section)]
    return [s for s in SECTIONS if s.name != "runtimes" or args.runtime]


def machine(client: Any) -> str:
    memory_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    docker = f", Docker {client.version()['Version']}" if client is not None else ""
    return f"{os.cpu_count()} cores, {memory_gb:.0f} GiB memory{docker}, Python {platform.python_version()}, {platform.machine()}"


async def run(args: argparse.Namespace, sections: list[Section]) -> tuple[Report, str]:
    """Run ``sections`` in order; the report and the machine it ran on."""
    client = None
    if any(section.engine for section in sections):
        client = engine.connect(Settings().docker_host)
        images.ensure(client, args.image, auto_build=True)
    report, on = Report(), machine(client)
    began = time.perf_counter()
    print(f"Machine: {on}\n", flush=True)
    with rows.workdir() as tmp:
        try:
            for section in sections:
                await _section(section, Run(report, client, args.image, Path(tmp), args))
        finally:
            if client is not None:
                owners.sweep(client, rows.INSTANCE, everything=False)
                for container in client.containers.list(all=True, filters={"label": f"{owners.MANAGED}=bench"}):
                    container.remove(force=True)
    print(f"bench: everything took {time.perf_counter() - began:.0f} s", file=sys.stderr)
    return report, on


async def _section(section: Section, run: Run) -> None:
    """Run one section, then print its tables at once; a section that fails is said to have, and the next runs."""
    start = time.perf_counter()
    try:
        await section.measure(run)
    except Exception:  # noqa: BLE001 - whatever broke, the other sections still measure (and the run fails)
        traceback.print_exc()
        run.report.failed.append(section.name)
    tables = run.report.end_section(section.name)
    print(f"## {section.title}\n\n{tables}", flush=True)
    print(f"bench: {section.name} took {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)


def write_json(path: Path, report: Report, args: argparse.Namespace, client_machine: str) -> None:
    """Every row of the run, with what it ran on and how."""
    effort = "smoke" if args.smoke else "quick" if args.quick else "full" if args.full else "default"
    document = {
        "machine": client_machine,
        "effort": effort,
        "rows": report.records(),
        "missed": report.missed,
        "failed": report.failed,
    }
    path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")


def parser() -> argparse.ArgumentParser:
    made = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    made.add_argument("--quick", action="store_true", help="fewer repetitions")
    made.add_argument("--smoke", action="store_true", help="a few repetitions and small sizes: does each section run")
    made.add_argument("--full", action="store_true", help="also N=50 and N=100 sessions and 50 docker-exec containers")
    made.add_argument(
        "--section",
        action="append",
        default=[],
        metavar="NAME",
        choices=list(BY_NAME),
        help="run only this section (repeatable; --list names them)",
    )
    made.add_argument("--list", action="store_true", help="name the sections and exit")
    made.add_argument("--json", type=Path, metavar="PATH", help="also write every row to PATH as JSON")
    made.add_argument("--image", default=DEFAULT_IMAGE, help="sandbox image")
    made.add_argument(
        "--runtime",
        action="append",
        default=[],
        metavar="NAME",
        help="also measure the sandbox under this OCI runtime (e.g. runsc), beside runc in the same run",
    )
    return made


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.list:
        for section in SECTIONS:
            print(f"{section.name:<15} {'engine' if section.engine else 'no engine':<10} {section.title}")
        return 0
    set_smoke(args.smoke)
    sections = chosen(args)
    try:
        report, on = asyncio.run(run(args, sections))
    except CubicleError as err:
        print(f"bench cannot run: {err}", file=sys.stderr)
        return 1
    print("\n".join([f"target missed: {m}" for m in report.missed] or ["every target met"]))
    if args.json is not None:
        write_json(args.json, report, args, on)
    if report.failed:
        print(f"bench: these sections failed: {', '.join(report.failed)}", file=sys.stderr)
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
