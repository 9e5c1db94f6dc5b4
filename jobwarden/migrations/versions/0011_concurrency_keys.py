"""operations: concurrency keys and the durable queued state (issue 13, item 1)

``concurrency_key`` names what an operation must not share (one deploy at a time
per target); ``concurrency_limit`` is how many holders the key admits, recorded at
intake so the hand-over decides without reloading a contract. An operation that
found its key full waits in ``queued`` (no worker, no lease, no wake-up): the
partial index walks a key's unfinished operations in submission order, which is
what both the admission count and the hand-over read.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

# The states as of this revision, written out (a migration never imports live code).
STATES_BEFORE = (
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
)
STATES = ("queued", *STATES_BEFORE)
TERMINAL = (
    "succeeded",
    "failed",
    "cancelled",
    "expired",
    "result_unavailable",
    "result_validation_failed",
    "abandoned",
)


def _values(states: tuple[str, ...]) -> str:
    return ", ".join(f"'{s}'" for s in states)


def _replace_state_check(states: tuple[str, ...]) -> None:
    # Older databases hold the doubled name the naming convention once produced
    # (see tests/integration/test_migrations.py); drop either, add the plain one.
    op.execute("ALTER TABLE operations DROP CONSTRAINT IF EXISTS ck_operations_state_known")
    op.execute(
        "ALTER TABLE operations DROP CONSTRAINT IF EXISTS ck_operations_ck_operations_state_known"
    )
    op.execute(
        "ALTER TABLE operations ADD CONSTRAINT ck_operations_state_known "
        f"CHECK (state IN ({_values(states)}))"
    )


def _replace_authorised_check(states: str) -> None:
    for name in (
        "ck_operations_authorised_before_create",
        "ck_operations_ck_operations_authorised_before_create",
    ):
        op.execute(f"ALTER TABLE operations DROP CONSTRAINT IF EXISTS {name}")
    op.execute(
        "ALTER TABLE operations ADD CONSTRAINT ck_operations_authorised_before_create "
        f"CHECK (authorised_by IS NOT NULL OR state IN ({states}))"
    )


def upgrade() -> None:
    op.add_column("operations", sa.Column("concurrency_key", sa.String(200), nullable=True))
    op.add_column("operations", sa.Column("concurrency_limit", sa.Integer(), nullable=True))
    op.execute(
        "ALTER TABLE operations ADD CONSTRAINT ck_operations_concurrency_limit_with_key "
        "CHECK ((concurrency_key IS NULL AND concurrency_limit IS NULL) "
        "OR (concurrency_key IS NOT NULL AND concurrency_limit >= 1))"
    )
    # Only a key's unfinished operations matter (holders and the queue): a partial index
    # stays small however many finished deploys a target has had.
    op.create_index(
        "ix_operations_concurrency_key",
        "operations",
        ["tenant", "concurrency_key", "created_at", "operation_id"],
        postgresql_where=sa.text(
            f"concurrency_key IS NOT NULL AND state NOT IN ({_values(TERMINAL)})"
        ),
    )
    _replace_state_check(STATES)
    # A queued operation waiting for approval has no approver yet, as awaiting_approval.
    _replace_authorised_check("'awaiting_approval', 'abandoned', 'queued'")


def downgrade() -> None:
    # A queued operation has no meaning without this revision, and changing its state here
    # would write a row its event chain does not explain: a human decides first.
    waiting = op.get_bind().scalar(
        sa.text("SELECT count(*) FROM operations WHERE state = 'queued'")
    )
    if waiting:
        raise RuntimeError(f"{waiting} operations are queued: abandon or admit them first")
    _replace_state_check(STATES_BEFORE)
    _replace_authorised_check("'awaiting_approval', 'abandoned'")
    op.drop_index("ix_operations_concurrency_key", table_name="operations")
    op.execute(
        "ALTER TABLE operations DROP CONSTRAINT IF EXISTS ck_operations_concurrency_limit_with_key"
    )
    op.drop_column("operations", "concurrency_limit")
    op.drop_column("operations", "concurrency_key")
