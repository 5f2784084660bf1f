"""A row of the responsiveness table, and the small timing helpers its measurements share."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from bench.measure import Sample, smoke


@dataclass
class Measured:
    """One row: what was timed, its baseline (None where the bound is the only reference), and the bound."""

    id: str
    """Stable, for machine-readable output."""
    name: str
    ours: Sample
    baseline_name: str
    baseline: Sample | None
    target_s: float
    """The bound a test once asserted: the p95 of ``ours`` must be within it."""


async def until(check: Callable[[], Any], what: str, timeout: float = 60) -> None:
    """Poll ``check`` (run in a thread) every 10 ms until it is true; TimeoutError naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(check):
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout:g} s: {what}")
        await asyncio.sleep(0.01)


async def timed(fn: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    """Seconds ``fn()`` took, and what it returned."""
    start = time.perf_counter()
    value = await fn()
    return time.perf_counter() - start, value


def repeat(quick: bool) -> int:
    """How many times each row's operation runs (each takes a second or more; once in smoke mode)."""
    if smoke():
        return 1
    return 3 if quick else 8
