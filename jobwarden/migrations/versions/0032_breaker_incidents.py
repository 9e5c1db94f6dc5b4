"""breaker_incidents: each opening of a provider breaker; a pause's notification (issue 39)

A provider breaker pauses a provider as one incident when its answers fail across
operations (models/provider/breaker.py). The row names the pause it holds the provider
by, why it opened and the evidence, and its half-open probing: at most one probe
operation at a time (``state = 'probing'``, set by a compare-and-set), the next probe
due at ``probe_due_at``. At most one incident per provider is not closed (partial unique
index): two workers tripping the same breaker open it once.

A pause (a person's, or a breaker's opening) is told to each tenant whose operations it
holds once, as a ``provider.paused`` notification keyed by the pause: such a notice names
a provider, not one operation, so ``notifications.operation_id`` becomes nullable.

Revision ID: 0032
Revises: 0031
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0032"
down_revision = "0031"
branch_labels = None
depends_on = None

TZ = sa.DateTime(timezone=True)
# As this migration knows them (never the live enum).
STATES = "'open', 'probing', 'held', 'closed'"
OLD_KINDS = "'operation.escalated', 'operation.awaiting_approval', 'operation.approval_expiring'"
NEW_KINDS = f"{OLD_KINDS}, 'provider.paused'"


def _kinds(known: str) -> None:
    name = op.f("ck_notifications_kind_known")
    op.drop_constraint(name, "notifications", type_="check")
    op.create_check_constraint(name, "notifications", f"kind IN ({known})")


def upgrade() -> None:
    _kinds(NEW_KINDS)
    op.alter_column("notifications", "operation_id", nullable=True)
    op.create_table(
        "breaker_incidents",
        sa.Column("incident_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("provider", sa.String(200), nullable=False),
        sa.Column("pause_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("reason", sa.String(40), nullable=False),
        sa.Column("evidence", postgresql.JSONB(), nullable=False),
        sa.Column("opened_at", TZ, nullable=False),
        sa.Column("probe_due_at", TZ, nullable=False),
        sa.Column("probe_operation_id", postgresql.UUID(as_uuid=True), nullable=True),
        sa.Column("probe_started_at", TZ, nullable=True),
        sa.Column("probes", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("held_by", sa.String(220), nullable=True),
        sa.Column("closed_at", TZ, nullable=True),
        sa.Column("closed_by", sa.String(220), nullable=True),
        sa.Column("close_note", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("incident_id", name="pk_breaker_incidents"),
        sa.ForeignKeyConstraint(
            ["pause_id"], ["pauses.pause_id"], name="fk_breaker_incidents_pause_id"
        ),
        sa.CheckConstraint(f"state IN ({STATES})", name="ck_breaker_incidents_state_known"),
        sa.CheckConstraint(
            "(state = 'closed') = (closed_at IS NOT NULL)", name="ck_breaker_incidents_closed_when"
        ),
        sa.CheckConstraint(
            "(state = 'probing') = (probe_operation_id IS NOT NULL)",
            name="ck_breaker_incidents_probe_when_probing",
        ),
    )
    op.create_index(
        "uq_breaker_incidents_active_provider",
        "breaker_incidents",
        ["provider"],
        unique=True,
        postgresql_where=sa.text("state <> 'closed'"),
    )


def downgrade() -> None:
    op.execute("DELETE FROM notifications WHERE operation_id IS NULL")
    op.alter_column("notifications", "operation_id", nullable=False)
    op.execute("DELETE FROM notifications WHERE kind = 'provider.paused'")
    _kinds(OLD_KINDS)
    op.drop_index("uq_breaker_incidents_active_provider", table_name="breaker_incidents")
    op.drop_table("breaker_incidents")
