"""operations, append-only operation_events, operation_results

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# The states as of this revision, written out: a migration must mean tomorrow what it meant
# when it was written, so it never imports the live enum. A new state needs a new revision.
STATES = (
    "awaiting_approval",
    "create_pending",
    "create_unknown",
    "reconciling",
    "accepted",
    "observing",
    "result_collecting",
    "cancel_requested",
    "cancelling",
    "escalated",
    "result_timed_out",
    "cancellation_unconfirmed",
    "succeeded",
    "failed",
    "cancelled",
    "expired",
    "result_unavailable",
    "result_validation_failed",
    "abandoned",
)
# Neither terminal nor stopped for a human: the states the sweeper looks at (ix_operations_due).
ACTIVE_STATES = (
    "awaiting_approval",
    "create_pending",
    "create_unknown",
    "reconciling",
    "accepted",
    "observing",
    "result_collecting",
    "cancel_requested",
    "cancelling",
)
STATE_VALUES = ", ".join(f"'{s}'" for s in STATES)
ACTIVE_STATE_VALUES = ", ".join(f"'{s}'" for s in ACTIVE_STATES)
TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "operations",
        sa.Column("operation_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("tenant", sa.String(200), nullable=False),
        sa.Column("provider", sa.String(200), nullable=False),
        sa.Column("idempotency_key", sa.String(255), nullable=False),
        sa.Column("source_event_id", sa.String(255), nullable=True),
        sa.Column("provider_token", sa.String(100), nullable=False),
        sa.Column("request_fingerprint", sa.String(64), nullable=False),
        sa.Column("method", sa.String(10), nullable=False),
        sa.Column("route", sa.String(500), nullable=False),
        sa.Column("command", postgresql.JSONB(), nullable=False),
        sa.Column("remote_job_id", sa.String(500), nullable=True),
        sa.Column("status_url", sa.Text(), nullable=True),
        sa.Column("state", sa.String(40), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("trace_id", sa.String(32), nullable=False),
        sa.Column("requested_by", sa.String(200), nullable=False),
        sa.Column("authorised_by", sa.String(200), nullable=True),
        sa.Column("approval_expires_at", TZ, nullable=True),
        sa.Column("created_at", TZ, nullable=False),
        sa.Column("accepted_at", TZ, nullable=True),
        sa.Column("create_deadline", TZ, nullable=False),
        sa.Column("result_deadline", TZ, nullable=False),
        sa.Column("cancel_deadline", TZ, nullable=True),
        sa.Column("next_poll_at", TZ, nullable=True),
        sa.Column("dispatched_at", TZ, nullable=True),
        sa.Column("create_attempts", sa.Integer(), nullable=False),
        sa.Column("status_requests_used", sa.Integer(), nullable=False),
        sa.Column("max_status_requests", sa.Integer(), nullable=False),
        sa.Column("transport_failures_used", sa.Integer(), nullable=False),
        sa.Column("max_transport_failures", sa.Integer(), nullable=False),
        sa.Column("consecutive_rate_limited", sa.Integer(), nullable=False),
        sa.Column("poll_attempt", sa.Integer(), nullable=False),
        sa.Column("last_remote_state", sa.String(200), nullable=True),
        sa.Column("last_http_status", sa.Integer(), nullable=True),
        sa.Column("progress", sa.Float(), nullable=True),
        sa.Column("escalation_reason", sa.String(60), nullable=True),
        sa.Column("escalation_detail", sa.Text(), nullable=True),
        sa.Column("cancel_requested_by", sa.String(200), nullable=True),
        sa.Column("cancel_reason", sa.Text(), nullable=True),
        sa.Column("result_reference", sa.Text(), nullable=True),
        sa.Column("validation_summary", postgresql.JSONB(), nullable=True),
        sa.Column("event_count", sa.Integer(), nullable=False),
        sa.Column("last_event_hash", sa.String(64), nullable=False),
        sa.Column("updated_at", TZ, nullable=False),
        sa.PrimaryKeyConstraint("operation_id", name="pk_operations"),
        sa.CheckConstraint(f"state IN ({STATE_VALUES})", name="ck_operations_state_known"),
        sa.CheckConstraint(
            "status_requests_used >= 0", name="ck_operations_status_requests_used_nonneg"
        ),
        sa.CheckConstraint(
            "status_requests_used <= max_status_requests",
            name="ck_operations_status_requests_within_budget",
        ),
        sa.CheckConstraint("version >= 1", name="ck_operations_version_positive"),
        sa.UniqueConstraint("tenant", "idempotency_key", name="uq_operations_tenant_key"),
        sa.UniqueConstraint("provider_token", name="uq_operations_provider_token"),
    )
    op.create_index(
        "uq_operations_source_event",
        "operations",
        ["tenant", "provider", "source_event_id"],
        unique=True,
        postgresql_where=sa.text("source_event_id IS NOT NULL"),
    )
    op.create_index(
        "ix_operations_due",
        "operations",
        ["next_poll_at"],
        postgresql_where=sa.text(f"state IN ({ACTIVE_STATE_VALUES})"),
    )
    op.create_table(
        "operation_events",
        sa.Column("event_id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("operation_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("at", TZ, nullable=False),
        sa.Column("from_state", sa.String(40), nullable=True),
        sa.Column("to_state", sa.String(40), nullable=True),
        sa.Column("kind", sa.String(40), nullable=False),
        sa.Column("cause", sa.Text(), nullable=True),
        sa.Column("delay_source", sa.String(40), nullable=True),
        sa.Column("http_status", sa.Integer(), nullable=True),
        sa.Column("provider_request_id", sa.String(200), nullable=True),
        sa.Column("excerpt", postgresql.JSONB(), nullable=True),
        sa.Column("prev_hash", sa.String(64), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("event_id", name="pk_operation_events"),
        sa.ForeignKeyConstraint(
            ["operation_id"],
            ["operations.operation_id"],
            name="fk_operation_events_operation_id",
        ),
        sa.UniqueConstraint("operation_id", "seq", name="uq_operation_events_seq"),
    )
    op.create_table(
        "operation_results",
        sa.Column("operation_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("content", sa.LargeBinary(), nullable=False),
        sa.Column("content_type", sa.String(200), nullable=True),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("size_bytes", sa.Integer(), nullable=False),
        sa.Column("record_count", sa.Integer(), nullable=True),
        sa.Column("failed_items", postgresql.JSONB(), nullable=True),
        sa.Column("collected_at", TZ, nullable=False),
        sa.PrimaryKeyConstraint("operation_id", name="pk_operation_results"),
        sa.ForeignKeyConstraint(
            ["operation_id"],
            ["operations.operation_id"],
            name="fk_operation_results_operation_id",
        ),
    )
    # History is append-only at the database, whoever connects: no UPDATE, DELETE or TRUNCATE.
    op.execute(
        """
        CREATE FUNCTION jobwarden_refuse_history_change() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            RAISE EXCEPTION 'operation_events is append-only: % refused', TG_OP
                USING ERRCODE = 'restrict_violation';
        END;
        $$
        """
    )
    op.execute(
        """
        CREATE TRIGGER operation_events_append_only
        BEFORE UPDATE OR DELETE ON operation_events
        FOR EACH ROW EXECUTE FUNCTION jobwarden_refuse_history_change()
        """
    )
    op.execute(
        """
        CREATE TRIGGER operation_events_no_truncate
        BEFORE TRUNCATE ON operation_events
        FOR EACH STATEMENT EXECUTE FUNCTION jobwarden_refuse_history_change()
        """
    )


def downgrade() -> None:
    op.drop_table("operation_results")
    op.execute("DROP TRIGGER IF EXISTS operation_events_no_truncate ON operation_events")
    op.execute("DROP TRIGGER IF EXISTS operation_events_append_only ON operation_events")
    op.drop_table("operation_events")
    op.execute("DROP FUNCTION IF EXISTS jobwarden_refuse_history_change()")
    op.drop_index("ix_operations_due", table_name="operations")
    op.drop_index("uq_operations_source_event", table_name="operations")
    op.drop_table("operations")
