"""operations: past approval, every operation names who authorised it (invariant 1)

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Rows written before this revision were authorised by their submitter.
    op.execute(
        "UPDATE operations SET authorised_by = requested_by "
        "WHERE authorised_by IS NULL AND state NOT IN ('awaiting_approval', 'abandoned')"
    )
    op.create_check_constraint(
        "ck_operations_authorised_before_create",
        "operations",
        "authorised_by IS NOT NULL OR state IN ('awaiting_approval', 'abandoned')",
    )


def downgrade() -> None:
    op.drop_constraint("ck_operations_authorised_before_create", "operations", type_="check")
