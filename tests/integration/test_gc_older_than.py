"""`cubicle gc --older-than`: old ended sessions go (record, events, layer, checkpoints); running ones, recent ones
and ones whose changes nobody applied or discarded stay. Sessions are real `cubicle run`s on a real engine."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from controller.sandbox import owners
from controller.server.store import Store
from tests.integration.cli_helpers import backdate, cubicle, scripted_run


@pytest.fixture(autouse=True)
def _data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUBICLE_DATA_DIR", str(tmp_path / "data"))


def run(tmp_path: Path, repo: Path, name: str, write: bool) -> str:
    """A finished `cubicle run` (changes kept, not applied); its session id."""
    first = {"command": "echo made > made.txt"} if write else {"command": "true"}
    turns = [
        {"content": [{"type": "tool_use", "name": "run_command", "input": first}]},
        {"content": [{"type": "text", "text": "done"}]},
    ]
    return scripted_run(tmp_path, repo, name, turns, "--no-apply")


def test_gc_older_than_removes_exactly_the_old_ended_sessions(tmp_path: Path, make_repo: Callable[..., Path]) -> None:
    data = tmp_path / "data"
    old_clean = run(tmp_path, make_repo("a"), "old-clean", write=False)
    old_changes = run(tmp_path, make_repo("b"), "old-changes", write=True)
    old_running = run(tmp_path, make_repo("c"), "old-running", write=False)
    store = Store(data / "cubicle.db")
    # as a run still going shows in the database: running, owned by a live process (this one)
    store.update(old_running, status="running", owner=owners.owner_token("gc-test"))
    store.close()
    for old in (old_clean, old_changes, old_running):
        backdate(data / "cubicle.db", old, 2 * 3600)
    recent = run(tmp_path, make_repo("d"), "recent", write=False)

    done = cubicle("gc", "--older-than", "1h")
    assert done.returncode == 0, done.stderr
    assert re.search(rf"removed the session {old_clean} \(last active 2 hours ago\)", done.stdout)
    assert (
        f"kept the session {old_changes}: 1 change not applied (apply or discard them, or add --include-unapplied)"
        in done.stdout
    )
    assert "1 old session removed, 1 kept for their changes" in done.stdout

    store = Store(data / "cubicle.db")
    try:
        assert store.get(old_clean) is None and store.events_after(old_clean, 0) == []
        assert store.messages(old_clean) == []
        assert {s for s in (old_changes, old_running, recent) if store.get(s) is not None} == {
            old_changes,
            old_running,
            recent,
        }
    finally:
        store.close()
    layers = data / "workspaces"
    assert not (layers / old_clean).exists()
    assert {p.name for p in layers.iterdir()} >= {old_changes, old_running, recent}

    listed = cubicle("sessions", env={"COLUMNS": "200"})
    assert all(s in listed.stdout for s in (old_changes, old_running, recent)) and old_clean not in listed.stdout

    forced = cubicle("gc", "--older-than", "1h", "--include-unapplied")
    assert forced.returncode == 0, forced.stderr
    assert f"removed the session {old_changes}" in forced.stdout and old_running not in forced.stdout
    assert not (layers / old_changes).exists() and (layers / old_running).exists()


def test_a_duration_that_is_not_one_is_a_usage_error() -> None:
    done = cubicle("gc", "--older-than", "soon")
    assert done.returncode == 2
    shown = " ".join(done.stderr.replace("│", " ").split())
    assert "'soon' is not a duration; use a number and a unit: 90s, 30m, 12h, 7d or 2w." in shown
