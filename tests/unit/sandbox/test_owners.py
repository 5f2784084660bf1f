"""Which containers a sweep judges orphans: a live controller's tick sweeps only those of gone processes."""

from __future__ import annotations

from controller.sandbox import owners


def _labels(owner: str, session: str = "s_1") -> dict[str, str]:
    return {owners.MANAGED: "true", owners.SESSION: session, owners.OWNER: owner}


def test_a_ticks_sweep_takes_a_gone_process_s_containers_and_never_this_process_s_own() -> None:
    mine = _labels(owners.owner_token("host"))
    gone = _labels("host:999999999:1")  # no such pid
    assert owners.is_orphan(mine, "host", live_sessions=(), everything=False)  # at a start: none of it is live
    assert not owners.is_orphan(mine, "host", live_sessions=(), everything=False, dead_only=True)
    assert owners.is_orphan(gone, "host", live_sessions=(), everything=False, dead_only=True)


def test_another_instance_s_containers_are_not_judged() -> None:
    other = _labels("elsewhere:999999999:1")
    assert not owners.is_orphan(other, "host", live_sessions=(), everything=False, dead_only=True)
    assert not owners.is_orphan(other, "host", live_sessions=(), everything=False)
