"""SQL for webhook deliveries: finding the operation a delivery names, and the dedup row.

Helpers take the session and never commit; the shell (tasks/provider/webhooks.py) owns the
transaction, so the delivery row and the operation's event commit together or not
at all: a delivery refused half-way can be sent again and is not a duplicate.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import cast

from sqlalchemy import Table, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session

from jobwarden.models.persistence.tables import OperationRow
from jobwarden.models.persistence.webhook_tables import WebhookDeliveryRow
from jobwarden.models.provider.webhooks import WebhookOutcome

DELIVERIES = cast(Table, WebhookDeliveryRow.__table__)
OPERATIONS = cast(Table, OperationRow.__table__)


def operation_for_job(session: Session, provider: str, remote_job_id: str) -> uuid.UUID | None:
    """The operation whose remote job this is (ix_operations_provider_remote_job).

    A provider's job ids are unique to it; should two operations ever hold one (a
    contract violation recorded elsewhere), the newest is the one still being watched.
    """
    found = session.scalar(
        select(OPERATIONS.c.operation_id)
        .where(OPERATIONS.c.provider == provider)
        .where(OPERATIONS.c.remote_job_id == remote_job_id)
        .order_by(OPERATIONS.c.created_at.desc())
        .limit(1)
    )
    return cast(uuid.UUID | None, found)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeliveryRecord:
    """One webhook_deliveries row as the shell decided it."""

    provider: str
    event_id: str
    job_id: str
    received_at: datetime
    operation_id: uuid.UUID | None
    outcome: WebhookOutcome


def record_delivery(session: Session, record: DeliveryRecord) -> bool:
    """Insert the delivery unless (provider, event id) is recorded; True when this call did.

    A concurrent delivery of the same event waits on the unique index until the first
    one commits, then finds it: exactly one of them records anything.
    """
    inserted = session.scalar(
        pg_insert(DELIVERIES)
        .values(
            provider=record.provider,
            event_id=record.event_id,
            job_id=record.job_id,
            received_at=record.received_at,
            operation_id=record.operation_id,
            outcome=record.outcome.value,
        )
        .on_conflict_do_nothing(index_elements=["provider", "event_id"])
        .returning(DELIVERIES.c.delivery_id)
    )
    return inserted is not None


def deliveries(
    session: Session, provider: str, event_id: str | None = None
) -> list[WebhookDeliveryRow]:
    """The recorded deliveries of a provider (one event's when named), oldest first."""
    query = select(WebhookDeliveryRow).where(WebhookDeliveryRow.provider == provider)
    if event_id is not None:
        query = query.where(WebhookDeliveryRow.event_id == event_id)
    return list(session.scalars(query.order_by(WebhookDeliveryRow.delivery_id)))
