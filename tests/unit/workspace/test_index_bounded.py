"""A large ``.git/index`` is read where walks are (issue 44, item 6): in the memory-bounded child, never in the
controller's process, and a normal index still vouches for its files' content ids as before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from controller.workspace.baseline import load_blobs
from controller.workspace.buildinputs import BuildInputs
from controller.workspace.contents import MAX_HASHED_FILE
from controller.workspace.manager import Workspaces
from controller.workspace.offload import Offload

MiB = 1 << 20
ENTRIES = 600_000
BOUND = 64 * MiB
"""How much the controller's memory may grow while a session over that checkout starts: parsing its index
in-process took about 250 MiB (900,000 entries cost 339 MiB in the red team's run)."""
EMPTY_BLOB = "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"


def git(repo: Path, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], input=stdin, capture_output=True, text=True, check=True)
    return done.stdout


def big_index(repo: Path) -> None:
    """A real index of ``ENTRIES`` entries (48 MB), written by git itself; the files need not exist."""
    git(repo, "init", "-q", ".")
    lines = "".join(f"100644 {EMPTY_BLOB}\td{n // 1000:03d}/f{n:06d}\n" for n in range(ENTRIES))
    git(repo, "update-index", "--index-info", stdin=lines)


START = """
import json, sys
from pathlib import Path
from controller.workspace.buildinputs import BuildInputs
from controller.workspace.contents import MAX_HASHED_FILE
from controller.workspace.manager import Workspaces
from controller.workspace.offload import Offload

def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) * 1024

data, small, big = map(Path, sys.argv[1:4])
workspaces = Workspaces(data, lambda _: None, offload=Offload(memory_mb=1024, workers=1))
workspaces.create("warm", small, definition=((), BuildInputs()))  # the fork server started, the modules loaded
before = status("VmRSS")
workspaces.create("big", big, definition=((), BuildInputs()))
print(json.dumps({"growth": status("VmHWM") - before}))
"""


def test_a_huge_index_costs_the_controller_nothing_at_session_start(tmp_path: Path) -> None:
    big, small = tmp_path / "big", tmp_path / "small"
    big.mkdir()
    small.mkdir()
    big_index(big)
    assert ENTRIES * 60 < (big / ".git" / "index").stat().st_size < 64 * MiB  # read, not skipped for its size
    done = subprocess.run(
        [sys.executable, "-c", START, str(tmp_path / "data"), str(small), str(big)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=os.getcwd(),
    )
    assert done.returncode == 0, done.stderr
    growth = json.loads(done.stdout)["growth"]
    assert growth < BOUND, f"the controller grew by {growth / MiB:.0f} MiB at the session's start"


def test_a_normal_index_still_vouches_for_content_ids(tmp_path: Path) -> None:
    """The index, read in the child, still names each file's blob without a byte being read (the racy rule kept:
    the files are older than the index): a file past what session start hashes has its id from the index alone."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", ".")
    (repo / "a.txt").write_text("alpha\n")
    (repo / "src").mkdir()
    (repo / "src" / "b.py").write_text("print('b')\n")
    (repo / "big.bin").write_bytes(os.urandom(MAX_HASHED_FILE + 1))
    names = ("a.txt", "src/b.py", "big.bin")
    for rel in names:
        os.utime(repo / rel, (1_600_000_000, 1_600_000_000))
    git(repo, "add", *names)
    expected = {rel: git(repo, "hash-object", rel).strip() for rel in names}
    workspaces = Workspaces(tmp_path / "data", lambda _: None, offload=Offload(memory_mb=256, workers=1))
    layer = workspaces.create("s1", repo, definition=((), BuildInputs()))
    assert load_blobs(layer.baseline_file) == expected
