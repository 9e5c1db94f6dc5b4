"""operations: the approval_expired state (issue 20, item 1)

An operation that waits for a human's approval longer than its contract's
``limits.approval_window_seconds`` (or past its business deadline) ends in
``approval_expired``: nothing was sent, and nobody authorized it, so the CHECK
that demands an authorizer past approval admits it as it admits ``abandoned``.
The states are spelled out here, not imported from the live enum: a migration
must keep meaning what it meant when it was written.

An operation awaiting approval now carries its window's end as its timer
(``next_poll_at``). One already waiting when this runs has none; it gets a full
default window (a day, the default of ``limits.approval_window_seconds``) from the
upgrade, capped by its business deadline, rather than being ended at once for a
bound nobody had announced. ``next_poll_at`` is a timer, not a fact the row digest
commits to, so the history still verifies.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

# The states as of 0011 (unchanged until this revision), written out.
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
)
STATES = (*STATES_BEFORE, "approval_expired")
UNAUTHORIZED_BEFORE = "'awaiting_approval', 'abandoned', 'queued'"
UNAUTHORIZED = "'awaiting_approval', 'abandoned', 'queued', 'approval_expired'"


def _values(states: tuple[str, ...]) -> str:
    return ", ".join(f"'{s}'" for s in states)


def _replace_state_check(states: tuple[str, ...]) -> None:
    # As 0011: an older database may hold the doubled name; drop either, add the plain one.
    for name in ("ck_operations_state_known", "ck_operations_ck_operations_state_known"):
        op.execute(f"ALTER TABLE operations DROP CONSTRAINT IF EXISTS {name}")
    op.execute(
        "ALTER TABLE operations ADD CONSTRAINT ck_operations_state_known "
        f"CHECK (state IN ({_values(states)}))"
    )


def _replace_authorized_check(states: str) -> None:
    for name in (
        "ck_operations_authorized_before_create",
        "ck_operations_ck_operations_authorized_before_create",
    ):
        op.execute(f"ALTER TABLE operations DROP CONSTRAINT IF EXISTS {name}")
    op.execute(
        "ALTER TABLE operations ADD CONSTRAINT ck_operations_authorized_before_create "
        f"CHECK (authorized_by IS NOT NULL OR state IN ({states}))"
    )


def upgrade() -> None:
    _replace_state_check(STATES)
    _replace_authorized_check(UNAUTHORIZED)
    op.execute(
        "UPDATE operations SET next_poll_at = LEAST(now() + interval '86400 seconds', "
        "COALESCE(business_deadline, 'infinity'::timestamptz)), dispatched_at = NULL "
        "WHERE state = 'awaiting_approval' AND next_poll_at IS NULL"
    )


def downgrade() -> None:
    # An approval_expired row has no meaning before this revision, and rewriting its state
    # would write a row its event chain does not explain: a person decides first.
    ended = op.get_bind().scalar(
        sa.text("SELECT count(*) FROM operations WHERE state = 'approval_expired'")
    )
    if ended:
        raise RuntimeError(f"{ended} operations are approval_expired: archive them first")
    _replace_authorized_check(UNAUTHORIZED_BEFORE)
    _replace_state_check(STATES_BEFORE)
    # Before this revision nothing wakes an operation awaiting approval.
    op.execute("UPDATE operations SET next_poll_at = NULL WHERE state = 'awaiting_approval'")
