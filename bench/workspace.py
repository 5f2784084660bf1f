"""The workspace layer on a 20,000-file repository: changes, apply, revert, checkpoints, beside plain baselines.

Builds a 20,000-file repository (60 lines a file), makes its directories in the layer as a
session with a disk quota does at its first mount (``workspace.headroom``), starts a real sandbox on its layer and
changes 100 files from inside it (60 modified, 30 added, 10 deleted), stops the sandbox
(which unmounts the overlay), then times the layer operations on the controller's side,
each next to the plain filesystem work of the same size, in the same run. Part of
``python -m bench``; ``python -m bench.workspace`` prints this table alone. Targets that
are missed are listed under the table; nothing is asserted.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.measure import Report, repetitions
from bench.rows import INSTANCE, LIMITS, give_away, section_main
from controller import workspace
from controller.errors import LayerMissingError
from controller.sandbox.docker import DockerSandbox
from controller.sandbox.sandboxes import Deployment
from controller.wire import protocol
from controller.wire.changeset import ApplyResult
from controller.wire.protocol import CommandResult
from controller.workspace import Layer, apply, baseline, checkpoint, headroom, revert, rewind, scan
from controller.workspace.checkpoints import numbers

DIRS, PER_DIR = 200, 100  # 20,000 files
BIG_MIB = 32

LIST_TARGET_S = 0.300
APPLY_TARGET_S = 1.0
CHECKPOINT_FIXED_S = 0.050

CHANGE_100 = r"""
import os
for i in range(60):
    path = f"pkg{i:03d}/mod000.py"
    text = open(path).read().replace("line 7 ", "LINE 7 ")
    open(path, "w").write(text)
for i in range(30):
    open(f"pkg{i:03d}/new.py", "w").write("print('new')\n" * 20)
for i in range(10):
    os.remove(f"pkg{100 + i:03d}/mod001.py")
