"""The SQL behind concurrency keys: the per-key lock, the count of holders, the queue.

Every reader and writer of a key's admission takes ``lock_key`` first, in its own
transaction; the lock is released by that transaction's commit or rollback.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import ColumnElement, and_, func, select, text
from sqlalchemy.dialects.postgresql import distinct_on
from sqlalchemy.orm import Session

from jobwarden.models.concurrency import Occupancy
from jobwarden.models.operation import Operation
from jobwarden.models.persistence.tables import OPERATION_WITH_TIMER, OperationRow, TimerRow
from jobwarden.models.states import TERMINAL, WAITING_FOR_ROOM, OperationState

OPERATIONS = OperationRow.__table__
_QUEUED = OperationState.queued.value
_NOT_HOLDING = [s.value for s in TERMINAL | WAITING_FOR_ROOM]
_TERMINAL = [s.value for s in TERMINAL]


def _of_key(tenant: str, key: str) -> ColumnElement[bool]:
    return and_(OPERATIONS.c.tenant == tenant, OPERATIONS.c.concurrency_key == key)


def lock_key(session: Session, tenant: str, key: str) -> None:
    """Serialise admissions and hand-overs of one key until this transaction ends.

    The race it closes: without it, a submission could count a holder that is ending
    and queue itself just after that holder's hand-over found the queue empty (the
    queued operation would wait for nobody), or two submissions could both see room
    and both start. Under the lock, each statement that follows (READ COMMITTED)
    sees every write the previous lock holder committed. A hash collision between
    two keys only serialises them; it never admits too many.
    """
    session.execute(
        text("SELECT pg_advisory_xact_lock(hashtextextended(:tenant || chr(31) || :key, 11))"),
        {"tenant": tenant, "key": key},
    )


def occupancy(session: Session, tenant: str, key: str) -> Occupancy:
    """How many of the key's operations hold it and how many wait (under lock_key)."""
    queued = func.count().filter(OPERATIONS.c.state == _QUEUED)
    is_holder = OPERATIONS.c.state.notin_(_NOT_HOLDING)
    holding = func.count().filter(is_holder)
    strictest = func.min(OPERATIONS.c.concurrency_limit).filter(is_holder)
    row = session.execute(
        select(holding, queued, strictest)
        .where(_of_key(tenant, key))
        .where(OPERATIONS.c.state.notin_(_TERMINAL))
    ).one()
    return Occupancy(
        holders=int(row[0]), queued=int(row[1]), strictest=int(row[2]) if row[2] else None
    )


def queue(session: Session, tenant: str, key: str, *, limit: int) -> list[Operation]:
    """The key's queued operations, oldest first (submission order), at most ``limit``."""
    rows = session.execute(
        OPERATION_WITH_TIMER.where(_of_key(tenant, key))
        .where(OPERATIONS.c.state == _QUEUED)
        .order_by(OPERATIONS.c.created_at, OPERATIONS.c.operation_id)
        .limit(limit)
    ).all()
    return [Operation.from_mapping(dict(r._mapping)) for r in rows]


def last_ended(session: Session, tenant: str, key: str) -> Operation | None:
    """The key's most recently ended operation: the holder a late hand-over names."""
    found = session.execute(
        OPERATION_WITH_TIMER.where(_of_key(tenant, key))
        .where(OPERATIONS.c.state.in_(_TERMINAL))
        .order_by(TimerRow.updated_at.desc())
        .limit(1)
    ).first()
    return Operation.from_mapping(dict(found._mapping)) if found is not None else None


def stranded_keys(session: Session, *, limit: int) -> Sequence[tuple[str, str]]:
    """Keys whose queue could move now: the oldest queued operation fits beside the
    holders (under its own limit and the strictest holder's, as the hand-over decides).

    Normally empty; non-empty when a process died between a holder's last commit and
    its hand-over. Walks ix_operations_concurrency_key only.
    """
    q = OPERATIONS.alias("q")
    oldest = (
        select(q.c.tenant, q.c.concurrency_key, q.c.concurrency_limit)
        .where(q.c.state == _QUEUED)
        .ext(distinct_on(q.c.tenant, q.c.concurrency_key))
        .order_by(q.c.tenant, q.c.concurrency_key, q.c.created_at, q.c.operation_id)
        .subquery("oldest")
    )
    h = OPERATIONS.alias("h")
    of_holders = (
        (h.c.tenant == oldest.c.tenant)
        & (h.c.concurrency_key == oldest.c.concurrency_key)
        & h.c.state.notin_(_NOT_HOLDING)
    )
    holders = select(func.count()).where(of_holders).scalar_subquery()
    strictest = select(func.min(h.c.concurrency_limit)).where(of_holders).scalar_subquery()
    cap = func.least(
        oldest.c.concurrency_limit, func.coalesce(strictest, oldest.c.concurrency_limit)
    )
    rows = session.execute(
        select(oldest.c.tenant, oldest.c.concurrency_key).where(holders < cap).limit(limit)
    ).all()
    return [(str(r[0]), str(r[1])) for r in rows]
