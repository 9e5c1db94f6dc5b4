"""SQL behind /metrics: aggregates over the operations table and the recent events.

Every figure is read from Postgres at scrape time, so any number of API processes
and workers report the same numbers; nothing is kept in worker memory and nothing
is added to a step's write. Two kinds of query, each with a bounded cost:

- over ``operations`` (one row per operation): counts by state and provider, the
  requests counted on the rows, escalations waiting and the sweeper's lag — one
  scan of the table, the last two on partial indexes;
- over the most recent ``window`` events (a range of event_id, on its BRIN index):
  early status requests, detection delay and step durations, which need the order of
  events or are figures of the recent past (gauges, not counters);
- over the whole history (append-only, never deleted): provider answers by status
  class, so the counter only grows. One aggregate over ``operation_events``; its cost
  grows with the history, which is why the collector caches an answer for a few seconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.orm import Session

from jobwarden.models.actions import DelaySource
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


def operation_counts(session: Session) -> list[OperationCounts]:
    rows = session.execute(
        text(
            "SELECT provider, state, count(*),"
            " coalesce(sum(status_requests_used), 0) - count(reserved_request),"
            " coalesce(sum(create_attempts), 0)"
            " FROM operations GROUP BY provider, state ORDER BY provider, state"
        )
    )
    return [
        OperationCounts(
            provider=p, state=s, operations=n, status_requests=int(r), create_attempts=int(c)
        )
        for p, s, n, r, c in rows
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
            f" FROM operations WHERE state IN ({stopped})"
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


_RECENT = """
WITH recent AS (
    SELECT operation_id, operation_created_at, seq, at, kind, from_state, to_state,
        delay_source, excerpt
    FROM operation_events
    -- The sequence's last value, not max(event_id): the index on event_id is a BRIN
    -- (0023), which cannot answer max(); a number taken by a rolled-back insert only
    -- narrows the window by one.
    WHERE event_id > (SELECT last_value FROM operation_events_event_id_seq) - :window
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
SELECT o.provider, count(*) FROM marked m JOIN operations o USING (operation_id)
WHERE (m.kind = 'poll_sent' OR (m.kind IN ('polled', 'observed') AND m.excerpt ? 'request'))
  AND m.at < m.not_before
GROUP BY o.provider
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
SELECT o.provider, extract(epoch FROM e.at - coalesce(
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
JOIN operations o ON o.operation_id = e.operation_id
ORDER BY 1, 2
"""
)


# The step runner puts the step's name and duration on the last event of its write
# (jobwarden.models.effects.timed).
_STEPS = (
    _RECENT
    + """
SELECT o.provider, r.excerpt->>'step', (r.excerpt->>'step_seconds')::float8
FROM recent r JOIN operations o USING (operation_id)
WHERE r.excerpt ? 'step_seconds'
ORDER BY 1, 2, 3
"""
)


def recent_facts(session: Session, window: int) -> RecentFacts:
    """Early requests, detection delays and step durations over the last ``window`` events."""
    params = {"window": window}
    early = {p: int(n) for p, n in session.execute(text(_EARLY), params)}
    delays = [(p, float(s)) for p, s in session.execute(text(_DELAYS), params)]
    steps = [(p, st, float(s)) for p, st, s in session.execute(text(_STEPS), params)]
    return RecentFacts(early_requests=early, detection_delays=delays, step_durations=steps)


# 429 is a class of its own (rate limiting, DESIGN "HTTP signals"), so 4xx excludes it.
# An answer that never came (a timeout, a reset, DNS, TLS) has no status: "none".
_ANSWERS_BY_CLASS = """
SELECT o.provider,
    CASE WHEN e.http_status IS NULL THEN 'none'
         WHEN e.http_status = 429 THEN '429'
         ELSE (e.http_status / 100)::text || 'xx' END,
    count(*)
FROM operation_events e JOIN operations o USING (operation_id)
WHERE e.http_status IS NOT NULL OR e.excerpt ? 'transport_failure'
GROUP BY 1, 2 ORDER BY 1, 2
"""


def provider_answers(session: Session) -> dict[tuple[str, str], int]:
    """Provider answers ever recorded, by (provider, status class).

    The step records each answer once, with its status on the event that carries it
    (jobwarden.models.effects), so counting those events counts the answers.
    """
    return {(p, c): int(n) for p, c, n in session.execute(text(_ANSWERS_BY_CLASS))}
