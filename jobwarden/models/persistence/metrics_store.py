"""SQL behind /metrics: each figure's cost bounded by the work in flight, not the history.

Every figure is read from Postgres at scrape time, so any number of API processes
and workers report the same numbers; nothing is kept in worker memory. The history only
grows, so no query here reads all of it (tests/integration/test_metrics_plans.py checks
every plan; scripts/bench_metrics.py measures a scrape at two history sizes):

- operations not ended (``ix_operations_not_ended``, the work in flight) by state and
  provider with their request counters, plus the ended ones from
  ``ended_operation_tallies`` (metrics_tables.py: kept by a trigger as rows end), read in
  one statement so that a row ending between two reads is never counted twice or lost;
  escalations waiting and the sweeper's lag on partial indexes;
- the most recent ``window`` events (a range of event_id, on its BRIN index, 0023): early
  status requests, detection delay and step durations, which need the order of events or are
  figures of the recent past (gauges, not counters). Each operation's provider is looked
  up by its key (a scalar subquery, never flattened into a join the planner could serve by
  reading every operation);
- provider answers by status class, a counter over the whole history, from the tallies
  and the deltas of the last fold interval (appended by the statements writing the events).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.orm import Session

from jobwarden.models.actions import DelaySource
from jobwarden.models.persistence.db import transaction
from jobwarden.models.persistence.metrics_tables import ENDED_STATE_VALUES
from jobwarden.models.persistence.tables import ACTIVE_STATES
from jobwarden.models.states import AUTOMATION_STOPPED, OperationState

# A remote job is seen to end when a status answer moves the operation from watching it
# to what follows the job's end (collection, or a terminal state the provider named).
_WATCHING = (OperationState.accepted, OperationState.observing, OperationState.cancelling)
_ENDED = (
    OperationState.result_collecting,
    OperationState.failed,
    OperationState.expired,
    OperationState.cancelled,
)
# Answers that say the job was still pending (or just accepted): the latest one before the
# end bounds when the end could first have been seen by polling.
_ANSWERS = ("polled", "observed", "create_accepted", "create_replayed", "reconciled")
# The waits the provider asked for: a status request before their end is early.
_PROVIDER_WAITS = (DelaySource.provider_retry_after.value, DelaySource.provider_poll_hint.value)


@contextmanager
def scrape_session(url: str) -> Iterator[Session]:
    """One read-only transaction for every figure of a scrape: one snapshot, so figures
    read apart (operations by state, escalations waiting) agree with each other.

    JIT off: the planner compiles a query whose estimated cost is high, and a scrape's
    queries, each over a bounded set of rows, spent more compiling (0.2 s) than running.
    """
    with transaction(url) as session:
        session.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"))
        session.execute(text("SET LOCAL jit = off"))
        yield session


def _in(values: Sequence[str]) -> str:
    return ", ".join(f"'{v}'" for v in values)


@dataclass(frozen=True, slots=True, kw_only=True)
class OperationCounts:
    """One (provider, state) group of operations."""

    provider: str
    state: str
    operations: int
    # Counted on the rows before each request left (invariant 3), minus a reservation not
    # yet spent: a crash may leave a counted request unsent, never an uncounted one.
    status_requests: int
    create_attempts: int


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitingEscalations:
    provider: str
    reason: str
    operations: int
    oldest_since: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class RecentFacts:
    """What the most recent events say, per provider."""

    early_requests: dict[str, int]
    # (provider, seconds from first evidence to the observed end), one per operation.
    detection_delays: list[tuple[str, float]]
    # (provider, step name, seconds the step took up to its write), one per step write.
    step_durations: list[tuple[str, str, float]]


# The rows in flight and the ended ones' tallies and deltas, in one statement (the scrape's
# snapshot holds across statements too). A group whose operations all moved on
# (result_validation_failed -> result_accepted) has nothing left to show, as before.
_OPERATION_COUNTS = f"""
SELECT provider, state, sum(operations), sum(status_requests), sum(create_attempts) FROM (
    SELECT provider, state, count(*) AS operations,
        coalesce(sum(status_requests_used), 0) - count(reserved_request) AS status_requests,
        coalesce(sum(create_attempts), 0) AS create_attempts
    FROM operations JOIN operation_timers USING (operation_id)
    WHERE state NOT IN ({ENDED_STATE_VALUES}) GROUP BY provider, state
    UNION ALL
    SELECT provider, state, operations, status_requests, create_attempts
    FROM ended_operation_tallies
    UNION ALL
    SELECT provider, state, operations, status_requests, create_attempts
    FROM ended_operation_deltas
) parts
GROUP BY provider, state HAVING sum(operations) > 0 ORDER BY provider, state
"""


def operation_counts(session: Session) -> list[OperationCounts]:
    return [
        OperationCounts(
            provider=p, state=s, operations=int(n), status_requests=int(r), create_attempts=int(c)
        )
        for p, s, n, r, c in session.execute(text(_OPERATION_COUNTS))
    ]


def waiting_escalations(session: Session) -> list[WaitingEscalations]:
    """Operations whose automation stopped, by provider and reason, with the oldest stop.

    A stopped row is written again only when a human moves it, so updated_at is when it
    stopped (the same reading as the escalations list, models/persistence/query_store.py).
    """
    stopped = _in(sorted(s.value for s in AUTOMATION_STOPPED))
    rows = session.execute(
        text(
            "SELECT provider, coalesce(escalation_reason, state), count(*), min(updated_at)"
            " FROM operations JOIN operation_timers USING (operation_id)"
            f" WHERE state IN ({stopped})"
            " GROUP BY 1, 2 ORDER BY 1, 2"
        )
    )
    return [
        WaitingEscalations(provider=p, reason=r, operations=n, oldest_since=at)
        for p, r, n, at in rows
    ]


def oldest_due(session: Session, now: datetime) -> dict[str, datetime]:
    """Per provider, the earliest next_poll_at already reached among active rows.

    The sweeper's lag: a healthy sweeper keeps it within an interval or two of now.
    """
    rows = session.execute(
        text(
            "SELECT o.provider, min(t.next_poll_at) FROM operation_timers t"
            " JOIN operations o ON o.operation_id = t.operation_id"
            f" WHERE o.state IN ({_in([s.value for s in ACTIVE_STATES])})"
            " AND t.next_poll_at <= :now GROUP BY o.provider"
        ),
        {"now": now},
    )
    return {p: at for p, at in rows}


# The provider of one operation, by its primary key (see the module docstring).
_PROVIDER = "(SELECT o.provider FROM operations o WHERE o.operation_id = {}.operation_id)"

_RECENT = """
WITH recent AS (
    SELECT operation_id, operation_created_at, seq, at, kind, from_state, to_state,
        delay_source, excerpt
    FROM operation_events
    WHERE event_id > :since
)
"""

# A status request is early when the event recording it (poll_sent, claimed just before the
# send; or the polled/observed event carrying a reserved request's ordinal, written after
# its answer) is earlier than the end of a provider-asked wait recorded before it.
_EARLY = (
    _RECENT
    + f"""
