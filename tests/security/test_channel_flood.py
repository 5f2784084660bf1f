"""A sandbox that reaches its toolbox's stream stalls nobody but itself.

Commands cannot open the toolbox's stdout (it is not dumpable), so the flood is written
from the host (as root, through /proc), standing in for a sandbox that found another way in.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bench import flood
from tests.integration.helpers import container_running
from tests.sandbox_defaults import TEST_INSTANCE

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="writing into a container's process from the host needs root"),
    pytest.mark.solo,  # a flood of its own making loads the machine: the other workers' tests would feel it
]


@pytest.fixture
def controller(model_server: Any, tmp_path: Path) -> Iterator[flood.Controller]:
    served = flood.Controller(model_server.url, tmp_path, TEST_INSTANCE)
    yield served
    served.close()


def test_a_flooded_channel_stalls_neither_the_api_nor_a_neighbour(
    controller: flood.Controller, model_server: Any, docker_client: Any, make_repo: Callable[..., Path]
) -> None:
    """/healthz answers throughout (its sampler stops at the first error) and the neighbour takes every step. How
    fast both are meanwhile is the channel flood's benchmark table (bench/flood.py), with its targets."""
    models = flood.scenarios(model_server)
    baseline, attacked = flood.measure(controller, docker_client, (make_repo("n"), make_repo("a")), models)
    assert len(attacked.health.values) > 100, "the sampler must have run through the attack"
    assert len(attacked.neighbour_steps.values) == len(baseline.neighbour_steps.values) > 0
    assert attacked.attacker is not None and attacked.attacker["is_error"]
    assert "not a toolbox response" in attacked.attacker["output"], attacked.attacker["output"]
    assert container_running(docker_client, f"sleep {flood.ATTACK_COMMAND_S}") is None


def test_plain_garbage_fails_the_pending_call_at_once(
    controller: flood.Controller, model_server: Any, docker_client: Any, make_repo: Callable[..., Path]
) -> None:
    _, attacker_model = flood.scenarios(model_server)
    sid = controller.start(make_repo(), attacker_model)
    flood.start_flood(docker_client, sid, "garbage", 0).wait(30)
    events = controller.finished(sid, timeout=flood.ATTACK_COMMAND_S - 2)  # long before the command would end
    result = next(e for e in events if e["type"] == "tool_result")
    assert result["is_error"] and "not a toolbox response" in result["output"]
    follow = controller.http.post(f"/v1/sessions/{sid}/messages", json={"text": "again"})
    assert follow.status_code == 202, follow.text  # the session goes on, in a fresh sandbox
