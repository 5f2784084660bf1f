"""Every walk of a layer is bounded by what the session may make, not by what the agent chose to make.

Hard links cost the agent a name each and no inode; an xattr on one inode is seen through
every name. A checkpoint keeps each inode once, the agent's xattrs up to an allowance, and a
layer holding more names than the session's limit is never checkpointed or applied: its
listing stops at the limit and says so.
"""

from __future__ import annotations

import json
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from controller.errors import TooManyEntriesError, WalkMemoryError, WalkTimeoutError
from controller.wire.changeset import Disposition
from controller.workspace import apply, checkpoint, listed, names, rewind, scan
from controller.workspace import layer as layers
from controller.workspace.changes import MAX_PATH_BYTES, listed_size
from controller.workspace.checkpoints import MAX_XATTR_BYTES, numbers, read_manifest
from controller.workspace.manager import INLINE_NAMES, Workspaces
from controller.workspace.offload import Offload
from tests.unit.workspace.overlay import Workspace

LINKS = 2000
XATTR = b"v" * 4000


def test_hard_links_are_kept_once_with_their_xattrs_and_come_back_as_links(ws: Workspace) -> None:
    ws.agent(f"echo x > f; mkdir d; for i in $(seq {LINKS}); do ln f d/$i; done")
    os.setxattr(ws.mnt / "f", "user.big", XATTR)  # on the inode: every name shows it
    ws.stop()
    checkpoint(ws.layer)
    manifest = ws.layer.checkpoints / "1.json"
    assert manifest.stat().st_size < 200_000  # one name each; per name, the xattr alone would be 16 MB of hex
    kinds = [e[1] for e in read_manifest(manifest) if e[0].startswith("d/") or e[0] == "f"]
    assert kinds.count("f") == 1 and kinds.count("h") == LINKS
    ws.agent("rm -r d f; echo other > f")
    ws.stop()
    rewind(ws.layer, 1)
    first = os.stat(ws.layer.upper / "f")
    assert first.st_nlink == LINKS + 1 and os.stat(ws.layer.upper / "d" / "7").st_ino == first.st_ino
    assert os.getxattr(ws.layer.upper / "d" / "7", "user.big") == XATTR
    assert (ws.layer.upper / "d" / "7").read_text() == "x\n"


def test_the_agents_xattrs_are_kept_up_to_an_allowance_and_overlays_markers_always(ws: Workspace) -> None:
    count = MAX_XATTR_BYTES // len(XATTR) + 200
    ws.agent(f"mkdir aaa; cd aaa; seq {count} | xargs touch")
    for name in os.listdir(ws.mnt / "aaa"):
        os.setxattr(ws.mnt / "aaa" / name, "user.big", XATTR)
    ws.agent("rm -rf docs; mkdir docs")  # an opaque directory, walked after aaa/ spent the allowance
    ws.stop()
    checkpoint(ws.layer)
    entries = {e[0]: e for e in read_manifest(ws.layer.checkpoints / "1.json")}
    kept = sum(1 for path, e in entries.items() if path.startswith("aaa/") and "user.big" in e[6])
    assert 0 < kept < count and kept * len(XATTR) <= MAX_XATTR_BYTES
    assert entries["docs"][6] == {"user.overlay.opaque": b"y".hex()}
    rewind(ws.layer, 1)
    assert scan(ws.layer) and not (ws.layer.upper / "docs" / "a.txt").exists()


def test_a_layer_past_its_names_limit_is_listed_up_to_it_and_never_checkpointed_or_applied(ws: Workspace) -> None:
    ws.restart(names=1024)
    ws.agent("echo small > small.txt")
    ws.stop()
    assert checkpoint(ws.layer) == 1
    ws.agent("mkdir many; cd many; seq 1100 | xargs touch")
    ws.stop()
    with pytest.raises(TooManyEntriesError) as raised:
        checkpoint(ws.layer)
    assert raised.value.limit == 1024 and "1,024" in str(raised.value)
    assert numbers(ws.layer) == [1] and sorted(p.name for p in ws.layer.checkpoints.iterdir()) == ["1.json", "blobs"]
    found = scan(ws.layer)
    assert found.truncated_at == 1024 and 0 < len(found) <= 1024
    with pytest.raises(TooManyEntriesError):
        apply(ws.layer)
    assert not (ws.repo / "small.txt").exists() and not (ws.repo / "many").exists()
    rewind(ws.layer, 1)
    assert scan(ws.layer).truncated_at is None
    assert apply(ws.layer).applied == ["small.txt"]


