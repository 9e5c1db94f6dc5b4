"""operations: polling_mode, what an Azure-convention operation is polled through

Under the Azure conventions (models/conventions/strategies.py) the create answer decides how the
remote job is observed: a status monitor (Operation-Location / Azure-AsyncOperation),
a Location polled until it stops answering 202, or the ARM resource itself. That
choice must survive every later step, so it is a column. NULL for every other
contract. The values are spelled out here, not imported from the live enum: a
migration must keep meaning what it meant when it was written.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("operations", sa.Column("polling_mode", sa.String(20), nullable=True))
    # Named in SQL as 0011 does: the metadata's naming convention would prefix it twice.
    op.execute(
        "ALTER TABLE operations ADD CONSTRAINT ck_operations_polling_mode_known CHECK "
        "(polling_mode IS NULL OR polling_mode IN ('status_monitor', 'location', 'resource'))"
    )


def downgrade() -> None:
    op.execute("ALTER TABLE operations DROP CONSTRAINT IF EXISTS ck_operations_polling_mode_known")
    op.drop_column("operations", "polling_mode")
