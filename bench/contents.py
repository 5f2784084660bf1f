"""Session start with content ids, on a 20,000-file repository: what judging conflicts by content costs.

A new session records the checkout's baseline (``workspace.baseline.record``). With content
ids it also parses the checkout's ``.git/index`` (which vouches for the tracked files whose
stat matches) and hashes what the index does not vouch for, within a budget. The baseline
row is the same record without content ids (the metadata-only record sessions made before),
timed in the same run on the same repository. No Docker needed: ``python -m bench.contents``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.measure import Report, ms, plain_main, repetitions, smoke
from bench.workspace import DIRS, PER_DIR, timed
from controller.workspace import baseline, contents


def build(root: Path, committed: bool, dirs: int = DIRS) -> Path:
    """``dirs`` times 100 files of 60 lines (20,000); ``committed``: a git repository whose index holds them all, written
    after them."""
    repo = root / ("committed" if committed else "plain")
    for d in range(dirs):
        folder = repo / f"pkg{d:03d}"
        folder.mkdir(parents=True)
        for f in range(PER_DIR):
            (folder / f"mod{f:03d}.py").write_text("".join(f"line {i} of {d}/{f}\n" for i in range(60)))
    if committed:
        past = time.time() - 60  # older than the index, as in a checkout worked on before (git's racy-clean rule)
        for path in repo.rglob("*.py"):
            os.utime(path, (past, past))
        # No git gc or maintenance left running in the background: it would write into .git as it is removed.
        git = [
            "git",
            "-c",
            "user.name=bench",
            "-c",
            "user.email=bench@example.com",
            "-c",
            "gc.auto=0",
            "-c",
            "maintenance.auto=false",
        ]
        subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
        subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
        subprocess.run([*git, "commit", "-qm", "bench"], cwd=repo, check=True)
    return repo


def table(report: Report, quick: bool) -> None:
    repeat = repetitions(3 if quick else 7)
    dirs = 2 if smoke() else DIRS
    files = f"{dirs * PER_DIR:,}"
    with tempfile.TemporaryDirectory(prefix="cubicle-bench-contents-") as tmp:
        committed, plain = build(Path(tmp), True, dirs), build(Path(tmp), False, dirs)
        rows = []
        for name, repo in (("a git checkout, every file in its index", committed), ("no git index", plain)):
            before = timed(lambda repo=repo: baseline.record(repo, with_contents=False), repeat)  # type: ignore[misc]
            after = timed(lambda repo=repo: baseline.record(repo), repeat)  # type: ignore[misc]
            known = len(baseline.record(repo).blobs)
            rows.append([name, ms(before), ms(after), f"+{ms(after - before)}", f"{known:,} of {files}"])
        root = os.open(committed, os.O_RDONLY | os.O_DIRECTORY)
        try:
            parse = timed(lambda: contents.read_index(root), repeat)
        finally:
            os.close(root)
        rows.append([f"  of which: parsing the {files}-entry .git/index", "", ms(parse), "", ""])
    report.extra.append(
        (
            f"Session start: the baseline of {files} files, with content ids (medians of {repeat}; hashing budget "
            f"{contents.MAX_HASHED_BYTES >> 20} MiB, files up to {contents.MAX_HASHED_FILE >> 20} MiB)",
            ["checkout", "metadata only (before)", "with content ids", "cost", "files with a content id"],
            rows,
        )
    )


def main() -> int:
    return plain_main("contents", __doc__, "3 repetitions instead of 7", table)


if __name__ == "__main__":
    sys.exit(main())
