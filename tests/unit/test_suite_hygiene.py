"""The suite's own rules, run on a small suite of their own: a leak fails the test that leaks it."""

from __future__ import annotations

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
