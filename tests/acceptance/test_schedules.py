"""Schedules fired by a real beat through real workers (issue 22).

Beat rings ``jobwarden.schedules`` every 0.5 s (worker_env); slots are whole seconds, so
these schedules use short intervals starting a few seconds ahead. Downtime is injected
through the row, not the clock: a schedule declared "three hours ago" has its timer three
hours back, exactly as after three hours without a beat; the tick reads the real time.
(The DST days need a clock far from today: tests/integration/test_schedules_tick.py
moves tick_once's injected clock across them.)
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import delete, select

from jobwarden.demo.harness import Stack, wait_for
from jobwarden.models.persistence import schedule_store
from jobwarden.models.persistence.api_tables import IntakeLogRow
from jobwarden.models.persistence.db import transaction
from jobwarden.models.persistence.schedule_tables import ScheduleRow
from jobwarden.models.persistence.tables import OperationRow
from jobwarden.models.schedules.slots import parse_spec, rfc3339, slot_key
from tests.acceptance.conftest import Pipeline, logged
from tests.cli_runner import CliResult, run_cli

pytestmark = pytest.mark.usefixtures("stack")

TENANT = "acceptance-schedules"
QUICK = {"kind": "export", "slot": "{slot}", "behaviour": {"polls_to_finish": 1}}
LONG = {"kind": "export", "slot": "{slot}", "behaviour": {"never_finish": True, "cancel": "honour"}}


@pytest.fixture(autouse=True)
def _own_schedules(database_url: str) -> Iterator[None]:
    """Each test's schedules are removed afterwards: no later tick decides their slots."""
    yield
    with transaction(database_url) as session:
        session.execute(delete(ScheduleRow).where(ScheduleRow.tenant == TENANT))


def soon(seconds: int) -> datetime:
    """A whole second at least ``seconds`` from now: the first slot of a test's schedule."""
    return datetime.fromtimestamp(math.ceil(time.time()) + seconds, UTC)


def declare(name: str, now: datetime | None = None, **table: Any) -> None:
    spec = parse_spec(TENANT, name, {"provider": "sandbox", **table}, key_limit=200)
    with transaction(os.environ["JOBWARDEN_DATABASE_URL"]) as session:
        schedule_store.declare(
            session, spec, source="test", actor="pytest", now=now or datetime.now(UTC)
        )


def slot_rows(name: str) -> list[Any]:
    with transaction(os.environ["JOBWARDEN_DATABASE_URL"]) as session:
        row = schedule_store.find(session, TENANT, name)
        assert row is not None
        return list(schedule_store.slots_of(session, row.schedule_id))


def schedule_ops(name: str) -> list[Any]:
    with transaction(os.environ["JOBWARDEN_DATABASE_URL"]) as session:
        return list(
            session.execute(
                select(OperationRow.operation_id, OperationRow.idempotency_key, OperationRow.state)
                .where(
                    OperationRow.tenant == TENANT,
                    OperationRow.idempotency_key.like(f"schedule:{name}:%"),
                )
                .order_by(OperationRow.idempotency_key)
            ).all()
        )


def decided(name: str, count: int, *, timeout: float = 60.0, fired: bool = False) -> list[Any]:
    """Wait until ``count`` slots are decided (and, with ``fired``, each has its operation)."""

    def done() -> list[Any]:
        rows = slot_rows(name)
        if len(rows) < count:
            return []
        if fired and any(r.state in ("submitting", "buffered") for r in rows):
            return []
        return rows

    return wait_for(done, timeout=timeout, what=f"{count} slots of {name} decided")


