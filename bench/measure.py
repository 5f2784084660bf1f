"""Timing helpers and the markdown table the benchmark prints."""

from __future__ import annotations

import resource
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Sample:
    """Durations in seconds."""

    values: list[float]

    def pct(self, q: float) -> float:
        ordered = sorted(self.values)
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]

    @property
    def p50(self) -> float:
        return statistics.median(self.values)

    @property
    def p95(self) -> float:
        return self.pct(0.95)


async def time_async(fn: Callable[[], Awaitable[Any]], repeat: int, warmup: int = 3) -> Sample:
    for _ in range(warmup):
        await fn()
    values = []
    for _ in range(repeat):
        start = time.perf_counter()
        await fn()
        values.append(time.perf_counter() - start)
    return Sample(values)


async def time_pair(
    first: Callable[[], Awaitable[Any]], second: Callable[[], Awaitable[Any]], repeat: int
) -> tuple[Sample, Sample]:
    """Time two operations call by call in turn, so that a busy moment of the machine hits both alike."""
    for _ in range(3):
        await first()
        await second()
    samples: tuple[list[float], list[float]] = ([], [])
    for i in range(2 * repeat):
        fn, values = (first, samples[0]) if i % 2 == 0 else (second, samples[1])
        start = time.perf_counter()
        await fn()
        values.append(time.perf_counter() - start)
    return Sample(samples[0]), Sample(samples[1])


def time_sync(fn: Callable[[], Any], repeat: int, warmup: int = 2) -> Sample:
    for _ in range(warmup):
        fn()
    values = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        values.append(time.perf_counter() - start)
    return Sample(values)


def peak_rss_mb() -> float:
    """This process's peak resident set size (ru_maxrss is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms" if seconds < 1 else f"{seconds:.2f} s"


@dataclass
class Row:
    name: str
    ours: Sample
    baseline_name: str
    baseline: Sample
    target: str = ""
    met: bool | None = None

    @property
    def ratio(self) -> float:
        return self.ours.p50 / self.baseline.p50 if self.baseline.p50 else float("inf")


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    extra: list[tuple[str, list[str], list[list[str]]]] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)

    def check(self, met: bool, text: str) -> bool:
        if not met:
            self.missed.append(text)
        return met

    def render(self) -> str:
        out = [
            "| measurement | Cubicle p50 | Cubicle p95 | baseline | baseline p50 | baseline p95 | ratio (p50) | target | met |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        if not self.rows:
            out = []
        for r in self.rows:
            met = "" if r.met is None else ("yes" if r.met else "**no**")
            out.append(
                f"| {r.name} | {ms(r.ours.p50)} | {ms(r.ours.p95)} | {r.baseline_name} | {ms(r.baseline.p50)} | "
                f"{ms(r.baseline.p95)} | {r.ratio:.3f} | {r.target} | {met} |"
            )
        for title, header, rows in self.extra:
            out += ["", f"**{title}**", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            out += ["| " + " | ".join(row) + " |" for row in rows]
        out.append("")
        out += [f"target missed: {m}" for m in self.missed] or ["every target met"]
        return "\n".join(out)
