"""The benchmark rows: each measures Cubicle and a baseline on the same machine in the same run."""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shlex
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from docker.types import Mount

from bench.measure import (
    Report,
    Row,
    Sample,
    current_rss_mb,
    ms,
    peak_rss_mb,
    repetitions,
    smoke,
    time_async,
    time_pair,
    time_sync,
)
from controller import workspace
from controller.agent import tools
from controller.agent.scripted import Scenario, ScriptedServer, serve_in_thread
from controller.config import DEFAULT_IMAGE, Settings
from controller.sandbox import engine, images, owners
from controller.sandbox.docker import WORKSPACE, DockerLauncher, DockerSandbox, container_options
from controller.sandbox.egress import Route
from controller.sandbox.sandboxes import Deployment
from controller.server.runtime import Runtime
from controller.server.sessions import NewSession, Sessions
from controller.server.store import Store
from controller.wire import protocol
from controller.wire.limits import Limits
from controller.wire.protocol import CommandResult, PingResult

INSTANCE = "cubicle-bench"
LIMITS = Limits(memory_mb=512, pids=256, tmpfs_mb=64, disk_mb=256, inodes=30_000)
"""The benchmarks' sessions write next to nothing: a 256 MiB quota each, so admission (which reserves every running
session's whole quota) lets even the 100-session row run on a disk with 30 GB free (the 10 GiB default refused
the 10-session row with 66 GB free)."""
OWNER = 1000
"""Who owns the bench's repositories when it runs as root: sessions refuse root-owned checkouts."""


def give_away(path: Path) -> None:
    """Make ``path`` and everything under it the unprivileged OWNER's (only when we are root)."""
    if os.geteuid() != 0:
        return
    os.chown(path, OWNER, OWNER)
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            os.chown(os.path.join(dirpath, name), OWNER, OWNER, follow_symlinks=False)


def make_repo(root: Path, name: str) -> Path:
    repo = root / name
    (repo / ".git" / "hooks").mkdir(parents=True)
    (repo / ".git" / "config").write_text("[core]\n")
    (repo / "README.md").write_text("# bench\n" + "line\n" * 40)
    (repo / "src").mkdir()
    (repo / "src" / "app.py").write_text("def total(items):\n    return sum(items)\n")
    give_away(repo)
    return repo


class BindLauncher(DockerLauncher):
    """The baseline from before the workspace layer: the checkout bind-mounted read-write at /workspace.

    Everything else (hardening, limits, channel) is the real sandbox's; only the mount differs,
    and no volume is made. Used by the benchmark only.
    """

    def _make_volume(self, labels: dict[str, str]) -> None:
        pass

    def _options(self, labels: dict[str, str], route: Route, volumes: Iterable[str] = ()) -> dict[str, Any]:
        options = container_options(self.image, self.layer, self.limits, labels, route, volumes)
        options["mounts"] = [Mount(WORKSPACE, str(self.repo), type="bind")]
        return options


class BindSandbox(DockerSandbox):
    """A sandbox whose launcher bind-mounts the checkout (``BindLauncher``)."""

    launcher = BindLauncher


def sandbox(client: Any, image: str, repo: Path, bind: bool = False, runtime: str = "runc") -> DockerSandbox:
    """A sandbox on ``repo`` over a fresh workspace layer (kept under ``<repo>/../layers``), or on a bind mount."""
    session_id = "bench-" + secrets.token_hex(4)
    layer = workspace.create(repo.parent / "layers", session_id, repo)
    kind = BindSandbox if bind else DockerSandbox
    limits = LIMITS.model_copy(update={"runtime": runtime})
    deployment = Deployment(image, INSTANCE)
    return kind(lambda: client, layer=layer, session_id=session_id, limits=limits, deployment=deployment)


LAYER_TOLERANCE = 1.2
"""Tool calls over the layer count as unchanged within 20 % of the bind mount's p50 (the noise of a shared machine)."""


def bare_run(client: Any, image: str, runtime: str | None = None) -> Any:
    """The baseline of a session's start: ``docker run [--runtime R] IMAGE true``, run to its end; the container,
    to remove."""
    container = client.containers.create(image, ["true"], runtime=runtime, labels={owners.MANAGED: "bench"})
    container.start()
    container.wait()
    return container


