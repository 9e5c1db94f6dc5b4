"""Postgres tables of the HTTP door: API tokens, tenants' settings, the intake log.

The intake log is append-only at the database (migration 0008's trigger), like
operation_events: after a disputed write it is the record of who asked what.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Identity,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects.postgresql import ARRAY, UUID
from sqlalchemy.orm import Mapped, mapped_column

from jobwarden.models.persistence.tables import Base

TZ = DateTime(timezone=True)
# Written out rather than imported from jobwarden.api so models/ never imports the shell.
SCOPES = ("submit", "read", "cancel", "approve", "decide", "pause", "operate")
DOORS = ("python", "celery", "http", "mcp")
INTAKE_OUTCOMES = ("created", "replayed", "in_progress", "conflict", "duplicate_event", "invalid")


def _values(names: tuple[str, ...]) -> str:
    return ", ".join(f"'{n}'" for n in names)


class ApiTokenRow(Base):
    __tablename__ = "api_tokens"
    __table_args__ = (
        UniqueConstraint("secret_hash", name="uq_api_tokens_secret_hash"),
        CheckConstraint(
            f"scopes <@ ARRAY[{_values(SCOPES)}]::varchar[]", name="ck_api_tokens_scopes_known"
        ),
    )

    token_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(200))
    name: Mapped[str] = mapped_column(String(200))
    # sha256 hex of the secret; the secret itself is printed once and never stored.
    secret_hash: Mapped[str] = mapped_column(String(64))
    scopes: Mapped[list[str]] = mapped_column(ARRAY(String(20)))
    created_at: Mapped[datetime] = mapped_column(TZ)
    last_used_at: Mapped[datetime | None] = mapped_column(TZ)
    revoked_at: Mapped[datetime | None] = mapped_column(TZ)


class ApiTenantRow(Base):
    """A tenant's settings; a tenant without a row has the defaults (no self-approval)."""

    __tablename__ = "api_tenants"

    tenant: Mapped[str] = mapped_column(String(200), primary_key=True)
    allow_self_approval: Mapped[bool] = mapped_column(Boolean, default=False)
    updated_at: Mapped[datetime] = mapped_column(TZ)


class IntakeLogRow(Base):
    __tablename__ = "intake_log"
    __table_args__ = (
        CheckConstraint(f"door IN ({_values(DOORS)})", name="ck_intake_log_door_known"),
        CheckConstraint(
            f"outcome IN ({_values(INTAKE_OUTCOMES)})", name="ck_intake_log_outcome_known"
        ),
        Index("ix_intake_log_operation_id", "operation_id"),
        Index("ix_intake_log_tenant_key", "tenant", "idempotency_key"),
    )

    entry_id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    at: Mapped[datetime] = mapped_column(TZ)
    door: Mapped[str] = mapped_column(String(10))
    # Who asked: token:<name> over HTTP, submitter:<requested_by> through Python and Celery.
    actor: Mapped[str] = mapped_column(String(220))
    token_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    tenant: Mapped[str] = mapped_column(String(200))
    idempotency_key: Mapped[str] = mapped_column(String(255))
    # NULL only for a submission refused before it could be fingerprinted.
    fingerprint: Mapped[str | None] = mapped_column(String(64))
    outcome: Mapped[str] = mapped_column(String(20))
    operation_id: Mapped[uuid.UUID | None] = mapped_column(
        UUID(as_uuid=True), ForeignKey("operations.operation_id")
    )
    # The operation's state as the answer named it (a replay repeats a created answer's).
    state: Mapped[str | None] = mapped_column(String(40))
    http_status: Mapped[int | None] = mapped_column(Integer)
    trace_id: Mapped[str | None] = mapped_column(String(32))
    # Why an invalid submission was refused (the rule and the field), else NULL.
    detail: Mapped[str | None] = mapped_column(Text)
