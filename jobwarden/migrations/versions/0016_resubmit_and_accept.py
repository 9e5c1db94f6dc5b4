"""operations: a person's resubmission links, and the result_accepted end (issue 20, item 3)

A resubmission is a new operation with a new token; the two rows name each other
(``resubmit_of`` on the new one, ``resubmitted_as`` on the one it replaces), so either
history leads to the other without a search. ``result_accepted`` is where an operation
ends when a person accepts a result that failed validation: a distinct end, never
``succeeded``. Its authorizer is set (it was created), so the authorization CHECK is
unchanged.

The key index's predicate lists the ended states; it was written by 0011 and missed
``approval_expired`` (0015), so it is rebuilt here with every ended state. The states
are spelled out, not imported from the live enum: a migration must keep meaning what it
meant when it was written.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

STATES_BEFORE = (
    "queued",
    "awaiting_approval",
    "create_pending",
    "create_unknown",
    "reconciling",
    "accepted",
    "observing",
    "result_collecting",
    "cancel_requested",
    "cancelling",
    "escalated",
    "result_timed_out",
    "cancellation_unconfirmed",
    "succeeded",
    "failed",
    "cancelled",
    "expired",
    "result_unavailable",
    "result_validation_failed",
    "abandoned",
    "approval_expired",
)
STATES = (*STATES_BEFORE, "result_accepted")
ENDED_BEFORE = (
    "succeeded",
    "failed",
    "cancelled",
    "expired",
    "result_unavailable",
    "result_validation_failed",
    "abandoned",
)
ENDED = (*ENDED_BEFORE, "approval_expired", "result_accepted")


def _values(states: tuple[str, ...]) -> str:
    return ", ".join(f"'{s}'" for s in states)


def _replace_state_check(states: tuple[str, ...]) -> None:
    for name in ("ck_operations_state_known", "ck_operations_ck_operations_state_known"):
        op.execute(f"ALTER TABLE operations DROP CONSTRAINT IF EXISTS {name}")
    op.execute(
        "ALTER TABLE operations ADD CONSTRAINT ck_operations_state_known "
        f"CHECK (state IN ({_values(states)}))"
    )


def _key_index(ended: tuple[str, ...]) -> None:
    op.execute("DROP INDEX IF EXISTS ix_operations_concurrency_key")
    op.create_index(
        "ix_operations_concurrency_key",
        "operations",
        ["tenant", "concurrency_key", "created_at", "operation_id"],
        postgresql_where=sa.text(
            f"concurrency_key IS NOT NULL AND state NOT IN ({_values(ended)})"
        ),
    )


def upgrade() -> None:
    for column in ("resubmit_of", "resubmitted_as"):
        op.add_column(
            "operations",
            sa.Column(
                column,
                sa.dialects.postgresql.UUID(as_uuid=True),
                sa.ForeignKey("operations.operation_id", name=f"fk_operations_{column}"),
                nullable=True,
            ),
        )
    _replace_state_check(STATES)
    _key_index(ENDED)


def downgrade() -> None:
    # A result_accepted row has no meaning before this revision, and rewriting its state
    # would write a row its event chain does not explain: a person decides first.
    ended = op.get_bind().scalar(
        sa.text("SELECT count(*) FROM operations WHERE state = 'result_accepted'")
    )
    if ended:
        raise RuntimeError(f"{ended} operations are result_accepted: archive them first")
    _key_index(ENDED_BEFORE)
    _replace_state_check(STATES_BEFORE)
    op.drop_column("operations", "resubmitted_as")
    op.drop_column("operations", "resubmit_of")
