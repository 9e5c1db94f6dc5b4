"""notifications: the durable outbox of messages telling a human to act (0017).

One row per (event id, channel). The row is written in the same statement as the
operation write that needs a human, so a committed stop always has its notification
and a rolled-back one never does; the relay (tasks/humans/notifications.py) delivers it later.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Identity,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column

from jobwarden.models.humans.notifications import Channel, DeliveryStatus, NotificationKind
from jobwarden.models.persistence.tables import Base

TZ = DateTime(timezone=True)


def _values(enum: Any) -> str:
    return ", ".join(f"'{m.value}'" for m in enum)


class NotificationRow(Base):
    __tablename__ = "notifications"
    __table_args__ = (
        # The dedup key: a write, a tick or a beat that runs twice meets the first row.
        UniqueConstraint("event_id", "channel", name="uq_notifications_event_channel"),
        CheckConstraint(f"channel IN ({_values(Channel)})", name="channel_known"),
        CheckConstraint(f"kind IN ({_values(NotificationKind)})", name="kind_known"),
        CheckConstraint(f"status IN ({_values(DeliveryStatus)})", name="status_known"),
        CheckConstraint("attempts >= 0", name="attempts_nonneg"),
        # The relay's claim walks only what is still to be sent.
        Index(
            "ix_notifications_due",
            "next_attempt_at",
            postgresql_where=text("status = 'pending'"),
        ),
        Index("ix_notifications_operation_id", "operation_id"),
    )

    notification_id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    event_id: Mapped[str] = mapped_column(String(200))
    channel: Mapped[str] = mapped_column(String(20))
    kind: Mapped[str] = mapped_column(String(40))
    tenant: Mapped[str] = mapped_column(String(200))
    # NULL: a notice about a provider, not one operation (a pause's, 0032).
    operation_id: Mapped[uuid.UUID | None] = mapped_column(
        UUID(as_uuid=True), ForeignKey("operations.operation_id")
    )
    payload: Mapped[dict[str, Any]] = mapped_column(JSONB)
    status: Mapped[str] = mapped_column(String(20), server_default="pending")
    created_at: Mapped[datetime] = mapped_column(TZ)
    next_attempt_at: Mapped[datetime] = mapped_column(TZ)
    attempts: Mapped[int] = mapped_column(Integer, server_default="0")
    delivered_at: Mapped[datetime | None] = mapped_column(TZ)
    gave_up_at: Mapped[datetime | None] = mapped_column(TZ)
    # Bounded, one line, never a secret (a status code, an exception class, a variable name).
    last_error: Mapped[str | None] = mapped_column(Text)
