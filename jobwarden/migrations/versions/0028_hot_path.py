"""The poll's hot path: provider answers counted by the statement that records them, and
the newest event's kind kept on the operation's row (issue 37)

0022's statement trigger ``tally_provider_answers`` ran on every insert into
``operation_events``: it captured a transition table, called a PL/pgSQL function and
looked the provider up for each write, which on a poll cost more Postgres time than the
event insert it counted (EXPLAIN: 0.41 of 0.92 ms). The two statements that insert
events now append the same ``provider_answer_deltas`` rows themselves, as one more CTE
(models/persistence/answer_tallies.py), so the trigger and its function go. No row
changes: the tallies and the deltas already written stay as they are, and the counter
goes on from them.

``operations.last_event_kind``: every load of an operation read the kind of its newest
event from the partitioned history with a subquery, whose partitions the executor opened
on every load (a third of the load's Postgres time, measured). The writes that append
events now set it on the row (not indexed: a poll stays a HOT update). Existing rows get
their newest event's kind, read once here through the history's primary key; an
operation whose history was archived (0023: its partition dropped) keeps NULL, as the
subquery read it.

Deploy note: workers of this revision and the schema must move together. A worker from
before it, on this schema, records answers that nobody counts; a worker of this revision
on the old schema counts them twice (its CTE and the trigger). ``jobwarden migrate`` and
a worker restart, as for any revision, keep them together.

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None

# As 0022 wrote them (a migration never imports live code, nor another revision's).
_CLASS = (
    "CASE WHEN e.http_status IS NULL THEN 'none' WHEN e.http_status = 429 THEN '429' "
    "ELSE (e.http_status / 100)::text || 'xx' END"
)
_IS_ANSWER = "(e.http_status IS NOT NULL OR e.excerpt ? 'transport_failure')"
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
TALLY_TRIGGER = (
    "CREATE TRIGGER tally_provider_answers AFTER INSERT ON operation_events "
    "REFERENCING NEW TABLE AS added "
    "FOR EACH STATEMENT EXECUTE FUNCTION jobwarden_tally_provider_answers()"
)


def upgrade() -> None:
    # Taken as DROP TRIGGER takes it anyway: no insert runs between the old count and the
    # new, nor between the kinds copied below and the writes that keep them from now on.
    op.execute("LOCK TABLE operations, operation_events IN SHARE ROW EXCLUSIVE MODE")
    op.execute("DROP TRIGGER tally_provider_answers ON operation_events")
    op.execute("DROP FUNCTION jobwarden_tally_provider_answers()")
    op.add_column("operations", sa.Column("last_event_kind", sa.String(40), nullable=True))
    op.execute(
        "UPDATE operations o SET last_event_kind = e.kind FROM operation_events e "
        "WHERE e.operation_id = o.operation_id AND e.seq = o.event_count "
        "AND e.operation_created_at = o.created_at"
    )


def downgrade() -> None:
    op.execute("LOCK TABLE operations, operation_events IN SHARE ROW EXCLUSIVE MODE")
    op.drop_column("operations", "last_event_kind")
    op.execute(TALLY_ANSWERS)
    op.execute(TALLY_TRIGGER)
