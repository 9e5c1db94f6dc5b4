"""The counters /metrics reads instead of the whole history (0022).

A counter such as ``jobwarden_provider_responses_total`` counts rows of a history that only
grows; counting them at every scrape made a scrape cost about 0.3 s per million events.
These tallies are kept as the rows are written, by triggers of migration 0022 (so the
write path in store.py is unchanged and no writer can forget them), in the same
transaction: a rolled-back write never counts, a committed one always does.

- ``provider_answer_tallies``: provider answers by status class, one row added to per
  answer (operation_events insert).
- ``ended_operation_tallies``: operations that have ended (a TERMINAL state), with their
  request counters, added to when a row enters an ended state (once per operation, never
  on a poll). Operations not ended are counted from their rows (``ix_operations_not_ended``,
  bounded by the work in flight); a row moves from one part to the other in the
  transaction that ends it, and a scrape reads both parts in one statement (one snapshot),
  so the sum never goes down.

Each tally is split into ``shard`` rows by the writer's backend (``pg_backend_pid() %
TALLY_SHARDS``): a row being added to stays locked until its transaction commits, and one
row per provider would make every poll of that provider wait for the previous one's
commit. A scrape sums the shards; shards may hold negative parts (a row that ended on one
backend and was moved on by another), their sum is exact.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Index, SmallInteger, String, text
from sqlalchemy.orm import Mapped, mapped_column

from jobwarden.models.persistence.tables import Base, OperationRow
from jobwarden.models.states import TERMINAL

# How many rows each tally is split into (see the module docstring).
TALLY_SHARDS = 16
# The ended states as migration 0022 wrote them into its trigger (a migration carries
# literals); tests/integration/test_metrics_plans.py fails when TERMINAL changes without
# a migration that rewrites the trigger and the index.
ENDED_STATES: tuple[str, ...] = tuple(sorted(s.value for s in TERMINAL))
ENDED_STATE_VALUES = ", ".join(f"'{s}'" for s in ENDED_STATES)


class ProviderAnswerTallyRow(Base):
    __tablename__ = "provider_answer_tallies"

    provider: Mapped[str] = mapped_column(String(200), primary_key=True)
    # 2xx, 3xx, 4xx (429 apart), 429, 5xx, none (no answer came).
    status_class: Mapped[str] = mapped_column(String(10), primary_key=True)
    shard: Mapped[int] = mapped_column(SmallInteger, primary_key=True)
    answers: Mapped[int] = mapped_column(BigInteger)


class EndedOperationTallyRow(Base):
    __tablename__ = "ended_operation_tallies"

    provider: Mapped[str] = mapped_column(String(200), primary_key=True)
    state: Mapped[str] = mapped_column(String(40), primary_key=True)
    shard: Mapped[int] = mapped_column(SmallInteger, primary_key=True)
    operations: Mapped[int] = mapped_column(BigInteger)
    # As the figure counts them: status_requests_used less a reservation not yet spent.
    status_requests: Mapped[int] = mapped_column(BigInteger)
    create_attempts: Mapped[int] = mapped_column(BigInteger)


# The operations not ended, by provider and state: the scrape's count of work in flight.
# Declared here, beside the only query it serves, rather than in tables.py. Neither column
# moves on a poll, so a poll stays a HOT update (test_migrations holds that line).
NOT_ENDED_INDEX = Index(
    "ix_operations_not_ended",
    OperationRow.__table__.c.provider,
    OperationRow.__table__.c.state,
    postgresql_where=text(f"state NOT IN ({ENDED_STATE_VALUES})"),
)
