"""webhook_deliveries: one row per verified webhook delivery, unique by (provider, event id).

The unique key is the deduplication: a provider that sends an event again (a retry,
a duplicate, a replay inside the tolerance) meets the row of the first delivery and
nothing is recorded twice. Refused deliveries (forged, stale) never get a row.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Identity,
    String,
    UniqueConstraint,
)
from sqlalchemy.dialects.postgresql import UUID
from sqlalchemy.orm import Mapped, mapped_column

from jobwarden.models.persistence.tables import Base
from jobwarden.models.provider.webhooks import WebhookOutcome

TZ = DateTime(timezone=True)
OUTCOME_VALUES = ", ".join(f"'{o.value}'" for o in WebhookOutcome)


class WebhookDeliveryRow(Base):
    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        UniqueConstraint("provider", "event_id", name="uq_webhook_deliveries_event"),
        CheckConstraint(f"outcome IN ({OUTCOME_VALUES})", name="outcome_known"),
    )

    delivery_id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    provider: Mapped[str] = mapped_column(String(200))
    event_id: Mapped[str] = mapped_column(String(255))
    received_at: Mapped[datetime] = mapped_column(TZ)
    job_id: Mapped[str] = mapped_column(String(500))  # the remote job id the delivery names
    # NULL when no operation has that remote job id (outcome unknown_job).
    operation_id: Mapped[uuid.UUID | None] = mapped_column(
        UUID(as_uuid=True), ForeignKey("operations.operation_id")
    )
    outcome: Mapped[str] = mapped_column(String(40))
