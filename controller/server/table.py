"""The sessions loaded in this controller process, by id: at most one ``LiveSession`` a session."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .live import LiveSession


class Loaded:
    """The table of loaded sessions. A session is loaded when a turn begins (or a change needs its container) and
    forgotten when it goes idle, is taken over, or is discarded; the store holds the rest."""

    def __init__(self) -> None:
        self._by_id: dict[str, LiveSession] = {}
        self._leaving: list[LiveSession] = []
        """Sessions forgotten whose container may still be being removed (``LiveSession.removed``)."""

    def get(self, session_id: str) -> LiveSession | None:
        return self._by_id.get(session_id)

    def add(self, live: LiveSession) -> None:
        self._by_id[live.session_id] = live

    def forget(self, live: LiveSession) -> bool:
        """Drop ``live``; False if the table no longer holds that object (it was replaced or dropped before)."""
        if self._by_id.get(live.session_id) is not live:
            return False
        del self._by_id[live.session_id]
        self._leaving.append(live)
        return True

    def pop(self, session_id: str) -> LiveSession | None:
        live = self._by_id.pop(session_id, None)
        if live is not None:
            self._leaving.append(live)
        return live

    def holding(self) -> list[LiveSession]:
        """The sessions whose containers may hold host pids: the loaded ones, and those forgotten whose container
        is still being removed (an idle timer's or a takeover's stop runs in the background)."""
        self._leaving = [live for live in self._leaving if not live.removed]
        return [*self._by_id.values(), *self._leaving]

    def all(self) -> list[LiveSession]:
        return list(self._by_id.values())

    def running(self) -> list[LiveSession]:
        """The sessions whose turn runs now."""
        return [live for live in self._by_id.values() if live.running]

    def is_running(self, session_id: str) -> bool:
        live = self._by_id.get(session_id)
        return live is not None and live.running
