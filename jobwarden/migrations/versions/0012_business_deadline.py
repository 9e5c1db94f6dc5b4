"""operations: business_deadline, the time after which the business no longer wants the work

Separate from the provider job's own deadlines (create_deadline, result_deadline):
a deploy window closes, a report is useless after 9:00. When it passes, automation
stops with deadline_exceeded, and every wait is clipped to the earlier of the two.
NULL: the submission named none, only the provider job's deadlines hold.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "operations", sa.Column("business_deadline", sa.DateTime(timezone=True), nullable=True)
    )


def downgrade() -> None:
    op.drop_column("operations", "business_deadline")
