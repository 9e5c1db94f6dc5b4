"""notifications: the durable outbox telling a human to act (issue 20, Notifications)

One row per (event id, channel), written in the same statement as the operation write
that puts an operation into a state needing a human, delivered later by the relay.
Channels, kinds and statuses are spelled out here, not imported from the live enums:
a migration must keep meaning what it meant when it was written.

The revision id is a plain string so renumbering it at a merge is a two-line change.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

CHANNELS = "'webhook', 'apprise'"
KINDS = "'operation.escalated', 'operation.awaiting_approval', 'operation.approval_expiring'"
STATUSES = "'pending', 'delivered', 'gave_up', 'no_target'"


def upgrade() -> None:
    tz = sa.DateTime(timezone=True)
    op.create_table(
        "notifications",
        sa.Column("notification_id", sa.BigInteger(), sa.Identity(), nullable=False),
        sa.Column("event_id", sa.String(200), nullable=False),
        sa.Column("channel", sa.String(20), nullable=False),
        sa.Column("kind", sa.String(40), nullable=False),
        sa.Column("tenant", sa.String(200), nullable=False),
        sa.Column("operation_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("payload", postgresql.JSONB(), nullable=False),
        sa.Column("status", sa.String(20), server_default="pending", nullable=False),
        sa.Column("created_at", tz, nullable=False),
        sa.Column("next_attempt_at", tz, nullable=False),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("delivered_at", tz, nullable=True),
        sa.Column("gave_up_at", tz, nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("notification_id", name="pk_notifications"),
        sa.UniqueConstraint("event_id", "channel", name="uq_notifications_event_channel"),
        sa.ForeignKeyConstraint(
            ["operation_id"], ["operations.operation_id"], name="fk_notifications_operation_id"
        ),
        sa.CheckConstraint(f"channel IN ({CHANNELS})", name=op.f("ck_notifications_channel_known")),
        sa.CheckConstraint(f"kind IN ({KINDS})", name=op.f("ck_notifications_kind_known")),
        sa.CheckConstraint(f"status IN ({STATUSES})", name=op.f("ck_notifications_status_known")),
        sa.CheckConstraint("attempts >= 0", name=op.f("ck_notifications_attempts_nonneg")),
    )
    op.create_index(
        "ix_notifications_due",
        "notifications",
        ["next_attempt_at"],
        postgresql_where=sa.text("status = 'pending'"),
    )
    op.create_index("ix_notifications_operation_id", "notifications", ["operation_id"])


def downgrade() -> None:
    op.drop_table("notifications")
