"""operations.priority: its turn among its tenant's requests at the provider's rate limit (issue 39)

When requests to one provider wait for the shared rate limiter, tenants take turns by
weight and, within a tenant, a higher priority goes first (models/provider/fair_shares.py).
The priority is set at submission and read by every step that asks the limiter, so it is
a column of the row the step already loads. NOT NULL with a server default of 0, so the
existing rows are the default priority without a rewrite (a constant default is
metadata-only since Postgres 11); bounded by a CHECK like the intake rule. Not indexed: a
poll's update stays HOT. Schedules carry one for the slots they submit.

Revision ID: 0031
Revises: 0027
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for table in ("operations", "schedules"):
        op.add_column(
            table, sa.Column("priority", sa.SmallInteger(), nullable=False, server_default="0")
        )
        op.create_check_constraint(
            op.f(f"ck_{table}_priority_bounded"), table, "priority BETWEEN -10 AND 10"
        )


def downgrade() -> None:
    for table in ("schedules", "operations"):
        op.drop_constraint(op.f(f"ck_{table}_priority_bounded"), table, type_="check")
        op.drop_column(table, "priority")
