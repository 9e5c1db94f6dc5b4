"""breaker_incidents: each opening of a provider breaker, and how it ended.

One row per incident (models/provider/breaker.py): the pause it holds the provider by, the
reason and evidence it saw, and its half-open probing (the one probe operation, when the
next is due). At most one incident per provider is not closed (a partial unique index), so
two workers tripping the same breaker open it once. Closing sets ``closed_at`` and
``closed_by`` on the same row; nothing is deleted.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import CheckConstraint, DateTime, ForeignKey, Index, Integer, String, Text, text
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column

from jobwarden.models.persistence.tables import Base

TZ = DateTime(timezone=True)
# The incident states as the CHECK constraint knows them (IncidentState).
INCIDENT_STATES = "'open', 'probing', 'held', 'closed'"


class BreakerIncidentRow(Base):
    __tablename__ = "breaker_incidents"
    __table_args__ = (
        CheckConstraint(f"state IN ({INCIDENT_STATES})", name="state_known"),
        CheckConstraint("(state = 'closed') = (closed_at IS NOT NULL)", name="closed_when"),
        CheckConstraint(
            "(state = 'probing') = (probe_operation_id IS NOT NULL)", name="probe_when_probing"
        ),
        Index(
            "uq_breaker_incidents_active_provider",
            "provider",
            unique=True,
            postgresql_where=text("state <> 'closed'"),
        ),
    )

    incident_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    provider: Mapped[str] = mapped_column(String(200))
    pause_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), ForeignKey("pauses.pause_id"))
    state: Mapped[str] = mapped_column(String(20))
    reason: Mapped[str] = mapped_column(String(40))  # the escalation reason it stands for
    evidence: Mapped[dict[str, Any]] = mapped_column(JSONB)
    opened_at: Mapped[datetime] = mapped_column(TZ)
    probe_due_at: Mapped[datetime] = mapped_column(TZ)  # the cool-down's end
    probe_operation_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    probe_started_at: Mapped[datetime | None] = mapped_column(TZ)
    probes: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    held_by: Mapped[str | None] = mapped_column(String(220))  # the person holding it open
    closed_at: Mapped[datetime | None] = mapped_column(TZ)
    closed_by: Mapped[str | None] = mapped_column(String(220))  # rule:breaker, or a person
    close_note: Mapped[str | None] = mapped_column(Text)
