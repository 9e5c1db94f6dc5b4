"""The schedules tick (tasks/schedules.py) against the real Postgres, on an injected clock.

``tick_once(rt, clock=...)`` reads the time once, from its argument: these tests move
that clock across Europe/Berlin's DST days and across downtime; no worker runs, so
submitted operations stay create_pending (active) unless a test ends them by hand.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import secrets
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import delete, select, update

from jobwarden.models.persistence import schedule_store
from jobwarden.models.persistence.db import transaction
from jobwarden.models.persistence.schedule_tables import ScheduleActionRow, ScheduleRow
from jobwarden.models.persistence.tables import OperationRow
from jobwarden.models.schedules.slots import OverlapPolicy, ScheduleError, parse_spec
from jobwarden.tasks.runtime import Runtime, current
from jobwarden.tasks.schedules import backfill, run_ticks, submit_named, tick_once, trigger


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, sec: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, sec, tzinfo=UTC)


@pytest.fixture
def rt(database_url: str) -> Iterator[Runtime]:
    """The process runtime publishing to a private queue, deleted afterwards."""
    base = current()
    queue = f"{base.settings.queue}-schedules-{secrets.token_hex(3)}"
    yield dataclasses.replace(base, settings=base.settings.model_copy(update={"queue": queue}))
    base.redis.delete(f"{base.settings.key_prefix}:celery:{queue}")


@pytest.fixture
def tenant(database_url: str) -> Iterator[str]:
    """A tenant of the test's own; its schedules are removed afterwards, so no later tick
    (a real beat in the acceptance tests) ever decides their slots."""
    name = f"sched-{secrets.token_hex(4)}"
    yield name
    with transaction(database_url) as session:
        session.execute(delete(ScheduleRow).where(ScheduleRow.tenant == name))


def declare(rt: Runtime, tenant: str, name: str, now: datetime, **table: Any) -> None:
    base: dict[str, Any] = {"provider": "sandbox", "command": {"kind": "export", "at": "{slot}"}}
    spec = parse_spec(tenant, name, base | table, key_limit=200)
    with transaction(rt.settings.database_url) as session:
        assert schedule_store.declare(session, spec, source="test", actor="pytest", now=now)


def slots(rt: Runtime, tenant: str, name: str) -> list[tuple[str, str, str | None]]:
    """(slot RFC 3339, state, operation's idempotency key) for each slot row, in order."""
    with transaction(rt.settings.database_url) as session:
        row = schedule_store.find(session, tenant, name)
        assert row is not None
        out = []
        for s in schedule_store.slots_of(session, row.schedule_id):
            key = None
            if s.operation_id is not None:
                key = session.scalar(
                    select(OperationRow.idempotency_key).where(
                        OperationRow.operation_id == s.operation_id
                    )
                )
            out.append((s.slot_at.strftime("%Y-%m-%dT%H:%M:%SZ"), s.state, key))
        return out


def operations(rt: Runtime, tenant: str) -> list[Any]:
    with transaction(rt.settings.database_url) as session:
        return list(
            session.execute(
                select(OperationRow.idempotency_key, OperationRow.state, OperationRow.command)
                .where(OperationRow.tenant == tenant)
                .order_by(OperationRow.idempotency_key)
            ).all()
        )


def end_operations(rt: Runtime, tenant: str) -> None:
    with transaction(rt.settings.database_url) as session:
        session.execute(
            update(OperationRow).where(OperationRow.tenant == tenant).values(state="failed")
        )


def test_berlin_spring_forward_fires_the_missing_0230_once_at_0300(
    rt: Runtime, tenant: str
) -> None:
    declare(
        rt, tenant, "nightly", utc(2026, 3, 28, 12), cron="30 2 * * *", timezone="Europe/Berlin"
    )
    for minute in (0, 30, 59):  # 01:00 to 01:59 CET: no slot yet
        tick_once(rt, clock=lambda m=minute: utc(2026, 3, 29, 0, m))  # type: ignore[misc]
    assert slots(rt, tenant, "nightly") == []
    for seconds in (0, 1, 30):  # 03:00 CEST, ticked three times, as by three beats
        tick_once(rt, clock=lambda s=seconds: utc(2026, 3, 29, 1, 0, s))  # type: ignore[misc]
    key = "schedule:nightly:2026-03-29T01:00:00Z"
    assert slots(rt, tenant, "nightly") == [("2026-03-29T01:00:00Z", "fired", key)]
    (op,) = operations(rt, tenant)
    assert op.command["at"] == "2026-03-29T01:00:00Z"


def test_berlin_autumn_fires_the_repeated_0230_once(rt: Runtime, tenant: str) -> None:
    declare(
        rt, tenant, "nightly", utc(2026, 10, 24, 12), cron="30 2 * * *", timezone="Europe/Berlin"
    )
    # 02:30 CEST is 00:30 UTC; 02:30 CET, an hour later, is the same local time again.
    for at in (utc(2026, 10, 25, 0, 30, 1), utc(2026, 10, 25, 1, 30, 1), utc(2026, 10, 25, 3)):
        tick_once(rt, clock=lambda at=at: at)  # type: ignore[misc]
    assert [s[:2] for s in slots(rt, tenant, "nightly")] == [("2026-10-25T00:30:00Z", "fired")]
    assert len(operations(rt, tenant)) == 1


def test_two_concurrent_ticks_decide_each_slot_once(rt: Runtime, tenant: str) -> None:
    start = utc(2026, 6, 1)
    for n in range(20):
        declare(
            rt, tenant, f"s{n}", start, interval_seconds=60, start="2026-06-01T00:00:00Z",
            overlap="allow_all",
        )  # fmt: skip
    now = start + timedelta(minutes=4, seconds=30)  # five slots each are due
    barrier = threading.Barrier(2)
    reports = []

    def run() -> None:
        barrier.wait()
        reports.append(tick_once(rt, clock=lambda: now, limit=7))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    while sum(r.schedules for r in reports) < 20:  # bounded: each pass takes 7 schedules
        reports.append(tick_once(rt, clock=lambda: now, limit=7))
        assert len(reports) < 10
    ops = operations(rt, tenant)
    assert len(ops) == 100 == len({o.idempotency_key for o in ops})
    assert sum(r.submitted for r in reports) == 100
    assert all(len(slots(rt, tenant, f"s{n}")) == 5 for n in range(20))


def test_downtime_fires_within_the_catch_up_window_and_records_the_rest_missed(
    rt: Runtime, tenant: str
) -> None:
    start = utc(2026, 6, 1, 9)
    declare(
        rt, tenant, "reconcile", start, interval_seconds=600, start="2026-06-01T09:00:00Z",
        catchup_window_seconds=3600, overlap="allow_all",
    )  # fmt: skip
    tick_once(rt, clock=lambda: start + timedelta(hours=3))  # three hours later
    found = slots(rt, tenant, "reconcile")
    assert [s[1] for s in found] == ["missed"] * 12 + ["fired"] * 7
    assert [s[0][11:16] for s in found if s[1] == "fired"] == [
        "11:00", "11:10", "11:20", "11:30", "11:40", "11:50", "12:00",
    ]  # fmt: skip
    with transaction(rt.settings.database_url) as session:
        (view,) = schedule_store.views(session, tenant=tenant)
    assert view.missed == 12 and view.last_state == "fired"


def test_overlap_policies_against_a_still_active_operation(rt: Runtime, tenant: str) -> None:
    start = utc(2026, 6, 1)
    for policy in OverlapPolicy:
        declare(
            rt, tenant, policy.value.replace("_", "-"), start, interval_seconds=60,
            start="2026-06-01T00:00:00Z", overlap=policy.value,
        )  # fmt: skip
    for minute in range(3):  # three slots, one per tick; the first operation never ends
        tick_once(rt, clock=lambda m=minute: start + timedelta(minutes=m, seconds=1))  # type: ignore[misc]
    states = {
        p.value: [s[1] for s in slots(rt, tenant, p.value.replace("_", "-"))] for p in OverlapPolicy
    }
    assert states == {
        "skip": ["fired", "skipped", "skipped"],
        "buffer_one": ["fired", "buffered", "skipped"],
        "allow_all": ["fired", "fired", "fired"],
        "cancel_previous": ["fired", "fired", "fired"],
    }
    # cancel_previous: each new slot asked the one cancel path to stop the one before.
    with transaction(rt.settings.database_url) as session:
        cancelled = session.execute(
            select(OperationRow.idempotency_key, OperationRow.state)
            .where(
                OperationRow.tenant == tenant,
                OperationRow.idempotency_key.like("schedule:cancel-previous:%"),
            )
            .order_by(OperationRow.idempotency_key)
        ).all()
    assert [state for _, state in cancelled] == ["abandoned", "abandoned", "create_pending"]
    # buffer_one: once the active operation ends, the buffered slot fires.
    end_operations(rt, tenant)
    tick_once(rt, clock=lambda: start + timedelta(minutes=2, seconds=30))
    assert [s[1] for s in slots(rt, tenant, "buffer-one")] == ["fired", "fired", "skipped"]


def test_backfill_twice_creates_nothing_new_and_records_who_asked(rt: Runtime, tenant: str) -> None:
    start = utc(2026, 6, 1)
    declare(
        rt, tenant, "hourly", start, interval_seconds=3600, start="2026-06-01T00:00:00Z",
        catchup_window_seconds=0, overlap="allow_all",
    )  # fmt: skip
    tick_once(rt, clock=lambda: start + timedelta(hours=2, seconds=30))  # three slots missed
    assert [s[1] for s in slots(rt, tenant, "hourly")] == ["missed"] * 3
    first = backfill(rt, tenant, "hourly", start=start, end=start + timedelta(hours=4), actor="ana")
    assert len(first.claimed) == 5 and first.already == 0 and len(first.operations) == 5
    again = backfill(rt, tenant, "hourly", start=start, end=start + timedelta(hours=4), actor="bo")
    assert again.claimed == [] and again.already == 5 and again.operations == []
    assert len(operations(rt, tenant)) == 5
    assert [s[1] for s in slots(rt, tenant, "hourly")] == ["fired"] * 5
    # The beat meets backfilled slots as decided: it submits none of them again.
    tick_once(rt, clock=lambda: start + timedelta(hours=4, seconds=30))
    assert len(operations(rt, tenant)) == 5
    with transaction(rt.settings.database_url) as session:
        acts = session.execute(
            select(ScheduleActionRow.action, ScheduleActionRow.actor)
            .join(ScheduleRow, ScheduleRow.schedule_id == ScheduleActionRow.schedule_id)
            .where(ScheduleRow.tenant == tenant)
            .order_by(ScheduleActionRow.action_id)
        ).all()
    assert [tuple(a) for a in acts] == [
        ("declared", "pytest"), ("backfilled", "ana"), ("backfilled", "bo"),
    ]  # fmt: skip
    with pytest.raises(ScheduleError, match=r"^to: is in the future"):
        backfill(rt, tenant, "hourly", start=start, end=utc(2999, 1, 1), actor="ana")


def test_trigger_fires_now_and_a_refused_submission_is_recorded_on_its_slot(
    rt: Runtime, tenant: str
) -> None:
    now = datetime.now(UTC)
    declare(rt, tenant, "manual", now, cron="0 0 1 1 *")
    op = trigger(rt, tenant, "manual", actor="ana")
    assert op is not None and [o.state for o in operations(rt, tenant)] == ["create_pending"]
    declare(rt, tenant, "ghost", now, cron="0 0 1 1 *", provider="no-such-provider")
    assert trigger(rt, tenant, "ghost", actor="ana") is None
    ((_, state, _),) = slots(rt, tenant, "ghost")
    assert state == "refused"
    with transaction(rt.settings.database_url) as session:
        row = schedule_store.find(session, tenant, "ghost")
        assert row is not None
        (slot,) = schedule_store.slots_of(session, row.schedule_id)
    assert "unknown provider 'no-such-provider'" in (slot.reason or "")
    with pytest.raises(ScheduleError, match=r"^name: no schedule 'nope'"):
        trigger(rt, tenant, "nope", actor="ana")
    # Two triggers within one second name one slot: the second is refused, nothing sent.
    at = utc(2026, 9, 1, 12)
    assert trigger(rt, tenant, "manual", actor="ana", now=at) is not None
    with pytest.raises(ScheduleError, match=r"^slot: schedule:manual:2026-09-01T12:00:00Z is"):
        trigger(rt, tenant, "manual", actor="bo", now=at)
    assert len(operations(rt, tenant)) == 2
    assert uuid.UUID(op)


def test_one_beat_tick_keeps_claiming_while_batches_come_back_full(
    rt: Runtime, tenant: str
) -> None:
    start = utc(2026, 7, 1)
    for n in range(20):
        declare(rt, tenant, f"b{n}", start, interval_seconds=60, start="2026-07-01T00:00:00Z")
    small = dataclasses.replace(
        rt, settings=rt.settings.model_copy(update={"schedule_batch_size": 7})
    )
    assert run_ticks(small, clock=lambda: start + timedelta(seconds=1), budget_seconds=60) == 20
    assert len(operations(rt, tenant)) == 20


def _messages(rt: Runtime) -> list[dict[str, Any]]:
    """The private queue's Celery messages (kombu's Redis envelope), oldest first."""
    raw = rt.redis.lrange(f"{rt.settings.key_prefix}:celery:{rt.settings.queue}", 0, -1)
    out = []
    for item in reversed(raw):
        envelope = json.loads(item)
        args, _kwargs, _embed = json.loads(base64.b64decode(envelope["body"]))
        out.append({"task": envelope["headers"]["task"], "args": args})
    return out


def test_many_due_slots_are_spread_over_the_workers_and_a_lost_share_is_resubmitted(
    rt: Runtime, tenant: str
) -> None:
    start = utc(2026, 8, 1)
    for n in range(7):
        declare(rt, tenant, f"f{n}", start, interval_seconds=60, start="2026-08-01T00:00:00Z")
    shared = dataclasses.replace(
        rt, settings=rt.settings.model_copy(update={"schedule_submit_chunk": 3})
    )
    report = tick_once(shared, clock=lambda: start + timedelta(seconds=1))
    assert (report.published, report.submitted) == (7, 0)
    shares = [m for m in _messages(rt) if m["task"] == "jobwarden.schedule_submit"]
    assert [len(m["args"][0]) for m in shares] == [3, 3, 1]
    # Two shares are run by workers; the third message is lost.
    assert sum(submit_named(shared, m["args"][0]) for m in shares[:2]) == 6
    assert submit_named(shared, shares[0]["args"][0]) == 0  # a duplicate message: nothing
    assert len(operations(rt, tenant)) == 6
    # A later tick, past schedule_resubmit_after_seconds, submits the lost share's claim.
    later = tick_once(shared, clock=lambda: start + timedelta(seconds=45))
    assert later.resubmitted == 1 and len(operations(rt, tenant)) == 7
