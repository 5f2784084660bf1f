"""Timing helpers, the markdown tables the benchmark prints and the JSON it writes.

In smoke mode (``python -m bench --smoke``, ``set_smoke``) every repetition count the helpers are given is cut to
``SMOKE_REPEAT`` and every warm-up to one, and the sections that do a fixed amount of work ask ``smoke()`` for a
small one: the numbers mean nothing then, only that each section still runs to its table.
"""

from __future__ import annotations

import argparse
import re
import resource
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SMOKE_REPEAT = 3
"""Repetitions of anything timed in smoke mode."""
_smoke = [False]


def set_smoke(on: bool) -> None:
    """Smoke mode on or off for this process (``python -m bench --smoke``)."""
    _smoke[0] = on


def smoke() -> bool:
    """Whether this run only checks that each section still runs (a few repetitions, small sizes)."""
    return _smoke[0]


def repetitions(n: int) -> int:
    """``n`` repetitions, or ``SMOKE_REPEAT`` at most in smoke mode."""
    return min(n, SMOKE_REPEAT) if _smoke[0] else n


def warmups(n: int) -> int:
    """``n`` warm-up calls, or one at most in smoke mode."""
    return min(n, 1) if _smoke[0] else n


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

    @property
    def p99(self) -> float:
        return self.pct(0.99)


async def time_async(fn: Callable[[], Awaitable[Any]], repeat: int, warmup: int = 3) -> Sample:
    for _ in range(warmups(warmup)):
        await fn()
    values = []
    for _ in range(repetitions(repeat)):
        start = time.perf_counter()
        await fn()
        values.append(time.perf_counter() - start)
    return Sample(values)


async def time_pair(
    first: Callable[[], Awaitable[Any]], second: Callable[[], Awaitable[Any]], repeat: int
) -> tuple[Sample, Sample]:
    """Time two operations call by call in turn, so that a busy moment of the machine hits both alike."""
    for _ in range(warmups(3)):
        await first()
        await second()
    samples: tuple[list[float], list[float]] = ([], [])
    for i in range(2 * repetitions(repeat)):
        fn, values = (first, samples[0]) if i % 2 == 0 else (second, samples[1])
        start = time.perf_counter()
        await fn()
        values.append(time.perf_counter() - start)
    return Sample(samples[0]), Sample(samples[1])


def time_sync(fn: Callable[[], Any], repeat: int, warmup: int = 2) -> Sample:
    for _ in range(warmups(warmup)):
        fn()
    values = []
    for _ in range(repetitions(repeat)):
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
    """A measurement beside its baseline, both timed in the same run (seconds)."""

    name: str
    ours: Sample
    baseline_name: str
    baseline: Sample
    target: str = ""
    met: bool | None = None
    key: str = ""
    """The row's id within its section, when its name carries a measured number (default: the name)."""

    @property
    def ratio(self) -> float:
        return self.ours.p50 / self.baseline.p50 if self.baseline.p50 else float("inf")

    def record(self, section: str) -> dict[str, Any]:
        """The row as ``--json`` writes it."""
        return {
            "id": f"{section}.{slug(self.key or self.name)}",
            "section": section,
            "name": self.name,
            "unit": "s",
            **_percentiles(self.ours),
            "n": len(self.ours.values),
            "baseline": {"name": self.baseline_name, **_percentiles(self.baseline), "n": len(self.baseline.values)},
            "ratio": self.ratio if self.baseline.p50 else None,
            "target": self.target or None,
            "met": self.met,
        }


Table = tuple[str, list[str], list[list[str]]]
"""A table of its own: its title, its header and its rows of printed cells."""
DURATION = re.compile(r"([0-9][0-9,]*(?:\.[0-9]+)?) (µs|ms|s)")
SECONDS = {"µs": 1e-6, "ms": 1e-3, "s": 1.0}


def slug(text: str) -> str:
    """A stable id made of ``text``: lower case, words joined by ``-``, at most 64 characters, without what it says in
    parentheses (a count or a measured number that changes with ``--quick``, say), unless that is all it says."""
    bare = re.sub(r"\s*\([^)]*\)", "", text) or text
    return re.sub(r"[^a-z0-9]+", "-", bare.lower()).strip("-")[:64].rstrip("-") or "row"


def _percentiles(sample: Sample) -> dict[str, float]:
    return {"p50": sample.p50, "p95": sample.p95, "p99": sample.p99}


