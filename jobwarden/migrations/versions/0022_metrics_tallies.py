"""/metrics: counters kept as rows are written, so a scrape's cost stays flat as history grows
(issue 24)

A scrape counted provider answers over every event and operations over every row: about
0.3 s per million events, growing for ever. Now (jobwarden/models/persistence/
metrics_tables.py says what each holds):

- ``provider_answer_deltas``, one row appended per write of answer events by a statement
  trigger on operation_events;
- ``ended_operation_deltas``, one row appended by row triggers on operations when a row
  enters, leaves or changes its counters in an ended state (never on a poll: the WHEN
  clause filters it out before any function runs);
- ``provider_answer_tallies`` / ``ended_operation_tallies``: the totals the deltas are
  folded into by the beat task jobwarden.fold_tallies, in one statement each;
- ``ix_operations_not_ended``: the rows still in flight, counted from the rows.

Appended, never updated: one row per provider that every poll updated would make each
poll wait for the previous one's commit and leave a dead version per poll on one page
(measured: +47 % on a poll's write in Postgres, against +10 % for the append).

The tallies start from a count of the existing history, taken while both tables are
locked against writes (SHARE ROW EXCLUSIVE, as CREATE TRIGGER takes anyway): no write
can slip between the count and the triggers, so each counter goes on from exactly where
the old query left it. Writers wait for that count (about 0.3 s per million events).

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

# As of this revision (a migration never imports live code): the ended (TERMINAL) states.
ENDED = (
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
ENDED_VALUES = ", ".join(f"'{s}'" for s in ENDED)
# 429 is a class of its own (rate limiting), so 4xx excludes it; no answer at all is none.
_CLASS = (
    "CASE WHEN e.http_status IS NULL THEN 'none' WHEN e.http_status = 429 THEN '429' "
    "ELSE (e.http_status / 100)::text || 'xx' END"
)
_IS_ANSWER = "(e.http_status IS NOT NULL OR e.excerpt ? 'transport_failure')"

# The provider by a lookup per event (the primary key), never a join the planner could
# turn into a scan of every operation on each write.
TALLY_ANSWERS = f"""
CREATE FUNCTION jobwarden_tally_provider_answers() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO provider_answer_deltas (provider, status_class, answers)
    SELECT (SELECT o.provider FROM operations o WHERE o.operation_id = e.operation_id),
        {_CLASS}, count(*)
    FROM added e WHERE {_IS_ANSWER}
    GROUP BY 1, 2;
    RETURN NULL;
END $$
"""


def _add_ended(row: str, sign: str) -> str:
    return f"""
        INSERT INTO ended_operation_deltas
            (provider, state, operations, status_requests, create_attempts)
        VALUES ({row}.provider, {row}.state, {sign}1,
            {sign}({row}.status_requests_used - (({row}.reserved_request IS NOT NULL)::int)),
            {sign}{row}.create_attempts);"""


TALLY_ENDED = f"""
CREATE FUNCTION jobwarden_tally_ended_operations() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.state IN ({ENDED_VALUES}) THEN {_add_ended("OLD", "-")}
    END IF;
    IF NEW.state IN ({ENDED_VALUES}) THEN {_add_ended("NEW", "+")}
    END IF;
    RETURN NULL;
END $$
"""


def upgrade() -> None:
    op.execute("LOCK TABLE operations, operation_events IN SHARE ROW EXCLUSIVE MODE")
    op.create_table(
        "provider_answer_tallies",
        sa.Column("provider", sa.String(200), nullable=False),
        sa.Column("status_class", sa.String(10), nullable=False),
        sa.Column("answers", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("provider", "status_class", name="pk_provider_answer_tallies"),
    )
    op.create_table(
        "provider_answer_deltas",
        sa.Column("delta_id", sa.BigInteger(), sa.Identity(always=True), nullable=False),
        sa.Column("provider", sa.String(200), nullable=False),
        sa.Column("status_class", sa.String(10), nullable=False),
        sa.Column("answers", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("delta_id", name="pk_provider_answer_deltas"),
    )

    def ended() -> list[sa.Column[object]]:
        return [
            sa.Column("provider", sa.String(200), nullable=False),
            sa.Column("state", sa.String(40), nullable=False),
            sa.Column("operations", sa.BigInteger(), nullable=False),
            sa.Column("status_requests", sa.BigInteger(), nullable=False),
            sa.Column("create_attempts", sa.BigInteger(), nullable=False),
        ]

    op.create_table(
        "ended_operation_tallies",
        *ended(),
        sa.PrimaryKeyConstraint("provider", "state", name="pk_ended_operation_tallies"),
    )
    op.create_table(
        "ended_operation_deltas",
        sa.Column("delta_id", sa.BigInteger(), sa.Identity(always=True), nullable=False),
        *ended(),
        sa.PrimaryKeyConstraint("delta_id", name="pk_ended_operation_deltas"),
    )
    op.create_index(
        "ix_operations_not_ended",
        "operations",
        ["provider", "state"],
        postgresql_where=sa.text(f"state NOT IN ({ENDED_VALUES})"),
    )
    op.execute(
        "INSERT INTO provider_answer_tallies (provider, status_class, answers) "
        f"SELECT o.provider, {_CLASS}, count(*) "
        "FROM operation_events e JOIN operations o USING (operation_id) "
        f"WHERE {_IS_ANSWER} GROUP BY 1, 2"
    )
    op.execute(
        "INSERT INTO ended_operation_tallies "
        "(provider, state, operations, status_requests, create_attempts) "
        "SELECT provider, state, count(*), "
        "sum(status_requests_used) - count(reserved_request), sum(create_attempts) "
        f"FROM operations WHERE state IN ({ENDED_VALUES}) GROUP BY 1, 2"
    )
    op.execute(TALLY_ANSWERS)
    op.execute(
        "CREATE TRIGGER tally_provider_answers AFTER INSERT ON operation_events "
        "REFERENCING NEW TABLE AS added "
        "FOR EACH STATEMENT EXECUTE FUNCTION jobwarden_tally_provider_answers()"
    )
    op.execute(TALLY_ENDED)
    op.execute(
        "CREATE TRIGGER tally_ended_operations_inserted AFTER INSERT ON operations "
        f"FOR EACH ROW WHEN (NEW.state IN ({ENDED_VALUES})) "
        "EXECUTE FUNCTION jobwarden_tally_ended_operations()"
    )
    op.execute(
        "CREATE TRIGGER tally_ended_operations_updated AFTER UPDATE OF "
        "state, provider, status_requests_used, reserved_request, create_attempts "
        "ON operations FOR EACH ROW "
        f"WHEN (OLD.state IN ({ENDED_VALUES}) OR NEW.state IN ({ENDED_VALUES})) "
        "EXECUTE FUNCTION jobwarden_tally_ended_operations()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER tally_ended_operations_updated ON operations")
    op.execute("DROP TRIGGER tally_ended_operations_inserted ON operations")
    op.execute("DROP TRIGGER tally_provider_answers ON operation_events")
    op.execute("DROP FUNCTION jobwarden_tally_ended_operations()")
    op.execute("DROP FUNCTION jobwarden_tally_provider_answers()")
    op.drop_index("ix_operations_not_ended", table_name="operations")
    op.drop_table("ended_operation_deltas")
    op.drop_table("ended_operation_tallies")
    op.drop_table("provider_answer_deltas")
    op.drop_table("provider_answer_tallies")
