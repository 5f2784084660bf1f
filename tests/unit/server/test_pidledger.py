"""The pids budget is the host's (issue 44, item 4): every controller process that admits sandboxes sees what the
others charged, through the host's ledger. Two processes here are real ones sharing a ledger directory."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from controller.config import Settings
from controller.errors import CapacityError
from controller.sandbox.isolation import host_pids
from controller.server.admission import Admission
from controller.server.hostpids import HostPids
from controller.server.pidledger import SUFFIX, Ledger
from controller.server.table import Loaded
from controller.wire.limits import Limits
from controller.workspace.manager import Workspaces

BUDGET = 400
RUNC_256 = Limits(pids=256)
"""Charged 256 + the proxy's 64 = 320: one fits a budget of 400, two do not (the red-team's repro)."""

HOLDER = """
import asyncio, sys
from pathlib import Path
from controller.config import Settings
from controller.sandbox.isolation import host_pids
from controller.server.admission import Admission
from controller.server.hostpids import HostPids
from controller.server.pidledger import Ledger
from controller.server.table import Loaded
from controller.wire.limits import Limits
from controller.workspace.manager import Workspaces

async def main():
    data = Path(sys.argv[2])
    admission = Admission(Settings(api_key="x", data_dir=data), Workspaces(data), Loaded(),
                          HostPids(int(sys.argv[3]), host_pids), Ledger(Path(sys.argv[1])))
    await admission.make_room(Limits(pids=256), [])
    print("admitted", flush=True)
    sys.stdin.readline()  # held until told
    if sys.argv[4] == "release":
        await admission.settle([])
        print("released", flush=True)
        sys.stdin.readline()