, marked AS (
    SELECT operation_id, at, kind, excerpt,
        max(CASE WHEN delay_source IN ({_in(_PROVIDER_WAITS)})
            THEN (excerpt->>'next_poll_at')::timestamptz END)
        OVER (PARTITION BY operation_id ORDER BY seq
              ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS not_before
    FROM recent
)
SELECT {_PROVIDER.format("early")}, sum(early.requests) FROM (
    SELECT operation_id, count(*) AS requests FROM marked m
    WHERE (m.kind = 'poll_sent' OR (m.kind IN ('polled', 'observed') AND m.excerpt ? 'request'))
      AND m.at < m.not_before
    GROUP BY operation_id
) early
GROUP BY 1
"""
)

# Detection delay: the observed end minus the first evidence it could be seen — the first
# verified webhook after the last pending answer, else that answer. The lookups name the
# partition key (0023), so each probes its operation's partition only.
_DELAYS = (
    _RECENT
    + f"""
, ends AS (
    SELECT DISTINCT ON (operation_id) operation_id, operation_created_at, seq, at FROM recent
    WHERE from_state IN ({_in(_WATCHING)}) AND to_state IN ({_in(_ENDED)})
    ORDER BY operation_id, seq
)
SELECT {_PROVIDER.format("e")}, extract(epoch FROM e.at - coalesce(
    (SELECT min(w.at) FROM operation_events w
     WHERE w.operation_id = e.operation_id AND w.kind = 'webhook_received'
       AND w.operation_created_at = e.operation_created_at
       AND w.seq > a.seq AND w.seq < e.seq),
    a.at))
FROM ends e
JOIN LATERAL (
    SELECT seq, at FROM operation_events p
    WHERE p.operation_id = e.operation_id AND p.operation_created_at = e.operation_created_at
      AND p.seq < e.seq AND p.kind IN ({_in(_ANSWERS)})
    ORDER BY p.seq DESC LIMIT 1
) a ON true
ORDER BY 1, 2
"""
)


# The step runner puts the step's name and duration on the last event of its write
# (jobwarden.models.effects.timed).
_STEPS = (
    _RECENT
    + f"""
SELECT {_PROVIDER.format("r")}, r.excerpt->>'step', (r.excerpt->>'step_seconds')::float8
FROM recent r
WHERE r.excerpt ? 'step_seconds'
ORDER BY 1, 2, 3
"""
)


def recent_facts(session: Session, window: int) -> RecentFacts:
    """Early requests, detection delays and step durations over the last ``window`` events."""
    # The bound as a value, not a subquery: the planner then expects the window's rows, not
    # a third of the history, and its estimates (and its choice to JIT-compile) stay flat.
    # The sequence's last value, not max(event_id): the index on event_id is a BRIN (0023),
    # which cannot answer max(); a number taken by a rolled-back insert only narrows the
    # window by one.
    newest = session.scalar(text("SELECT last_value FROM operation_events_event_id_seq"))
    params = {"since": int(newest or 0) - window}
    early = {p: int(n) for p, n in session.execute(text(_EARLY), params)}
    delays = [(p, float(s)) for p, s in session.execute(text(_DELAYS), params)]
    steps = [(p, st, float(s)) for p, st, s in session.execute(text(_STEPS), params)]
    return RecentFacts(early_requests=early, detection_delays=delays, step_durations=steps)


def provider_answers(session: Session) -> dict[tuple[str, str], int]:
    """Provider answers ever recorded, by (provider, status class).

    The step records each answer once, with its status on the event that carries it
    (jobwarden.models.effects); migration 0022's trigger appends each write's count to
    ``provider_answer_deltas`` (429 a class of its own, so 4xx excludes it; an answer that
    never came, a timeout, reset, DNS or TLS failure: "none").
    """
    rows = session.execute(
        text(
            "SELECT provider, status_class, sum(answers) FROM ("
            " SELECT provider, status_class, answers FROM provider_answer_tallies"
            " UNION ALL SELECT provider, status_class, answers FROM provider_answer_deltas"
            ") parts GROUP BY 1, 2 ORDER BY 1, 2"
        )
    )
    return {(p, c): int(n) for p, c, n in rows}


# Each fold deletes the deltas it can see and adds them to the totals in one statement: a
# delta still uncommitted is invisible to it and waits for the next fold; two folds at once
# cannot add a delta twice (the second finds it deleted when the first commits).
_FOLDS = (
    """
WITH folded AS (DELETE FROM provider_answer_deltas RETURNING provider, status_class, answers)
INSERT INTO provider_answer_tallies AS t (provider, status_class, answers)
SELECT provider, status_class, sum(answers) FROM folded GROUP BY 1, 2 ORDER BY 1, 2
ON CONFLICT (provider, status_class) DO UPDATE SET answers = t.answers + EXCLUDED.answers
""",
    """
WITH folded AS (DELETE FROM ended_operation_deltas
    RETURNING provider, state, operations, status_requests, create_attempts)
INSERT INTO ended_operation_tallies AS t
    (provider, state, operations, status_requests, create_attempts)
SELECT provider, state, sum(operations), sum(status_requests), sum(create_attempts)
FROM folded GROUP BY 1, 2 ORDER BY 1, 2
ON CONFLICT (provider, state) DO UPDATE SET
    operations = t.operations + EXCLUDED.operations,
    status_requests = t.status_requests + EXCLUDED.status_requests,
    create_attempts = t.create_attempts + EXCLUDED.create_attempts
""",
)


def fold_tallies(session: Session) -> int:
    """Fold the deltas written since the last fold into the tallies; returns how many tally
    rows it added to.

    The figures are the same before and after (a scrape reads both), only cheaper to sum.
    """
    return sum(int(getattr(session.execute(text(sql)), "rowcount", 0)) for sql in _FOLDS)
