"""The SQL of pauses: the pauses table, and which operations a pause covers or parked.

Helpers take the session and never commit. A pause row is inserted once and only ever
resumed (``resumed_at``), never deleted; the partial unique index on active scopes makes
a second pause of the same scope find the first.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any, cast

from sqlalchemy import RowMapping, Table, and_, func, or_, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from jobwarden.models.humans.notifications import paused_notice
from jobwarden.models.humans.pauses import SENDING, Pause
from jobwarden.models.persistence import notification_store
from jobwarden.models.persistence.pause_tables import PauseRow
from jobwarden.models.persistence.tables import OperationRow

PAUSES = cast(Table, PauseRow.__table__)
OPERATIONS = cast(Table, OperationRow.__table__)


def _pause(row: RowMapping) -> Pause:
    return Pause(**{name: row[name] for name in PAUSES.c.keys()})  # noqa: SIM118 - a Table's columns


def _scope(provider: str, tenant: str | None, operation_id: uuid.UUID | None) -> Any:
    return and_(
        PAUSES.c.resumed_at.is_(None),
        PAUSES.c.provider == provider,
        PAUSES.c.tenant.is_(None) if tenant is None else PAUSES.c.tenant == tenant,
        PAUSES.c.operation_id.is_(None)
        if operation_id is None
        else PAUSES.c.operation_id == operation_id,
    )


def start(  # noqa: PLR0913 - the row's own facts, each named at the one call
    session: Session,
    *,
    provider: str,
    tenant: str | None,
    operation_id: uuid.UUID | None,
    reason: str,
    evidence: Mapping[str, Any] | None,
    author: str,
    author_kind: str,
    now: datetime,
) -> tuple[Pause, bool]:
    """The active pause of this scope, and whether this call started it.

    Inserted unless one is active (the unique index on active scopes): then that one is
    returned unchanged, so a second person's pause never hides the first one's reason.
    """
    row = {
        "pause_id": uuid.uuid4(),
        "provider": provider,
        "tenant": tenant,
        "operation_id": operation_id,
        "reason": reason,
        "evidence": dict(evidence) if evidence is not None else None,
        "author": author,
        "author_kind": author_kind,
        "started_at": now,
    }
    inserted = session.execute(
        insert(PAUSES).values(row).on_conflict_do_nothing().returning(PAUSES.c.pause_id)
    ).scalar()
    found = session.execute(select(PAUSES).where(_scope(provider, tenant, operation_id))).first()
    if found is None:  # pragma: no cover - a resume between the two statements
        raise LookupError("the pause ended as it was started; pause again")
    return _pause(found._mapping), inserted is not None


def get(session: Session, pause_id: uuid.UUID) -> Pause | None:
    found = session.execute(select(PAUSES).where(PAUSES.c.pause_id == pause_id)).first()
    return _pause(found._mapping) if found is not None else None


def end(
    session: Session, pause_id: uuid.UUID, *, resumed_by: str, note: str | None, now: datetime
) -> Pause | None:
    """Mark the pause resumed; None when it was not active (already resumed, or none)."""
    found = session.execute(
        update(PAUSES)
        .where(PAUSES.c.pause_id == pause_id, PAUSES.c.resumed_at.is_(None))
        .values(resumed_at=now, resumed_by=resumed_by, resume_note=note)
        .returning(*PAUSES.c)
    ).first()
    return _pause(found._mapping) if found is not None else None


def listed(
    session: Session,
    *,
    active_only: bool = True,
    provider: str | None = None,
    tenant: str | None = None,
    limit: int = 200,
) -> list[Pause]:
    """Pauses, newest first. ``tenant``: the ones that hold its operations (its own, and
    those over every tenant at a provider)."""
    query = select(PAUSES).order_by(PAUSES.c.started_at.desc()).limit(limit)
    if active_only:
        query = query.where(PAUSES.c.resumed_at.is_(None))
    if provider is not None:
        query = query.where(PAUSES.c.provider == provider)
    if tenant is not None:
        query = query.where(or_(PAUSES.c.tenant.is_(None), PAUSES.c.tenant == tenant))
    return [_pause(r._mapping) for r in session.execute(query)]


def covered(
    session: Session, pause: Pause, *, after: uuid.UUID | None, limit: int
) -> list[uuid.UUID]:
    """The next ``limit`` operations in a state that sends which ``pause`` covers and has
    not parked, in id order after ``after`` (keyset: a batch at a time)."""
    query = (
        select(OPERATIONS.c.operation_id)
        .where(OPERATIONS.c.provider == pause.provider)
        .where(OPERATIONS.c.state.in_([s.value for s in SENDING]))
        .where(or_(OPERATIONS.c.held_by.is_(None), OPERATIONS.c.held_by != pause.pause_id))
        .order_by(OPERATIONS.c.operation_id)
        .limit(limit)
    )
    if pause.tenant is not None:
        query = query.where(OPERATIONS.c.tenant == pause.tenant)
    if pause.operation_id is not None:
        query = query.where(OPERATIONS.c.operation_id == pause.operation_id)
    if after is not None:
        query = query.where(OPERATIONS.c.operation_id > after)
    return list(session.scalars(query))


def parked_by(
    session: Session, pause_id: uuid.UUID, *, after: uuid.UUID | None, limit: int
) -> list[uuid.UUID]:
    """The next ``limit`` operations ``pause_id`` parked, in id order after ``after``."""
    query = (
        select(OPERATIONS.c.operation_id)
        .where(OPERATIONS.c.held_by == pause_id)
        .order_by(OPERATIONS.c.operation_id)
        .limit(limit)
    )
    if after is not None:
        query = query.where(OPERATIONS.c.operation_id > after)
    return list(session.scalars(query))


def tenants_covered(session: Session, pause: Pause, *, limit: int = 1000) -> list[str]:
    """The tenants whose operations in a state that sends ``pause`` covers (who is told)."""
    if pause.tenant is not None:
        return [pause.tenant]
    query = (
        select(OPERATIONS.c.tenant)
        .where(OPERATIONS.c.provider == pause.provider)
        .where(OPERATIONS.c.state.in_([s.value for s in SENDING]))
        .distinct()
        .order_by(OPERATIONS.c.tenant)
        .limit(limit)
    )
    return list(session.scalars(query))


def tell(session: Session, pause: Pause) -> int:
    """The pause's notifications, in the transaction that starts it: one per tenant whose
    operations it holds, keyed by the pause (never one per operation it parks)."""
    notices = [
        paused_notice(
            pause_id=str(pause.pause_id),
            provider=pause.provider,
            tenant=tenant,
            operation_id=str(pause.operation_id) if pause.operation_id else None,
            reason=pause.reason,
            paused_by=pause.author,
            at=pause.started_at,
        )
        for tenant in tenants_covered(session, pause)
    ]
    return notification_store.add(session, notices)


def parked_counts(session: Session) -> dict[str, int]:
    """Operations parked by a pause, in a state that sends, per provider (the gauge)."""
    rows = session.execute(
        select(OPERATIONS.c.provider, func.count())
        .where(OPERATIONS.c.held_by.is_not(None))
        # One a deadline stopped while paused keeps the mark until the resume: not parked.
        .where(OPERATIONS.c.state.in_([s.value for s in SENDING]))
        .group_by(OPERATIONS.c.provider)
    )
    return {provider: int(n) for provider, n in rows}
