"""operations: follow-up operations linked to their parent (issue 40)

A capture, a refund or a rollback is an operation of its own that follows another
(its parent's contract declares it in ``[follow_ups.<kind>]``). The child names its
parent, the kind, and the amount it requests under the kind's amount rule; the
parent's follow-ups are found through the partial index, which also serves the sum
of amounts intake checks under the parent's row lock. All three columns are fixed
at intake and never updated, so the index keeps every later write HOT.

Revision ID: 0029
Revises: 0027
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "operations",
        sa.Column(
            "follows",
            sa.dialects.postgresql.UUID(as_uuid=True),
            sa.ForeignKey("operations.operation_id", name="fk_operations_follows"),
            nullable=True,
        ),
    )
    op.add_column("operations", sa.Column("follow_up_kind", sa.String(40), nullable=True))
    op.add_column("operations", sa.Column("follow_up_amount", sa.BigInteger(), nullable=True))
    op.execute(
        "ALTER TABLE operations ADD CONSTRAINT ck_operations_follow_up_kind_with_parent CHECK "
        "((follows IS NULL AND follow_up_kind IS NULL AND follow_up_amount IS NULL) "
        "OR (follows IS NOT NULL AND follow_up_kind IS NOT NULL))"
    )
    op.create_index(
        "ix_operations_follows",
        "operations",
        ["follows", "follow_up_kind"],
        postgresql_where=sa.text("follows IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_operations_follows", table_name="operations")
    op.execute("ALTER TABLE operations DROP CONSTRAINT ck_operations_follow_up_kind_with_parent")
    op.drop_column("operations", "follow_up_amount")
    op.drop_column("operations", "follow_up_kind")
    op.drop_column("operations", "follows")
