"""operations: the indexes behind the HTTP API's keyset lists (issue 10, item 4)

Each list filter walks one index in (created_at, operation_id) order within a
tenant, so a deep page costs what the first one does over a million rows;
escalations walk a partial index of the few operations that wait for a human.
Built CONCURRENTLY, outside the migration's transaction: workers keep writing
operations while a large table is indexed (a plain CREATE INDEX would block them).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

# Literals as of this revision (a migration never imports live code).
NEEDS_A_HUMAN = "'awaiting_approval', 'cancellation_unconfirmed', 'escalated', 'result_timed_out'"

INDEXES: list[tuple[str, list[str], str | None]] = [
    ("ix_operations_tenant_created", ["tenant", "created_at", "operation_id"], None),
    ("ix_operations_tenant_state", ["tenant", "state", "created_at", "operation_id"], None),
    ("ix_operations_tenant_provider", ["tenant", "provider", "created_at", "operation_id"], None),
    ("ix_operations_tenant_remote_job", ["tenant", "remote_job_id"], "remote_job_id IS NOT NULL"),
    (
        "ix_operations_tenant_reason",
        ["tenant", "escalation_reason", "created_at", "operation_id"],
        "escalation_reason IS NOT NULL",
    ),
    (
        "ix_operations_needs_a_human",
        ["tenant", "updated_at", "operation_id"],
        f"state IN ({NEEDS_A_HUMAN})",
    ),
]


def upgrade() -> None:
    with op.get_context().autocommit_block():
        for name, columns, where in INDEXES:
            op.create_index(
                name,
                "operations",
                columns,
                postgresql_where=sa.text(where) if where else None,
                postgresql_concurrently=True,
            )


def downgrade() -> None:
    with op.get_context().autocommit_block():
        for name, _, _ in reversed(INDEXES):
            op.drop_index(name, table_name="operations", postgresql_concurrently=True)
