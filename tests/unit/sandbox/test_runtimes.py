"""Runtimes: which a session may use, what a guarded container is made with, and the guardian's relay."""

from __future__ import annotations

import io
import json
import threading
import time
from pathlib import Path

import pytest
from toolbox import guardian, seccomp
from toolbox import relay as relays
from toolbox.pool import Pool

from controller import workspace
from controller.config import Settings
from controller.errors import InvalidRequestError, SandboxError
from controller.sandbox import isolation as runtimes
from controller.sandbox import owners
from controller.sandbox.docker import container_options
from controller.wire.limits import Limits
from controller.wire.network import OPEN
from tests.sandbox_defaults import AGENT_UID, owned_dir


def test_a_session_may_use_only_an_allowed_runtime_and_runsc_only_without_a_network() -> None:
    settings = Settings(allowed_runtimes=["runc", "runsc"])
    runtimes.check(Limits(runtime="runsc"), settings)
    runtimes.check(Limits(network=OPEN), settings)
    with pytest.raises(InvalidRequestError, match="'kata' is not allowed on this server; allowed: runc, runsc"):
        runtimes.check(Limits(runtime="kata"), settings)
    with pytest.raises(InvalidRequestError, match="no network: the network open needs the runc runtime"):
        runtimes.check(Limits(runtime="runsc", network=OPEN), settings)
    assert Settings(allowed_runtimes="runc").allowed_runtimes == ["runc"]  # type: ignore[arg-type]
    assert Limits(runtime="runsc").clamp(Limits()).runtime == "runsc"  # not ordered: kept, checked as above
    with pytest.raises(ValueError, match="runtime"):
        Limits(runtime="run c; rm")


@pytest.fixture
def layer(tmp_path: Path) -> workspace.Layer:
    return workspace.create(tmp_path / "data", "s_rt", owned_dir(tmp_path / "repo"))


def test_a_guarded_container_starts_as_root_with_three_capabilities_and_names_its_owner(layer: workspace.Layer) -> None:
    labels = owners.labels("unit", "s_rt")
    plain = container_options("img", layer, Limits(), labels)
    assert plain["runtime"] == "runc" and plain["user"] == f"{layer.info.uid}:{layer.info.gid}"
    assert "cap_add" not in plain and "entrypoint" not in plain and runtimes.OWNER_VARIABLE not in plain["environment"]
    guarded = container_options("img", layer, Limits(runtime="runsc"), labels)
    assert guarded["runtime"] == "runsc" and guarded["user"] == "0:0" and guarded["cap_drop"] == ["ALL"]
    assert guarded["cap_add"] == ["SETUID", "SETGID", "SETPCAP"]
    assert guarded["entrypoint"] == [runtimes.GUARDED_INIT, "--"] and guarded["command"] == list(
        runtimes.TOOLBOX_COMMAND
    )
    assert guarded["environment"][runtimes.OWNER_VARIABLE] == f"{layer.info.uid}:{layer.info.gid}"
    assert guarded["environment"]["LD_PRELOAD"] == runtimes.STATX_SHIM
    assert guarded["security_opt"] == ["no-new-privileges:true"] and guarded["read_only"] is True
    with pytest.raises(SandboxError, match="no network"):
        container_options("img", layer, Limits(runtime="runsc", network=OPEN), labels)


def test_under_runsc_gvisor_counts_the_agents_processes_and_the_engine_only_bounds_gvisors_own(
    layer: workspace.Layer,
) -> None:
    labels = owners.labels("unit", "s_rt")
    plain = container_options("img", layer, Limits(pids=300), labels)
    assert plain["pids_limit"] == 300 and [u["Name"] for u in plain["ulimits"]] == ["core"]
    guarded = container_options("img", layer, Limits(pids=300, runtime="runsc"), labels)
    assert guarded["pids_limit"] == 300 * runtimes.GVISOR_HOST_TASKS_PER_PID
    nproc = [u for u in guarded["ulimits"] if u["Name"] == "nproc"]
    assert [(u["Soft"], u["Hard"]) for u in nproc] == [(300, 300)]  # hard too: the agent cannot raise it


