"""SQL of the history's partitions and archive (migration 0023): list the partitions,
create them ahead, read what a partition holds, record an archived segment, and detach
and drop a partition whose every history is archived.

Helpers take the session and never commit. Partition names come from the catalog or
from ``models.history.archive.partition_name``, and are quoted as identifiers anyway.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Final, cast

from sqlalchemy import Table, func, select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from jobwarden.models.errors import PartitionNotArchivedError
from jobwarden.models.history.archive import (
    DEFAULT_PARTITION,
    HeldOperation,
    Partition,
    months_ahead,
    partition_name,
)
from jobwarden.models.persistence.store import EVENTS, own_partition
from jobwarden.models.persistence.tables import ArchivedHistoryRow

SCHEMA: Final = "event_partitions"  # where 0023 puts the partitions
ARCHIVED = cast(Table, ArchivedHistoryRow.__table__)
_NAME: Final = re.compile(r"operation_events_(\d{6}|default)")
_BOUNDS: Final = re.compile(r"FROM \('([^']+)'\) TO \('([^']+)'\)")


@dataclass(frozen=True, slots=True, kw_only=True)
class ArchivedHistory:
    operation_id: uuid.UUID
    partition: str
    location: str
    sha256: str
    size_bytes: int
    event_count: int
    head_hash: str
    archived_at: datetime


def _qualified(partition: str) -> str:
    if not _NAME.fullmatch(partition):
        raise ValueError(f"not a history partition: {partition!r}")
    return f'{SCHEMA}."{partition}"'


def ensure_partitions(session: Session, now: datetime, *, lock_timeout: str) -> list[str]:
    """Create this month's partition and the next ones if missing; what could not be.

    Each takes a lock on operation_events for an instant (the DEFAULT partition is
    scanned, empty when the months were made ahead), so this runs in the maintenance
    step, never on a poll, and waits at most ``lock_timeout`` for that lock. A month
    whose rows already went to the DEFAULT partition cannot get its own (Postgres
    refuses, check_violation): it is named, and its rows stay in DEFAULT, verifiable as
    ever but never archived.
    """
    problems: list[str] = []
    session.execute(text(f"SET LOCAL lock_timeout = '{lock_timeout}'"))
    for month in months_ahead(now):
        try:
            with session.begin_nested():
                session.execute(text("SELECT jobwarden_add_history_partition(:m)"), {"m": month})
        except DBAPIError as exc:
            if getattr(exc.orig, "sqlstate", None) != "23514":
                raise
            problems.append(
                f"{partition_name(month)}: the DEFAULT partition already holds rows of that month"
            )
    return problems


def partitions(session: Session) -> list[Partition]:
    """Every partition of operation_events with its bounds and exact row count, by month."""
    found = session.execute(
        text(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = 'public.operation_events'::regclass ORDER BY c.relname"
        )
    ).all()
    out: list[Partition] = []
    for name, bound in found:
        rows = int(session.scalar(text(f"SELECT count(*) FROM {_qualified(name)}")) or 0)
        match = _BOUNDS.search(str(bound))
        low = high = None
        if match is not None:
            low, high = (datetime.fromisoformat(v) for v in match.groups())
        out.append(Partition(name=name, low=low, high=high, rows=rows))
    return sorted(out, key=lambda p: (p.low is None, p.name))


def held_operations(session: Session, partition: str) -> list[HeldOperation]:
    """The operations whose events ``partition`` holds, as their rows say now."""
    rows = session.execute(
        text(
            "SELECT o.operation_id, o.state, t.updated_at, t.event_count, t.last_event_hash "
            "FROM operations o JOIN operation_timers t USING (operation_id) "
            "WHERE o.operation_id IN "
            f"(SELECT DISTINCT operation_id FROM {_qualified(partition)}) "
            "ORDER BY o.operation_id"
        )
    ).all()
    return [
        HeldOperation(
            operation_id=op_id,
            state=state,
            updated_at=updated,
            event_count=count,
            last_event_hash=head,
        )
        for op_id, state, updated, count, head in rows
    ]


def first_live_seq(session: Session, operation_id: uuid.UUID) -> int | None:
    """The first of the operation's events still in operation_events; None when none is."""
    found = session.scalar(
        select(func.min(EVENTS.c.seq)).where(
            EVENTS.c.operation_id == operation_id, own_partition(operation_id)
        )
    )
    return int(found) if found is not None else None


def archived(session: Session, operation_id: uuid.UUID) -> ArchivedHistory | None:
    found = session.execute(select(ARCHIVED).where(ARCHIVED.c.operation_id == operation_id))
    row = found.first()
    return ArchivedHistory(**row._mapping) if row is not None else None


def record_archived(session: Session, done: ArchivedHistory) -> None:
    """Say where an operation's history segment is; a re-archived one replaces the row."""
    values = {
        "operation_id": done.operation_id,
        "partition": done.partition,
        "location": done.location,
        "sha256": done.sha256,
        "size_bytes": done.size_bytes,
        "event_count": done.event_count,
        "head_hash": done.head_hash,
        "archived_at": done.archived_at,
    }
    statement = insert(ARCHIVED).values(**values)
    session.execute(
        statement.on_conflict_do_update(
            index_elements=["operation_id"],
            set_={k: statement.excluded[k] for k in values if k != "operation_id"},
        )
    )


def detach_and_drop(session: Session, partition: str, *, lock_timeout: str) -> int:
    """Detach ``partition`` and drop it, once each history in it is archived whole.

    DETACH takes an ACCESS EXCLUSIVE lock on operation_events for an instant (a catalog
    change); ``lock_timeout`` bounds the wait for it, so a long transaction makes this
    fail (lock_not_available) rather than queue every poll behind it. With the partition
    detached (and so locked), each operation's last event in it is compared with its
    archived segment's count: an event written since archiving raises
    PartitionNotArchivedError and the caller's rollback re-attaches the partition.
    Returns the rows dropped.
    """
    if partition == DEFAULT_PARTITION:
        raise ValueError("the DEFAULT partition is never dropped")
    table = _qualified(partition)
    session.execute(text(f"SET LOCAL lock_timeout = '{lock_timeout}'"))
    session.execute(text(f"ALTER TABLE operation_events DETACH PARTITION {table}"))
    uncovered = session.execute(
        text(
            "SELECT e.operation_id, max(e.seq), a.event_count FROM "
            f"{table} e LEFT JOIN archived_histories a USING (operation_id) "
            "GROUP BY e.operation_id, a.event_count "
            "HAVING a.event_count IS DISTINCT FROM max(e.seq) LIMIT 1"
        )
    ).first()
    if uncovered is not None:
        op_id, last, count = uncovered
        covered = "no segment" if count is None else f"a segment of {count} events"
        raise PartitionNotArchivedError(
            f"partition {partition}: operation {op_id} has {last} events here but {covered}"
        )
    rows = int(session.scalar(text(f"SELECT count(*) FROM {table}")) or 0)
    session.execute(text(f"DROP TABLE {table}"))
    return rows


def archived_counts(session: Session) -> dict[str, int]:
    """How many histories were archived from each partition (attached or dropped)."""
    found = session.execute(
        select(ARCHIVED.c.partition, func.count()).group_by(ARCHIVED.c.partition)
    )
    return {name: int(n) for name, n in found}
