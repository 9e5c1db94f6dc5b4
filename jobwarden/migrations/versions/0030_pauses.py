"""pauses, and the operations a pause parked (issue 39)

A pause is a recorded decision that a provider (all its operations, or one tenant's) or
one operation sends nothing until it is resumed. Its row names who decided and why
(``reason``, and for a rule such as a provider breaker the ``evidence`` it saw); resuming
it is the same row's ``resumed_at``/``resumed_by``, never a delete, so the table is the
record of every incident. At most one active pause per scope (a partial unique index):
pausing what is already paused finds the pause that holds it.

``operations.held_by`` names the pause that parked an operation (its event says so too),
so a resume wakes exactly those; ``operations.cancel_during_pause_by`` names who allowed
a cancel requested during a pause to be sent before the resume. Both nullable, and a
poll never writes them, so a poll stays a HOT update (held_by's partial index only
changes when an operation is parked or resumed).

Revision ID: 0030
Revises: 0027
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None

TZ = sa.DateTime(timezone=True)


# The scopes as each side of this migration knows them (never the live enum: a later
# scope must not change what this migration did).
OLD_SCOPES = "'submit', 'read', 'cancel', 'approve', 'decide'"
NEW_SCOPES = f"{OLD_SCOPES}, 'pause', 'operate'"


def _scopes(known: str) -> None:
    op.drop_constraint("ck_api_tokens_scopes_known", "api_tokens", type_="check")
    op.create_check_constraint(
        "ck_api_tokens_scopes_known", "api_tokens", f"scopes <@ ARRAY[{known}]::varchar[]"
    )


def upgrade() -> None:
    # pause: a tenant's token pauses its own share; operate: a provider for every tenant.
    _scopes(NEW_SCOPES)
    op.create_table(
        "pauses",
        sa.Column("pause_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("provider", sa.String(200), nullable=False),
        # NULL: every tenant's operations at the provider.
        sa.Column("tenant", sa.String(200), nullable=True),
        # Set: this one operation only (its provider and tenant are copied beside it).
        sa.Column("operation_id", postgresql.UUID(as_uuid=True), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("evidence", postgresql.JSONB(), nullable=True),
        sa.Column("author", sa.String(220), nullable=False),
        sa.Column("author_kind", sa.String(20), nullable=False),
        sa.Column("started_at", TZ, nullable=False),
        sa.Column("resumed_at", TZ, nullable=True),
        sa.Column("resumed_by", sa.String(220), nullable=True),
        sa.Column("resume_note", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("pause_id", name="pk_pauses"),
        sa.ForeignKeyConstraint(
            ["operation_id"], ["operations.operation_id"], name="fk_pauses_operation_id"
        ),
        sa.CheckConstraint(
            "(resumed_at IS NULL) = (resumed_by IS NULL)", name="ck_pauses_resumed_by_whom"
        ),
        sa.CheckConstraint(
            "operation_id IS NULL OR tenant IS NOT NULL", name="ck_pauses_operation_has_tenant"
        ),
    )
    # The snapshot's hold lookup and the console's provider state: active pauses only.
    op.create_index(
        "ix_pauses_active_provider",
        "pauses",
        ["provider"],
        postgresql_where=sa.text("resumed_at IS NULL"),
    )
    op.create_index(
        "uq_pauses_active_scope",
        "pauses",
        [
            "provider",
            sa.text("coalesce(tenant, '')"),
            sa.text("coalesce(operation_id::text, '')"),
        ],
        unique=True,
        postgresql_where=sa.text("resumed_at IS NULL"),
    )
    op.add_column("operations", sa.Column("held_by", postgresql.UUID(as_uuid=True), nullable=True))
    op.add_column("operations", sa.Column("cancel_during_pause_by", sa.String(200), nullable=True))
    op.create_index(
        "ix_operations_held_by",
        "operations",
        ["held_by"],
        postgresql_where=sa.text("held_by IS NOT NULL"),
    )


def downgrade() -> None:
    op.execute(
        "UPDATE api_tokens SET scopes = array_remove(array_remove(scopes, 'pause'), 'operate')"
    )
    _scopes(OLD_SCOPES)
    op.drop_index("ix_operations_held_by", table_name="operations")
    op.drop_column("operations", "cancel_during_pause_by")
    op.drop_column("operations", "held_by")
    op.drop_index("uq_pauses_active_scope", table_name="pauses")
    op.drop_index("ix_pauses_active_provider", table_name="pauses")
    op.drop_table("pauses")
