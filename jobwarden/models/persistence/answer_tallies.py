"""The provider-answer counter, counted by the statement that records the answers (0028).

``/metrics`` reads provider answers by status class from ``provider_answer_tallies`` and
the deltas appended since the last fold (metrics_tables.py). Migration 0022 appended the
deltas from a statement trigger on ``operation_events``; it ran on every poll (a
transition table, a PL/pgSQL call, a lookup of the provider) and cost a poll's write
more Postgres time than the event insert it counted (issue 37: EXPLAIN showed 0.41 of
0.92 ms). Since 0028 the two statements that insert events (``store.fenced_update``,
``intake_store.insert``) append the deltas themselves, as one more data-modifying CTE,
from values already in hand: the provider is the operation's, the class is the event's.
So, as with the trigger, a rolled-back write counts nothing and a committed one counts
once; tests/integration/test_answer_tallies.py pins the classes against 0022's SQL and
that no other module inserts events.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from jobwarden.models.history.chain import ChainedEvent


def status_class(http_status: int | None, excerpt: object) -> str | None:
    """The class an event's answer is counted under; None when it records no answer.

    As 0022's trigger classed them: an answer has a status or a transport failure (no
    answer at all, class ``none``); 429 is a class of its own, so ``4xx`` excludes it.
    """
    if http_status is None:
        failed = isinstance(excerpt, Mapping) and "transport_failure" in excerpt
        return "none" if failed else None
    if http_status == 429:
        return "429"
    return f"{http_status // 100}xx"


def classes(events: Sequence[ChainedEvent]) -> tuple[tuple[str, int], ...]:
    """The (class, answers) the events add, in a stable order (the statement's shape)."""
    found = Counter(
        c
        for c in (status_class(ev.draft.http_status, ev.draft.excerpt) for ev in events)
        if c is not None
    )
    return tuple(sorted(found.items()))


def cte(name: str, count: int, source: str) -> str:
    """``name AS (INSERT INTO provider_answer_deltas ... SELECT ... source ...)``.

    ``source`` makes the rows conditional on the write (``FROM claimed``, or
    ``WHERE EXISTS (SELECT 1 FROM fenced)``), as for the events themselves.
    """
    selects = " UNION ALL ".join(
        f"SELECT %(a{i}_provider)s::text, %(a{i}_class)s::text, %(a{i}_answers)s::bigint {source}"
        for i in range(count)
    )
    return (
        f"{name} AS (INSERT INTO provider_answer_deltas (provider, status_class, answers) "
        f"{selects})"
    )


def params(provider: str, counted: Sequence[tuple[str, int]]) -> dict[str, Any]:
    bound: dict[str, Any] = {}
    for i, (cls, n) in enumerate(counted):
        bound.update({f"a{i}_provider": provider, f"a{i}_class": cls, f"a{i}_answers": n})
    return bound