asyncio.run(main())
"""


def admission(ledger: Path, data: Path) -> Admission:
    return Admission(
        Settings(api_key="x", data_dir=data), Workspaces(data), Loaded(), HostPids(BUDGET, host_pids), Ledger(ledger)
    )


def holder(ledger: Path, data: Path, then: str = "exit") -> subprocess.Popen[str]:
    """Another controller process, which has admitted one sandbox of 256 pids under runc and holds it."""
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(ledger), str(data), str(BUDGET), then],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "admitted"
    return child


def done(child: subprocess.Popen[str]) -> None:
    assert child.stdin is not None and child.stdout is not None
    child.stdin.close()
    child.wait(timeout=60)
    child.stdout.close()


def test_a_second_process_is_refused_while_the_first_holds(tmp_path: Path) -> None:
    """Each process alone would admit its sandbox (320 of 400); together they would pass the budget, so the second
    is refused (429) for as long as the first holds its sandbox, and admitted once that process is gone."""
    ledger = tmp_path / "ledger"
    first = holder(ledger, tmp_path / "a")
    try:
        second = admission(ledger, tmp_path / "b")
        with pytest.raises(CapacityError, match=r"320 of them another controller process's\); this one needs 320"):
            asyncio.run(second.make_room(RUNC_256, []))
        assert not [p for p in ledger.glob("*" + SUFFIX) if str(os.getpid()) in p.name]
    finally:
        done(first)
    asyncio.run(second.make_room(RUNC_256, []))  # the first is gone: its reservation no longer counts


def test_a_release_reaches_the_other_process(tmp_path: Path) -> None:
    """A process whose sandboxes are removed writes its charge anew (each tick): the other is then admitted."""
    ledger = tmp_path / "ledger"
    first = holder(ledger, tmp_path / "a", then="release")
    try:
        second = admission(ledger, tmp_path / "b")
        with pytest.raises(CapacityError):
            asyncio.run(second.make_room(RUNC_256, []))
        assert first.stdin is not None and first.stdout is not None
        first.stdin.write("\n")
        first.stdin.flush()
        assert first.stdout.readline().strip() == "released"
        assert first.poll() is None, "the first process is still alive"
        asyncio.run(second.make_room(RUNC_256, []))
    finally:
        done(first)


def test_a_dead_holders_reservation_is_ignored_and_removed(tmp_path: Path) -> None:
    """A file whose holder ended (its pid gone, or another process's with a different start time) counts nothing
    and is removed; a live one's counts; malformed files count nothing."""
    ledger = tmp_path / "ledger"
    exited = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(exited.stdout)
    ledger.mkdir()
    (ledger / f"dead{SUFFIX}").write_text(json.dumps({"holder": f"pids:{dead_pid}:1", "charge": 10_000}))
    (ledger / f"reused{SUFFIX}").write_text(json.dumps({"holder": f"pids:{os.getppid()}:1", "charge": 10_000}))
    (ledger / f"junk{SUFFIX}").write_text("{not json" * 100)
    (ledger / f"negative{SUFFIX}").write_text(json.dumps({"holder": "pids:1:x", "charge": -5_000}))
    (ledger / f"link{SUFFIX}").symlink_to(ledger / f"dead{SUFFIX}")
    second = admission(ledger, tmp_path / "b")
    asyncio.run(second.make_room(RUNC_256, []))
    assert not (ledger / f"dead{SUFFIX}").exists() and not (ledger / f"reused{SUFFIX}").exists()
    asyncio.run(second.settle([]))  # its sandbox removed: the other process below counts what is left, nothing
    first = holder(ledger, tmp_path / "a")  # a live holder's file counts: the two together pass the budget
    try:
        with pytest.raises(CapacityError):
            asyncio.run(admission(ledger, tmp_path / "c").make_room(RUNC_256, []))
    finally:
        done(first)


def test_the_ledger_directory_is_shared_by_every_user(tmp_path: Path) -> None:
    """Made sticky and writable by everyone (as /tmp), so every user's controllers charge in the same one."""
    ledger = tmp_path / "shared"

    async def hold() -> None:
        entry = Ledger(ledger)
        async with entry.locked():
            entry.hold(320)

    asyncio.run(hold())
    assert ledger.stat().st_mode & 0o7777 == 0o1777
    (entry,) = ledger.glob("*" + SUFFIX)
    assert json.loads(entry.read_text())["charge"] == 320


@pytest.mark.skipif(os.geteuid() != 0, reason="gives the directory to another user")
def test_a_directory_others_may_empty_is_refused(tmp_path: Path) -> None:
    """Another user's directory that is not sticky lets everyone remove the others' files (their charges would go
    uncounted): no session is admitted through it. Sticky, it is used."""
    ledger = tmp_path / "theirs"
    ledger.mkdir()
    os.chown(ledger, 1000, 1000)
    ledger.chmod(0o777)
    with pytest.raises(CapacityError, match="not a directory Cubicle can trust"):
        asyncio.run(admission(ledger, tmp_path / "a").make_room(RUNC_256, []))
    ledger.chmod(0o1777)
    asyncio.run(admission(ledger, tmp_path / "a").make_room(RUNC_256, []))


async def test_an_unchanged_charge_is_not_written_again_but_a_removed_file_is(tmp_path: Path) -> None:
    """The tick settles every second: it writes (and locks) only when the charge changed or its file went."""
    ledger = Ledger(tmp_path / "ledger")
    assert ledger.says(0) and not ledger.says(5)
    async with ledger.locked():
        ledger.hold(5)
    (own,) = (tmp_path / "ledger").glob(f"*{SUFFIX}")
    written = own.stat().st_mtime_ns
    assert ledger.says(5) and not ledger.says(6) and not ledger.says(0)
    assert own.stat().st_mtime_ns == written
    own.unlink()  # judged dead by another process, or cleaned away
    assert not ledger.says(5)
    async with ledger.locked():
        ledger.hold(5)
    assert json.loads(next((tmp_path / "ledger").glob(f"*{SUFFIX}")).read_text())["charge"] == 5
    async with ledger.locked():
        ledger.hold(0)
    assert ledger.says(0) and not list((tmp_path / "ledger").glob(f"*{SUFFIX}"))
