"""operation_results: a result's bytes live in the result store (issue 21)

A result is an artifact, not a column (DESIGN invariant 14): its bytes stream into the
result store and the row keeps where they are (``location``) with their digest, size
and counts (as big integers: a streamed result may pass 2 GiB). A small result (at most
64 KiB) may stay inline in ``content``; every row has its bytes in one place or the
other. Rows written before this revision keep their
inline bytes and need no location.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("operation_results", sa.Column("location", sa.Text(), nullable=True))
    op.alter_column("operation_results", "content", nullable=True)
    # A streamed result may pass 2 GiB (and as many records): integer columns would overflow.
    for column in ("size_bytes", "record_count"):
        op.alter_column("operation_results", column, type_=sa.BigInteger())
    # Named in SQL, as 0011 does: the metadata's naming convention would prefix it twice.
    op.execute(
        "ALTER TABLE operation_results ADD CONSTRAINT ck_operation_results_bytes_somewhere "
        "CHECK (content IS NOT NULL OR location IS NOT NULL)"
    )


def downgrade() -> None:
    # A result held only in the store has no place in the older table: a person moves or
    # archives those rows first.
    held = op.get_bind().scalar(
        sa.text("SELECT count(*) FROM operation_results WHERE content IS NULL")
    )
    if held:
        raise RuntimeError(f"{held} results are held only in the result store: archive them first")
    op.execute(
        "ALTER TABLE operation_results "
        "DROP CONSTRAINT IF EXISTS ck_operation_results_bytes_somewhere"
    )
    op.alter_column("operation_results", "content", nullable=False)
    for column in ("size_bytes", "record_count"):
        op.alter_column("operation_results", column, type_=sa.Integer())
    op.drop_column("operation_results", "location")
