"""Red-team findings on the storage bounds (CUBICLE_SESSION_EVENTS_MB, gc --older-than / CUBICLE_RETENTION).

Each test states what should hold; each failed on the code it was first written against, and passes since the fixes. Sessions are real
`cubicle run`s of the scripted model on a real engine; the caps are set small so the runs stay cheap.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from controller.config import Settings
from controller.sandbox import owners
from controller.server.runtime import Runtime
from controller.server.sessions import Sessions
from controller.server.store import Store
from tests.integration.cli_helpers import backdate, cubicle, scripted_run

CAP_MB = 1
CAP = CAP_MB << 20
SLACK = CAP // 4
"""What the metadata of a few events past the cap may add; every test below overshoots by several caps."""


@pytest.fixture(autouse=True)
def _data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUBICLE_DATA_DIR", str(tmp_path / "data"))


def run(tmp_path: Path, repo: Path, name: str, calls: list[dict[str, Any]], *flags: str, text: str = "done") -> str:
    """A finished `cubicle run` whose model makes ``calls`` (one per step), then says ``text``; its session id."""
    turns = [{"content": [{"type": "tool_use", "name": "run_command", "input": c}]} for c in calls]
    turns.append({"content": [{"type": "text", "text": text}]})
    flags = ("--token-budget", "100000000", *(flags or ("--no-apply",)))
    return scripted_run(tmp_path, repo, name, turns, *flags, env={"CUBICLE_SESSION_EVENTS_MB": str(CAP_MB)})


def stored(tmp_path: Path, session_id: str) -> dict[str, int]:
    """Bytes of the session's stored events, by type."""
    with sqlite3.connect(tmp_path / "data" / "cubicle.db") as conn:
        rows = conn.execute(
            "SELECT type, SUM(length(CAST(data AS BLOB))) FROM events WHERE session_id = ? GROUP BY type",
            (session_id,),
        ).fetchall()
    conn.close()
    return {kind: int(size) for kind, size in rows}


FILL = {"command": "head -c 2000000 /dev/zero | tr '\\0' a"}
"""One output of event_output_chars (1 MiB): the session is at its cap after it."""


# ---------------------------------------------------------------------------------------------- the events cap


def test_one_output_of_control_characters_is_stored_at_six_times_its_counted_size(
    tmp_path: Path, make_repo: Callable[..., Path]
) -> None:
    """The cap is checked against the output's UTF-8 size, but JSON stores each control character as ``\\u0001``
    (6 bytes): one command's output, counted under 7/8 of the cap, is stored at 5x the cap."""
    session = run(tmp_path, make_repo(), "ctrl", [{"command": "head -c 900000 /dev/zero | tr '\\0' '\\1'"}])
    assert sum(stored(tmp_path, session).values()) <= CAP + SLACK, stored(tmp_path, session)


def test_tool_call_arguments_in_short_pieces_or_keys_are_stored_whole_past_the_cap(
    tmp_path: Path, make_repo: Callable[..., Path]
) -> None:
    """Only top-level string values over 1024 characters become a note: the same bytes split into 1000-character
    values, or carried in a key, are stored whole past the cap (the tool call is recorded before it is checked)."""
    split = {"command": "true", **{f"k{i}": "y" * 1000 for i in range(1500)}}
    keyed = {"command": "true", "z" * 1_000_000: 1}
    session = run(tmp_path, make_repo(), "args", [FILL, split, keyed])
    assert sum(stored(tmp_path, session).values()) <= CAP + SLACK, stored(tmp_path, session)


def test_model_text_past_the_cap_is_stored_whole_at_five_times_its_size(
    tmp_path: Path, make_repo: Callable[..., Path]
) -> None:
    """Text deltas are never bounded, and each ~24-character delta is its own ~120-byte event: 600 kB of model
    text past the cap stores ~3 MB."""
    session = run(tmp_path, make_repo(), "text", [FILL], text="w" * 600_000)
    by_type = stored(tmp_path, session)
    assert sum(by_type.values()) <= CAP + SLACK, by_type


def test_one_command_making_many_files_grows_the_applied_event_past_the_cap(
    tmp_path: Path, make_repo: Callable[..., Path]
) -> None:
    """The ``applied`` event lists every applied path, unbounded: one cheap command making 8000 files with
    200-character names (a few hundred bytes of model output) stores a 1.7 MB event under a 1 MiB cap."""
    make = {
        "command": "mkdir out && cd out && seq -f '%06g' 1 8000 | sed 's/$/-'$(head -c 193 /dev/zero | tr '\\0' p)'/' | xargs touch"
    }
    session = run(tmp_path, make_repo(), "paths", [make], "--apply")
    by_type = stored(tmp_path, session)
    assert sum(by_type.values()) <= CAP + SLACK, by_type


# ---------------------------------------------------------------------------------------------- gc --older-than


def test_gc_older_than_goes_on_past_a_session_whose_checkout_was_moved(
    tmp_path: Path, make_repo: Callable[..., Path]
) -> None:
    """A checkout moved or deleted since its session (a scratch clone) makes the layer scan raise RepoChangedError,
    which expire does not catch: gc exits 4 and removes nothing after it, and since the oldest session comes first,
    every later gc and every hourly CUBICLE_RETENTION sweep stops at the same session for good."""
    moved = make_repo("moved")
    first = run(tmp_path, moved, "moved", [{"command": "true"}])
    second = run(tmp_path, make_repo("clean"), "clean", [{"command": "true"}])
    backdate(tmp_path / "data" / "cubicle.db", first, 3 * 3600)
    backdate(tmp_path / "data" / "cubicle.db", second, 2 * 3600)
    moved.rename(tmp_path / "moved-away")

    done = cubicle("gc", "--older-than", "1h")
    assert done.returncode == 0, done.stderr
    assert f"removed the session {second}" in done.stdout
    store = Store(tmp_path / "data" / "cubicle.db")
    try:
        assert store.get(second) is None
    finally:
        store.close()


def test_expire_leaves_a_session_that_a_follow_up_started_during_the_sweep(
    tmp_path: Path, make_repo: Callable[..., Path]
) -> None:
    """expire lists the ended sessions once, then scans each one's layer (seconds for a large one) before deleting
    it. A follow-up sent meanwhile (`cubicle serve`, another process) makes a listed session running; the purge
    must look again and leave it, not remove its container, layer and record under the running turn."""
    first = run(tmp_path, make_repo("a"), "a", [{"command": "true"}])
    second = run(tmp_path, make_repo("b"), "b", [{"command": "true"}])
    backdate(tmp_path / "data" / "cubicle.db", first, 3 * 3600)
    backdate(tmp_path / "data" / "cubicle.db", second, 2 * 3600)
    data = tmp_path / "data"
    settings = Settings(data_dir=data)

    async def sweep() -> tuple[list[str], bool]:
        store = Store(data / "cubicle.db")
        runtime = Runtime(settings)
        sessions = Sessions(settings, store, runtime)
        try:
            listed = [record.id for record, _ in store.ended_before(time.time() - 3600)]
            # the second session's follow-up begins in a live process (this one) after the listing
            store.update(second, status="running", owner=owners.owner_token("redteam-follow-up"))
            return listed, await sessions.purge_ended(second)
        finally:
            await runtime.close()
            store.close()

    listed, purged = asyncio.run(sweep())
    assert second in listed and not purged
    store = Store(data / "cubicle.db")
    try:
        assert store.get(second) is not None, "a running session was removed"
    finally:
        store.close()
    assert (data / "workspaces" / second).exists()
