"""The outbox's SQL fragment, shared by every write that may need a human.

A notice becomes one row per channel, inserted as a data-modifying CTE of the write's
own statement (``store.fenced_update``, ``intake_store.insert``): the rows exist exactly
when the write that caused them committed, even on a step's autocommit connection,
where two statements would be two commits. Built as text once per shape, like the
statements it joins.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any, Final

from psycopg.types.json import Jsonb

from jobwarden.models.humans.notifications import CHANNELS, DeliveryStatus, Notice

# The columns a new row names (the rest take their defaults), with the casts their
# binds need inside a SELECT list (an untyped bind there would be text).
_CASTS: Final = {
    "event_id": "text",
    "channel": "text",
    "kind": "text",
    "tenant": "text",
    "operation_id": "uuid",
    "payload": "jsonb",
    "status": "text",
    "created_at": "timestamptz",
    "next_attempt_at": "timestamptz",
    "attempts": "integer",
}


def rows(notices: Sequence[Notice]) -> int:
    return len(notices) * len(CHANNELS)


def cte(name: str, count: int, source: str) -> str:
    """``name AS (INSERT INTO notifications ... SELECT ... FROM/WHERE source ...)``.

    ``source``: what makes the rows conditional on the write (``FROM claimed``, or
    ``WHERE EXISTS (SELECT 1 FROM fenced)``). A repeated event id is skipped (dedup).
    """
    names = ", ".join(f'"{c}"' for c in _CASTS)
    selects = " UNION ALL ".join(
        "SELECT " + ", ".join(f"%(n{i}_{c})s::{t}" for c, t in _CASTS.items()) + f" {source}"
        for i in range(count)
    )
    return (
        f"{name} AS (INSERT INTO notifications ({names}) {selects} "
        "ON CONFLICT (event_id, channel) DO NOTHING)"
    )


def params(notices: Sequence[Notice]) -> dict[str, Any]:
    bound: dict[str, Any] = {}
    i = 0
    for notice in notices:
        for channel in CHANNELS:
            values = {
                "event_id": notice.event_id,
                "channel": channel.value,
                "kind": notice.kind.value,
                "tenant": notice.tenant,
                "operation_id": uuid.UUID(notice.operation_id),
                "payload": Jsonb(notice.payload),
                "status": DeliveryStatus.pending.value,
                "created_at": notice.created_at,
                # Due at once: the relay's next tick sends it.
                "next_attempt_at": notice.created_at,
                "attempts": 0,
            }
            bound.update({f"n{i}_{c}": v for c, v in values.items()})
            i += 1
    return bound
