"""Waiting for something that happens on its own time: a container starting, a process exiting, a line arriving.

``eventually(check, what=...)`` calls ``check`` until its value satisfies ``until`` (by default: is truthy)
and returns that value. When the time is up it fails with an AssertionError that names what was
awaited and the last value ``check`` returned, or the last exception it raised among ``ignoring``:

    record = eventually(lambda: api.get(sid), until=lambda r: r["status"] == "idle", what="the session idles")

Any exception not in ``ignoring`` ends the wait at once. ``eventually_async`` is the same for a
coroutine; its ``check`` may return a value or an awaitable (wrap blocking calls in ``asyncio.to_thread``).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

SHOWN_CHARS = 3000  # of the last value, in the failure message: a terminal's screen, a session record


def eventually(
    check: Callable[[], T],
    *,
    what: str,
    until: Callable[[T], object] = bool,
    timeout: float = 30,
    interval: float = 0.1,
    ignoring: tuple[type[BaseException], ...] = (),
) -> T:
    """``check()``'s first value that satisfies ``until``, trying every ``interval`` seconds for ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except ignoring as raised:
            last: object = raised
        else:
            if until(value):
                return value
            last = value
        if time.monotonic() >= deadline:
            raise AssertionError(_not_within(timeout, what, last))
        time.sleep(interval)


async def eventually_async(
    check: Callable[[], Awaitable[T] | T],
    *,
    what: str,
    until: Callable[[T], object] = bool,
    timeout: float = 30,
    interval: float = 0.1,
    ignoring: tuple[type[BaseException], ...] = (),
) -> T:
    """:func:`eventually` for the event loop: it waits with ``asyncio.sleep``, so other tasks run meanwhile."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value: Any = check()
            if inspect.isawaitable(value):
                value = await value
        except ignoring as raised:
            last: object = raised
        else:
            if until(value):
                return value  # type: ignore[no-any-return]
            last = value
        if time.monotonic() >= deadline:
            raise AssertionError(_not_within(timeout, what, last))
        await asyncio.sleep(interval)


def _not_within(timeout: float, what: str, last: object) -> str:
    if isinstance(last, BaseException):
        return f"not within {timeout:g}s: {what}; the last try raised {last!r}"
    shown = last if isinstance(last, str) else repr(last)
    if len(shown) > SHOWN_CHARS:
        shown = "…" + shown[-SHOWN_CHARS:]
    return f"not within {timeout:g}s: {what}; the last try returned:\n{shown}"
