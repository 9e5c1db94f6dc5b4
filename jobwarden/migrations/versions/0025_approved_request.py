"""operations: approved_request_digest, the create request an approval bound (issue 33)

An approval binds the request as it will leave (method, absolute URL, headers with
secrets as their reference, body, fingerprint) by its digest
(``models/outgoing.request_digest``); the create step renders the request it is about to
send, and sends only while the two digests are equal. The approval events record the
digest too; the column is what the send reads, so the check needs no history read.

NULL for every row written before it: nothing is bound, and such a row is sent as it
was before (it was approved under the old rule).

Revision ID: 0025
Revises: 0023
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("operations", sa.Column("approved_request_digest", sa.String(64), nullable=True))


def downgrade() -> None:
    op.drop_column("operations", "approved_request_digest")
