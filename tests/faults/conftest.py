"""Fault injection: infrastructure fails under a running session; nothing hangs, nothing is lost."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/faults" in str(item.path):
            item.add_marker(pytest.mark.integration)