def test_a_listing_is_bounded_with_what_apply_writes_first_and_apply_still_writes_the_rest(ws: Workspace) -> None:
    ws.start_with({".gitignore": "build/\n"})
    ws.agent("mkdir build; cd build; seq 300 | xargs touch; cd ..; for f in 1 2 3; do echo $f > zz$f.txt; done")
    ws.stop()
    found = scan(ws.layer)
    few = listed(found, most=4)
    assert [c.path for c in few][-3:] == ["zz1.txt", "zz2.txt", "zz3.txt"]  # the edits, though the flood sorts first
    assert len(few) == 4 and few.unlisted == len(found) - 4 and few.truncated_at is None
    assert few[0].disposition == Disposition.IGNORED and few.unlisted_applied == 0
    two = listed_size(found[-1]) * 2
    long = listed(found, most_bytes=two)
    assert [c.path for c in long] == ["zz1.txt", "zz2.txt"] and long.unlisted == len(found) - 2
    assert long.unlisted_applied == 1
    assert listed(found).unlisted == 0 and listed(found) == found
    assert apply(ws.layer).applied == ["zz1.txt", "zz2.txt", "zz3.txt"]


def test_a_flood_of_definition_files_or_escapes_cannot_push_the_edits_out_of_a_listing(ws: Workspace) -> None:
    ws.agent("mkdir -p .devcontainer && cd .devcontainer && seq 50 | xargs touch && cd .. && echo x > src.py")
    (ws.mnt / ("e" + "\x01" * 100)).touch()  # each character six bytes of JSON
    ws.stop()
    found = scan(ws.layer)
    few = listed(found, most=2)
    assert [c.path for c in few][-1] == "src.py" and few.unlisted_applied == 0
    assert {c.disposition for c in few} == {Disposition.APPLY}  # the escaped name and src.py, not the definitions
    assert listed_size(next(c for c in found if c.path.startswith("e"))) > 6 * 100


def test_a_manifest_of_the_release_before_is_still_rewound_to(ws: Workspace) -> None:
    ws.agent("echo one > one.txt")
    ws.stop()
    checkpoint(ws.layer)
    entries = list(read_manifest(ws.layer.checkpoints / "1.json"))
    (ws.layer.checkpoints / "1.json").write_text(json.dumps(entries, separators=(",", ":")))  # one JSON array
    ws.agent("rm one.txt; echo two > two.txt")
    ws.stop()
    checkpoint(ws.layer)
    rewind(ws.layer, 1)
    assert (ws.layer.upper / "one.txt").read_text() == "one\n" and not (ws.layer.upper / "two.txt").exists()


def test_counting_names_stops_one_past_the_limit(tmp_path: Path) -> None:
    for i in range(30):
        (tmp_path / f"d{i % 3}").mkdir(exist_ok=True)
        (tmp_path / f"d{i % 3}" / f"f{i}").write_text("")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert names.count(fd, 1000) == 33
        assert names.count(fd, 10) == 11
        listed, more = names.listing(fd, 2)
        assert len(listed) == 2 and more and listed == sorted(listed)
    finally:
        os.close(fd)


def _allocate(megabytes: int) -> int:
    return len(bytearray(megabytes << 20))


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _refuse(limit: int) -> None:
    raise TooManyEntriesError(limit)


def test_a_walk_past_its_memory_fails_alone_and_the_next_one_runs() -> None:
    offload = Offload(memory_mb=256, workers=1)
    try:
        assert offload.run(_allocate, 64) == 64 << 20
        with pytest.raises(WalkMemoryError, match="256 MiB"):
            offload.run(_allocate, 512)
        with pytest.raises(WalkMemoryError, match="killed"):
            offload.run(_die)
        with pytest.raises(TooManyEntriesError) as raised:  # the child's own errors come back whole
            offload.run(_refuse, 4096)
        assert raised.value.limit == 4096
        assert offload.run(_allocate, 1) == 1 << 20
    finally:
        offload.close()


