"""operations: cleaning up what a job left behind (issue 21, [cleanup])

A job that ends failed, cancelled or expired may leave resources at the provider; a
contract with ``[cleanup]`` calls its endpoint once and waits for the confirmation
before the operation ends as the job ended. Three states: ``cleanup_pending`` (the
call may be sent), ``cleaning_up`` (sent; confirmation awaited) and
``cleanup_unconfirmed`` (its bounds ran out: a person decides). ``ended_as`` keeps
how the job ended while its cleanup runs; ``cleanup_deadline`` bounds the wait.

The two working states are due states (the sweeper wakes them), so the due index is
rebuilt; the stopped one needs a human, so that index is rebuilt too. The key index
lists ended states only and none is added, so it stays. The states are spelled out,
not imported from the live enum: a migration must keep meaning what it meant when it
was written.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
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
    "result_accepted",
)
CLEANUP_STATES = ("cleanup_pending", "cleaning_up", "cleanup_unconfirmed")
STATES = (*STATES_BEFORE, *CLEANUP_STATES)
ACTIVE_BEFORE = (
    "awaiting_approval",
    "create_pending",
    "create_unknown",
    "reconciling",
    "accepted",
    "observing",
    "result_collecting",
    "cancel_requested",
    "cancelling",
)
ACTIVE = (*ACTIVE_BEFORE, "cleanup_pending", "cleaning_up")
NEEDS_A_HUMAN_BEFORE = (
    "awaiting_approval",
    "cancellation_unconfirmed",
    "escalated",
    "result_timed_out",
)
NEEDS_A_HUMAN = (*NEEDS_A_HUMAN_BEFORE, "cleanup_unconfirmed")


def _values(states: tuple[str, ...]) -> str:
    return ", ".join(f"'{s}'" for s in states)


def _replace_state_check(states: tuple[str, ...]) -> None:
    for name in ("ck_operations_state_known", "ck_operations_ck_operations_state_known"):
        op.execute(f"ALTER TABLE operations DROP CONSTRAINT IF EXISTS {name}")
    op.execute(
        "ALTER TABLE operations ADD CONSTRAINT ck_operations_state_known "
        f"CHECK (state IN ({_values(states)}))"
    )


def _partial_indexes(active: tuple[str, ...], human: tuple[str, ...]) -> None:
    op.execute("DROP INDEX IF EXISTS ix_operations_due")
    op.create_index(
        "ix_operations_due",
        "operations",
        ["next_poll_at"],
        postgresql_where=sa.text(f"state IN ({_values(active)})"),
    )
    op.execute("DROP INDEX IF EXISTS ix_operations_needs_a_human")
    op.create_index(
        "ix_operations_needs_a_human",
        "operations",
        ["tenant", "updated_at", "operation_id"],
        postgresql_where=sa.text(f"state IN ({_values(human)})"),
    )


def upgrade() -> None:
    op.add_column("operations", sa.Column("ended_as", sa.String(30), nullable=True))
    op.add_column(
        "operations", sa.Column("cleanup_deadline", sa.DateTime(timezone=True), nullable=True)
    )
    _replace_state_check(STATES)
    _partial_indexes(ACTIVE, NEEDS_A_HUMAN)


def downgrade() -> None:
    # A row cleaning up has no meaning before this revision, and rewriting its state
    # would write a row its event chain does not explain: a person decides first.
    busy = op.get_bind().scalar(
        sa.text(f"SELECT count(*) FROM operations WHERE state IN ({_values(CLEANUP_STATES)})")
    )
    if busy:
        raise RuntimeError(f"{busy} operations are cleaning up: let them end first")
    _partial_indexes(ACTIVE_BEFORE, NEEDS_A_HUMAN_BEFORE)
    _replace_state_check(STATES_BEFORE)
    op.drop_column("operations", "cleanup_deadline")
    op.drop_column("operations", "ended_as")