async def tool_overhead(report: Report, client: Any, image: str, root: Path, quick: bool) -> None:
    """read_file and run_command over the workspace layer: against docker exec, and against the old bind mount."""
    repo = make_repo(root, "overhead")
    box, bound = sandbox(client, image, repo), sandbox(client, image, repo, bind=True)
    await box.start()
    await bound.start()
    try:
        n, m = repetitions(100 if quick else 500), repetitions(20 if quick else 30)

        def read(b: DockerSandbox) -> Callable[[], Awaitable[Any]]:
            return lambda: b.call(protocol.call("read_file", path="README.md"), 30)

        def true(b: DockerSandbox) -> Callable[[], Awaitable[Any]]:
            return lambda: b.call(protocol.call("run_command", command="true", timeout_s=10), 30)

        ours, bind_read = await time_pair(read(box), read(bound), n)
        container = box.container
        exec_cat = time_sync(lambda: container.exec_run(["cat", "/workspace/README.md"]), m)
        met = report.check(
            ours.p50 <= exec_cat.p50 / 25, f"read_file p50 {ms(ours.p50)} > 1/25 of docker exec {ms(exec_cat.p50)}"
        )
        report.rows.append(Row("read_file round trip", ours, "docker exec cat (SDK)", exec_cat, "≤ 1/25 of exec", met))
        ours_cmd, bind_cmd = await time_pair(true(box), true(bound), n // 2)
        exec_true = time_sync(lambda: container.exec_run(["true"]), m)
        report.rows.append(Row('run_command("true")', ours_cmd, "docker exec true (SDK)", exec_true))
        kernel: tuple[list[float], list[float]] = ([], [])
        for _ in range(3):
            for b, values in ((box, kernel[0]), (bound, kernel[1])):
                values.append(await _open_read_close(b))
    finally:
        await box.stop()
        await bound.stop()
    rows = []
    for name, layered, bind in (("read_file", ours, bind_read), ('run_command("true")', ours_cmd, bind_cmd)):
        ratio = layered.p50 / bind.p50
        met = report.check(
            ratio <= LAYER_TOLERANCE,
            f"{name} over the layer p50 {ms(layered.p50)} > {LAYER_TOLERANCE} × the bind mount's {ms(bind.p50)}",
        )
        rows.append(
            [
                name,
                ms(layered.p50),
                ms(layered.p95),
                ms(bind.p50),
                ms(bind.p95),
                f"{ratio:.2f}",
                "yes" if met else "**no**",
            ]
        )
    layer_us, bind_us = (statistics.median(v) * 1e6 for v in kernel)
    rows.append(
        [
            f"open + read + close of a file, inside the sandbox (median of 3 × {KERNEL_LOOPS:,}; no target)",
            f"{layer_us:.1f} µs",
            "",
            f"{bind_us:.1f} µs",
            "",
            f"{layer_us / bind_us:.2f}",
            "",
        ]
    )
    report.extra.append(
        (
            f"Tool calls over the workspace layer vs the old bind mount (calls alternate; target: p50 within {LAYER_TOLERANCE}×)",
            ["", "layer p50", "layer p95", "bind mount p50", "bind mount p95", "ratio (p50)", "met"],
            rows,
        )
    )


KERNEL_LOOPS = 20_000
OPEN_READ_CLOSE = f"""
import os, time
start = time.perf_counter()
for _ in range({KERNEL_LOOPS}):
    fd = os.open("README.md", os.O_RDONLY)
    os.read(fd, 65536)
    os.close(fd)
print((time.perf_counter() - start) / {KERNEL_LOOPS})
"""


async def _open_read_close(box: DockerSandbox) -> float:
    """Seconds per open + read + close of README.md inside the sandbox: the mount's own cost, without the channel."""
    result = await box.call(
        protocol.call("run_command", command=f"python3 -c {shlex.quote(OPEN_READ_CLOSE)}", timeout_s=60), 90
    )
    assert isinstance(result, CommandResult) and result.exit_code == 0, result
    return float(result.stdout.text.strip())


TAIL_BOUND_S = 0.040


async def command_tail_latency(report: Report, client: Any, image: str, root: Path, quick: bool) -> None:
    """run_command("true") over many consecutive calls: the tail, not just the median, must stay short.

    The baseline is ping on the same sandbox and channel in the same run: the round trip without a
    process. The toolbox's own duration_s separates what the toolbox spends from the channel's share.
    """
    box = sandbox(client, image, make_repo(root, "tail"))
    await box.start()
    try:
        n = repetitions(200 if quick else 1000)
        ping = await time_async(lambda: box.call(protocol.call("ping"), 30), n, warmup=20)
        inside: list[float] = []

        async def true() -> None:
            result = await box.call(protocol.call("run_command", command="true", timeout_s=10), 30)
            assert isinstance(result, CommandResult) and result.exit_code == 0, result
            inside.append(result.duration_s)

        ours = await time_async(true, n, warmup=20)
        inside = inside[-n:]  # the warm-up calls' are not counted
    finally:
        await box.stop()
    p50, p99, worst = ours.p50, ours.pct(0.99), max(ours.values)
    slow = sum(1 for v in ours.values if v >= TAIL_BOUND_S)
    report.check(p99 <= 2 * p50, f"run_command(true) p99 {ms(p99)} > 2 × p50 {ms(p50)}")
    report.check(slow == 0, f"run_command(true): {slow} of {n} calls took ≥ {ms(TAIL_BOUND_S)} (max {ms(worst)})")

    def row(name: str, sample: Sample) -> list[str]:
        values = sample.values
        over = sum(1 for v in values if v >= TAIL_BOUND_S)
        cells = [sample.p50, sample.p95, sample.pct(0.99), max(values)]
        return [name, str(len(values)), *(ms(v) for v in cells), str(over)]

    report.extra.append(
        (
            f'run_command("true"), {n} consecutive calls (targets: p99 ≤ 2 × p50, none ≥ {ms(TAIL_BOUND_S)})',
            ["", "calls", "p50", "p95", "p99", "max", f"≥ {ms(TAIL_BOUND_S)}"],
            [
                row('Cubicle run_command("true"), round trip', ours),
                row("  of which inside the toolbox (duration_s)", Sample(inside)),
                row("baseline: ping on the same channel", ping),
            ],
        )
    )


READY_TARGET = 1.3
"""Session ready over the layer: at most this many times a bare ``docker run`` of the image."""


async def ready_and_teardown(report: Report, client: Any, image: str, root: Path, quick: bool) -> None:
    """Start to first answer: over the layer, over the old bind mount, and a bare ``docker run``, interleaved.

    Each round starts one of each, so a busy moment of the machine costs all three alike. A
    layered start includes re-checking the checkout's identity and creating the overlay volume;
    its teardown includes removing that volume.
    """
    repo = make_repo(root, "lifecycle")
    n = repetitions(6 if quick else 10)
    layered, bound = sandbox(client, image, repo), sandbox(client, image, repo, bind=True)
    ready: dict[str, list[float]] = {"layer": [], "bind": [], "bare": []}
    teardown, removals = [], []

    for _ in range(n):
        for name, box in (("layer", layered), ("bind", bound)):
            start = time.perf_counter()
            await box.start()
            ready[name].append(time.perf_counter() - start)
            start = time.perf_counter()
            await box.stop()
            if name == "layer":
                teardown.append(time.perf_counter() - start)
        start = time.perf_counter()
        container = await asyncio.to_thread(bare_run, client, image)
        ready["bare"].append(time.perf_counter() - start)
        await asyncio.to_thread(container.remove, force=True)
        running = await asyncio.to_thread(
            client.containers.run, image, ["sleep", "600"], detach=True, init=True, labels={owners.MANAGED: "bench"}
        )
        start = time.perf_counter()
        await asyncio.to_thread(running.remove, force=True)
        removals.append(time.perf_counter() - start)
    ours, bind, base = Sample(ready["layer"]), Sample(ready["bind"]), Sample(ready["bare"])
    met = report.check(
        ours.p50 <= READY_TARGET * base.p50,
        f"session ready over the layer {ms(ours.p50)} > {READY_TARGET} × bare docker run {ms(base.p50)}",
    )
    report.rows.append(
        Row(
            "session ready over the layer (toolbox answering)",
            ours,
            "docker run image true",
            base,
            f"≤ {READY_TARGET}×",
            met,
        )
    )
    report.rows.append(Row("session ready over a bind mount (before the layer)", bind, "docker run image true", base))
    down = Sample(teardown)
    met = report.check(down.p95 <= 0.5, f"teardown p95 {ms(down.p95)} > 0.5 s")
    report.rows.append(
        Row(
            "teardown (kill + remove + volume)",
            down,
            "docker rm -f (running bare container)",
            Sample(removals),
            "≤ 0.5 s",
            met,
        )
    )


async def output_flood(report: Report, client: Any, image: str, root: Path) -> None:
    box = sandbox(client, image, make_repo(root, "flood"))
    size = 10**8 if smoke() else 10**9  # smoke: a tenth, to see that the section runs
    flood = f"head -c {size} /dev/zero | tr '\\0' y"
    await box.start()
    try:
        ping = await box.call(protocol.call("ping"), 30)
        assert isinstance(ping, PingResult)
        rss_before = current_rss_mb()
        start = time.perf_counter()
        outcome = await tools.execute("run_command", {"command": flood}, box, LIMITS)
        took = time.perf_counter() - start
        rss_growth = current_rss_mb() - rss_before
        hwm = await box.call(
            protocol.call("run_command", command=f"grep VmHWM /proc/{ping.pid}/status", timeout_s=10), 30
        )
        toolbox_kb = int(hwm.stdout.text.split()[1]) if hasattr(hwm, "stdout") else -1
        container = box.container

        def exec_flood() -> None:
            result = container.exec_run(["sh", "-c", flood], stream=True)
            for _ in result.output:
                pass

        base = time_sync(exec_flood, 1, warmup=0)
    finally:
        await box.stop()
    report.check(len(outcome.model_text) <= LIMITS.model_output_chars + 200, "flood: the model saw more than the cap")
    report.check(rss_growth < 50, f"flood: controller RSS grew {rss_growth:.1f} MB")
    report.check(toolbox_kb < 50 * 1024, f"flood: toolbox peak RSS {toolbox_kb / 1024:.1f} MB")
    report.extra.append(
        (
            f"Output flood: a command printing {size / 10**9:g} GB",
            ["", "time to result", "reached the model", "controller RSS growth", "toolbox peak RSS"],
            [
                [
                    "Cubicle run_command",
                    f"{took:.2f} s",
                    f"{len(outcome.model_text):,} chars",
                    f"{rss_growth:.1f} MB",
                    f"{toolbox_kb / 1024:.1f} MB",
                ],
                ["docker exec, streamed and discarded", f"{base.p50:.2f} s", "(everything)", "n/a", "n/a"],
            ],
        )
    )


def _flow(calls: int) -> list[dict[str, Any]]:
    ops = [
        {"type": "tool_use", "name": "read_file", "input": {"path": "README.md"}},
        {"type": "tool_use", "name": "list_files", "input": {}},
        {"type": "tool_use", "name": "search", "input": {"pattern": "total"}},
        {"type": "tool_use", "name": "run_command", "input": {"command": "echo ok"}},
    ]
    turns = [{"content": [ops[(2 * i) % 4], ops[(2 * i + 1) % 4]]} for i in range(calls // 2)]
    return [*turns, {"content": [{"type": "text", "text": "done"}]}]


def _container_memory_mb(container_id: str) -> float:
    for path in (
        f"/sys/fs/cgroup/memory/docker/{container_id}/memory.stat",
        f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope/memory.stat",
    ):
        try:
            stats = dict(line.split() for line in Path(path).read_text().splitlines())
        except OSError:
            continue
        return int(stats.get("total_rss", stats.get("anon", 0))) / (1 << 20)
    return float("nan")


async def concurrency(
    report: Report, client: Any, image: str, root: Path, sizes: list[int], exec_sizes: list[int]
) -> None:
    flow = Scenario.model_validate({"name": "bench-flow", "turns": _flow(20)})
    server = ScriptedServer([flow])
    rows = []
    with serve_in_thread(server.app) as url:
        for n in sizes:
            settings = Settings(
                api_key="bench",
                base_url=url,
                repo_roots=[root],
                data_dir=root / f"data-{n}",
                instance=INSTANCE,
                limits=LIMITS,
                max_concurrent_sessions=n + 1,
                image=image,
            )
            store = Store(settings.data_dir / "cubicle.db")
            runtime = Runtime(settings)
            sessions = Sessions(settings, store, runtime)
            repos = [make_repo(root, f"c{n}-{i}") for i in range(n)]
            start = time.perf_counter()
            records = [await sessions.create(NewSession(repo, "bench", "bench-flow", LIMITS)) for repo in repos]
            await asyncio.gather(*(sessions.join(r.id) for r in records))
            wall = time.perf_counter() - start
            finals = [store.get(r.id) for r in records]
            errors = sum(1 for f in finals if f is None or f.finish_reason != "end_turn")
            errors += sum(
                1
                for r in records
                for e in store.events_after(r.id, 0, 10_000)
                if e.type == "tool_result" and e.is_error
            )
            mems = [
                _container_memory_mb(c.id)
                for c in client.containers.list(filters={"label": f"{owners.OWNER}"})
                if c.labels.get(owners.SESSION, "").startswith("s_")
            ]
            await sessions.close()
            await runtime.close()
            store.close()
            per_container = sum(mems) / len(mems) if mems else float("nan")
            rows.append(
                [
                    f"Cubicle, N={n}",
                    f"{wall:.2f} s",
                    f"{20 * n / wall:.0f}",
                    str(errors),
                    f"{peak_rss_mb():.0f} MB",
                    f"{per_container:.1f} MB",
                ]
            )
            report.check(errors == 0, f"concurrency N={n}: {errors} errors")
            if n == 100:
                report.check(
                    peak_rss_mb() <= 300, f"concurrency N=100: controller peak RSS {peak_rss_mb():.0f} MB > 300 MB"
                )
    for n in exec_sizes:
        wall = await asyncio.to_thread(_exec_baseline, client, image, n)
        rows.append(
            [f"docker run + 20 × docker exec, N={n}", f"{wall:.2f} s", f"{20 * n / wall:.0f}", "0", "n/a", "n/a"]
        )
    report.extra.append(
        (
            "Concurrency: N sessions of 20 tool calls each",
            ["", "wall time", "tool calls/s", "errors", "controller peak RSS", "memory per sandbox"],
            rows,
        )
    )


def _exec_baseline(client: Any, image: str, n: int) -> float:
    def one(_: int) -> None:
        container = client.containers.run(image, ["sleep", "600"], detach=True, labels={owners.MANAGED: "bench"})
        try:
            for i in range(20):
                container.exec_run(["cat", "/etc/hostname"] if i % 2 else ["true"])
        finally:
            container.remove(force=True)

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=min(n, 32)) as pool:
        list(pool.map(one, range(n)))
    return time.perf_counter() - start


def workdir() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="cubicle-bench-")


def standalone(image: str, section: Callable[[Report, Any, Path], Awaitable[None]]) -> int:
    """Run one benchmark section on its own (``python -m bench.<name>``): the image ensured, a work
    directory, what it leaves swept even when it fails, and its tables printed."""
    client = engine.connect(Settings().docker_host)
    images.ensure(client, image, auto_build=True)
    report = Report()
    with workdir() as tmp:
        try:
            asyncio.run(section(report, client, Path(tmp)))
        finally:
            owners.sweep(client, INSTANCE, everything=False)
    print(report.render())
    return 0


Table = Callable[[Report, Any, str, Path, bool], Awaitable[None]]
"""A section's ``table(report, client, image, root, quick)``."""


def section_main(name: str, description: str | None, quick_help: str, table: Table) -> int:
    """``python -m bench.<name>``: ``--quick`` and ``--image``, then the section alone (``standalone``)."""
    parser = argparse.ArgumentParser(prog=f"python -m bench.{name}", description=description)
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--image", default=DEFAULT_IMAGE, help="sandbox image")
    args = parser.parse_args()
    return standalone(args.image, lambda report, client, root: table(report, client, args.image, root, args.quick))


async def peer(report: Report, client: Any, image: str, root: Path, quick: bool) -> None:
    """llm-sandbox on the same image: session open, command round trip, close — beside Cubicle's."""
    try:
        from llm_sandbox import SandboxSession
    except ImportError:
        report.extra.append(("Peer: llm-sandbox", ["not installed"], [["pip install -e '.[bench]' to add this row"]]))
        return
    sessions = 1 if smoke() else 2 if quick else 3
    opens, closes, commands = [], [], []
    for _ in range(sessions):
        start = time.perf_counter()
        session = SandboxSession(lang="python", image=image, keep_template=True, verbose=False)
        await asyncio.to_thread(session.open)
        opens.append(time.perf_counter() - start)
        commands += time_sync(lambda s=session: s.execute_command("true"), 10, warmup=1).values
        start = time.perf_counter()
        await asyncio.to_thread(session.close)
        closes.append(time.perf_counter() - start)
    ours_open, ours_close, ours_cmd = [], [], []
    repo = make_repo(root, "peer")
    for _ in range(sessions):
        box = sandbox(client, image, repo)
        start = time.perf_counter()
        await box.start()
        ours_open.append(time.perf_counter() - start)
        ours_cmd += (
            await time_async(
                lambda b=box: b.call(protocol.call("run_command", command="true", timeout_s=10), 30), 10, warmup=1
            )
        ).values
        start = time.perf_counter()
        await box.stop()
        ours_close.append(time.perf_counter() - start)
    rows = [
        [name, ms(Sample(ours).p50), ms(Sample(theirs).p50), f"{Sample(ours).p50 / Sample(theirs).p50:.3f}"]
        for name, ours, theirs in (
            ("session open", ours_open, opens),
            ("command round trip", ours_cmd, commands),
            ("close", ours_close, closes),
        )
    ]
    report.extra.append(("Peer: llm-sandbox on the same image (p50)", ["", "Cubicle", "llm-sandbox", "ratio"], rows))