"""


def build_repo(root: Path) -> Path:
    repo = root / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    for d in range(DIRS):
        folder = repo / f"pkg{d:03d}"
        folder.mkdir()
        for f in range(PER_DIR):
            (folder / f"mod{f:03d}.py").write_text("".join(f"line {i} of {d}/{f}\n" for i in range(60)))
    give_away(repo)
    return repo


def timed(fn: Callable[[], Any], repeat: int, before: Callable[[], Any] | None = None) -> float:
    """Median seconds of ``fn``; ``before`` runs untimed ahead of each call."""
    values = []
    for _ in range(repeat):
        if before:
            before()
        start = time.perf_counter()
        fn()
        values.append(time.perf_counter() - start)
    return sorted(values)[len(values) // 2]


def walk_lstat(root: Path) -> int:
    count = 0
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.lstat(os.path.join(dirpath, name))
            count += 1
    return count


def copy_tree(src: Path, scratch: Path) -> None:
    """``cp -a``: copies whiteouts (char devices) and xattrs too, as a checkpoint must."""
    shutil.rmtree(scratch, ignore_errors=True)
    subprocess.run(["cp", "-a", str(src), str(scratch)], check=True)


def copy_files(src: Path, scratch: Path, paths: list[str]) -> None:
    """The bytes a checkpoint or an apply has to write, copied plainly (into an existing tree)."""
    for path in paths:
        shutil.copyfile(src / path, scratch / path)


def undo(layer: Layer) -> None:
    """Revert every apply, so the next apply starts from the original checkout."""
    with contextlib.suppress(LayerMissingError):
        while True:
            revert(layer)


def check_applied(result: ApplyResult) -> None:
    if len(result.applied) != 100:
        raise SystemExit(f"the bench expected 100 applied changes, got {len(result.applied)}: {result.conflicts[:3]}")


def forget_after(layer: Layer, number: int) -> Callable[[], None]:
    """Drop checkpoints newer than ``number``, so the next one is again taken after ``number``."""

    def drop() -> None:
        for later in numbers(layer):
            if later > number:
                (layer.checkpoints / f"{later}.json").unlink()

    return drop


async def in_sandbox(client: Any, image: str, layer: Layer, command: str) -> None:
    """Run ``command`` in a real sandbox on ``layer`` (so the kernel's overlay writes the upper), then stop it."""
    box = DockerSandbox(
        lambda: client, layer=layer, session_id=layer.root.name, limits=LIMITS, deployment=Deployment(image, INSTANCE)
    )
    try:
        result = await box.call(protocol.call("run_command", command=command, timeout_s=60), 90)
    finally:
        await box.stop()
    if not isinstance(result, CommandResult) or result.exit_code != 0:
        raise SystemExit(f"the bench's change to the layer failed: {result}")


Row = tuple[str, float, str, float, str, bool | None]


async def measure(client: Any, image: str, root: Path, repeat: int) -> tuple[list[Row], dict[str, float]]:
    repo = build_repo(root)
    start = time.perf_counter()
    layer = workspace.create(root / "data", "bench-ws", repo)
    created = time.perf_counter() - start
    start = time.perf_counter()
    headroom.ready(layer)  # what a session with a disk quota (the default) does before its first mount
    mirrored = time.perf_counter() - start
    await in_sandbox(client, image, layer, f"python3 -c {shlex.quote(CHANGE_100)}")
    scratch = root / "scratch"
    copy_tree(layer.upper, scratch)
    written = [c.path for c in scan(layer) if c.kind.value != "deleted"]
    walk = timed(lambda: walk_lstat(layer.repo), repeat)
    plain_copy = timed(lambda: copy_files(layer.upper, scratch, written), repeat)
    cp_a = timed(lambda: copy_tree(layer.upper, root / "scratch-a"), repeat)

    listing = timed(lambda: scan(layer), repeat)
    recorded = timed(lambda: baseline.record(layer.repo).save(root / "b.json"), repeat)

    def no_checkpoints() -> None:
        shutil.rmtree(layer.checkpoints)
        layer.checkpoints.mkdir()

    first = timed(lambda: checkpoint(layer), repeat, no_checkpoints)
    number = checkpoint(layer)

    def unapplied() -> None:
        undo(layer)
        rewind(layer, number)

    def applied_once() -> None:
        unapplied()
        check_applied(apply(layer))

    again = timed(lambda: checkpoint(layer), repeat, forget_after(layer, number))
    applied = timed(lambda: check_applied(apply(layer)), repeat, unapplied)
    reverted = timed(lambda: revert(layer), repeat, applied_once)
    undo(layer)
    rewind(layer, number)
    settled = checkpoint(layer)  # rewind made fresh inodes: record them, so only the big file is new below

    # One big file: what a checkpoint costs per changed byte.
    await in_sandbox(client, image, layer, f"head -c {BIG_MIB << 20} /dev/urandom > big.bin")
    big = timed(lambda: checkpoint(layer), repeat, forget_after(layer, settled))
    big_copy = timed(lambda: shutil.copyfile(layer.upper / "big.bin", scratch / "big.bin"), repeat)

    rows: list[Row] = [
        (
            "list the 100 changes (with diffs)",
            listing,
            "os.walk + lstat of the checkout",
            walk,
            f"≤ {LIST_TARGET_S * 1000:.0f} ms",
            listing <= LIST_TARGET_S,
        ),
        (
            "record the baseline of 20,000 files (at session create)",
            recorded,
            "os.walk + lstat of the checkout",
            walk,
            "",
            None,
        ),
        (
            f"make the checkout's {DIRS} directories in the layer (first mount)",
            mirrored,
            "os.walk + lstat of the checkout",
            walk,
            "",
            None,
        ),
        (
            "checkpoint, 100 files changed since the last",
            first,
            "copyfile of the 90 written files",
            plain_copy,
            "≤ 50 ms + that copy",
            first <= CHECKPOINT_FIXED_S + plain_copy,
        ),
        (
            "checkpoint, nothing changed since the last",
            again,
            "cp -a of the upper layer",
            cp_a,
            "≤ 50 ms",
            again <= CHECKPOINT_FIXED_S,
        ),
        (f"checkpoint, one {BIG_MIB} MiB file changed", big, f"copyfile of the {BIG_MIB} MiB", big_copy, "", None),
        (
            "apply the 100 changes",
            applied,
            "copyfile of the 90 written files",
            plain_copy,
            f"≤ {APPLY_TARGET_S:.0f} s",
            applied <= APPLY_TARGET_S,
        ),
        ("revert that apply (byte for byte)", reverted, "copyfile of the 90 written files", plain_copy, "", None),
    ]  # fmt: skip - a table
    per_mib = (big - again) / BIG_MIB
    return rows, {"created": created, "per_mib": per_mib, "copy_per_mib": big_copy / BIG_MIB, "fixed": again}


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


async def table(report: Report, client: Any, image: str, root: Path, quick: bool) -> None:
    """Add the workspace table to ``report``; the targets it misses go under the tables."""
    repeat = repetitions(3 if quick else 5)
    work = root / "workspace"
    work.mkdir()
    rows, extra = await measure(client, image, work, repeat)
    out = []
    for name, ours, what, base, target, met in rows:
        if met is not None:
            report.check(met, f"workspace: {name} took {ms(ours)} (target {target})")
        out.append([name, ms(ours), ms(base), what, target, "" if met is None else ("yes" if met else "**no**")])
        if name.startswith("checkpoint, one"):
            per_mib, copy_per_mib = (
                f"{extra['per_mib'] * 1000:.1f} ms/MiB",
                f"{extra['copy_per_mib'] * 1000:.1f} ms/MiB",
            )
            out.append(["  so a checkpoint costs per changed MiB", per_mib, copy_per_mib, "copyfile", "", ""])
    report.extra.append(
        (
            f"Workspace layer: 20,000-file repository, 100 files changed in a sandbox (medians of {repeat})",
            ["operation", "Cubicle", "baseline", "baseline measures", "target", "met"],
            out,
        )
    )


def main() -> int:
    return section_main("workspace", __doc__, "3 repetitions instead of 5", table)


if __name__ == "__main__":
    sys.exit(main())
