"""Fault injection: infrastructure fails under a running session; nothing hangs, nothing is lost."""

from __future__ import annotations

import pytest

from tests.sandbox_defaults import each_runtime  # noqa: F401 - sandboxes here run under each runtime


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/faults" in str(item.path):
            item.add_marker(pytest.mark.integration)
