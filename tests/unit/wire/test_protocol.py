"""Wire and config models reject what they do not know."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from controller.agent.tools import TOOLS
from controller.config import Settings
from controller.wire import protocol
from controller.wire.limits import Limits
from controller.wire.network import NONE
from controller.wire.protocol import OPS, REQUESTS, CommandResult, Failure, ReadFile, ReadFileArgs, Response, RunCommand


def test_request_rejects_unknown_keys() -> None:
    ReadFile.model_validate({"id": 1, "op": "read_file", "args": {"path": "a"}})
    with pytest.raises(ValidationError, match="extra"):
        ReadFile.model_validate({"id": 1, "op": "read_file", "args": {"path": "a"}, "sudo": True})
    with pytest.raises(ValidationError, match="extra"):
        protocol.call("read_file", path="a", sudo=True)


def test_request_rejects_unknown_op() -> None:
    with pytest.raises(ValidationError):
        protocol.call("exec_on_host")


def test_a_request_goes_on_the_wire_as_id_op_args() -> None:
    request = protocol.call("run_command", command="ls", timeout_s=5).model_copy(update={"id": 7})
    assert request.model_dump_json() == (
        '{"id":7,"op":"run_command","args":{"command":"ls","timeout_s":5,"max_output":1048576,"live_output":0}}'
    )
    assert isinstance(request, RunCommand) and RunCommand.interruptible and RunCommand.result is CommandResult


def test_the_table_names_each_operation_once() -> None:
    assert list(OPS) == [r.op_name() for r in REQUESTS] and len(set(OPS)) == len(REQUESTS)
    assert {"ping", "cancel"} | set(TOOLS) == set(OPS)


@pytest.mark.parametrize("name", sorted(TOOLS))
def test_each_tool_schema_is_the_model_half_of_its_request(name: str) -> None:
    """What the model is told is what the request is built from; only toolbox-side fields are added."""
    tool = TOOLS[name]
    wire = tool.request.model_fields["args"].annotation
    assert isinstance(wire, type) and issubclass(wire, tool.args)
    assert set(wire.model_fields) - set(tool.args.model_fields) <= {"max_output", "live_output"}


def test_response_rejects_unknown_keys() -> None:
    Response.model_validate({"id": 1, "ok": False, "error": {"kind": "not_found", "message": "x"}})
    with pytest.raises(ValidationError):
        Response.model_validate({"id": 1, "ok": True, "result": {}, "debug": 1})
    with pytest.raises(ValidationError):
        Failure.model_validate({"kind": "x", "message": "y", "trace": "z"})


def test_results_reject_unknown_keys() -> None:
    good = {
        "exit_code": 0,
        "stdout": {"text": "", "total_bytes": 0, "truncated": False},
        "stderr": {"text": "", "total_bytes": 0, "truncated": False},
        "timed_out": False,
        "duration_s": 0.1,
    }
    CommandResult.model_validate(good)
    with pytest.raises(ValidationError):
        CommandResult.model_validate({**good, "pid": 4})


@pytest.mark.parametrize("op", sorted(OPS))
def test_every_argument_model_forbids_extra_fields(op: str) -> None:
    args = OPS[op].model_fields["args"].annotation
    assert isinstance(args, type) and args.model_json_schema()["additionalProperties"] is False
    assert OPS[op].result.model_json_schema()["additionalProperties"] is False


def test_argument_bounds() -> None:
    with pytest.raises(ValidationError):
        ReadFileArgs(path="a", offset=0)
    with pytest.raises(ValidationError):
        ReadFileArgs.model_validate({"path": "a", "limit": 10**9})


def test_limits_reject_unknown_and_absurd_values() -> None:
    with pytest.raises(ValidationError):
        Limits.model_validate({"privileged": True})
    with pytest.raises(ValidationError):
        Limits(memory_mb=0)
    with pytest.raises(ValidationError):
        Limits(pids=-1)


def test_limits_clamp_to_ceiling() -> None:
    ceiling = Limits(memory_mb=1024, network="none", max_steps=10)
    asked = Limits(memory_mb=4096, network="open", max_steps=5)
    clamped = asked.clamp(ceiling)
    assert (clamped.memory_mb, clamped.network, clamped.max_steps) == (1024, NONE, 5)


def test_repo_roots_accept_json_and_commas(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUBICLE_REPO_ROOTS", "/srv/a, /srv/b")
    assert [str(p) for p in Settings().repo_roots] == ["/srv/a", "/srv/b"]
    monkeypatch.setenv("CUBICLE_REPO_ROOTS", '["/srv/c"]')
    assert [str(p) for p in Settings().repo_roots] == ["/srv/c"]
