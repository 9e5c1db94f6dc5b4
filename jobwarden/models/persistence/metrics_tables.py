"""The counters /metrics reads instead of the whole history (0022).

A counter such as ``jobwarden_provider_responses_total`` counts rows of a history that only
grows; counting them at every scrape made a scrape cost about 0.3 s per million events.
These are kept as the rows are written, in the same transaction: a rolled-back write
never counts, a committed one always does.

- ``provider_answer_deltas``: one row appended per write of provider answers, by status
  class, by the statement that inserts the events (answer_tallies.py; 0022's trigger did
  it until 0028, at more cost to every poll than the insert it counted);
- ``ended_operation_deltas``: one row appended when a row enters an ended state (a
  TERMINAL one), leaves one or changes its counters in one (once per operation, never on
  a poll), with its request counters. Operations not ended are counted from their rows
  (``ix_operations_not_ended``, bounded by the work in flight); a row moves from one part
  to the other in the transaction that ends it;
- ``*_tallies``: the totals the deltas are folded into, in one statement, by the beat task
  ``jobwarden.fold_tallies`` (metrics_store.fold_tallies), so the deltas a scrape adds up
  are those of the last fold interval.

A scrape reads the tallies, the deltas and the rows in flight in one snapshot, so a fold
or an operation ending meanwhile never counts a thing twice or loses it: the sums never
go down. Deltas are appended, never updated: one total row that every poll updated would
make each poll wait for the previous one's commit, and leave a dead row version per poll.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Identity, Index, String, Table, text
from sqlalchemy.orm import Mapped, mapped_column

from jobwarden.models.persistence.tables import Base, OperationRow
from jobwarden.models.states import TERMINAL

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
    answers: Mapped[int] = mapped_column(BigInteger)


# A heap and nothing else (0034): every poll appends a row and a fold deletes them all, so
# no statement looks one up; a key cost each poll a sequence step and an index entry.
PROVIDER_ANSWER_DELTAS = Table(
    "provider_answer_deltas",
    Base.metadata,
    Column("provider", String(200), nullable=False),
    Column("status_class", String(10), nullable=False),
    Column("answers", BigInteger, nullable=False),
)


class EndedOperationTallyRow(Base):
    __tablename__ = "ended_operation_tallies"

    provider: Mapped[str] = mapped_column(String(200), primary_key=True)
    state: Mapped[str] = mapped_column(String(40), primary_key=True)
    operations: Mapped[int] = mapped_column(BigInteger)
    # As the figure counts them: status_requests_used less a reservation not yet spent.
    status_requests: Mapped[int] = mapped_column(BigInteger)
    create_attempts: Mapped[int] = mapped_column(BigInteger)


class EndedOperationDeltaRow(Base):
    __tablename__ = "ended_operation_deltas"

    delta_id: Mapped[int] = mapped_column(BigInteger, Identity(always=True), primary_key=True)
    provider: Mapped[str] = mapped_column(String(200))
    state: Mapped[str] = mapped_column(String(40))
    operations: Mapped[int] = mapped_column(BigInteger)
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
