"""The parallel run's scheduler (tests/scheduling.py), driven as xdist drives it, by workers that run what they hold."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tests.scheduling import LONG, LongFirst


class Worker:
    """What the scheduler sees of an xdist worker; each batch it is sent goes to the run's shared log."""

    def __init__(self, name: str, log: list[tuple[str, list[int]]]) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.shutting_down = False
        self.log = log

    def send_runtest_some(self, indices: list[int]) -> None:
        self.log.append((self.gateway.id, list(indices)))

    def shutdown(self) -> None:
        self.shutting_down = True


def run(collection: list[str], workers: int) -> list[tuple[str, list[str]]]:
    """Schedule ``collection`` on ``workers`` workers that each finish the oldest test they hold, in turn; the
    batches sent, in order: (worker, the tests' names)."""
    options = {"tx": [f"{workers}*popen"], "maxschedchunk": None}
    config: Any = SimpleNamespace(getvalue=options.__getitem__, getoption=options.__getitem__)
    scheduler = LongFirst(config, SimpleNamespace(loadsched=lambda *_: None))
    log: list[tuple[str, list[int]]] = []
    nodes: list[Any] = [Worker(f"gw{n}", log) for n in range(workers)]
    for node in nodes:
        scheduler.add_node(node)
    for node in nodes:
        scheduler.add_node_collection(node, collection)
    scheduler.schedule()
    while not scheduler.tests_finished:
        for node in nodes:
            if held := scheduler.node2pending[node]:
                scheduler.mark_test_complete(node, held[0], duration=1.0)
    return [(name, [collection[index] for index in batch]) for name, batch in log]


def test_the_long_tests_go_out_first_longest_first_two_at_a_time() -> None:
    short = [f"tests/unit/test_a.py::test_{n}" for n in range(400)]
    long = [LONG[5] + "[runsc]", LONG[0], LONG[2], LONG[1], LONG[3] + "[runc]"]
    collection = short[:100] + long[:2] + short[100:300] + long[2:] + short[300:]
    batches = run(collection, workers=4)
    in_order = [name for _, batch in batches for name in batch]
    assert in_order[:5] == [LONG[0], LONG[1], LONG[2], LONG[3] + "[runc]", LONG[5] + "[runsc]"]
    assert [len(batch) for _, batch in batches[:3]] == [2, 2, 2]  # a worker runs a test once it holds the next
    assert [worker for worker, _ in batches[:3]] == ["gw0", "gw1", "gw2"]
    assert sorted(in_order) == sorted(collection)  # each test once, none lost


def test_without_long_tests_the_order_is_loads_own() -> None:
    collection = [f"tests/unit/test_a.py::test_{n}" for n in range(40)]
    batches = run(collection, workers=2)
    assert batches[:2] == [("gw0", collection[:5]), ("gw1", collection[5:10])]  # load's consecutive chunks
    assert sorted(name for _, batch in batches for name in batch) == sorted(collection)


def test_every_long_test_is_still_there() -> None:
    """A renamed or removed test would silently lose its place: each entry names a file and a test in it."""
    root = Path(__file__).resolve().parents[2]
    for entry in LONG:
        path, name = entry.split("::")
        source = (root / path).read_text()
        assert re.search(rf"^(async )?def {re.escape(name)}", source, re.MULTILINE), entry
