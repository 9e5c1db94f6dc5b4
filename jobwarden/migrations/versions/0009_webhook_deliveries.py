"""webhook_deliveries (deduplicated by provider and event id), and operations by remote job

A verified webhook names a remote job; ``ix_operations_provider_remote_job`` finds its
operation without a scan. ``webhook_deliveries`` keeps one row per (provider, event id):
the unique key is what makes a repeated delivery a no-op.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

# Literals as of this revision (a migration never imports live code).
OUTCOMES = (
    "'woke_poll', 'poll_already_due', 'not_polled', 'automation_stopped', 'finished', 'unknown_job'"
)


def upgrade() -> None:
    op.create_index(
        "ix_operations_provider_remote_job",
        "operations",
        ["provider", "remote_job_id"],
        postgresql_where=sa.text("remote_job_id IS NOT NULL"),
    )
    op.create_table(
        "webhook_deliveries",
        sa.Column("delivery_id", sa.BigInteger(), sa.Identity(), nullable=False),
        sa.Column("provider", sa.String(200), nullable=False),
        sa.Column("event_id", sa.String(255), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("job_id", sa.String(500), nullable=False),
        sa.Column("operation_id", postgresql.UUID(as_uuid=True), nullable=True),
        sa.Column("outcome", sa.String(40), nullable=False),
        sa.PrimaryKeyConstraint("delivery_id", name="pk_webhook_deliveries"),
        sa.UniqueConstraint("provider", "event_id", name="uq_webhook_deliveries_event"),
        sa.ForeignKeyConstraint(
            ["operation_id"],
            ["operations.operation_id"],
            name="fk_webhook_deliveries_operation_id",
        ),
        sa.CheckConstraint(f"outcome IN ({OUTCOMES})", name="ck_webhook_deliveries_outcome_known"),
    )


def downgrade() -> None:
    op.drop_table("webhook_deliveries")
    op.drop_index("ix_operations_provider_remote_job", table_name="operations")
