"""The suite's own rules, run on a small suite of their own: a leak fails the test that leaks it."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

LEAKY_SUITE = """
import socket

kept = []


def test_leaks_a_socket_in_a_cycle():
    leaked = [socket.socket()]
    leaked.append(leaked)  # a cycle: only the collector frees it, whenever it next runs


def test_a_bystander_that_runs_the_collector():
    import gc

    gc.collect()
"""


def test_a_leaked_socket_fails_the_test_that_leaked_it_not_a_bystander(tmp_path: Path) -> None:
    """An unclosed connection freed by the collector warns from its finalizer; before, that warning failed
    whichever test ran next to the collector (in CI, an unrelated test of the toolbox package)."""
    (tmp_path / "test_leaky.py").write_text(LEAKY_SUITE)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-c",
            str(ROOT / "pyproject.toml"),
            "--rootdir",
            str(tmp_path),
            "-p",
            "tests.conftest",
            "-p",
            "no:cacheprovider",
            "-o",
            "addopts=",
            "-q",
            "-rA",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    report = done.stdout
    outcomes = re.findall(r"^(PASSED|FAILED|ERROR) \S*test_leaky\.py::(\w+)", report, re.MULTILINE)
    assert done.returncode == 1, report
    assert ("ERROR", "test_leaks_a_socket_in_a_cycle") in outcomes, report
    assert ("PASSED", "test_a_bystander_that_runs_the_collector") in outcomes, report
    assert [name for outcome, name in outcomes if outcome != "PASSED"] == ["test_leaks_a_socket_in_a_cycle"]
    assert "ResourceWarning" in report, report


def test_a_unit_test_sees_no_engine_in_any_run() -> None:
    """The README's command runs unit tests beside the integration tests: they still see no engine."""
    from controller.config import Settings
    from tests.unit.conftest import NO_ENGINE

    assert os.environ["DOCKER_HOST"] == NO_ENGINE and "CUBICLE_DOCKER_HOST" not in os.environ
    assert Settings().docker_host == NO_ENGINE


CLOCKS = {"monotonic", "perf_counter", "time"}
"""``time.<clock>()``: a test that compares what one measures against a number asserts a speed."""
TIMINGS = {"elapsed", "took", "latency", "latencies", "fastest", "seconds", "duration_s", "p50", "p95", "p99", "pct"}
"""Names, attributes and keys (``answer["seconds"]``) that hold a measured time, in this suite's words."""


def _timed(node: ast.AST) -> bool:
    """Whether the expression measures time: a clock read, or a name or attribute that holds a measured time."""
    return any(_clock_read(part) or _timing_name(part) for part in ast.walk(node))


def _clock_read(node: ast.AST) -> bool:
    """``time.monotonic()`` and the other clocks of ``CLOCKS``."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in CLOCKS):
        return False
    return isinstance(node.func.value, ast.Name) and node.func.value.id == "time"


def _timing_name(node: ast.AST) -> bool:
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return node.slice.value in TIMINGS
    return (isinstance(node, ast.Name) and node.id in TIMINGS) or (
        isinstance(node, ast.Attribute) and node.attr in TIMINGS
    )


def _constant(node: ast.AST) -> bool:
    """Whether the expression is a number the test chose: literals, and names in capitals (``2 * LEASE_S``)."""
    return all(
        isinstance(part, ast.Constant | ast.BinOp | ast.UnaryOp | ast.operator | ast.unaryop | ast.Load)
        or (isinstance(part, ast.Name) and part.id.isupper())
        for part in ast.walk(node)
    )


def _speed_bounds(tree: ast.AST) -> list[int]:
    """The lines of ``assert``s that hold a measured time under a constant (``elapsed < 2``, ``took <= LIMIT``)."""
    lines = []
    for check in (node for node in ast.walk(tree) if isinstance(node, ast.Assert)):
        for compare in (node for node in ast.walk(check.test) if isinstance(node, ast.Compare)):
            sides = [compare.left, *compare.comparators]
            for op, low, high in zip(compare.ops, sides[:-1], sides[1:], strict=True):
                if isinstance(op, ast.Gt | ast.GtE):
                    low, high = high, low
                elif not isinstance(op, ast.Lt | ast.LtE):
                    continue
                if _timed(low) and _constant(high):
                    lines.append(check.lineno)
    return lines


def test_no_test_asserts_how_fast_something_answers() -> None:
    """A speed is a benchmark's row (bench/), measured beside its baseline; in a test on a shared machine it fails
    for the machine's load, not for a bug (CI under load: "took 1.09s < 1.0"). A test's deadlines bound hangs."""
    found = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        if "fixtures" not in path.parts:
            found += [f"{path.relative_to(ROOT)}:{line}" for line in _speed_bounds(ast.parse(path.read_text()))]
    assert found == [], f"a test asserts a speed (make it a bench row): {found}"


def test_the_speed_check_finds_the_forms_it_names() -> None:
    found = _speed_bounds(
        ast.parse(
            "assert time.monotonic() - started < 1.0\n"
            "assert took < 2 * LEASE_S\n"
            "assert 0.5 > result.duration_s\n"
            "assert health.pct(0.99) < 0.1\n"
            'assert "addresses" not in answer and answer["seconds"] < 1\n'
            "assert 0 < result.duration_s <= round_trip\n"  # a consistency check: no constant bound
            "assert time.monotonic() - began >= 0.2\n"  # a lower bound: a load only lengthens it
        )
    )
    assert found == [1, 2, 3, 4, 5]
