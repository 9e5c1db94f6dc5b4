"""The schedules tick: beat rings, Postgres decides (DESIGN, Schedules).

One tick claims the due schedules (FOR UPDATE SKIP LOCKED: a second beat's tick passes
them over), asks the core which slots are due and what each becomes, inserts one row per
slot (ON CONFLICT DO NOTHING) and moves each schedule's timer — all in one commit. Only
then does it submit the slots it claimed, each through the one intake with the key
``schedule:<name>:<slot>``, and record the operation on the slot.

Why no slot is ever doubled or dropped:
- two ticks: the schedule row lock and the slot's primary key let one of them claim it;
- a crash after the claim and before the record (``schedule_after_claim``,
  ``schedule_after_submit``): the slot stays ``submitting`` and a later tick submits it
  again after schedule_resubmit_after_seconds; the idempotency key makes that submit
  answer the operation the first one created (replayed), never a second one;
- downtime: the timer stays at the first undecided slot, so the next tick decides every
  slot since, firing those within the catch-up window and recording the rest as missed.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from jobwarden.config.celery_app import app
from jobwarden.models.errors import RefusedInputError
from jobwarden.models.intake.submission import SubmissionRequest
from jobwarden.models.persistence import api_store
from jobwarden.models.persistence import schedule_store as sstore
from jobwarden.models.persistence.db import transaction
from jobwarden.models.schedules.slots import (
    EPOCH,
    ScheduleAction,
    ScheduleError,
    ScheduleSpec,
    SlotDecision,
    SlotOrigin,
    SlotState,
    backfill_slots,
    plan_tick,
    render_command,
    slot_key,
)
from jobwarden.observability.logs import get_logger
from jobwarden.tasks import faults
from jobwarden.tasks.humans.interventions import request_cancel
from jobwarden.tasks.intake import Caller, SubmitOutcome, submit_request
from jobwarden.tasks.runtime import Runtime, current, utcnow

log = get_logger("jobwarden.schedules")

# The most slots one tick decides for one schedule (downtime of a year at one a minute
# is half a million): the rest are decided by the next ticks, each one bounded.
MAX_SLOTS_PER_TICK = 1000


@dataclass(slots=True)
class TickReport:
    schedules: int = 0
    decided: dict[str, int] = field(default_factory=dict)
    submitted: int = 0
    resubmitted: int = 0
    published: int = 0  # slots handed to other workers (jobwarden.schedule_submit)

    def count(self, state: SlotState) -> None:
        self.decided[state.value] = self.decided.get(state.value, 0) + 1


def tick_once(
    rt: Runtime, *, clock: Callable[[], datetime] = utcnow, limit: int | None = None
) -> TickReport:
    """Decide every due slot of up to ``limit`` schedules, then submit what was claimed.

    ``clock`` is the tick's one reading of the time (tests inject it). Raises only on
    infrastructure failures (Postgres down): the claim then rolls back, nothing changes.
    """
    now = clock()
    report = TickReport()
    batch = limit or rt.settings.schedule_batch_size
    with transaction(rt.settings.database_url) as session:
        due = sstore.claim_due(session, now=now, limit=batch)
        ids = [row.schedule_id for row in due]
        active = sstore.active_operations(session, ids)
        waiting = sstore.buffered(session, ids)
        claims: list[tuple[uuid.UUID, SlotDecision]] = []
        moves = []
        for row in due:
            assert row.next_slot_at is not None  # claim_due takes only rows with a timer
            plan = plan_tick(
                sstore.spec_of(row),
                next_slot_at=row.next_slot_at,
                now=now,
                active=row.schedule_id in active,
                buffered=row.schedule_id in waiting,
                limit=MAX_SLOTS_PER_TICK,
            )
            claims += [(row.schedule_id, d) for d in plan.decisions]
            moves.append((row.schedule_id, plan.next_slot_at, plan.next_due_at))
            for d in plan.decisions:
                report.count(d.state)
        inserted = sstore.insert_slots(
            session, claims, origin=SlotOrigin.beat, requested_by="beat", now=now
        )
        sstore.advance(session, moves)
        released = sstore.release_buffered(session, now=now)
        report.schedules = len(due)
    fresh = {
        (s, d.slot_at)
        for s, d in claims
        if d.state is SlotState.submitting and (s, d.slot_at) in inserted
    } | set(released)
    stale = now - timedelta(seconds=rt.settings.schedule_resubmit_after_seconds)
    chunk = rt.settings.schedule_submit_chunk
    if len(fresh) > chunk:
        # Many slots at once (10,000 schedules every minute): one intake each is ~5 ms of
        # CPU, more than one process has in a minute, so the submits are spread over the
        # workers in messages of ``chunk`` slots. A lost message costs only time: its
        # claims stay submitting and the stale path below submits them in a later tick.
        ordered = sorted(fresh)
        for start in range(0, len(ordered), chunk):
            report.published += publish_submits(rt, ordered[start : start + chunk])
        fresh = set()
    report.submitted, report.resubmitted = submit_pending(rt, fresh, stale_before=stale)
    if report.decided or report.submitted or report.resubmitted or report.published:
        log.info(
            "schedules_tick",
            schedules=report.schedules,
            decided=report.decided,
            submitted=report.submitted,
            resubmitted=report.resubmitted,
            published=report.published,
        )
    return report


def publish_submits(rt: Runtime, slots: list[tuple[uuid.UUID, datetime]]) -> int:
    """One ``jobwarden.schedule_submit`` message naming these claimed slots; returns how
    many slots it carries (0 when the broker refused it: the stale path takes them)."""
    args = [[[str(s), at.isoformat()] for s, at in slots]]
    try:
        app.send_task(
            "jobwarden.schedule_submit",
            args=args,
            queue=rt.settings.queue,
            retry=False,
            ignore_result=True,
        )
    except Exception as exc:
        log.warning("schedule_submits_not_published", slots=len(slots), error=type(exc).__name__)
        return 0
    return len(slots)


def submit_named(rt: Runtime, named: list[list[str]]) -> int:
    """The body of ``jobwarden.schedule_submit``: submit the named claims still open (a
    slot another tick recorded meanwhile is skipped); returns how many were submitted."""
    wanted = {(uuid.UUID(s), datetime.fromisoformat(at)) for s, at in named}
    done, _ = submit_pending(rt, wanted, stale_before=EPOCH)
    return done


def submit_pending(
    rt: Runtime, fresh: set[tuple[uuid.UUID, datetime]], *, stale_before: datetime
) -> tuple[int, int]:
    """Submit the slots just claimed, and any claim a crash left open; (fresh, stale) counts."""
    with transaction(rt.settings.database_url) as session:
        pending = sstore.pending_submits(session, fresh, stale_before=stale_before)
        specs = sstore.specs(session, {p.schedule_id for p in pending})
    done = stale = 0
    # The slots' operations are recorded together (one transaction per batch, three round
    # trips a slot fewer): a crash before that record leaves them submitting, and the
    # stale path resubmits them, which intake answers with the same operations.
    records: list[sstore.SubmitRecord] = []
    for slot in pending:
        spec = specs.get(slot.schedule_id)
        if spec is None:
            continue  # the schedule was removed since
        if slot.cancel_previous:
            # Its cancel must see every earlier slot's operation, recorded.
            _record(rt, records)
        submit_slot(rt, spec, slot, records=records)
        if (slot.schedule_id, slot.slot_at) in fresh:
            done += 1
        else:
            stale += 1
    _record(rt, records)
    return done, stale


def _record(rt: Runtime, records: list[sstore.SubmitRecord]) -> None:
    if records:
        with transaction(rt.settings.database_url) as session:
            sstore.record_submits(session, records)
        records.clear()


def submit_slot(
    rt: Runtime,
    spec: ScheduleSpec,
    slot: sstore.PendingSlot,
    *,
    records: list[sstore.SubmitRecord] | None = None,
) -> str | None:
    """Submit one claimed slot and record its operation (at once, or appended to
    ``records`` for the caller to record); returns the operation id.

    The key is the slot's own, so a resubmission after a crash answers the operation the
    first submit created. An intake refusal is recorded on the slot (state refused)."""
    key = slot_key(spec.name, slot.slot_at)
    faults.fault_point(rt.redis, rt.settings.key_prefix, "schedule_after_claim", key)
    if slot.cancel_previous:
        _cancel_previous(rt, spec, slot)
    # On behalf of the schedule's author (issue 33): a beat slot is theirs alone; a
    # trigger or backfill is whoever asked, and the author still never approves it.
    by = slot.author if slot.author and slot.origin == SlotOrigin.beat.value else None
    request = SubmissionRequest(
        tenant=spec.tenant,
        requested_by=by or slot.requested_by,
        provider=spec.provider,
        command=render_command(
            spec.command, name=spec.name, slot_at=slot.slot_at, timezone=spec.timing.timezone
        ),
        idempotency_key=key,
        concurrency_key=spec.concurrency_key,
        priority=spec.priority,
    )
    caller = Caller(actor=f"schedule:{spec.name}", on_behalf_of=slot.author)
    try:
        result = submit_request(request, door="python", caller=caller, runtime=rt, derived_key=True)
    except RefusedInputError as exc:
        with transaction(rt.settings.database_url) as session:
            sstore.record_refused(session, slot.schedule_id, slot.slot_at, str(exc))
        log.warning("schedule_slot_refused", schedule=spec.name, slot=key, error=str(exc))
        return None
    if result.outcome is SubmitOutcome.in_progress or result.operation_id is None:
        return None  # another submit holds the key right now; a later tick records it
    if result.outcome is not SubmitOutcome.created and not _ours(rt, result.operation_id, caller):
        _refuse_planted(rt, spec, slot, key, result.operation_id)
        return None
    faults.fault_point(rt.redis, rt.settings.key_prefix, "schedule_after_submit", key)
    record = (slot.schedule_id, slot.slot_at, uuid.UUID(result.operation_id))
    if records is not None:
        records.append(record)
    else:
        _record(rt, [record])
    log.info(
        "schedule_slot_fired",
        schedule=spec.name,
        slot=key,
        operation_id=result.operation_id,
        outcome=result.outcome.value,
    )
    return result.operation_id


def _ours(rt: Runtime, operation_id: str, caller: Caller) -> bool:
    """Whether this schedule's own submit created the operation now holding a slot's key
    (a replay after a crash), as the intake log's creating entry says (invariant 17)."""
    with transaction(rt.settings.database_url) as session:
        created = api_store.created_by(session, uuid.UUID(operation_id))
    return created is not None and created[1] == caller.actor


