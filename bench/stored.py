"""A finished session written straight into a store, for the sections that read one back (the CLI, the page)."""

from __future__ import annotations

import time
from pathlib import Path

from controller.server.store import Row, Store
from controller.wire.events import Event, Usage
from controller.wire.limits import Limits


def store_session(data_dir: Path, session_id: str, repo: Path, task: str, events: list[Event], steps: int) -> str:
    """Write session ``session_id`` on ``repo``, idle after a turn that ended, with ``events`` numbered in order,
    into ``data_dir``'s SQLite store; returns its id."""
    store = Store(data_dir / "cubicle.db")
    try:
        now = time.time()
        store.insert(
            Row(
                id=session_id,
                repo=str(repo),
                task=task,
                model="m",
                status="idle",
                finish_reason="end_turn",
                usage=Usage(),
                steps=steps,
                limits=Limits(),
                created_at=now,
                updated_at=now,
            )
        )
        for seq, event in enumerate(events, 1):
            store.append_event(event.model_copy(update={"seq": seq}))
    finally:
        store.close()
    return session_id
