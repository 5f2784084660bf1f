"""A finished session written straight into a store, for the sections that read one back (the CLI, the page)."""

from __future__ import annotations

from pathlib import Path

from controller.server.store import Row, Store
from controller.wire.events import Event


def store_session(data_dir: Path, session_id: str, repo: Path, task: str, events: list[Event], steps: int) -> str:
    """Write session ``session_id`` on ``repo``, idle after a turn that ended, with ``events`` numbered in order,
    into ``data_dir``'s SQLite store; returns its id."""
    store = Store(data_dir / "cubicle.db")
    try:
        store.insert(Row.fresh(session_id, str(repo), task, "m", status="idle", finish_reason="end_turn", steps=steps))
        for seq, event in enumerate(events, 1):
            store.append_event(event.model_copy(update={"seq": seq}))
    finally:
        store.close()
    return session_id
