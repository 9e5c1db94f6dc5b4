"""operations: polls as HOT updates — the timer in its own row, nothing a poll moves indexed
(issue 23)

Every poll changed ``next_poll_at``, which ``ix_operations_due`` indexes, and
``updated_at``, which ``ix_operations_needs_a_human`` indexes: no poll could be a HOT
update, so each wrote a new entry into every index of the wide operations row. Now:

- ``operation_timers`` holds ``next_poll_at`` and ``dispatched_at`` (one narrow row per
  operation, its own due index); the fenced write updates it in the same statement.
- ``state_since`` (when the row entered its state) replaces ``updated_at`` in the
  needs-a-human index; it moves only on a transition, which a poll that waits is not.
- ``fillfactor = 70`` leaves room on each page for the next version of a row.

Existing rows get a timer row with their timer, and ``state_since = updated_at`` (for a
stopped row, as the escalations list read it). The fillfactor applies to pages written
from now on; ``VACUUM FULL operations`` (a lock, so the operator's call) rewrites the rest.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

# As of this revision (a migration never imports live code).
ACTIVE = (
    "awaiting_approval",
    "create_pending",
    "create_unknown",
    "reconciling",
    "accepted",
    "observing",
    "result_collecting",
    "cancel_requested",
    "cancelling",
    "cleanup_pending",
    "cleaning_up",
)
NEEDS_A_HUMAN = (
    "awaiting_approval",
    "cancellation_unconfirmed",
    "cleanup_unconfirmed",
    "escalated",
    "result_timed_out",
)
TZ = sa.DateTime(timezone=True)


def _values(states: tuple[str, ...]) -> str:
    return ", ".join(f"'{s}'" for s in states)


def _needs_a_human(column: str) -> None:
    op.execute("DROP INDEX IF EXISTS ix_operations_needs_a_human")
    op.create_index(
        "ix_operations_needs_a_human",
        "operations",
        ["tenant", column, "operation_id"],
        postgresql_where=sa.text(f"state IN ({_values(NEEDS_A_HUMAN)})"),
    )


def upgrade() -> None:
    op.create_table(
        "operation_timers",
        sa.Column(
            "operation_id",
            sa.dialects.postgresql.UUID(as_uuid=True),
            sa.ForeignKey(
                "operations.operation_id",
                name="fk_operation_timers_operation_id_operations",
                ondelete="CASCADE",
            ),
            primary_key=True,
        ),
        sa.Column("next_poll_at", TZ, nullable=True),
        sa.Column("dispatched_at", TZ, nullable=True),
        sa.PrimaryKeyConstraint("operation_id", name="pk_operation_timers"),
    )
    op.execute(
        "INSERT INTO operation_timers (operation_id, next_poll_at, dispatched_at) "
        "SELECT operation_id, next_poll_at, dispatched_at FROM operations"
    )
    op.create_index(
        "ix_operation_timers_due",
        "operation_timers",
        ["next_poll_at"],
        postgresql_where=sa.text("next_poll_at IS NOT NULL"),
    )
    op.execute("DROP INDEX IF EXISTS ix_operations_due")
    op.drop_column("operations", "next_poll_at")
    op.drop_column("operations", "dispatched_at")
    op.add_column("operations", sa.Column("state_since", TZ, nullable=True))
    op.execute("UPDATE operations SET state_since = updated_at")
    _needs_a_human("state_since")
    op.execute("ALTER TABLE operations SET (fillfactor = 70)")


def downgrade() -> None:
    op.execute("ALTER TABLE operations RESET (fillfactor)")
    _needs_a_human("updated_at")
    op.drop_column("operations", "state_since")
    op.add_column("operations", sa.Column("next_poll_at", TZ, nullable=True))
    op.add_column("operations", sa.Column("dispatched_at", TZ, nullable=True))
    op.execute(
        "UPDATE operations o SET next_poll_at = t.next_poll_at, dispatched_at = t.dispatched_at "
        "FROM operation_timers t WHERE t.operation_id = o.operation_id"
    )
    op.create_index(
        "ix_operations_due",
        "operations",
        ["next_poll_at"],
        postgresql_where=sa.text(f"state IN ({_values(ACTIVE)})"),
    )
    op.drop_table("operation_timers")
