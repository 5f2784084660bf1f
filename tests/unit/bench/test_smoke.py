"""``python -m bench --smoke``: the sections that need no engine run to their tables and write valid JSON (issue 43).

The bench rots when nothing runs it: a section that no longer runs is found here, not three minutes into a real
run. The sections that need the engine run in smoke mode in CI (``.ci/run``). Their numbers are not checked:
in smoke mode they mean nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
NO_ENGINE = ("cli", "contents", "context")
"""The sections with no engine, and no browser (``page`` needs Chromium; CI's smoke run has it)."""


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUBICLE_", "ANTHROPIC_"))}
    return subprocess.run(
        [sys.executable, "-m", "bench", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )


def test_list_names_every_section_once() -> None:
    done = _bench("--list")
    assert done.returncode == 0, done.stderr
    names = [line.split()[0] for line in done.stdout.splitlines()]
    assert len(names) == len(set(names)) > 20
    assert {*NO_ENGINE, "stores", "tool-overhead", "page"} <= set(names)


def test_an_unknown_section_is_a_usage_error() -> None:
    done = _bench("--section", "no-such-section")
    assert done.returncode == 2
    assert "invalid choice" in done.stderr


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], dict]:
    out = tmp_path_factory.mktemp("bench") / "rows.json"
    done = _bench("--smoke", *(arg for name in NO_ENGINE for arg in ("--section", name)), "--json", str(out))
    return done, json.loads(out.read_text()) if out.exists() else {}


def test_smoke_runs_each_section_and_prints_its_tables_as_it_ends(smoke: tuple) -> None:
    done, _ = smoke
    assert done.returncode == 0, done.stderr[-3000:]
    headings = [line for line in done.stdout.splitlines() if line.startswith("## ")]
    assert len(headings) == len(NO_ENGINE)
    for name in NO_ENGINE:
        assert f"bench: {name} took" in done.stderr
    cli = done.stdout.index("## CLI start")
    assert cli < done.stdout.index("| cubicle --version |") < done.stdout.index("## ", cli + 1)  # before the next


def test_smoke_json_has_every_row_with_a_stable_id_its_unit_and_its_baseline(smoke: tuple) -> None:
    _, document = smoke
    assert document["effort"] == "smoke"
    rows = document["rows"]
    assert {row["section"] for row in rows} == set(NO_ENGINE)
    assert len({row["id"] for row in rows}) == len(rows)
    assert all(row["id"].startswith(row["section"] + ".") for row in rows)
    timed = {row["id"]: row for row in rows if "baseline" in row}
    for name in ("version", "help", "sessions", "show-id", "changes-id"):
        row = timed[f"cli.cubicle-{name}"]
        assert row["unit"] == "s" and 0 < row["p50"] <= row["p95"] <= row["p99"]
        assert row["baseline"]["name"] == "python -c pass" and row["baseline"]["p50"] > 0
        assert row["ratio"] == pytest.approx(row["p50"] / row["baseline"]["p50"])
        assert row["target"] and isinstance(row["met"], bool)
    assert sum(1 for row in rows if "cells" in row) >= 8  # the contents and context tables, and the CLI's CPU times
