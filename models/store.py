"""The store: every write to an operation is a compare-and-set on its version,
and appends its events to the hash chain in the same transaction."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import Table, insert, or_, select, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from jobwarden.models.errors import StaleVersionError
from jobwarden.models.history import (
    GENESIS_HASH,
    ChainedEvent,
    ChainProblem,
    EventDraft,
    EventKind,
    chain,
    verify_chain,
)
from jobwarden.models.states import OperationState, check_transition
from jobwarden.models.tables import ACTIVE_STATES, EventRow, OperationRow

# Core inserts: history rows need no ORM identity, and this runs on every poll.
EVENTS = cast(Table, EventRow.__table__)
OPERATIONS = cast(Table, OperationRow.__table__)


def _event_rows(events: Sequence[ChainedEvent]) -> list[dict[str, Any]]:
    return [
        {
            "operation_id": uuid.UUID(ev.operation_id),
            "seq": ev.seq,
            "actor": ev.draft.actor,
            "at": ev.draft.at,
            "from_state": ev.draft.from_state,
            "to_state": ev.draft.to_state,
            "kind": ev.draft.kind.value,
            "cause": ev.draft.cause,
            "delay_source": ev.draft.delay_source,
            "http_status": ev.draft.http_status,
            "provider_request_id": ev.draft.provider_request_id,
            "excerpt": ev.draft.excerpt,
            "prev_hash": ev.prev_hash,
            "hash": ev.hash,
        }
        for ev in events
    ]


def insert_operation(session: Session, row: OperationRow, drafts: Sequence[EventDraft]) -> None:
    """Add a new operation with its first events; flushes so unique violations surface here."""
    chained = chain(str(row.operation_id), drafts, last_seq=0, last_hash=GENESIS_HASH)
    row.version = 1
    row.event_count = len(chained)
    row.last_event_hash = chained[-1].hash if chained else GENESIS_HASH
    session.add(row)
    session.flush()
    if chained:
        session.execute(insert(EVENTS), _event_rows(chained))


def load(session: Session, operation_id: uuid.UUID) -> OperationRow | None:
    return session.get(OperationRow, operation_id, populate_existing=True)


def fenced_update(
    session: Session,
    row: OperationRow,
    *,
    changes: dict[str, Any],
    drafts: Sequence[EventDraft],
    now: datetime,
) -> OperationRow:
    """Write `changes` only if the row still has the version we read; append events.

    A state change in `changes` must be an allowed transition. Raises
    StaleVersionError when another owner wrote first (zero rows matched): the
    caller stops, it does not overwrite. Returns the row as now stored.
    """
    new_state = changes.get("state")
    if new_state is not None and new_state != row.state:
        check_transition(OperationState(row.state), OperationState(new_state))
    chained = chain(
        str(row.operation_id), drafts, last_seq=row.event_count, last_hash=row.last_event_hash
    )
    values = dict(changes)
    values["version"] = row.version + 1
    values["updated_at"] = now
    if chained:
        values["event_count"] = chained[-1].seq
        values["last_event_hash"] = chained[-1].hash
    table = OPERATIONS
    # Core, not ORM: the fence needs only a row count, and this is the hot path of every poll.
    result = session.execute(
        update(table)
        .where(table.c.operation_id == row.operation_id)
        .where(table.c.version == row.version)
        .values(**values)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        raise StaleVersionError(str(row.operation_id), row.version)
    if chained:
        session.execute(insert(EVENTS), _event_rows(chained))
    # The caller's row now mirrors what is stored, without the session seeing a change to flush.
    for key, value in values.items():
        set_committed_value(row, key, value)
    return row


def append_events(
    session: Session, row: OperationRow, drafts: Sequence[EventDraft], *, now: datetime
) -> OperationRow:
    """Record events without changing any other field (still fenced by version)."""
    return fenced_update(session, row, changes={}, drafts=drafts, now=now)


def claim_due(
    session: Session, *, now: datetime, redispatch_after: timedelta, limit: int
) -> list[tuple[uuid.UUID, str]]:
    """Mark up to `limit` due operations as dispatched and return (id, state).

    Due means: active, next_poll_at reached, and no wake-up message handed to
    the broker recently (a message that is overdue by `redispatch_after` is
    presumed lost). SKIP LOCKED lets two sweepers run at once without both
    taking the same row.
    """
    due = (
        select(OperationRow.operation_id, OperationRow.state)
        .where(OperationRow.state.in_([s.value for s in ACTIVE_STATES]))
        .where(OperationRow.next_poll_at <= now)
        .where(
            or_(
                OperationRow.dispatched_at.is_(None),
                OperationRow.dispatched_at <= now - redispatch_after,
            )
        )
        .order_by(OperationRow.next_poll_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    rows = [(op_id, state) for op_id, state in session.execute(due)]
    if rows:
        # dispatched_at is a delivery hint, not owned data: no version bump, no event.
        session.execute(
            update(OperationRow)
            .where(OperationRow.operation_id.in_([r[0] for r in rows]))
            .values(dispatched_at=now)
            .execution_options(synchronize_session=False)
        )
    return rows


def _chained(row: EventRow) -> ChainedEvent:
    draft = EventDraft(
        kind=EventKind(row.kind),
        actor=row.actor,
        at=row.at,
        from_state=row.from_state,
        to_state=row.to_state,
        cause=row.cause,
        delay_source=row.delay_source,
        http_status=row.http_status,
        provider_request_id=row.provider_request_id,
        excerpt=row.excerpt,
    )
    return ChainedEvent(
        operation_id=str(row.operation_id),
        seq=row.seq,
        draft=draft,
        prev_hash=row.prev_hash,
        hash=row.hash,
    )


def events_for(session: Session, operation_id: uuid.UUID) -> list[ChainedEvent]:
    rows = session.scalars(
        select(EventRow).where(EventRow.operation_id == operation_id).order_by(EventRow.seq)
    )
    return [_chained(r) for r in rows]


def verify(session: Session, operation_id: uuid.UUID) -> list[ChainProblem]:
    """Prove an operation's history: every hash recomputed, the head matching the row."""
    row = load(session, operation_id)
    if row is None:
        return [ChainProblem(seq=0, problem="no such operation")]
    return verify_chain(
        str(operation_id),
        events_for(session, operation_id),
        head_seq=row.event_count,
        head_hash=row.last_event_hash,
    )
