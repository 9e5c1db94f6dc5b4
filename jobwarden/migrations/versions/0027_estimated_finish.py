"""operations.estimated_finish: the finish the last status reading implied (issue 38)

A poll may aim at a job's finish only when two readings agree on it, so the finish one
reading implied (from its progress or the provider's ETA) must outlive the step: the
next status answer compares its own estimate with this one. Nullable (no reading, or one
that implied nothing) and not indexed, so a poll that writes it stays a HOT update.

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "operations", sa.Column("estimated_finish", sa.DateTime(timezone=True), nullable=True)
    )


def downgrade() -> None:
    op.drop_column("operations", "estimated_finish")