def seconds(cell: str) -> float | None:
    """A printed duration (``1.81 ms``, ``10.7 µs``, ``2.15 s``) in seconds; None for anything else."""
    found = DURATION.fullmatch(cell.strip())
    return float(found[1].replace(",", "")) * SECONDS[found[2]] if found else None


def table_record(section: str, title: str, header: list[str], cells: list[str]) -> dict[str, Any]:
    """A row of a table of its own as ``--json`` writes it: its cells as printed, and, where its columns are named
    so, its p50/p95/p99 (in seconds), its target and whether it was met."""
    named = {(column or "measurement"): cell for column, cell in zip(header, cells, strict=False)}
    record: dict[str, Any] = {"id": f"{section}.{slug(cells[0] if cells else title)}", "section": section}
    record |= {"name": cells[0] if cells else "", "table": title, "cells": named}
    quantiles = {q: seconds(named[q]) for q in ("p50", "p95", "p99") if q in named}
    if quantiles and all(v is not None for v in quantiles.values()):
        record |= {"unit": "s", **quantiles}
    if "target" in named:
        record["target"] = named["target"] or None
    if "met" in named:
        record["met"] = {"yes": True, "no": False}.get(named["met"].strip("* ").lower())
    return record


@dataclass
class Report:
    """What the sections measured: rows beside a baseline, tables of their own, and the targets missed."""

    rows: list[Row] = field(default_factory=list)
    extra: list[Table] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)
    done: list[tuple[str, int, int, int]] = field(default_factory=list)
    """Each finished section: its name and where its rows, tables and missed targets end."""
    failed: list[str] = field(default_factory=list)
    """The sections that raised instead of finishing."""

    def check(self, met: bool, text: str) -> bool:
        if not met:
            self.missed.append(text)
        return met

    def end_section(self, name: str) -> str:
        """Mark what was added since the last section as ``name``'s; its tables and missed targets, rendered."""
        rows, extra, missed = self._ends()
        self.done.append((name, len(self.rows), len(self.extra), len(self.missed)))
        return render(self.rows[rows:], self.extra[extra:], self.missed[missed:], summary=False)

    def _ends(self) -> tuple[int, int, int]:
        return self.done[-1][1:] if self.done else (0, 0, 0)

    def render(self) -> str:
        return render(self.rows, self.extra, self.missed)

    def records(self) -> list[dict[str, Any]]:
        """Every row of every finished section, as ``--json`` writes them, each id made unique."""
        out: list[dict[str, Any]] = []
        start = (0, 0)
        for name, rows, extra, _ in self.done:
            out += [row.record(name) for row in self.rows[start[0] : rows]]
            for title, header, cells in self.extra[start[1] : extra]:
                out += [table_record(name, title, header, row) for row in cells]
            start = (rows, extra)
        seen: dict[str, int] = {}
        for record in out:
            seen[record["id"]] = seen.get(record["id"], 0) + 1
            if seen[record["id"]] > 1:
                record["id"] += f"-{seen[record['id']]}"
        return out


def render(rows: list[Row], extra: list[Table], missed: list[str], summary: bool = True) -> str:
    """The markdown tables of ``rows`` and ``extra``, then the missed targets (with ``summary``: or that none was)."""
    out = [
        "| measurement | Cubicle p50 | Cubicle p95 | baseline | baseline p50 | baseline p95 | ratio (p50) | target | met |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    if not rows:
        out = []
    for r in rows:
        met = "" if r.met is None else ("yes" if r.met else "**no**")
        out.append(
            f"| {r.name} | {ms(r.ours.p50)} | {ms(r.ours.p95)} | {r.baseline_name} | {ms(r.baseline.p50)} | "
            f"{ms(r.baseline.p95)} | {r.ratio:.3f} | {r.target} | {met} |"
        )
    for title, header, cells in extra:
        out += ["", f"**{title}**", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        out += ["| " + " | ".join(row) + " |" for row in cells]
    out.append("")
    out += [f"target missed: {m}" for m in missed] or (["every target met"] if summary else [])
    return "\n".join(out)


def plain_main(name: str, description: str | None, quick_help: str, table: Callable[[Report, bool], None]) -> int:
    """``python -m bench.<name>`` for a section that needs no engine: ``--quick``, then its table alone."""
    parser = argparse.ArgumentParser(prog=f"python -m bench.{name}", description=description)
    parser.add_argument("--quick", action="store_true", help=quick_help)
    report = Report()
    table(report, parser.parse_args().quick)
    print(report.render())
    return 0
