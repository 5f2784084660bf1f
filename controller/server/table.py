"""The sessions loaded in this controller process, by id: at most one ``LiveSession`` a session."""

from __future__ import annotations

from .live import LiveSession


class Loaded:
    """The table of loaded sessions. A session is loaded when a turn begins (or a change needs its container) and
    forgotten when it goes idle, is taken over, or is discarded; the store holds the rest."""

    def __init__(self) -> None:
        self._by_id: dict[str, LiveSession] = {}

    def get(self, session_id: str) -> LiveSession | None:
        return self._by_id.get(session_id)

    def add(self, live: LiveSession) -> None:
        self._by_id[live.session_id] = live

    def forget(self, live: LiveSession) -> bool:
        """Drop ``live``; False if the table no longer holds that object (it was replaced or dropped before)."""
        if self._by_id.get(live.session_id) is not live:
            return False
        del self._by_id[live.session_id]
        return True

    def pop(self, session_id: str) -> LiveSession | None:
        return self._by_id.pop(session_id, None)

    def all(self) -> list[LiveSession]:
        return list(self._by_id.values())

    def running(self) -> list[LiveSession]:
        """The sessions whose turn runs now."""
        return [live for live in self._by_id.values() if live.running]

    def is_running(self, session_id: str) -> bool:
        live = self._by_id.get(session_id)
        return live is not None and live.running
