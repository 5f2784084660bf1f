"""`python -m bench.workspace`: the workspace layer against plain filesystem baselines, same run, same data.

Needs root (it mounts overlayfs directly, as the Docker ``local`` driver would). Builds a
20,000-file repository, changes 100 files through the mount (60 modified, 30 added, 10
deleted), and prints a markdown table of medians. No targets are asserted; misses are
listed under the table.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from controller.workspace import (
    ApplyResult,
    LayerMissingError,
    apply,
    baseline,
    checkpoint,
    create,
    discard,
    revert,
    rewind,
    scan,
)
from controller.workspace.layer import Layer, mount_options

DIRS, PER_DIR = 200, 100  # 20,000 files


def build_repo(root: Path) -> Path:
    repo = root / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    for d in range(DIRS):
        folder = repo / f"pkg{d:03d}"
        folder.mkdir()
        for f in range(PER_DIR):
            (folder / f"mod{f:03d}.py").write_text("".join(f"line {i} of {d}/{f}\n" for i in range(60)))
    return repo


def change_100(mnt: Path) -> None:
    for i in range(60):
        path = mnt / f"pkg{i:03d}" / "mod000.py"
        path.write_text(path.read_text().replace("line 7 ", "LINE 7 "))
    for i in range(30):
        (mnt / f"pkg{i:03d}" / "new.py").write_text("print('new')\n" * 20)
    for i in range(10):
        (mnt / f"pkg{100 + i:03d}" / "mod001.py").unlink()


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


def undo(layer: Layer) -> None:
    """Revert every apply, so the next apply starts from the original checkout."""
    with contextlib.suppress(LayerMissingError):
        while True:
            revert(layer)


def check_applied(result: ApplyResult) -> None:
    if len(result.applied) != 100:
        raise SystemExit(f"the bench expected 100 applied changes, got {len(result.applied)}: {result.conflicts[:3]}")


def rows(root: Path, layer: Layer, repeat: int) -> list[tuple[str, float, str, float, str]]:
    scratch = root / "scratch"
    changed = [c.path for c in scan(layer) if c.kind.value != "deleted"]
    out = [
        ("list 100 changes (with diffs)", timed(lambda: scan(layer), repeat), "os.walk+lstat of the repo", timed(lambda: walk_lstat(layer.repo), repeat), "<= 300 ms"),
        ("baseline of 20,000 files (+ JSON)", timed(lambda: baseline.record(layer.repo).save(root / "b.json"), repeat), "os.walk+lstat of the repo", timed(lambda: walk_lstat(layer.repo), repeat), "-"),
    ]  # fmt: skip
    fresh = lambda: shutil.rmtree(layer.checkpoints) or layer.checkpoints.mkdir()  # noqa: E731
    out.append(("checkpoint, 100 files changed since the last", timed(lambda: checkpoint(layer), repeat, fresh), "cp -a of the upper", timed(lambda: copy_tree(layer.upper, scratch), repeat), "<= 50 ms + bytes"))  # fmt: skip
    out.append(("checkpoint, nothing changed since the last", timed(lambda: checkpoint(layer), repeat), "cp -a of the upper", timed(lambda: copy_tree(layer.upper, scratch), repeat), "<= 50 ms"))  # fmt: skip
    number = checkpoint(layer)
    plain_copy = timed(lambda: [shutil.copyfile(layer.upper / p, scratch / p) for p in changed], repeat, lambda: copy_tree(layer.upper, scratch))  # fmt: skip
    out.append(("apply 100 changes", timed(lambda: check_applied(apply(layer)), repeat, lambda: (undo(layer), rewind(layer, number))), "copyfile of the 90 written files", plain_copy, "-"))  # fmt: skip
    out.append(("revert that apply", timed(lambda: revert(layer), repeat, lambda: (undo(layer), rewind(layer, number), check_applied(apply(layer)))), "copyfile of the 90 written files", plain_copy, "-"))  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench.workspace mounts overlayfs: run it as root")
    root = Path(tempfile.mkdtemp(prefix="cubicle-bench-ws-"))
    try:
        repo = build_repo(root)
        layer = create(root / "data", "bench", repo)
        mnt = root / "mnt"
        mnt.mkdir()
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o", mount_options(layer), str(mnt)], check=True)
        try:
            change_100(mnt)
        finally:
            subprocess.run(["umount", str(mnt)], check=True)
        table = rows(root, layer, args.repeat)
        discard(layer)
    finally:
        shutil.rmtree(root)
    print(f"{os.cpu_count()} CPUs, medians of {args.repeat}\n")
    print("| operation | cubicle | baseline | baseline measures | target |\n|---|---:|---:|---|---|")
    for name, ours, what, base, target in table:
        print(f"| {name} | {ours * 1000:.1f} ms | {base * 1000:.1f} ms | {what} | {target} |")


if __name__ == "__main__":
    main()