def test_more_walks_than_workers_all_finish() -> None:
    """More calls than workers wait for a slot, each in a child of its own (a pool with max_tasks_per_child can
    stop replacing its workers and hang: CPython gh-115634)."""
    offload = Offload(memory_mb=256, workers=2)
    try:
        with ThreadPoolExecutor(8) as threads:
            sizes = list(threads.map(lambda n: offload.run(_allocate, n), range(1, 9)))
        assert sizes == [n << 20 for n in range(1, 9)]
    finally:
        offload.close()


def test_names_deeper_than_any_walk_reads_count_as_past_the_limit(ws: Workspace) -> None:
    """A red-team finding: the count stopped at 256 levels, so a million links below them went uncounted."""
    ws.agent("i=0; while [ $i -lt 260 ]; do mkdir d; cd d; i=$((i+1)); done; touch a b c")
    ws.stop()
    fd = os.open(ws.layer.upper, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert names.count(fd, 10_000) == 10_001
    finally:
        os.close(fd)
    with pytest.raises(TooManyEntriesError):
        checkpoint(ws.layer)


def test_a_path_longer_than_any_walk_keeps_is_listed_once_and_nothing_below_it_is_read(ws: Workspace) -> None:
    """A red-team finding: 5,000 names under 255-byte directories made 64 KB paths, a 314 MB listing."""
    deep = "/".join(["n" * 250] * 13)  # 3,262 bytes
    ws.agent(f"mkdir -p {deep} && cd {deep} && touch one two three")
    ws.stop()
    found = scan(ws.layer)
    long = [c for c in found if len(c.path.encode()) > MAX_PATH_BYTES]
    assert len(long) == 1 and long[0].disposition == Disposition.UNSAFE and "longer than" in long[0].reason
    assert not any(c.path.endswith(("one", "two", "three")) for c in found)


def _sleep(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def test_a_walk_past_its_deadline_is_stopped() -> None:
    offload = Offload(memory_mb=256, workers=1, timeout_s=1)
    try:
        with pytest.raises(WalkTimeoutError):
            offload.run(_sleep, 300)
        offload.timeout_s = 120  # a fresh child's start on a busy machine may itself take a second
        assert offload.run(_sleep, 0) == 0  # the slot is free again: the sleeper (300 s, past 120) was stopped
    finally:
        offload.close()


def test_a_large_layer_is_counted_in_a_walks_child(ws: Workspace) -> None:
    ws.agent("mkdir many; cd many; seq 300 | xargs touch")
    ws.stop()
    workspaces = Workspaces(ws.data, offload=Offload(memory_mb=256, workers=1))
    try:
        assert workspaces.count_names(ws.layer, 10_000) == layers.count_names(ws.layer, 10_000) >= 301
        assert workspaces.count_names(ws.layer, 100) == 101
    finally:
        workspaces.close()


def _layer_with(data_dir: Path, root: Path, session_id: str, files: int) -> None:
    """A session's layer whose upper holds ``files`` files the agent wrote (as the checkout's owner, under root)."""
    repo = root / session_id
    repo.mkdir()
    (repo / "README.md").write_text("# repo\n")
    made = layers.create(data_dir, session_id, repo)
    for n in range(files):
        (made.upper / f"f{n}.py").write_text("VALUE = 1\n")
    if os.geteuid() == 0:
        for path in [repo, *repo.iterdir(), *made.upper.iterdir()]:
            os.chown(path, 1000, 1000)


def test_a_one_shot_command_lists_a_small_layer_itself_and_a_large_one_in_the_bounded_child(tmp_path: Path) -> None:
    """With ``inline_small`` (a CLI command), a layer of few names is listed in the calling process, sparing the
    start of the walks' fork server; one past ``INLINE_NAMES`` still goes to the child and its memory ceiling."""
    data_dir = tmp_path / "data"
    _layer_with(data_dir, tmp_path, "small", 3)
    _layer_with(data_dir, tmp_path, "large", INLINE_NAMES + 1)
    starved = Offload(memory_mb=1, workers=1)  # no walk's child can list anything within 1 MiB
    try:
        one_shot = Workspaces(data_dir, offload=starved, inline_small=True)
        assert sorted(c.path for c in one_shot.changes("small")) == ["f0.py", "f1.py", "f2.py"]
        with pytest.raises(WalkMemoryError):
            one_shot.changes("large")
        with pytest.raises(WalkMemoryError):  # a server lists every layer in the child
            Workspaces(data_dir, offload=starved).changes("small")
    finally:
        starved.close()