def stop_beat(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    os.killpg(proc.pid, sig)
    proc.wait(timeout=15)


def test_two_beats_fire_ten_slots_as_ten_operations(stack: Stack, pipeline: Pipeline) -> None:
    second = stack.start_beat("beat-two")
    try:
        start = soon(3)
        end = start + timedelta(seconds=9)
        declare(
            "ten", interval_seconds=1, start=rfc3339(start), end=rfc3339(end),
            overlap="allow_all", command=QUICK,
        )  # fmt: skip
        rows = decided("ten", 10, fired=True)

        def ended() -> bool:
            with transaction(pipeline.database_url) as session:
                row = schedule_store.find(session, TENANT, "ten")
                return row is not None and row.next_slot_at is None

        wait_for(ended, timeout=30, what="the schedule to pass its end")
    finally:
        stop_beat(second)
        stack.beats.remove(second)
    ops = schedule_ops("ten")
    assert [r.slot_at for r in rows] == [start + timedelta(seconds=k) for k in range(10)]
    assert [r.state for r in rows] == ["fired"] * 10
    assert [o.idempotency_key for o in ops] == [slot_key("ten", r.slot_at) for r in rows]
    assert {r.operation_id for r in rows} == {o.operation_id for o in ops}
    pipeline.created += [str(o.operation_id) for o in ops]
    for op in ops:
        assert pipeline.wait_state(str(op.operation_id), timeout=60).state == "succeeded"
        assert len(pipeline.creates(str(op.operation_id))) == 1
    assert len(slot_rows("ten")) == 10


def test_killed_tick_workers_and_a_killed_beat_neither_double_nor_drop_a_slot(
    stack: Stack,
    pipeline: Pipeline,
    arm: Callable[[str, str, str], None],
    fired: Callable[[str, str], int | None],
) -> None:
    start = soon(4)
    end = start + timedelta(seconds=9)
    claimed = slot_key("crash", start + timedelta(seconds=1))
    submitted = slot_key("crash", start + timedelta(seconds=3))
    # A worker dies after the slot's claim commits (before its submit), and another after
    # the submit (before the slot records its operation).
    arm("schedule_after_claim", claimed, "kill")
    arm("schedule_after_submit", submitted, "kill")
    declare(
        "crash", interval_seconds=1, start=rfc3339(start), end=rfc3339(end),
        overlap="allow_all", command=QUICK,
    )  # fmt: skip
    wait_for(lambda: fired("schedule_after_submit", submitted), timeout=30, what="the kill")
    assert fired("schedule_after_claim", claimed)
    # Beat itself is killed mid-run; three slots come due with no beat at all.
    (beat,) = [b for b in stack.beats if b.poll() is None][:1]
    stop_beat(beat, signal.SIGKILL)
    stack.beats.remove(beat)
    gap = (start + timedelta(seconds=7)).timestamp()
    wait_for(lambda: time.time() > gap, timeout=30, what="slots to come due without a beat")
    stack.start_beat("beat-restarted")
    rows = decided("crash", 10, fired=True)
    ops = schedule_ops("crash")
    assert [r.state for r in rows] == ["fired"] * 10
    assert [o.idempotency_key for o in ops] == [slot_key("crash", r.slot_at) for r in rows]
    assert [r.operation_id for r in rows] == [o.operation_id for o in ops]
    # The slot left unrecorded was submitted again, and intake answered the first operation.
    with transaction(pipeline.database_url) as session:
        answers = session.scalars(
            select(IntakeLogRow.outcome)
            .where(IntakeLogRow.tenant == TENANT, IntakeLogRow.idempotency_key == submitted)
            .order_by(IntakeLogRow.at)
        ).all()
    # (Two ticks running side by side may both resubmit it: each is answered replayed.)
    assert answers[0] == "created" and answers[1:] and set(answers[1:]) == {"replayed"}
    pipeline.created += [str(o.operation_id) for o in ops]
    for op in ops:
        assert pipeline.wait_state(str(op.operation_id), timeout=60).state == "succeeded"
        assert len(pipeline.creates(str(op.operation_id))) == 1


def test_three_hours_down_with_a_one_hour_catch_up_window(stack: Stack, pipeline: Pipeline) -> None:
    # Declared three hours ago (its timer is there), every ten minutes: the state a
    # schedule is in after three hours without a beat. The last slot is 15 s ahead.
    start = soon(15) - timedelta(hours=3)
    declare(
        "downtime", now=start, interval_seconds=600, start=rfc3339(start),
        catchup_window_seconds=3600, overlap="allow_all", command=QUICK,
    )  # fmt: skip
    rows = decided("downtime", 19, fired=True)
    fired_at = [r.slot_at - start for r in rows if r.state == "fired"]
    missed = [r for r in rows if r.state == "missed"]
    assert fired_at == [timedelta(minutes=m) for m in range(120, 190, 10)]
    assert [r.slot_at - start for r in missed] == [timedelta(minutes=m) for m in range(0, 120, 10)]
    assert all("past the catch-up window of 3600 s" in (r.reason or "") for r in missed)
    assert all(r.operation_id is None for r in missed)
    ops = schedule_ops("downtime")
    assert len(ops) == 7
    # The six slots caught up at once were more than one process's share (4): the tick
    # handed them to the workers in two jobwarden.schedule_submit messages.
    assert any(r.get("published") == 6 for r in logged(stack, "schedules_tick"))
    pipeline.created += [str(o.operation_id) for o in ops]
    for op in ops:
        assert pipeline.wait_state(str(op.operation_id), timeout=60).state == "succeeded"


def test_each_overlap_policy_against_a_long_running_job(pipeline: Pipeline) -> None:
    from jobwarden.tasks.humans.interventions import request_cancel

    start = soon(3)
    names = {"skip": "ov-skip", "buffer_one": "ov-buffer", "allow_all": "ov-all",
             "cancel_previous": "ov-cancel"}  # fmt: skip
    for policy, name in names.items():
        declare(
            name, interval_seconds=3, start=rfc3339(start),
            end=rfc3339(start + timedelta(seconds=6)), overlap=policy, command=LONG,
        )  # fmt: skip
    for name in names.values():
        decided(name, 3, timeout=60)
    # Every decision is made while the first slot's job is still running at the provider.
    ops = {name: schedule_ops(name) for name in names.values()}
    for name in names.values():
        pipeline.created += [str(o.operation_id) for o in ops[name]]

    def states(name: str) -> list[str]:
        return [r.state for r in decided(name, 3, fired=name != "ov-buffer")]

    assert states("ov-skip") == ["fired", "skipped", "skipped"]
    assert states("ov-buffer") == ["fired", "buffered", "skipped"]
    assert states("ov-all") == ["fired", "fired", "fired"]
    assert states("ov-cancel") == ["fired", "fired", "fired"]
    assert len(ops["ov-skip"]) == 1 and len(ops["ov-buffer"]) == 1
    # allow_all: three remote jobs run side by side.
    for op in ops["ov-all"]:
        pipeline.wait_state(str(op.operation_id), {"accepted", "observing"}, timeout=60)
    # cancel_previous: each earlier job was cancelled at the provider (confirmed there).
    first, second, third = (str(o.operation_id) for o in schedule_ops("ov-cancel"))
    for op in (first, second):
        assert pipeline.wait_state(op, timeout=60).state == "cancelled"
        assert pipeline.remote_jobs(op)[0]["status"] == "cancelled"
    pipeline.wait_state(third, {"accepted", "observing"}, timeout=60)
    # buffer_one: the buffered slot fires once the running job ends.
    (running,) = ops["ov-buffer"]
    request_cancel(str(running.operation_id), "pytest", "end the first slot's job")
    assert [r.state for r in decided("ov-buffer", 3, fired=True)] == ["fired", "fired", "skipped"]
    later = [o for o in schedule_ops("ov-buffer") if o.operation_id != running.operation_id]
    assert len(later) == 1
    pipeline.created.append(str(later[0].operation_id))
    # Leave nothing running at the provider.
    for name in names.values():
        for op in schedule_ops(name):
            if op.state not in ("cancelled", "abandoned", "succeeded", "failed"):
                request_cancel(str(op.operation_id), "pytest", "test over")
    for name in names.values():
        for op in schedule_ops(name):
            pipeline.wait_state(str(op.operation_id), timeout=60)


def _cli(*args: str, token: str | None = None) -> CliResult:
    """``jobwarden ARGS`` in this process (tests/cli_runner.py), as ``token``'s principal."""
    return run_cli(*args, env={"JOBWARDEN_TOKEN": token} if token is not None else {})


def test_backfill_run_twice_creates_nothing_new(pipeline: Pipeline) -> None:
    import json

    from jobwarden.api.auth import create_token

    declare("backfilled", cron="0 * * * *", command=QUICK)
    # The CLI acts as a token's principal of the schedule's tenant (issue 33).
    ana, bo = (
        create_token(pipeline.database_url, tenant=TENANT, name=n, scopes=["submit"]).token
        for n in ("ana", "bo")
    )
    past = (datetime.now(UTC) - timedelta(days=2)).replace(minute=0, second=0, microsecond=0)
    span = ["--from", rfc3339(past), "--to", rfc3339(past + timedelta(hours=3))]
    first = _cli("schedules", "backfill", "backfilled", "--tenant", TENANT, *span, token=ana)
    assert first.returncode == 0, first.stderr
    answer = json.loads(first.stdout)
    assert answer["claimed"] == 4 and answer["already_decided"] == 0
    assert len(answer["operations"]) == 4
    for op in answer["operations"]:
        pipeline.created.append(op)
        assert pipeline.wait_state(op, timeout=60).state == "succeeded"
    again = _cli("schedules", "backfill", "backfilled", "--tenant", TENANT, *span, token=bo)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == {"claimed": 0, "already_decided": 4, "operations": []}
    assert len(schedule_ops("backfilled")) == 4
    listed = _cli("schedules", "list", "--tenant", TENANT, "--json")
    (view,) = json.loads(listed.stdout)
    assert view["name"] == "backfilled" and view["last_state"] == "fired"
    assert view["last_slot_at"] == (past + timedelta(hours=3)).isoformat()
    assert view["last_operation_state"] == "succeeded"