def _refuse_planted(
    rt: Runtime, spec: ScheduleSpec, slot: sstore.PendingSlot, key: str, operation_id: str
) -> None:
    """Defence in depth: intake refuses a caller's slot key, but one planted before that
    rule would otherwise be adopted as the slot's operation, with whatever it holds."""
    why = (
        f"idempotency key {key} is held by operation {operation_id}, which this schedule "
        "did not submit: refusing to adopt it (see `jobwarden keys check`)"
    )
    with transaction(rt.settings.database_url) as session:
        sstore.record_refused(session, slot.schedule_id, slot.slot_at, why)
    log.warning(
        "schedule_slot_key_planted", schedule=spec.name, slot=key, operation_id=operation_id
    )


def _cancel_previous(rt: Runtime, spec: ScheduleSpec, slot: sstore.PendingSlot) -> None:
    """cancel_previous: a cancel request for every active operation of earlier slots,
    through the one cancel path (a worker sends it and waits for confirmation)."""
    with transaction(rt.settings.database_url) as session:
        active = sstore.active_operations(session, [slot.schedule_id])
    for operation_id in active.get(slot.schedule_id, []):
        if operation_id is None:
            continue
        # RefusedInputError: it ended meanwhile, nothing to cancel.
        with contextlib.suppress(RefusedInputError):
            request_cancel(
                str(operation_id),
                f"schedule:{spec.name}",
                f"overlap policy cancel_previous: slot {slot_key(spec.name, slot.slot_at)}",
                runtime=rt,
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class Backfill:
    claimed: list[datetime]
    already: int  # slots in the range already decided (fired, refused, in flight)
    operations: list[str]


def backfill(
    rt: Runtime, tenant: str, name: str, *, start: datetime, end: datetime, actor: str
) -> Backfill:
    """Fire every slot in [start, end] not fired yet; recorded with who asked.

    Idempotent: a second run over the same range claims nothing and creates nothing.
    Raises ScheduleError naming the field (``name``, ``from``, ``to``) on bad input."""
    now = utcnow()
    with transaction(rt.settings.database_url) as session:
        row = sstore.find(session, tenant, name, lock=True)
        if row is None:
            raise ScheduleError("name", f"no schedule {name!r} for tenant {tenant!r}")
        spec = sstore.spec_of(row)
        wanted = backfill_slots(spec.timing, start=start, end=end, now=now)
        author = sstore.author_of(session, row.schedule_id)
        claimed = sstore.claim_backfill(
            session, row.schedule_id, wanted, requested_by=actor, now=now
        )
        sstore.record_action(
            session,
            row,
            ScheduleAction.backfilled,
            actor=actor,
            now=now,
            detail={"from": start.isoformat(), "to": end.isoformat(), "claimed": len(claimed)},
        )
        schedule_id = row.schedule_id
    ops = []
    for at in claimed:
        op = submit_slot(
            rt, spec, _pending(spec, schedule_id, at, SlotOrigin.backfill, actor, author=author)
        )
        if op is not None:
            ops.append(op)
    return Backfill(claimed=claimed, already=len(wanted) - len(claimed), operations=ops)


def trigger(
    rt: Runtime, tenant: str, name: str, *, actor: str, now: datetime | None = None
) -> str | None:
    """Fire one slot now (this second), recorded with who asked; returns its operation,
    None when intake refused it (recorded on the slot). ScheduleError ``slot`` when this
    second's slot is already decided (a second trigger within the second, or a beat slot)."""
    now = (now or utcnow()).replace(microsecond=0)
    with transaction(rt.settings.database_url) as session:
        row = sstore.find(session, tenant, name, lock=True)
        if row is None:
            raise ScheduleError("name", f"no schedule {name!r} for tenant {tenant!r}")
        spec = sstore.spec_of(row)
        author = sstore.author_of(session, row.schedule_id)
        inserted = sstore.insert_slots(
            session,
            [(row.schedule_id, SlotDecision(slot_at=now, state=SlotState.submitting))],
            origin=SlotOrigin.trigger,
            requested_by=actor,
            now=now,
        )
        if not inserted:
            raise ScheduleError("slot", f"{slot_key(name, now)} is already decided")
        sstore.record_action(
            session,
            row,
            ScheduleAction.triggered,
            actor=actor,
            now=now,
            detail={"slot": now.isoformat()},
        )
        schedule_id = row.schedule_id
    return submit_slot(
        rt, spec, _pending(spec, schedule_id, now, SlotOrigin.trigger, actor, author=author)
    )


def _pending(
    spec: ScheduleSpec,
    schedule_id: uuid.UUID,
    at: datetime,
    origin: SlotOrigin,
    actor: str,
    *,
    author: str | None,
) -> sstore.PendingSlot:
    return sstore.PendingSlot(
        schedule_id=schedule_id,
        tenant=spec.tenant,
        name=spec.name,
        slot_at=at,
        origin=origin.value,
        requested_by=actor,
        cancel_previous=False,
        author=author,
    )


def run_ticks(
    rt: Runtime,
    *,
    clock: Callable[[], datetime] = utcnow,
    timer: Callable[[], float] = time.monotonic,
    budget_seconds: float | None = None,
) -> int:
    """Tick again while batches come back full, until the budget (one schedule interval by
    default) is spent; what is left is due at the next beat. Returns slots decided."""
    budget = rt.settings.schedule_interval_seconds if budget_seconds is None else budget_seconds
    started = timer()
    total = 0
    while True:
        report = tick_once(rt, clock=clock)
        total += sum(report.decided.values())
        if report.schedules < rt.settings.schedule_batch_size or timer() - started >= budget:
            return total


@app.task(name="jobwarden.schedules", acks_late=True, reject_on_worker_lost=True)
def schedules_tick() -> int:
    """Beat's entry (jobwarden-schedules): ticks for one interval; returns slots decided."""
    return run_ticks(current())


@app.task(name="jobwarden.schedule_submit", acks_late=True, reject_on_worker_lost=True)
def schedule_submit(slots: list[list[str]]) -> int:
    """Submit a share of one tick's claimed slots (published by tick_once)."""
    return submit_named(current(), slots)
