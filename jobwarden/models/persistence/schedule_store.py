"""Schedules in SQL: declare, claim due, record slots, and the figures /metrics reads.

Helpers take the session and never commit (the task wrapper or the CLI owns the
transaction). Every claim is an INSERT … ON CONFLICT DO NOTHING on (schedule, slot
time), so whoever inserts a slot's row is the one who submits it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, and_, bindparam, func, insert, or_, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session

from jobwarden.models.persistence.schedule_tables import (
    ScheduleActionRow,
    ScheduleRow,
    ScheduleSlotRow,
)
from jobwarden.models.persistence.tables import OperationRow
from jobwarden.models.schedules.slots import (
    OverlapPolicy,
    ScheduleAction,
    ScheduleSpec,
    ScheduleStatus,
    SlotDecision,
    SlotOrigin,
    SlotState,
    Timing,
    due_at,
    with_next_slot,
)
from jobwarden.models.states import TERMINAL

_TERMINAL = [s.value for s in TERMINAL]


def spec_of(row: ScheduleRow) -> ScheduleSpec:
    return ScheduleSpec(
        tenant=row.tenant,
        name=row.name,
        timing=Timing(
            cron=row.cron,
            interval_seconds=row.interval_seconds,
            timezone=row.timezone,
            start_at=row.start_at,
            end_at=row.end_at,
            jitter_seconds=row.jitter_seconds,
        ),
        provider=row.provider,
        command=row.command,
        overlap=OverlapPolicy(row.overlap),
        catchup_window_seconds=row.catchup_window_seconds,
        concurrency_key=row.concurrency_key,
        priority=row.priority,
    )


def _columns(spec: ScheduleSpec) -> dict[str, Any]:
    t = spec.timing
    return {
        "cron": t.cron,
        "interval_seconds": t.interval_seconds,
        "timezone": t.timezone,
        "start_at": t.start_at,
        "end_at": t.end_at,
        "jitter_seconds": t.jitter_seconds,
        "provider": spec.provider,
        "command": spec.command,
        "concurrency_key": spec.concurrency_key,
        "priority": spec.priority,
        "overlap": spec.overlap.value,
        "catchup_window_seconds": spec.catchup_window_seconds,
    }


_TIMING = ("cron", "interval_seconds", "timezone", "start_at", "end_at", "jitter_seconds")


def declare(session: Session, spec: ScheduleSpec, *, source: str, actor: str, now: datetime) -> str:
    """Create or change a schedule; returns "created", "changed" or "unchanged".

    A new schedule, or one whose timing changed, starts at its first slot at or after
    ``now``: declaring never fires the past (backfill does). Its status (paused or not)
    and its slots are kept across changes.
    """
    row = session.scalars(
        select(ScheduleRow)
        .where(ScheduleRow.tenant == spec.tenant, ScheduleRow.name == spec.name)
        .with_for_update()
    ).one_or_none()
    values = _columns(spec)
    if row is None:
        first = with_next_slot(spec, now=now)
        row = ScheduleRow(
            schedule_id=uuid.uuid4(),
            tenant=spec.tenant,
            name=spec.name,
            status=ScheduleStatus.active.value,
            source=source,
            next_slot_at=first,
            next_due_at=due_at(spec, first) if first else None,
            created_at=now,
            updated_at=now,
            version=1,
            **values,
        )
        session.add(row)
        session.flush()
        _act(session, row.schedule_id, ScheduleAction.declared, actor, now, {"source": source})
        return "created"
    changed = {k: v for k, v in values.items() if getattr(row, k) != v}
    if not changed and row.source == source:
        return "unchanged"
    for key, value in changed.items():
        setattr(row, key, value)
    if any(k in _TIMING for k in changed):
        first = with_next_slot(spec, now=now)
        row.next_slot_at = first
        row.next_due_at = due_at(spec, first) if first else None
    row.source = source
    row.updated_at = now
    row.version += 1
    _act(
        session,
        row.schedule_id,
        ScheduleAction.declared,
        actor,
        now,
        {"source": source, "changed": sorted(changed)},
    )
    return "changed"


def _act(
    session: Session,
    schedule_id: uuid.UUID,
    action: ScheduleAction,
    actor: str,
    now: datetime,
    detail: dict[str, Any],
) -> None:
    session.execute(
        insert(ScheduleActionRow).values(
            schedule_id=schedule_id, action=action.value, actor=actor, at=now, detail=detail
        )
    )


def _author(schedule_id: Any) -> Any:
    """The actor of the schedule's latest ``declared`` action: its author, on whose behalf
    its slots are submitted (a scalar subquery; ``schedule_id`` a value or a column)."""
    return (
        select(ScheduleActionRow.actor)
        .where(
            ScheduleActionRow.schedule_id == schedule_id,
            ScheduleActionRow.action == ScheduleAction.declared.value,
        )
        .order_by(ScheduleActionRow.action_id.desc())
        .limit(1)
        .scalar_subquery()
    )


def author_of(session: Session, schedule_id: uuid.UUID) -> str | None:
    """Who last declared (created or changed) the schedule; None for none recorded."""
    return cast(str | None, session.scalar(select(_author(schedule_id))))


def find(session: Session, tenant: str, name: str, *, lock: bool = False) -> ScheduleRow | None:
    query = select(ScheduleRow).where(ScheduleRow.tenant == tenant, ScheduleRow.name == name)
    return session.scalars(query.with_for_update() if lock else query).one_or_none()


def set_status(
    session: Session, row: ScheduleRow, status: ScheduleStatus, *, actor: str, now: datetime
) -> bool:
    """Pause or resume; False when it already was. Resuming leaves next_slot_at where it
    was, so the slots that came due while paused are decided by the catch-up window."""
    if row.status == status.value:
        return False
    row.status = status.value
    row.updated_at = now
    row.version += 1
    action = ScheduleAction.paused if status is ScheduleStatus.paused else ScheduleAction.resumed
    _act(session, row.schedule_id, action, actor, now, {})
    return True


def record_action(
    session: Session,
    row: ScheduleRow,
    action: ScheduleAction,
    *,
    actor: str,
    now: datetime,
    detail: dict[str, Any],
) -> None:
    _act(session, row.schedule_id, action, actor, now, detail)


def claim_due(session: Session, *, now: datetime, limit: int) -> Sequence[ScheduleRow]:
    """Active schedules whose next slot is due, locked; another beat's tick skips them."""
    return session.scalars(
        select(ScheduleRow)
        .where(
            ScheduleRow.status == ScheduleStatus.active.value,
            ScheduleRow.next_due_at.is_not(None),
            ScheduleRow.next_due_at <= now,
        )
        .order_by(ScheduleRow.next_due_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    ).all()


def _active_condition() -> Any:
    # An in-flight submit counts as active: its operation exists, or is about to.
    return or_(
        ScheduleSlotRow.state == SlotState.submitting.value,
        and_(
            ScheduleSlotRow.state == SlotState.fired.value,
            OperationRow.state.not_in(_TERMINAL),
        ),
    )


def active_operations(
    session: Session, schedule_ids: Iterable[uuid.UUID]
) -> dict[uuid.UUID, list[uuid.UUID | None]]:
    """Per schedule, the operations of its slots that have not ended (None: submit in flight)."""
    ids = list(schedule_ids)
    if not ids:
        return {}
    rows = session.execute(
        select(ScheduleSlotRow.schedule_id, ScheduleSlotRow.operation_id)
        .outerjoin(OperationRow, OperationRow.operation_id == ScheduleSlotRow.operation_id)
        .where(
            ScheduleSlotRow.schedule_id.in_(ids),
            ScheduleSlotRow.state.in_([SlotState.submitting.value, SlotState.fired.value]),
            _active_condition(),
        )
    ).all()
    found: dict[uuid.UUID, list[uuid.UUID | None]] = {}
    for schedule_id, operation_id in rows:
        found.setdefault(schedule_id, []).append(operation_id)
    return found


def buffered(session: Session, schedule_ids: Iterable[uuid.UUID]) -> set[uuid.UUID]:
    ids = list(schedule_ids)
    if not ids:
        return set()
    return set(
        session.scalars(
            select(ScheduleSlotRow.schedule_id).where(
                ScheduleSlotRow.schedule_id.in_(ids),
                ScheduleSlotRow.state == SlotState.buffered.value,
            )
        ).all()
    )


def insert_slots(
    session: Session,
    rows: Sequence[tuple[uuid.UUID, SlotDecision]],
    *,
    origin: SlotOrigin,
    requested_by: str,
    now: datetime,
) -> set[tuple[uuid.UUID, datetime]]:
    """Claim slots; returns those this call inserted (a slot already decided is left as
    it is: ON CONFLICT DO NOTHING is what keeps a second beat from deciding it again)."""
    if not rows:
        return set()
    values = [
        {
            "schedule_id": schedule_id,
            "slot_at": d.slot_at,
            "state": d.state.value,
            "origin": origin.value,
            "reason": d.reason,
            "requested_by": requested_by,
            "decided_at": now,
            "cancel_previous": d.cancel_previous,
        }
        for schedule_id, d in rows
    ]
    statement = (
        pg_insert(ScheduleSlotRow)
        .values(values)
        .on_conflict_do_nothing(index_elements=["schedule_id", "slot_at"])
        .returning(ScheduleSlotRow.schedule_id, ScheduleSlotRow.slot_at)
    )
    return {(r[0], r[1]) for r in session.execute(statement).all()}


def claim_backfill(
    session: Session,
    schedule_id: uuid.UUID,
    slot_times: Sequence[datetime],
    *,
    requested_by: str,
    now: datetime,
) -> list[datetime]:
    """Claim past slots for a backfill: new ones, and missed or skipped ones (never
    submitted, so their key is unused). A fired, refused or in-flight slot is left alone,
    so a second backfill of the same range claims nothing."""
    if not slot_times:
        return []
    values = [
        {
            "schedule_id": schedule_id,
            "slot_at": at,
            "state": SlotState.submitting.value,
            "origin": SlotOrigin.backfill.value,
            "reason": None,
            "requested_by": requested_by,
            "decided_at": now,
            "cancel_previous": False,
        }
        for at in slot_times
    ]
    claim = pg_insert(ScheduleSlotRow).values(values)
    statement = claim.on_conflict_do_update(
        index_elements=["schedule_id", "slot_at"],
        set_={
            "state": claim.excluded.state,
            "origin": claim.excluded.origin,
            "reason": None,
            "requested_by": claim.excluded.requested_by,
            "decided_at": claim.excluded.decided_at,
        },
        where=ScheduleSlotRow.state.in_([SlotState.missed.value, SlotState.skipped.value]),
    ).returning(ScheduleSlotRow.slot_at)
    return sorted(session.scalars(statement).all())


def advance(
    session: Session, moves: Sequence[tuple[uuid.UUID, datetime | None, datetime | None]]
) -> None:
    """Move each schedule's timer past the slots just decided (rows locked by claim_due).

    One executemany on the Core table: psycopg sends it as one pipeline, and the ORM's
    session synchronisation (which evaluates every loaded row per statement) is skipped."""
    if not moves:
        return
    table = cast(Table, ScheduleRow.__table__)
    statement = (
        table.update()
        .where(table.c.schedule_id == bindparam("id"))
        .values(next_slot_at=bindparam("slot"), next_due_at=bindparam("due"))
    )
    session.connection().execute(
        statement, [{"id": i, "slot": slot, "due": due} for i, slot, due in moves]
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingSlot:
    schedule_id: uuid.UUID
    tenant: str
    name: str
    slot_at: datetime
    origin: str
    requested_by: str
    cancel_previous: bool
    # The schedule's author (models/humans/approvals.py: never approves what the slot submits).
    author: str | None = None


def pending_submits(
    session: Session, keys: Iterable[tuple[uuid.UUID, datetime]], *, stale_before: datetime
) -> list[PendingSlot]:
    """Slots to submit: those just claimed (``keys``) and any other claim older than
    ``stale_before`` (its claimer died between the claim and recording the operation)."""
    wanted = set(keys)
    # By schedule (a flat IN list), then the exact (schedule, slot) pairs in Python: a
    # row-value IN list of thousands of pairs exhausts Postgres's expression stack.
    conditions = [ScheduleSlotRow.decided_at < stale_before]
    if wanted:
        conditions.append(ScheduleSlotRow.schedule_id.in_({s for s, _ in wanted}))
    found = session.execute(
        select(
            ScheduleSlotRow.schedule_id,
            ScheduleRow.tenant,
            ScheduleRow.name,
            ScheduleSlotRow.slot_at,
            ScheduleSlotRow.origin,
            ScheduleSlotRow.requested_by,
            ScheduleSlotRow.cancel_previous,
            ScheduleSlotRow.decided_at,
            _author(ScheduleSlotRow.schedule_id),
        )
        .join(ScheduleRow, ScheduleRow.schedule_id == ScheduleSlotRow.schedule_id)
        .where(ScheduleSlotRow.state == SlotState.submitting.value, or_(*conditions))
        .order_by(ScheduleSlotRow.slot_at)
    ).all()
    rows = [r for r in found if (r[0], r[3]) in wanted or r[7] < stale_before]
    return [
        PendingSlot(
            schedule_id=r[0],
            tenant=r[1],
            name=r[2],
            slot_at=r[3],
            origin=r[4],
            requested_by=r[5],
            cancel_previous=r[6],
            author=r[8],
        )
        for r in rows
    ]


def record_refused(session: Session, schedule_id: uuid.UUID, slot_at: datetime, why: str) -> bool:
    """Intake refused the slot's submission: recorded with its reason. Conditional on the
    claim still being open; False when someone recorded it first."""
    values = {"state": SlotState.refused.value, "reason": why[:2000]}
    result = session.execute(
        update(ScheduleSlotRow)
        .where(
            ScheduleSlotRow.schedule_id == schedule_id,
            ScheduleSlotRow.slot_at == slot_at,
            ScheduleSlotRow.state == SlotState.submitting.value,
        )
        .values(**values)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


# (schedule, slot time, operation): a fired slot's record.
SubmitRecord = tuple[uuid.UUID, datetime, uuid.UUID]


def record_submits(session: Session, records: Sequence[SubmitRecord]) -> None:
    """Record fired slots' operations in one executemany; a slot no longer submitting
    (recorded by another tick) is left as it is."""
    if not records:
        return
    table = cast(Table, ScheduleSlotRow.__table__)
    statement = (
        table.update()
        .where(
            table.c.schedule_id == bindparam("id"),
            table.c.slot_at == bindparam("at"),
            table.c.state == SlotState.submitting.value,
        )
        .values(state=SlotState.fired.value, operation_id=bindparam("op"))
    )
    session.connection().execute(
        statement, [{"id": s, "at": at, "op": op} for s, at, op in records]
    )


def release_buffered(session: Session, *, now: datetime) -> list[tuple[uuid.UUID, datetime]]:
    """Buffered slots whose schedule has nothing active any more become claims to submit.

    The schedule row is locked (SKIP LOCKED) so this cannot race a tick deciding the same
    schedule's new slots against a stale view of what is active."""
    candidates = session.execute(
        select(ScheduleSlotRow.schedule_id, ScheduleSlotRow.slot_at)
        .join(ScheduleRow, ScheduleRow.schedule_id == ScheduleSlotRow.schedule_id)
        .where(
            ScheduleSlotRow.state == SlotState.buffered.value,
            ScheduleRow.status == ScheduleStatus.active.value,
        )
        .with_for_update(of=ScheduleRow, skip_locked=True)
    ).all()
    if not candidates:
        return []
    busy = active_operations(session, {c[0] for c in candidates})
    released = [(s, at) for s, at in candidates if s not in busy]
    for schedule_id, slot_at in released:
        session.execute(
            update(ScheduleSlotRow)
            .where(
                ScheduleSlotRow.schedule_id == schedule_id,
                ScheduleSlotRow.slot_at == slot_at,
                ScheduleSlotRow.state == SlotState.buffered.value,
            )
            .values(state=SlotState.submitting.value, decided_at=now, reason=None)
        )
    return released


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleView:
    """One schedule as `schedules list`, the API and the console show it."""

    tenant: str
    name: str
    status: str
    timing: str
    timezone: str
    overlap: str
    provider: str
    next_slot_at: datetime | None
    last_slot_at: datetime | None
    last_state: str | None
    last_operation_id: uuid.UUID | None
    last_operation_state: str | None
    missed: int
    source: str

    def as_dict(self) -> dict[str, Any]:
        def iso(at: datetime | None) -> str | None:
            return at.isoformat() if at else None

        return {
            "tenant": self.tenant,
            "name": self.name,
            "status": self.status,
            "timing": self.timing,
            "timezone": self.timezone,
            "overlap": self.overlap,
            "provider": self.provider,
            "next_slot_at": iso(self.next_slot_at),
            "last_slot_at": iso(self.last_slot_at),
            "last_state": self.last_state,
            "last_operation_id": str(self.last_operation_id) if self.last_operation_id else None,
            "last_operation_state": self.last_operation_state,
            "missed": self.missed,
            "source": self.source,
        }


def views(session: Session, *, tenant: str | None = None) -> list[ScheduleView]:
    """Every schedule (of one tenant) with its next slot, last slot, and missed count."""
    query = select(ScheduleRow).order_by(ScheduleRow.tenant, ScheduleRow.name)
    if tenant is not None:
        query = query.where(ScheduleRow.tenant == tenant)
    rows = session.scalars(query).all()
    if not rows:
        return []
    ids = [r.schedule_id for r in rows]
    missed: dict[uuid.UUID, int] = {
        r[0]: r[1]
        for r in session.execute(
            select(ScheduleSlotRow.schedule_id, func.count())
            .where(
                ScheduleSlotRow.schedule_id.in_(ids),
                ScheduleSlotRow.state == SlotState.missed.value,
            )
            .group_by(ScheduleSlotRow.schedule_id)
        ).all()
    }
    # The latest slot per schedule (DISTINCT ON needs SQLAlchemy 2.1's distinct_on; the
    # floor is 2.0): its time by GROUP BY, then its row.
    latest = (
        select(ScheduleSlotRow.schedule_id, func.max(ScheduleSlotRow.slot_at).label("slot_at"))
        .where(ScheduleSlotRow.schedule_id.in_(ids))
        .group_by(ScheduleSlotRow.schedule_id)
        .subquery()
    )
    last = {
        r[0]: r[1:]
        for r in session.execute(
            select(
                ScheduleSlotRow.schedule_id,
                ScheduleSlotRow.slot_at,
                ScheduleSlotRow.state,
                ScheduleSlotRow.operation_id,
                OperationRow.state,
            )
            .join(
                latest,
                and_(
                    latest.c.schedule_id == ScheduleSlotRow.schedule_id,
                    latest.c.slot_at == ScheduleSlotRow.slot_at,
                ),
            )
            .outerjoin(OperationRow, OperationRow.operation_id == ScheduleSlotRow.operation_id)
        ).all()
    }
    out = []
    for r in rows:
        slot_at, state, op_id, op_state = last.get(r.schedule_id, (None, None, None, None))
        out.append(
            ScheduleView(
                tenant=r.tenant,
                name=r.name,
                status=r.status,
                timing=r.cron if r.cron is not None else f"every {r.interval_seconds} s",
                timezone=r.timezone,
                overlap=r.overlap,
                provider=r.provider,
                next_slot_at=r.next_slot_at,
                last_slot_at=slot_at,
                last_state=state,
                last_operation_id=op_id,
                last_operation_state=op_state,
                missed=int(missed.get(r.schedule_id, 0)),
                source=r.source,
            )
        )
    return out


def specs(session: Session, ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, ScheduleSpec]:
    wanted = list(ids)
    if not wanted:
        return {}
    rows = session.scalars(select(ScheduleRow).where(ScheduleRow.schedule_id.in_(wanted))).all()
    return {r.schedule_id: spec_of(r) for r in rows}


def slots_of(session: Session, schedule_id: uuid.UUID) -> Sequence[ScheduleSlotRow]:
    return session.scalars(
        select(ScheduleSlotRow)
        .where(ScheduleSlotRow.schedule_id == schedule_id)
        .order_by(ScheduleSlotRow.slot_at)
    ).all()


def lag_and_missed(session: Session) -> tuple[datetime | None, list[tuple[str, str, int]]]:
    """What /metrics reports of the schedules (observability/schedule_metrics.py): the
    earliest due time an active schedule has reached and the tick not yet decided (None:
    none), and the missed slots by (tenant, schedule). Two aggregates, on partial indexes."""
    oldest = session.scalar(
        select(func.min(ScheduleRow.next_due_at)).where(
            ScheduleRow.status == ScheduleStatus.active.value,
            ScheduleRow.next_due_at.is_not(None),
        )
    )
    # Every declared schedule has a series, 0 until it misses a slot: the alert's
    # increase() sees the first miss (a series born at 1 shows no increase).
    missed = session.execute(
        select(ScheduleRow.tenant, ScheduleRow.name, func.count(ScheduleSlotRow.schedule_id))
        .outerjoin(
            ScheduleSlotRow,
            (ScheduleSlotRow.schedule_id == ScheduleRow.schedule_id)
            & (ScheduleSlotRow.state == SlotState.missed.value),
        )
        .group_by(ScheduleRow.tenant, ScheduleRow.name)
        .order_by(ScheduleRow.tenant, ScheduleRow.name)
    ).all()
    return oldest, [(tenant, name, n) for tenant, name, n in missed]
