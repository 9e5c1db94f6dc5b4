"""The outbox's SQL: claim what is due, record each attempt's outcome, add reminders.

A claim commits the attempt count (and pushes next_attempt_at past the send's own
bound) before anything is sent: a crash leaves a counted attempt that is retried
later, never an invisible send. Each outcome is fenced on the attempt it claimed, so
a relay that outlived its claim cannot overwrite a newer attempt's outcome.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import Table, func, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session

from jobwarden.models.humans.notifications import CHANNELS, DeliveryStatus, Notice, NotificationKind
from jobwarden.models.operation import Operation
from jobwarden.models.persistence.notification_tables import NotificationRow
from jobwarden.models.persistence.tables import HOT_SELECTED, OperationRow, TimerRow
from jobwarden.models.states import OperationState

NOTIFICATIONS = cast(Table, NotificationRow.__table__)
OPERATIONS = cast(Table, OperationRow.__table__)
TIMERS = cast(Table, TimerRow.__table__)
_PENDING = DeliveryStatus.pending.value


@dataclass(frozen=True, slots=True, kw_only=True)
class Claimed:
    """One outbox row claimed for an attempt (``attempts`` already counts it)."""

    notification_id: int
    event_id: str
    channel: str
    kind: str
    tenant: str
    payload: dict[str, Any]
    created_at: datetime
    attempts: int


def due_tenants(session: Session, *, now: datetime, limit: int) -> list[str]:
    """Tenants with a notification due now (at most ``limit``, most overdue first)."""
    oldest = func.min(NOTIFICATIONS.c.next_attempt_at)
    due = (
        select(NOTIFICATIONS.c.tenant)
        .where(NOTIFICATIONS.c.status == _PENDING)
        .where(NOTIFICATIONS.c.next_attempt_at <= now)
        .group_by(NOTIFICATIONS.c.tenant)
        .order_by(oldest)
        .limit(limit)
    )
    return list(session.scalars(due))


def claim_due(
    session: Session,
    *,
    now: datetime,
    hold: timedelta,
    limit: int,
    tenant: str | None = None,
) -> list[Claimed]:
    """Count an attempt on up to ``limit`` due rows (``tenant``'s only, when given) and
    hide them for ``hold``.

    SKIP LOCKED lets two relays run at once without taking the same row; ``hold`` (longer
    than the sends of one claim) keeps a row claimed by a relay that died from being sent
    again before then, when it is due again and its counted attempt was spent.
    """
    due = (
        select(NOTIFICATIONS.c.notification_id)
        .where(NOTIFICATIONS.c.status == _PENDING)
        .where(NOTIFICATIONS.c.next_attempt_at <= now)
        .order_by(NOTIFICATIONS.c.next_attempt_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    if tenant is not None:
        due = due.where(NOTIFICATIONS.c.tenant == tenant)
    ids = list(session.scalars(due))
    if not ids:
        return []
    rows = session.execute(
        update(NOTIFICATIONS)
        .where(NOTIFICATIONS.c.notification_id.in_(ids))
        .values(attempts=NOTIFICATIONS.c.attempts + 1, next_attempt_at=now + hold)
        .returning(*NOTIFICATIONS.c)
    ).all()
    return [
        Claimed(
            notification_id=r.notification_id,
            event_id=r.event_id,
            channel=r.channel,
            kind=r.kind,
            tenant=r.tenant,
            payload=r.payload,
            created_at=r.created_at,
            attempts=r.attempts,
        )
        for r in sorted(rows, key=lambda r: r.next_attempt_at)
    ]


def _fenced(c: Claimed) -> Any:
    return (
        (NOTIFICATIONS.c.notification_id == c.notification_id)
        & (NOTIFICATIONS.c.attempts == c.attempts)
        & (NOTIFICATIONS.c.status == _PENDING)
    )


def record(  # noqa: PLR0913 - the outcome's parts, each named at the one call
    session: Session,
    c: Claimed,
    *,
    status: DeliveryStatus,
    now: datetime,
    retry_at: datetime | None = None,
    error: str | None = None,
) -> bool:
    """The outcome of ``c``'s attempt; False when a newer attempt owns the row."""
    values: dict[str, Any] = {"status": status.value, "last_error": error}
    if status is DeliveryStatus.delivered:
        values["delivered_at"] = now
    elif status is DeliveryStatus.pending:
        assert retry_at is not None
        values["next_attempt_at"] = retry_at
    else:
        values["gave_up_at"] = now
    done = session.execute(update(NOTIFICATIONS).where(_fenced(c)).values(**values))
    return bool(done.rowcount)  # type: ignore[attr-defined]  # CursorResult at run time


def expiring(session: Session, *, now: datetime, lead: timedelta, limit: int) -> list[Operation]:
    """Operations awaiting approval whose window ends within ``lead`` and not reminded yet.

    An operation waits for approval once (awaiting_approval is never re-entered), so
    "has a reminder row" is "was reminded"; the unique event id still guards a race.
    """
    reminded = (
        select(NOTIFICATIONS.c.notification_id)
        .where(NOTIFICATIONS.c.operation_id == OPERATIONS.c.operation_id)
        .where(NOTIFICATIONS.c.kind == NotificationKind.approval_expiring.value)
        .exists()
    )
    # The window's end is the operation's timer (operation_timers, beside the row).
    rows = session.execute(
        select(OPERATIONS, *HOT_SELECTED)
        .join(TIMERS, TIMERS.c.operation_id == OPERATIONS.c.operation_id)
        .where(OPERATIONS.c.state == OperationState.awaiting_approval.value)
        .where(TIMERS.c.next_poll_at > now)
        .where(TIMERS.c.next_poll_at <= now + lead)
        .where(~reminded)
        .order_by(TIMERS.c.next_poll_at)
        .limit(limit)
    ).all()
    return [Operation.from_mapping(dict(r._mapping)) for r in rows]


def add(session: Session, notices: list[Notice]) -> int:
    """Insert notices (one row per channel) unless their event id is there; rows added."""
    if not notices:
        return 0
    values = [
        {
            "event_id": n.event_id,
            "channel": channel.value,
            "kind": n.kind.value,
            "tenant": n.tenant,
            "operation_id": uuid.UUID(n.operation_id) if n.operation_id else None,
            "payload": n.payload,
            "status": _PENDING,
            "created_at": n.created_at,
            "next_attempt_at": n.created_at,
            "attempts": 0,
        }
        for n in notices
        for channel in CHANNELS
    ]
    done = session.execute(
        pg_insert(NOTIFICATIONS)
        .values(values)
        .on_conflict_do_nothing(index_elements=["event_id", "channel"])
    )
    return int(done.rowcount)  # type: ignore[attr-defined]  # CursorResult at run time


def for_operation(session: Session, operation_id: uuid.UUID) -> list[dict[str, Any]]:
    """Every outbox row of one operation, oldest first (the console and the tests read it)."""
    rows = session.execute(
        select(NOTIFICATIONS)
        .where(NOTIFICATIONS.c.operation_id == operation_id)
        .order_by(NOTIFICATIONS.c.notification_id)
    )
    return [dict(r._mapping) for r in rows]


def escalations_by_reason(session: Session) -> dict[tuple[str, str], int]:
    """Escalations ever notified, by (provider, reason): one row per stop on the webhook
    channel, never deleted, so each figure only grows (a Prometheus counter)."""
    data = NOTIFICATIONS.c.payload["data"]
    provider = data["provider"].astext
    reason = func.coalesce(data["reason"].astext, "none")
    rows = session.execute(
        select(provider, reason, func.count())
        .where(NOTIFICATIONS.c.kind == NotificationKind.escalated.value)
        .where(NOTIFICATIONS.c.channel == CHANNELS[0].value)
        .group_by(provider, reason)
        .order_by(provider, reason)
    )
    return {(str(p), str(r)): int(n) for p, r, n in rows}


def by_status(session: Session) -> dict[tuple[str, str], int]:
    """Outbox rows by (channel, status)."""
    rows = session.execute(
        select(NOTIFICATIONS.c.channel, NOTIFICATIONS.c.status, func.count()).group_by(
            NOTIFICATIONS.c.channel, NOTIFICATIONS.c.status
        )
    )
    return {(c, s): int(n) for c, s, n in rows}
