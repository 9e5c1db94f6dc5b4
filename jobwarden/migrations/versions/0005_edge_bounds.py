"""operations: step_failures and poll_not_before; operation_events: row_digest

- step_failures: steps that crashed on this operation, committed, so a bug or a
  hostile answer that crashes a step cannot retry without bound.
- poll_not_before: the last time the provider asked us not to look before
  (Retry-After or a poll hint); a cancel's confirmation honours it.
- result_fetch_attempts / collect_deadline: result collection's own bounds.
- row_digest: each event commits to a digest of the operations row it produced,
  so verify can check the live row against the chain.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "operations",
        sa.Column("step_failures", sa.Integer(), nullable=False, server_default="0"),
    )
    op.add_column(
        "operations", sa.Column("poll_not_before", sa.DateTime(timezone=True), nullable=True)
    )
    op.add_column(
        "operations",
        sa.Column("result_fetch_attempts", sa.Integer(), nullable=False, server_default="0"),
    )
    op.add_column(
        "operations", sa.Column("collect_deadline", sa.DateTime(timezone=True), nullable=True)
    )
    op.add_column("operation_events", sa.Column("row_digest", sa.String(64), nullable=True))


def downgrade() -> None:
    op.drop_column("operations", "collect_deadline")
    op.drop_column("operations", "result_fetch_attempts")
    op.drop_column("operation_events", "row_digest")
    op.drop_column("operations", "poll_not_before")
    op.drop_column("operations", "step_failures")
