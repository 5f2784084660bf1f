"""Both ends of the wire agree: the toolbox answers exactly the controller's operations, with the same defaults.

The toolbox runs inside the container on the stdlib alone, so it cannot import the controller's
protocol; this test is where the two copies of each shared number meet.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from toolbox import limits, processes
from toolbox.protocol import Toolbox
from toolbox.workspace import Workspace

from controller.agent.tools import DEADLINE_MARGIN_S
from controller.wire import envspec, protocol
from controller.wire.limits import Limits


def test_the_toolbox_answers_exactly_the_controllers_operations(tmp_path: Path) -> None:
    toolbox = Toolbox(Workspace(str(tmp_path)), None, io.BytesIO())
    assert set(toolbox.operations) == set(protocol.OPS)


@pytest.mark.parametrize(
    ("controller", "toolbox"),
    [
        (protocol.KILL_GRACE_S, limits.KILL_GRACE_S),
        (protocol.DEFAULT_COMMAND_TIMEOUT_S, limits.DEFAULT_COMMAND_TIMEOUT_S),
        (protocol.DEFAULT_COMMAND_OUTPUT, limits.DEFAULT_COMMAND_OUTPUT),
        (protocol.DEFAULT_SEARCH_OUTPUT, limits.DEFAULT_SEARCH_OUTPUT),
        (Limits().default_command_timeout_s, limits.DEFAULT_COMMAND_TIMEOUT_S),
        (Limits().event_output_chars, limits.DEFAULT_COMMAND_OUTPUT),
    ],
    ids=[
        "kill grace",
        "command timeout",
        "command output cap",
        "search output cap",
        "limits: timeout",
        "limits: output",
    ],
)
def test_shared_numbers_are_equal(controller: float, toolbox: float) -> None:
    assert controller == toolbox


def test_the_controller_waits_longer_than_the_toolbox_searches() -> None:
    """A search the toolbox times out is answered (with its partial matches) before the controller gives up."""
    assert Limits().op_timeout_s > limits.SEARCH_TIMEOUT_S + limits.DRAIN_AFTER_EXIT_S
    assert DEADLINE_MARGIN_S > limits.DRAIN_AFTER_EXIT_S + limits.UNKILLABLE_WAIT_S


def test_every_request_the_controller_sends_is_one_the_toolbox_reads(tmp_path: Path) -> None:
    """Each operation, built the controller's way, reaches the toolbox's handler with the fields it reads."""
    (tmp_path / "a.txt").write_text("one\n")
    out = io.BytesIO()
    toolbox = Toolbox(Workspace(str(tmp_path)), None, out)
    for request in (
        protocol.call("list_files"),
        protocol.call("read_file", path="a.txt"),
        protocol.call("write_file", path="b.txt", content="two\n"),
        protocol.call("edit_file", path="b.txt", old_string="two", new_string="three"),
        protocol.call("ping"),
        protocol.call("cancel", id=5),
    ):
        toolbox.handle(json.loads(request.model_copy(update={"id": 7}).model_dump_json()))
        response = protocol.Response.model_validate_json(out.getvalue().splitlines()[-1])
        assert response.ok, response.error
        type(request).result.model_validate(response.result)
    assert (tmp_path / "b.txt").read_text() == "three\n"


def test_both_ends_name_the_environments_path_alike() -> None:
    assert envspec.PATH_VARIABLE == processes.PATH_VARIABLE
    assert processes.KEEP_PATH.startswith(f'PATH="${processes.PATH_VARIABLE}"; export PATH; ')
