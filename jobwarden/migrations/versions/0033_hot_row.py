"""operations: what a poll changes in a narrow hot row, so the wide row is not rewritten
on every poll (issue 37)

0021 moved the timer into ``operation_timers`` so that a poll changed no indexed column
of ``operations`` (a HOT update); the poll still wrote a new version of that whole
110-column row, 1.5 KB of tuple and its WAL, to change a dozen small columns. Now those
columns live in ``operation_timers``, the operation's hot row: the version (THE version,
which every writer compares-and-sets), the chain head and the newest event's kind, the
counters, the last reading and ``updated_at``. A poll writes that row and its events;
the wide row is written only when a colder column changes (a state, a reason, a remote
job id). ``max_status_requests`` moves with ``status_requests_used``, because the CHECK
that bounds one by the other sees one row; so do the other budget checks.

The ended-operations tally (0022's row trigger on ``operations``) read the counters from
the row it fired on; it now reads them from the hot row, which the same statement wrote
(an AFTER trigger runs once the whole statement is done, and sees all of it). It fires
on the wide row's changes of state, provider and create attempts, as before less the two
counters that moved: an ended row's counters no longer change without its state.

Every operation has a hot row (intake inserts both; 0021 gave every older row one, and
this revision adds any still missing). Downgrade moves the columns, checks and the
trigger back, with their values.

Revision ID: 0033
Revises: 0032
Create Date: 2026-12-07
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0033"
down_revision = "0032"
branch_labels = None
depends_on = None

TZ = sa.DateTime(timezone=True)
# As of this revision (a migration never imports live code): the moved columns, each with
# its type and whether it is NOT NULL, in the order 0001-0028 gave them.
MOVED: tuple[tuple[str, sa.types.TypeEngine[Any], bool], ...] = (
    ("version", sa.BigInteger(), True),
    ("updated_at", TZ, True),
    ("event_count", sa.Integer(), True),
    ("last_event_hash", sa.String(64), True),
    ("last_event_kind", sa.String(40), False),
    ("status_requests_used", sa.Integer(), True),
    ("max_status_requests", sa.Integer(), True),
    ("reserved_request", sa.Integer(), False),
    ("transport_failures_used", sa.Integer(), True),
    ("consecutive_rate_limited", sa.Integer(), True),
    ("poll_attempt", sa.Integer(), True),
    ("poll_not_before", TZ, False),
    ("last_remote_state", sa.String(200), False),
    ("last_http_status", sa.Integer(), False),
    ("progress", sa.Float(), False),
    ("estimated_finish", TZ, False),
)
# The checks that bound the moved columns (0001, 0007): their names on the hot row, and
# on the operations row as those revisions left them (0001's under the naming convention
# twice), so that a downgrade puts back exactly the names the older downgrades drop.
CHECKS = (
    (
        "status_requests_used_nonneg",
        "ck_operations_ck_operations_status_requests_used_nonneg",
        "status_requests_used >= 0",
    ),
    (
        "status_requests_within_budget",
        "ck_operations_ck_operations_status_requests_within_budget",
        "status_requests_used <= max_status_requests",
    ),
    ("version_positive", "ck_operations_ck_operations_version_positive", "version >= 1"),
    (
        "reserved_request_counted",
        "ck_operations_reserved_request_counted",
        "reserved_request IS NULL OR reserved_request BETWEEN 1 AND status_requests_used",
    ),
)


def _check_name(table: str, name: str, on_operations: str) -> str:
    return on_operations if table == "operations" else f"ck_{table}_{name}"


# The ended states, as 0022's tally function names them.
ENDED_VALUES = ", ".join(
    f"'{s}'"
    for s in (
        "abandoned",
        "approval_expired",
        "cancelled",
        "expired",
        "failed",
        "result_accepted",
        "result_unavailable",
        "result_validation_failed",
        "succeeded",
    )
)


def _add_ended(row: str, sign: str, spent: str) -> str:
    return f"""
        INSERT INTO ended_operation_deltas
            (provider, state, operations, status_requests, create_attempts)
        VALUES ({row}.provider, {row}.state, {sign}1, {sign}({spent}),
            {sign}{row}.create_attempts);"""


def _tally_ended(spent_from_hot_row: bool) -> str:
    """0022's function (the counters from the row it fires on), or this revision's."""
    if spent_from_hot_row:
        spent = "spent"
        read = (
            "SELECT coalesce(t.status_requests_used - (t.reserved_request IS NOT NULL)::int, 0) "
            "INTO spent FROM operation_timers t WHERE t.operation_id = NEW.operation_id;"
        )
        old_spent = new_spent = spent
    else:
        read = ""
        old_spent = "OLD.status_requests_used - ((OLD.reserved_request IS NOT NULL)::int)"
        new_spent = "NEW.status_requests_used - ((NEW.reserved_request IS NOT NULL)::int)"
    return f"""
