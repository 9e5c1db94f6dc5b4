"""api_tokens, api_tenants and the append-only intake_log (the HTTP door, issue 10)

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

# Literals as of this revision (a migration never imports live code).
SCOPES = "'submit', 'read', 'cancel', 'approve', 'decide'"
DOORS = "'python', 'celery', 'http', 'mcp'"
OUTCOMES = "'created', 'replayed', 'in_progress', 'conflict', 'duplicate_event', 'invalid'"
TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("token_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("tenant", sa.String(200), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("secret_hash", sa.String(64), nullable=False),
        sa.Column("scopes", postgresql.ARRAY(sa.String(20)), nullable=False),
        sa.Column("created_at", TZ, nullable=False),
        sa.Column("last_used_at", TZ, nullable=True),
        sa.Column("revoked_at", TZ, nullable=True),
        sa.PrimaryKeyConstraint("token_id", name="pk_api_tokens"),
        sa.UniqueConstraint("secret_hash", name="uq_api_tokens_secret_hash"),
        sa.CheckConstraint(
            f"scopes <@ ARRAY[{SCOPES}]::varchar[]", name="ck_api_tokens_scopes_known"
        ),
    )
    op.create_table(
        "api_tenants",
        sa.Column("tenant", sa.String(200), nullable=False),
        sa.Column("allow_self_approval", sa.Boolean(), nullable=False),
        sa.Column("updated_at", TZ, nullable=False),
        sa.PrimaryKeyConstraint("tenant", name="pk_api_tenants"),
    )
    op.create_table(
        "intake_log",
        sa.Column("entry_id", sa.BigInteger(), sa.Identity(), nullable=False),
        sa.Column("at", TZ, nullable=False),
        sa.Column("door", sa.String(10), nullable=False),
        sa.Column("actor", sa.String(220), nullable=False),
        sa.Column("token_id", postgresql.UUID(as_uuid=True), nullable=True),
        sa.Column("tenant", sa.String(200), nullable=False),
        sa.Column("idempotency_key", sa.String(255), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=True),
        sa.Column("outcome", sa.String(20), nullable=False),
        sa.Column("operation_id", postgresql.UUID(as_uuid=True), nullable=True),
        sa.Column("state", sa.String(40), nullable=True),
        sa.Column("http_status", sa.Integer(), nullable=True),
        sa.Column("trace_id", sa.String(32), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("entry_id", name="pk_intake_log"),
        sa.ForeignKeyConstraint(
            ["operation_id"], ["operations.operation_id"], name="fk_intake_log_operation_id"
        ),
        sa.CheckConstraint(f"door IN ({DOORS})", name="ck_intake_log_door_known"),
        sa.CheckConstraint(f"outcome IN ({OUTCOMES})", name="ck_intake_log_outcome_known"),
    )
    op.create_index("ix_intake_log_operation_id", "intake_log", ["operation_id"])
    op.create_index("ix_intake_log_tenant_key", "intake_log", ["tenant", "idempotency_key"])
    # Append-only like operation_events, whoever connects; 0001's function names its table
    # in the message, so the intake log gets its own.
    op.execute(
        """
        CREATE FUNCTION jobwarden_refuse_intake_log_change() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            RAISE EXCEPTION 'intake_log is append-only: % refused', TG_OP
                USING ERRCODE = 'restrict_violation';
        END;
        $$
        """
    )
    op.execute(
        """
        CREATE TRIGGER intake_log_append_only
        BEFORE UPDATE OR DELETE ON intake_log
        FOR EACH ROW EXECUTE FUNCTION jobwarden_refuse_intake_log_change()
        """
    )
    op.execute(
        """
        CREATE TRIGGER intake_log_no_truncate
        BEFORE TRUNCATE ON intake_log
        FOR EACH STATEMENT EXECUTE FUNCTION jobwarden_refuse_intake_log_change()
        """
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS intake_log_no_truncate ON intake_log")
    op.execute("DROP TRIGGER IF EXISTS intake_log_append_only ON intake_log")
    op.drop_index("ix_intake_log_tenant_key", table_name="intake_log")
    op.drop_index("ix_intake_log_operation_id", table_name="intake_log")
    op.drop_table("intake_log")
    op.execute("DROP FUNCTION IF EXISTS jobwarden_refuse_intake_log_change()")
    op.drop_table("api_tenants")
    op.drop_table("api_tokens")
