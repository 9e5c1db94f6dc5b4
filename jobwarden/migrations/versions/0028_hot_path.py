"""The poll's hot path: provider answers counted by the statement that records them
(issue 37)

0022's statement trigger ``tally_provider_answers`` ran on every insert into
``operation_events``: it captured a transition table, called a PL/pgSQL function and
looked the provider up for each write, which on a poll cost more Postgres time than the
event insert it counted (EXPLAIN: 0.41 of 0.92 ms). The two statements that insert
events now append the same ``provider_answer_deltas`` rows themselves, as one more CTE
(models/persistence/answer_tallies.py), so the trigger and its function go. No row
changes: the tallies and the deltas already written stay as they are, and the counter
goes on from them.

Deploy note: workers of this revision and the schema must move together. A worker from
before it, on this schema, records answers that nobody counts; a worker of this revision
on the old schema counts them twice (its CTE and the trigger). ``jobwarden migrate`` and
a worker restart, as for any revision, keep them together.

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-07
"""

from __future__ import annotations

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
    # Taken as DROP TRIGGER takes it anyway: no insert runs between the old count and the new.
    op.execute("LOCK TABLE operation_events IN SHARE ROW EXCLUSIVE MODE")
    op.execute("DROP TRIGGER tally_provider_answers ON operation_events")
    op.execute("DROP FUNCTION jobwarden_tally_provider_answers()")


def downgrade() -> None:
    op.execute("LOCK TABLE operation_events IN SHARE ROW EXCLUSIVE MODE")
    op.execute(TALLY_ANSWERS)
    op.execute(TALLY_TRIGGER)
