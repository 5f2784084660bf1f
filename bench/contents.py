"""Session start with content ids, on a 20,000-file repository: what judging conflicts by content costs.

A new session records the checkout's baseline (``workspace.baseline.record``). With content
ids it also parses the checkout's ``.git/index`` (which vouches for the tracked files whose
stat matches) and hashes what the index does not vouch for, within a budget. The baseline
row is the same record without content ids (the metadata-only record sessions made before),
timed in the same run on the same repository. No Docker needed: ``python -m bench.contents``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.measure import Report, ms
from bench.workspace import DIRS, PER_DIR, timed
from controller.workspace import baseline, contents


def build(root: Path, committed: bool) -> Path:
    """20,000 files of 60 lines; ``committed``: a git repository whose index holds them all, written after them."""
    repo = root / ("committed" if committed else "plain")
    for d in range(DIRS):
        folder = repo / f"pkg{d:03d}"
        folder.mkdir(parents=True)
        for f in range(PER_DIR):
            (folder / f"mod{f:03d}.py").write_text("".join(f"line {i} of {d}/{f}\n" for i in range(60)))
    if committed:
        past = time.time() - 60  # older than the index, as in a checkout worked on before (git's racy-clean rule)
        for path in repo.rglob("*.py"):
            os.utime(path, (past, past))
        git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.com"]
        subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
        subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
        subprocess.run([*git, "commit", "-qm", "bench"], cwd=repo, check=True)
    return repo


def table(report: Report, quick: bool) -> None:
    repeat = 3 if quick else 7
    with tempfile.TemporaryDirectory(prefix="cubicle-bench-contents-") as tmp:
        committed, plain = build(Path(tmp), True), build(Path(tmp), False)
        rows = []
        for name, repo in (("a git checkout, every file in its index", committed), ("no git index", plain)):
            before = timed(lambda repo=repo: baseline.record(repo, with_contents=False), repeat)  # type: ignore[misc]
            after = timed(lambda repo=repo: baseline.record(repo), repeat)  # type: ignore[misc]
            known = len(baseline.record(repo).blobs)
            rows.append([name, ms(before), ms(after), f"+{ms(after - before)}", f"{known:,} of {DIRS * PER_DIR:,}"])
        root = os.open(committed, os.O_RDONLY | os.O_DIRECTORY)
        try:
            parse = timed(lambda: contents.read_index(root), repeat)
        finally:
            os.close(root)
        rows.append(["  of which: parsing the 20,000-entry .git/index", "", ms(parse), "", ""])
    report.extra.append(
        (
            f"Session start: the baseline of 20,000 files, with content ids (medians of {repeat}; hashing budget "
            f"{contents.MAX_HASHED_BYTES >> 20} MiB, files up to {contents.MAX_HASHED_FILE >> 20} MiB)",
            ["checkout", "metadata only (before)", "with content ids", "cost", "files with a content id"],
            rows,
        )
    )


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.contents", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="3 repetitions instead of 7")
    args = parser.parse_args()
    report = Report()
    table(report, args.quick)
    print(report.render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
