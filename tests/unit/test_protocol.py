"""Wire and config models reject what they do not know."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from controller.config import Limits, Settings
from controller.protocol import ARGS, RESULTS, CommandResult, Failure, ReadFileArgs, Request, Response


def test_request_rejects_unknown_keys() -> None:
    Request.model_validate({"id": 1, "op": "read_file", "args": {"path": "a"}})
    with pytest.raises(ValidationError, match="extra"):
        Request.model_validate({"id": 1, "op": "read_file", "args": {}, "sudo": True})


def test_request_rejects_unknown_op() -> None:
    with pytest.raises(ValidationError):
        Request.model_validate({"id": 1, "op": "exec_on_host", "args": {}})


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


@pytest.mark.parametrize("op", sorted(ARGS))
def test_every_argument_model_forbids_extra_fields(op: str) -> None:
    assert ARGS[op].model_json_schema()["additionalProperties"] is False
    assert op in RESULTS


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
    ceiling = Limits(memory_mb=1024, network=False, max_steps=10)
    asked = Limits(memory_mb=4096, network=True, max_steps=5)
    clamped = asked.clamp(ceiling)
    assert (clamped.memory_mb, clamped.network, clamped.max_steps) == (1024, False, 5)


def test_repo_roots_accept_json_and_commas(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUBICLE_REPO_ROOTS", "/srv/a, /srv/b")
    assert [str(p) for p in Settings().repo_roots] == ["/srv/a", "/srv/b"]
    monkeypatch.setenv("CUBICLE_REPO_ROOTS", '["/srv/c"]')
    assert [str(p) for p in Settings().repo_roots] == ["/srv/c"]
