"""pauses: every pause of a provider (or one tenant's share of it) or of one operation.

A row is a recorded decision (who, why, and for a rule the evidence it saw); resuming
sets ``resumed_at``/``resumed_by`` on the same row and never deletes it, so the table
is the record of every incident. At most one active pause per scope: the partial
unique index makes pausing what is already paused find the pause that holds it.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import CheckConstraint, DateTime, ForeignKey, Index, String, Text, text
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column

from jobwarden.models.persistence.tables import Base

TZ = DateTime(timezone=True)


class PauseRow(Base):
    __tablename__ = "pauses"
    __table_args__ = (
        CheckConstraint("(resumed_at IS NULL) = (resumed_by IS NULL)", name="resumed_by_whom"),
        CheckConstraint("operation_id IS NULL OR tenant IS NOT NULL", name="operation_has_tenant"),
        # The snapshot's hold lookup (tables.HOLD) and the console's provider state.
        Index(
            "ix_pauses_active_provider",
            "provider",
            postgresql_where=text("resumed_at IS NULL"),
        ),
        Index(
            "uq_pauses_active_scope",
            "provider",
            text("coalesce(tenant, '')"),
            text("coalesce(operation_id::text, '')"),
            unique=True,
            postgresql_where=text("resumed_at IS NULL"),
        ),
    )

    pause_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    provider: Mapped[str] = mapped_column(String(200))
    tenant: Mapped[str | None] = mapped_column(String(200))  # NULL: every tenant's
    operation_id: Mapped[uuid.UUID | None] = mapped_column(
        UUID(as_uuid=True), ForeignKey("operations.operation_id")
    )
    reason: Mapped[str] = mapped_column(Text)
    # What a rule saw when it paused (a breaker's counts and samples); NULL for a person.
    evidence: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    author: Mapped[str] = mapped_column(String(220))  # the actor, as events name it
    author_kind: Mapped[str] = mapped_column(String(20))  # identity.AuthorKind, or "rule"
    started_at: Mapped[datetime] = mapped_column(TZ)
    resumed_at: Mapped[datetime | None] = mapped_column(TZ)
    resumed_by: Mapped[str | None] = mapped_column(String(220))
    resume_note: Mapped[str | None] = mapped_column(Text)
