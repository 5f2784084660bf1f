"""Leases and the command queue, alone: their SQL on SQLite and on PostgreSQL, no controller around them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.config import Settings
from controller.errors import LeaseLostError
from controller.server.leases import Leases
from controller.server.store import Row, Store, open_store
from controller.wire.events import StatusEvent, Usage
from controller.wire.limits import Limits

pytestmark = pytest.mark.usefixtures("each_store")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = open_store(Settings(data_dir=tmp_path / "data"))
    yield opened
    opened.close()


def add(store: Store, sid: str, status: str = "idle", owner: str = "", lease_s: float = -1.0) -> Row:
    now = time.time()
    row = Row(
        id=sid,
        repo="/r",
        task="t",
        model="m",
        status=status,
        usage=Usage(),
        steps=0,
        limits=Limits(),  # type: ignore[arg-type]
        owner=owner,
        epoch=1,
        lease_expires=store.now() + lease_s,
        created_at=now,
        updated_at=now,
    )
    store.insert(row)
    return row


def test_a_claim_is_taken_once_and_fences_the_writes_of_the_earlier_holder(store: Store) -> None:
    add(store, "s_a")
    first, second = Leases(store, "first", 30), Leases(store, "second", 30)
    assert first.claim("s_a", 1) == 2 and first.claims == {"s_a": 2}
    assert second.claim("s_a", 1) is None  # not at that epoch any more
    assert second.claim("s_a", 2) is None  # running under a lease that has not run out
    row = store.get("s_a")
    assert row is not None and (row.status, row.owner, row.epoch) == ("running", "first", 2)
    store.append_event(StatusEvent(session_id="s_a", status="running"), epoch=2)
    assert second.claim("s_a", 2, "interrupted") == 3  # a takeover: no lease, and not one of second's claims
    assert second.claims == {}
    with pytest.raises(LeaseLostError):
        store.append_event(StatusEvent(session_id="s_a", status="running"), epoch=2)


def test_an_expired_lease_is_found_and_taken_over_only_when_expired_is_asked(store: Store) -> None:
    add(store, "s_live", status="running", owner="gone", lease_s=30)
    add(store, "s_dead", status="running", owner="gone", lease_s=-1)
    taker = Leases(store, "taker", 30)
    assert [row.id for row in taker.expired()] == ["s_dead"]
    assert taker.claim("s_live", 1, "interrupted", expired_only=True) is None
    assert taker.claim("s_dead", 1, "interrupted", expired_only=True) == 2
    assert taker.expired() == []


def test_a_turn_of_its_own_whose_lease_ran_out_is_not_taken_over_by_the_same_process(store: Store) -> None:
    """A process starved between its renewal and its look at the expired leases (seen in CI under load: a `cubicle
    run` stopped its own turn as taken over) renews its own lease instead; another controller still takes it."""
    add(store, "s_own")
    mine = Leases(store, "mine", 30)
    assert mine.claim("s_own", 1) == 2
    store.run("UPDATE sessions SET lease_expires = ? WHERE id = ?", (store.now() - 1, "s_own"))
    assert mine.expired() == []
    assert [row.id for row in Leases(store, "other", 30).expired()] == ["s_own"]
    mine.claims.clear()  # a turn this process no longer runs (left under its name): taken over, even by itself
    assert [row.id for row in mine.expired()] == ["s_own"]


def test_renew_extends_the_running_sessions_and_the_holds_of_this_owner_only(store: Store) -> None:
    add(store, "s_run", status="running", owner="me", lease_s=1)
    add(store, "s_idle")
    add(store, "s_other", status="running", owner="other", lease_s=1)
    mine = Leases(store, "me", 300)
    assert mine.hold("s_idle", 1) == 2 and mine.holds == {"s_idle": 2}
    assert mine.renew() == {"s_run": 1, "s_idle": 2}
    for sid in ("s_run", "s_idle"):
        row = store.get(sid)
        assert row is not None and row.lease_expires > store.now() + 200
    other = store.get("s_other")
    assert other is not None and other.lease_expires < store.now() + 2


def test_a_hold_keeps_a_turn_from_beginning_until_it_is_released(store: Store) -> None:
    add(store, "s_a")
    holder, runner = Leases(store, "holder", 30), Leases(store, "runner", 30)
    epoch = holder.hold("s_a", 1)
    assert epoch == 2
    assert holder.hold("s_a", 2) is None  # already held
    assert runner.claim("s_a", 2) is None  # no turn begins under a hold
    holder.release("s_a", epoch)
    assert holder.holds == {}
    assert runner.claim("s_a", 2) == 3
    assert holder.hold("s_a", 3) is None  # a running turn is not held...
    assert holder.hold("s_a", 3, stale=True) == 4  # ...unless its controller is gone (the epoch alone fences it)


def test_commands_reach_the_owner_of_the_running_session_once_and_a_claim_drops_old_ones(store: Store) -> None:
    add(store, "s_a", status="running", owner="runner", lease_s=30)
    add(store, "s_b")
    runner, asker = Leases(store, "runner", 30), Leases(store, "asker", 30)
    asker.send("s_a", "cancel")
    asker.send("s_a", "cancel")  # one command of a kind per session: sent again, it is only newer
    asker.send("s_b", "cancel")  # not running: nobody takes it
    assert asker.take() == []
    taken = runner.take()
    assert [(sid, kind) for sid, kind, _ in taken] == [("s_a", "cancel")] and taken[0][2] <= time.time()
    assert runner.take() == []
    asker.send("s_b", "cancel")
    assert runner.claim("s_b", 1) == 2  # a new claim begins with no commands left for an earlier holder
    assert runner.take() == []
