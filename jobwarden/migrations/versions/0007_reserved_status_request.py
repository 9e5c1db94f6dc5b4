"""operations: reserved_request, the status request the last decision reserved

The commit that records a poll's decision also counts the next status request
(``status_requests_used``) and names it here, so the next poll sends without a
claim commit of its own (DESIGN: cost of one poll). NULL when no request is
reserved; a reservation whose send may have happened is never reused (see
tasks/steps.py).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("operations", sa.Column("reserved_request", sa.Integer(), nullable=True))
    op.create_check_constraint(
        "reserved_request_counted",
        "operations",
        "reserved_request IS NULL OR reserved_request BETWEEN 1 AND status_requests_used",
    )


def downgrade() -> None:
    op.drop_constraint("reserved_request_counted", "operations", type_="check")
    op.drop_column("operations", "reserved_request")
