"""operations.cancel_window_seconds: a per-operation cancel confirmation window

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("operations", sa.Column("cancel_window_seconds", sa.Float(), nullable=True))


def downgrade() -> None:
    op.drop_column("operations", "cancel_window_seconds")
