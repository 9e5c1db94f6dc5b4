"""operations: first_sent_at, the moment the first create was claimed

OASIS Repeatable Requests 1.0 (Azure): Repeatability-First-Sent carries the
IMF-fixdate of the first attempt, identical on every retry; it is stored with
the row so a retry from any worker, after any restart, sends the same value.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "operations", sa.Column("first_sent_at", sa.DateTime(timezone=True), nullable=True)
    )


def downgrade() -> None:
    op.drop_column("operations", "first_sent_at")