def test_an_unknown_runtime_is_explained() -> None:
    err = runtimes.unknown_runtime(
        Exception('400 Client Error: Bad Request ("Unknown runtime specified runsc")'), "runsc"
    )
    assert err is not None and "no runtime 'runsc'" in str(err) and "apt-get install runsc" in str(err)
    assert runtimes.unknown_runtime(Exception("no such image"), "runsc") is None


def test_the_guardian_takes_its_owner_from_the_environment_and_never_root() -> None:
    environ = {guardian.OWNER_VARIABLE: f"{AGENT_UID}:{AGENT_UID}", "HOME": "/home/agent"}
    assert guardian.owner(environ) == (AGENT_UID, AGENT_UID) and environ == {"HOME": "/home/agent"}
    for bad in ("", "0:1000", "x:y", "1000"):
        with pytest.raises(SystemExit):
            guardian.owner({guardian.OWNER_VARIABLE: bad})
    assert guardian.guardian_uid(AGENT_UID) == 65534 and guardian.guardian_uid(65534) == 65533
    assert guardian.OWNER_VARIABLE == runtimes.OWNER_VARIABLE  # one name on both sides of the wire


def answered(relay: relays.Relay, out: io.BytesIO, line: bytes) -> list[dict[str, object]]:
    before = len(out.getvalue())
    relay.answer(line)
    return [json.loads(x) for x in out.getvalue()[before:].splitlines()]


def test_the_relay_passes_on_one_well_formed_answer_per_pending_request() -> None:
    out, worker = io.BytesIO(), io.BytesIO()
    relay = relays.Relay(out, worker)
    relay.request(b'{"id":7,"op":"ping"}\n')
    relay.request(b'{"id":8,"op":"read_file","args":{"path":"a"}}\n')
    assert worker.getvalue() == b'{"id":7,"op":"ping"}\n{"id":8,"op":"read_file","args":{"path":"a"}}\n'
    assert answered(relay, out, b'{"id":9,"ok":true,"result":{}}\n') == []  # never asked
    assert answered(relay, out, b"not json\n") == []
    assert answered(relay, out, b'[{"id":7}]\n') == []
    assert answered(relay, out, b'{"id":true,"ok":true}\n') == []  # True == 1 in Python; not an id here
    assert answered(relay, out, b'{"id":7,"ok":"yes"}\n') == []
    forged = b'{"id":7,"ok":true,"result":{"pid":1},"extra":"\\n{\\"id\\":8}"}\n'
    assert answered(relay, out, forged) == [{"id": 7, "ok": True, "result": {"pid": 1}}]  # only its own fields
    assert answered(relay, out, b'{"id":7,"ok":true,"result":{}}\n') == []  # answered already
    assert answered(relay, out, b'{"id":8,"ok":false,"error":{"kind":"x","message":"\\ud800"}}\n') == [
        {"id": 8, "ok": False, "error": {"kind": "x", "message": "?"}}
    ]
    assert out.getvalue().count(b"\n") == 2 and all(line.startswith(b'{"id":') for line in out.getvalue().splitlines())


def test_the_relay_passes_pieces_of_live_output_and_keeps_the_request_pending() -> None:
    out, worker = io.BytesIO(), io.BytesIO()
    relay = relays.Relay(out, worker)
    relay.request(b'{"id":7,"op":"run_command","args":{"command":"x","live_output":100}}\n')
    piece = b'{"id":7,"output":{"text":"line 1\\n","truncated":false},"extra":1}\n'
    assert answered(relay, out, piece) == [{"id": 7, "output": {"text": "line 1\n", "truncated": False}}]
    assert answered(relay, out, b'{"id":9,"output":{"text":"never asked","truncated":false}}\n') == []
    assert answered(relay, out, b'{"id":7,"output":{"text":1,"truncated":false}}\n') == []
    assert answered(relay, out, b'{"id":7,"output":"text"}\n') == []
    assert answered(relay, out, b'{"id":7,"output":{"text":"x","truncated":"no"}}\n') == []
    assert answered(relay, out, b'{"id":7,"ok":true,"result":{},"output":{"text":"x","truncated":false}}\n') == [
        {"id": 7, "ok": True, "result": {}}  # an answer (it has ok) ends the request, whatever else it carries
    ]
    assert answered(relay, out, b'{"id":7,"output":{"text":"late","truncated":false}}\n') == []  # answered already


