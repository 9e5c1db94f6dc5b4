"""schedules, schedule_slots and schedule_actions (migration 0020).

A schedule is a durable row; the tick's timer is ``next_due_at`` (a partial index over
active schedules). Each decided slot is one schedule_slots row, unique on (schedule,
slot time): the claim that makes two beats, a restart or a backfill decide a slot once.
schedule_actions records every person's or file's change with who asked.
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
    PrimaryKeyConstraint,
    SmallInteger,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column

from jobwarden.models.persistence.tables import Base
from jobwarden.models.schedules.slots import (
    OverlapPolicy,
    ScheduleAction,
    ScheduleStatus,
    SlotOrigin,
    SlotState,
)

TZ = DateTime(timezone=True)


def _values(enum: Any) -> str:
    return ", ".join(f"'{m.value}'" for m in enum)


class ScheduleRow(Base):
    __tablename__ = "schedules"
    __table_args__ = (
        UniqueConstraint("tenant", "name", name="uq_schedules_tenant_name"),
        CheckConstraint(f"status IN ({_values(ScheduleStatus)})", name="status_known"),
        CheckConstraint(f"overlap IN ({_values(OverlapPolicy)})", name="overlap_known"),
        CheckConstraint("(cron IS NULL) <> (interval_seconds IS NULL)", name="one_timing"),
        CheckConstraint("version >= 1", name="version_positive"),
        CheckConstraint("priority BETWEEN -10 AND 10", name="priority_bounded"),
        # The tick's claim walks only active schedules, by when their next slot is due.
        Index(
            "ix_schedules_due",
            "next_due_at",
            postgresql_where=text("status = 'active' AND next_due_at IS NOT NULL"),
        ),
    )

    schedule_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(200))
    name: Mapped[str] = mapped_column(String(100))
    status: Mapped[str] = mapped_column(String(20), server_default="active")
    cron: Mapped[str | None] = mapped_column(String(200))
    interval_seconds: Mapped[int | None] = mapped_column(Integer)
    timezone: Mapped[str] = mapped_column(String(64))
    start_at: Mapped[datetime | None] = mapped_column(TZ)
    end_at: Mapped[datetime | None] = mapped_column(TZ)
    jitter_seconds: Mapped[int] = mapped_column(Integer, server_default="0")
    provider: Mapped[str] = mapped_column(String(200))
    command: Mapped[dict[str, Any]] = mapped_column(JSONB)
    concurrency_key: Mapped[str | None] = mapped_column(String(200))
    # The slots' priority at the provider's rate limit, -10..10 (0031).
    priority: Mapped[int] = mapped_column(SmallInteger, default=0, server_default="0")
    overlap: Mapped[str] = mapped_column(String(20))
    catchup_window_seconds: Mapped[int] = mapped_column(Integer)
    # Where it was declared: a file's path, or "api".
    source: Mapped[str] = mapped_column(Text)
    # The first slot not yet decided, and when it comes due (slot + jitter); NULL: ended.
    next_slot_at: Mapped[datetime | None] = mapped_column(TZ)
    next_due_at: Mapped[datetime | None] = mapped_column(TZ)
    created_at: Mapped[datetime] = mapped_column(TZ)
    updated_at: Mapped[datetime] = mapped_column(TZ)
    version: Mapped[int] = mapped_column(Integer, server_default="1")


class ScheduleSlotRow(Base):
    __tablename__ = "schedule_slots"
    __table_args__ = (
        # One row per slot: the claim every beat, trigger and backfill inserts against.
        PrimaryKeyConstraint("schedule_id", "slot_at", name="pk_schedule_slots"),
        CheckConstraint(f"state IN ({_values(SlotState)})", name="state_known"),
        CheckConstraint(f"origin IN ({_values(SlotOrigin)})", name="origin_known"),
        CheckConstraint("state <> 'fired' OR operation_id IS NOT NULL", name="fired_has_op"),
        # The tick's second look: submits a crash left unrecorded, and buffered slots.
        Index(
            "ix_schedule_slots_pending",
            "decided_at",
            postgresql_where=text("state IN ('submitting', 'buffered')"),
        ),
        # /metrics counts missed slots per schedule without reading every fired one.
        Index(
            "ix_schedule_slots_missed",
            "schedule_id",
            postgresql_where=text("state = 'missed'"),
        ),
    )

    schedule_id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), ForeignKey("schedules.schedule_id", ondelete="CASCADE")
    )
    slot_at: Mapped[datetime] = mapped_column(TZ)
    state: Mapped[str] = mapped_column(String(20))
    origin: Mapped[str] = mapped_column(String(20))
    reason: Mapped[str | None] = mapped_column(Text)
    operation_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    requested_by: Mapped[str] = mapped_column(String(200))
    decided_at: Mapped[datetime] = mapped_column(TZ)
    # cancel_previous: the operations active at the claim get a cancel request before submit.
    cancel_previous: Mapped[bool] = mapped_column(server_default=text("false"))


class ScheduleActionRow(Base):
    __tablename__ = "schedule_actions"
    __table_args__ = (
        CheckConstraint(f"action IN ({_values(ScheduleAction)})", name="action_known"),
        Index("ix_schedule_actions_schedule_id", "schedule_id"),
    )

    action_id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    schedule_id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), ForeignKey("schedules.schedule_id", ondelete="CASCADE")
    )
    action: Mapped[str] = mapped_column(String(20))
    actor: Mapped[str] = mapped_column(String(200))
    at: Mapped[datetime] = mapped_column(TZ)
    detail: Mapped[dict[str, Any]] = mapped_column(JSONB)
