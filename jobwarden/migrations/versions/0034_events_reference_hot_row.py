"""A poll's write touches only what it writes: the history's foreign key names the hot row,
and the answer deltas are a bare heap (issue 37)

A foreign key check takes ``FOR KEY SHARE`` on the row it finds. Since 0033 a poll
writes the hot row (``operation_timers``) and not the wide one, so every event insert's
check on ``operations`` locked a row the statement had not touched: the wide row's
tuple took a lock bit and its page a WAL record, on every poll (the durable floor's
check finds the row its own statement just updated, which needs no new lock). The
history now references the hot row, which every operation has for its whole life
(0033), which the same statement has just updated, and which itself references
``operations``: an event still cannot name an operation that does not exist.

``provider_answer_deltas`` loses its identity key: every poll appended a row to it, which
cost a sequence step and a btree entry, and nothing ever looked a row up (the fold deletes
them all, ``metrics_store``). Downgrade numbers the rows again.

Adding the constraint checks every stored event (one pass over the history, under a
lock that holds writers off until it ends); Postgres 15 cannot add it ``NOT VALID`` on
a partitioned table.

Revision ID: 0034
Revises: 0033
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0034"
down_revision = "0033"
branch_labels = None
depends_on = None

NAME = "fk_operation_events_operation_id"


def _reference(table: str) -> None:
    op.execute(f"ALTER TABLE operation_events DROP CONSTRAINT {NAME}")
    op.execute(
        f"ALTER TABLE operation_events ADD CONSTRAINT {NAME} "
        f"FOREIGN KEY (operation_id) REFERENCES {table} (operation_id)"
    )


def upgrade() -> None:
    _reference("operation_timers")
    op.drop_constraint("pk_provider_answer_deltas", "provider_answer_deltas", type_="primary")
    op.drop_column("provider_answer_deltas", "delta_id")


def downgrade() -> None:
    op.add_column(
        "provider_answer_deltas",
        sa.Column("delta_id", sa.BigInteger(), sa.Identity(always=True), nullable=False),
    )
    op.create_primary_key("pk_provider_answer_deltas", "provider_answer_deltas", ["delta_id"])
    _reference("operations")