def test_the_stderr_relay_passes_printable_text_only_and_a_bounded_amount() -> None:
    import os

    r, w = os.pipe()
    data = b"Traceback\x1b[2J\x07 \xff\n" + b"x" * (relays.MAX_STDERR + 100)
    threading.Thread(target=lambda: (os.write(w, data), os.close(w)), daemon=True).start()
    out = io.BytesIO()
    with os.fdopen(r, "rb") as reader:
        relays.relay_stderr(reader, out)
    text = out.getvalue()
    assert text.startswith(b"Traceback\\x1b[2J\\x07 \\xfd\n") and len(text) == relays.MAX_STDERR
    assert all(32 <= b < 127 or b == 10 for b in text)


def test_the_pool_keeps_its_threads_and_queues_past_them() -> None:
    pool = Pool(kept=2)
    seen: list[str] = []
    release = threading.Event()
    done = threading.Semaphore(0)

    def work(wait: bool) -> None:
        if wait:
            release.wait(5)
        seen.append(threading.current_thread().name)
        done.release()

    before = threading.active_count()
    for _ in range(20):
        pool.submit(lambda: work(False))
        done.acquire(timeout=5)
    assert threading.active_count() - before <= 2 and len(seen) == 20  # kept, not a thread each
    pool.submit(lambda: work(True))
    pool.submit(lambda: work(True))
    pool.submit(lambda: work(False))  # both kept threads busy: it waits for one
    time.sleep(0.1)
    assert len(seen) == 20
    release.set()
    for _ in range(3):
        assert done.acquire(timeout=5)
    assert len(seen) == 23 and threading.active_count() - before <= 2


def run_filter(machine: str, arch: int, nr: int, arg0: int = 0) -> int:
    """Evaluate the toolbox's seccomp program on one call, as the kernel would."""
    instructions, pc, acc = seccomp.program(machine), 0, 0
    fields = {seccomp.ARCH_AT: arch, seccomp.NR_AT: nr, seccomp.ARG0_AT: arg0}
    while True:
        code, jt, jf, k = instructions[pc]
        if code == seccomp.RET:
            return k
        if code == seccomp.LD_ABS:
            acc, pc = fields[k], pc + 1
        else:
            taken = acc == k if code == seccomp.JEQ else acc >= k if code == seccomp.JGE else bool(acc & k)
            pc += 1 + (jt if taken else jf)


@pytest.mark.parametrize("machine", sorted(seccomp.TABLES))
def test_the_toolbox_seccomp_filter_refuses_namespaces_and_ptrace_and_nothing_else(machine: str) -> None:
    arch, unshare, setns, clone, clone3, ptrace = seccomp.TABLES[machine]
    eperm, enosys = seccomp.RET_ERRNO | 1, seccomp.RET_ERRNO | 38
    assert run_filter(machine, arch, unshare) == eperm and run_filter(machine, arch, setns) == eperm
    assert run_filter(machine, arch, ptrace) == eperm  # a tracer could rewrite an allowed call (see seccomp)
    assert run_filter(machine, arch, 0x40000000 | unshare) == enosys  # x32
    assert run_filter(machine, arch, 0xFFFFFFFF) == enosys  # syscall(-1)
    assert run_filter(machine, arch, clone, 0x10000000) == eperm  # CLONE_NEWUSER
    assert run_filter(machine, arch, clone, 0x3D0F00) == seccomp.RET_ALLOW  # a thread's flags
    assert run_filter(machine, arch, clone, 0x01200011) == seccomp.RET_ALLOW  # fork's
    assert run_filter(machine, arch, clone3) == enosys  # libc falls back to clone
    assert run_filter(machine, arch, 0) == seccomp.RET_ALLOW and run_filter(machine, arch, 1) == seccomp.RET_ALLOW
    assert run_filter(machine, 0x40000003, unshare) == enosys  # another architecture's table