CREATE OR REPLACE FUNCTION jobwarden_tally_ended_operations() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE spent bigint;
BEGIN
    {read}
    IF TG_OP = 'UPDATE' AND OLD.state IN ({ENDED_VALUES}) THEN {_add_ended("OLD", "-", old_spent)}
    END IF;
    IF NEW.state IN ({ENDED_VALUES}) THEN {_add_ended("NEW", "+", new_spent)}
    END IF;
    RETURN NULL;
END $$
"""


def _updated_trigger(columns: str) -> str:
    return (
        f"CREATE TRIGGER tally_ended_operations_updated AFTER UPDATE OF {columns} "
        "ON operations FOR EACH ROW "
        f"WHEN (OLD.state IN ({ENDED_VALUES}) OR NEW.state IN ({ENDED_VALUES})) "
        "EXECUTE FUNCTION jobwarden_tally_ended_operations()"
    )


def _move(source: str, target: str) -> None:
    """Add the moved columns to ``target``, copy them from ``source``, drop them there."""
    for name, type_, _ in MOVED:
        op.add_column(target, sa.Column(name, type_, nullable=True))
    sets = ", ".join(f"{name} = s.{name}" for name, _, _ in MOVED)
    op.execute(
        f"UPDATE {target} t SET {sets} FROM {source} s WHERE s.operation_id = t.operation_id"
    )
    for name, _, not_null in MOVED:
        if not_null:
            op.alter_column(target, name, nullable=False)
    for name, on_operations, _ in CHECKS:
        dropped = _check_name(source, name, on_operations)
        op.drop_constraint(op.f(dropped), source, type_="check")
    for name, _, _ in MOVED:
        op.drop_column(source, name)
    for name, on_operations, condition in CHECKS:
        created = _check_name(target, name, on_operations)
        op.create_check_constraint(op.f(created), target, condition)


def upgrade() -> None:
    op.execute("LOCK TABLE operations, operation_timers IN SHARE ROW EXCLUSIVE MODE")
    op.execute(
        "INSERT INTO operation_timers (operation_id) SELECT operation_id FROM operations "
        "ON CONFLICT (operation_id) DO NOTHING"
    )
    # The trigger names two of the moved columns: it goes first, and comes back without them.
    op.execute("DROP TRIGGER tally_ended_operations_updated ON operations")
    _move("operations", "operation_timers")
    op.execute(_tally_ended(spent_from_hot_row=True))
    op.execute(_updated_trigger("state, provider, create_attempts"))


def downgrade() -> None:
    op.execute("LOCK TABLE operations, operation_timers IN SHARE ROW EXCLUSIVE MODE")
    op.execute("DROP TRIGGER tally_ended_operations_updated ON operations")
    _move("operation_timers", "operations")
    op.execute(_tally_ended(spent_from_hot_row=False))
    op.execute(
        _updated_trigger("state, provider, status_requests_used, reserved_request, create_attempts")
    )
