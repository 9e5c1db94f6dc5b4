"""The store: the operation row and its hash-chained history, in SQL.

Every write to an operation is a compare-and-set on its version and appends
its events to the hash chain in the same transaction; the last event of each
write commits to the digest of the row the write produced (``ROW_FACTS`` in
row_facts), computed from values already in hand, so it costs no round trip.
Reads return frozen ``Operation`` snapshots, never ORM rows; helpers take the
session and never commit (the task wrapper does).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from enum import Enum
from functools import lru_cache
from typing import Any, Final, cast

from psycopg.types.json import Jsonb
from sqlalchemy import (
    Table,
    bindparam,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.dialects.postgresql.psycopg import dialect as psycopg_dialect
from sqlalchemy.orm import Session

from jobwarden.models.errors import StaleVersionError, TransitionRefusedError
from jobwarden.models.history.chain import (
    GENESIS_HASH,
    ChainedEvent,
    EventDraft,
    EventKind,
    StoredEvent,
    chain,
    recorded_fields,
)
from jobwarden.models.history.row_facts import ROW_FACTS, row_digest
from jobwarden.models.history.verification import ChainProblem, check_result, verify_chain
from jobwarden.models.humans.notifications import NOTIFY_STATES, Notice, notices_for
from jobwarden.models.operation import COLUMNS, Operation, RowChanges
from jobwarden.models.persistence import answer_tallies, outbox
from jobwarden.models.persistence.db import driver_execute
from jobwarden.models.persistence.tables import (
    ACTIVE_STATES,
    HOLD,
    HOT_COLUMNS,
    HOT_JOIN,
    HOT_SELECTED,
    EventRow,
    OperationRow,
    ResultRow,
    TimerRow,
)
from jobwarden.models.plan import Plan
from jobwarden.models.states import OperationState, check_transition

# Core statements: history rows need no ORM identity, and this runs on every poll.
EVENTS = cast(Table, EventRow.__table__)
OPERATIONS = cast(Table, OperationRow.__table__)
RESULTS = cast(Table, ResultRow.__table__)
TIMERS = cast(Table, TimerRow.__table__)
_PG = psycopg_dialect()  # type: ignore[no-untyped-call]  # SQLAlchemy leaves it untyped

# What a poll changes lives in the operation's narrow hot row (tables.TimerRow, 0033: the
# timer, the version, the chain head, the counters); a snapshot reads it joined to the
# wide row, one statement. The newest event's kind is a column of the hot row (0028): a
# create_sent with nothing after it is how a lost send is recognised, and reading it
# from the partitioned history cost every load a third of its Postgres time.
# The active pause covering the operation rides on the same SELECT (HOLD, 0030).
_LOAD = select(OPERATIONS, *HOT_SELECTED, HOLD).select_from(HOT_JOIN)


def _event_rows(events: Sequence[ChainedEvent], created_at: datetime) -> list[dict[str, Any]]:
    """The events' rows; ``created_at`` is their operation's (the partition key, 0023)."""
    return [
        {
            "operation_id": uuid.UUID(ev.operation_id),
            "operation_created_at": created_at,
            "seq": ev.seq,
            "actor": ev.draft.actor,
            "at": ev.draft.at,
            "from_state": ev.draft.from_state,
            "to_state": ev.draft.to_state,
            "kind": ev.draft.kind.value,
            "cause": ev.draft.cause,
            "delay_source": ev.draft.delay_source,
            "http_status": ev.draft.http_status,
            "provider_request_id": ev.draft.provider_request_id,
            "excerpt": ev.draft.excerpt,
            "row_digest": ev.row_digest,
            "prev_hash": ev.prev_hash,
            "hash": ev.hash,
        }
        for ev in events
    ]


def _cast(column: Any) -> str:
    """The column's type to cast a bind to; text for VARCHAR(n), whose cast would truncate."""
    compiled = column.type.compile(dialect=_PG)
    return "text" if compiled.startswith("VARCHAR") else compiled.lower()


_EVENT_CASTS: Final = {c.name: _cast(c) for c in EVENTS.c if c.name != "event_id"}
_JSON_COLUMNS: Final = frozenset(
    c.name for c in (*OPERATIONS.c, *EVENTS.c) if isinstance(c.type, JSONB)
)


@lru_cache(maxsize=512)
def _fenced_sql(
    columns: tuple[str, ...], events: int, notifications: int = 0, answers: int = 0
) -> str:
    """The fenced write as one statement, per shape (which columns, how many events).

    ``WITH fenced AS (UPDATE operation_timers ... WHERE version = :v RETURNING)``: the
    compare-and-set is on the hot row, whose version is the operation's (0033). The
    columns of the wide operations row, when the write changes any (a poll that waits
    changes none), are updated by one more CTE ``WHERE EXISTS (fenced)``, and the events
    are inserted ``WHERE EXISTS (fenced)``: nothing lands unless the version matched.
    Built as text once per shape, because composing and compiling it per poll cost more
    CPU than the rest of the write.
    """
    hot = ", ".join(f'"{c}" = %(set_{c})s' for c in columns if c in HOT_COLUMNS)
    cold = ", ".join(f'"{c}" = %(set_{c})s' for c in columns if c not in HOT_COLUMNS)
    fenced = (
        f"UPDATE operation_timers SET {hot} "
        "WHERE operation_id = %(fenced_id)s AND version = %(fenced_version)s"
    )
    cold_update = (
        f"UPDATE operations SET {cold} "
        "WHERE operation_id = %(fenced_id)s AND EXISTS (SELECT 1 FROM fenced)"
    )
    if not events:
        # Its row count says whether the version matched: the wide row's update, else the
        # hot row's.
        return f"WITH fenced AS ({fenced} RETURNING operation_id) {cold_update}" if cold else fenced
    names = ", ".join(f'"{c}"' for c in _EVENT_CASTS)
    rows = " UNION ALL ".join(
        "SELECT "
        + ", ".join(f"%(e{i}_{c})s::{cast}" for c, cast in _EVENT_CASTS.items())
        + " WHERE EXISTS (SELECT 1 FROM fenced)"
        for i in range(events)
    )
    ctes = [f"fenced AS ({fenced} RETURNING operation_id)"]
    if cold:
        ctes.append(f"cold AS ({cold_update})")
    if notifications:
        # A write that needs a human adds its outbox rows as one more CTE of the same
        # statement (Postgres runs every data-modifying CTE, read or not); a poll's
        # shape, without notifications, is unchanged.
        ctes.append(outbox.cte("noted", notifications, "WHERE EXISTS (SELECT 1 FROM fenced)"))
    if answers:
        # The /metrics counter of provider answers (answer_tallies.py; a trigger before 0028).
        ctes.append(answer_tallies.cte("tallied", answers, "WHERE EXISTS (SELECT 1 FROM fenced)"))
    return f"WITH {', '.join(ctes)} INSERT INTO operation_events ({names}) {rows} RETURNING seq"


def _bound(name: str, value: Any) -> Any:
    # As SQLAlchemy's JSONB type stored them: a JSON document, None as JSON null.
    if name in _JSON_COLUMNS:
        return Jsonb(value)
    # A state, reason or polling mode is typed as its enum up to here; the column holds
    # its text, so it is turned into its value once, in this one place.
    return value.value if isinstance(value, Enum) else value


def _fenced_params(
    row: Operation, values: RowChanges, chained: Sequence[ChainedEvent]
) -> dict[str, Any]:
    params = {f"set_{c}": _bound(c, v) for c, v in values.items()}
    params["fenced_id"] = row.operation_id
    params["fenced_version"] = row.version
    for i, event in enumerate(_event_rows(chained, row.created_at)):
        params.update({f"e{i}_{c}": _bound(c, event[c]) for c in _EVENT_CASTS})
    return params


def _notices(
    row: Operation, after: Operation, chained: Sequence[ChainedEvent]
) -> tuple[Notice, ...]:
    """The outbox rows this write adds: none unless it enters a state needing a human."""
    if after.state is row.state or after.state not in NOTIFY_STATES:
        return ()
    entered = [
        (OperationState(ev.draft.to_state), ev.seq, ev.draft.at)
        for ev in chained
        if ev.draft.to_state is not None and ev.draft.to_state != ev.draft.from_state
    ]
    return notices_for(row, after, entered)


# Compiled once and run by the driver: composing and compiling the statement per call
# cost more CPU than running it (psycopg already returns UUIDs, datetimes and JSON).
_LOAD_ONE: Final = str(
    _LOAD.where(OPERATIONS.c.operation_id == bindparam("operation_id")).compile(dialect=_PG)
)


_LOAD_NAMES: Final = tuple(_LOAD.selected_columns.keys())


def load(session: Session, operation_id: uuid.UUID) -> Operation | None:
    """The operation as now stored, in one round trip; None when there is none."""
    found = driver_execute(session, _LOAD_ONE, {"operation_id": operation_id}).fetchone()
    return (
        Operation.from_mapping(dict(zip(_LOAD_NAMES, found, strict=True)))
        if found is not None
        else None
    )


def check_path(src: OperationState, drafts: Sequence[EventDraft], dst: OperationState) -> None:
    """A state change walks allowed transitions, each recorded by one of ``drafts``.

    Raises TransitionRefusedError for a hop outside the table or a change no event
    explains (invariant 5: every transition is caused by a recorded decision).
    """
    at = src
    for draft in drafts:
        if draft.to_state is None or draft.to_state == draft.from_state:
            continue
        hop = OperationState(draft.to_state)
        check_transition(at, hop)
        at = hop
    if at is not dst:
        check_transition(src, dst)
        raise TransitionRefusedError(src.value, dst.value, "no event records this transition")


def fenced_update(
    session: Session,
    row: Operation,
    *,
    changes: RowChanges,
    drafts: Sequence[EventDraft],
    now: datetime,
) -> Operation:
    """Write `changes` only if the row still has the version we read; append events.

    A state change in `changes` must walk allowed transitions recorded by the events.
    The last event commits to the digest of the row as this write leaves it. A
    write without events cannot move that digest: it must not change a bound fact
    (``ROW_FACTS``), or verify reports the row as differing from its history.
    Raises StaleVersionError when another owner wrote first (zero rows matched):
    the caller stops, it does not overwrite. Returns the snapshot as now stored.
    """
    unknown = set(changes) - COLUMNS
    if unknown:
        raise ValueError(f"not operation columns: {', '.join(sorted(unknown))}")
    new_state = changes.get("state")
    if new_state is not None and new_state != row.state:
        check_path(row.state, drafts, new_state)
    digest = None
    if drafts:
        # The row after this write, from the snapshot and the changes: no read needed.
        changed: Mapping[str, object] = changes
        after = {
            name: changed[name] if name in changed else getattr(row, name) for name in ROW_FACTS
        }
        digest = row_digest(after)
    chained = chain(
        str(row.operation_id),
        drafts,
        last_seq=row.event_count,
        last_hash=row.last_event_hash,
        row_digest=digest,
    )
    values: RowChanges = {**changes, "version": row.version + 1, "updated_at": now}
    if new_state is not None and new_state != row.state:
        values["state_since"] = now
    if chained:
        values["event_count"] = chained[-1].seq
        values["last_event_hash"] = chained[-1].hash
        values["last_event_kind"] = chained[-1].draft.kind
    stored = row.with_changes(values)
    notices = _notices(row, stored, chained)
    # One statement: the events (and a stop's outbox rows) are inserted only if the fenced
    # update matched, so a poll's write is one round trip (in autocommit, its one commit).
    answered = answer_tallies.classes(chained)
    sql = _fenced_sql(tuple(values), len(chained), outbox.rows(notices), len(answered))
    bound = _fenced_params(row, values, chained)
    if notices:
        bound.update(outbox.params(notices))
    if answered:
        bound.update(answer_tallies.params(row.provider, answered))
    result = driver_execute(session, sql, bound)
    written = len(result.fetchall()) if chained else result.rowcount
    if written != max(1, len(chained)):
        raise StaleVersionError(str(row.operation_id), row.version)
    return stored


def write(session: Session, op: Operation, plan: Plan, *, now: datetime) -> Operation:
    """Persist one plan: the fenced row update, its events, and a collected result."""
    stored = fenced_update(session, op, changes=plan.changes, drafts=plan.events, now=now)
    if plan.result is not None:
        verdict = plan.result.verdict
        session.execute(
            insert(RESULTS).values(
                operation_id=op.operation_id,
                content=plan.result.content,
                location=plan.result.location,
                content_type=plan.result.content_type,
                sha256=verdict.sha256,
                size_bytes=verdict.size_bytes,
                record_count=verdict.record_count,
                failed_items=verdict.failed_items or None,
                collected_at=now,
            )
        )
    return stored


def find_by_key(session: Session, tenant: str, key: str) -> Operation | None:
    found = session.execute(
        _LOAD.where(OPERATIONS.c.tenant == tenant).where(OPERATIONS.c.idempotency_key == key)
    ).first()
    return Operation.from_mapping(dict(found._mapping)) if found is not None else None


def find_by_source_event(
    session: Session, tenant: str, provider: str, source_event_id: str
) -> Operation | None:
    found = session.execute(
        _LOAD.where(OPERATIONS.c.tenant == tenant)
        .where(OPERATIONS.c.provider == provider)
        .where(OPERATIONS.c.source_event_id == source_event_id)
    ).first()
    return Operation.from_mapping(dict(found._mapping)) if found is not None else None


def claim_due(
    session: Session, *, now: datetime, redispatch_after: timedelta, limit: int
) -> list[tuple[uuid.UUID, OperationState]]:
    """Mark up to `limit` due operations as dispatched and return (id, state).

    Due means: active, next_poll_at reached, and no wake-up message handed to
    the broker recently (a message that is overdue by `redispatch_after` is
    presumed lost). SKIP LOCKED lets two sweepers run at once without both
    taking the same row.
    """
    due = (
        select(TIMERS.c.operation_id, OPERATIONS.c.state, TIMERS.c.dispatched_at)
        .join(OPERATIONS, OPERATIONS.c.operation_id == TIMERS.c.operation_id)
        .where(OPERATIONS.c.state.in_([s.value for s in ACTIVE_STATES]))
        .where(TIMERS.c.next_poll_at <= now)
        .where(
            or_(
                TIMERS.c.dispatched_at.is_(None),
                TIMERS.c.dispatched_at <= now - redispatch_after,
            )
        )
        .order_by(TIMERS.c.next_poll_at)
        .limit(limit)
        # Both rows: a step's fenced write locks the operation, then its timer; skipping a
        # row either of them has locked means the sweeper never waits, so never deadlocks.
        .with_for_update(of=(TIMERS, OPERATIONS), skip_locked=True)
    )
    found = list(session.execute(due))
    rows = [(op_id, OperationState(state)) for op_id, state, _ in found]
    if rows:
        # dispatched_at is a delivery hint, not owned data: no version bump, no event.
        session.execute(
            update(TIMERS)
            .where(TIMERS.c.operation_id.in_([r[0] for r in rows]))
            .values(dispatched_at=now)
        )
        # A message presumed lost may have sent its reserved request before it was lost (the
        # guard against reuse lives in Redis, which may have lost it too), so the request
        # stays counted and the redispatched poll claims a fresh one.
        lost = [op_id for op_id, _, dispatched in found if dispatched is not None]
        if lost:
            session.execute(
                update(TIMERS).where(TIMERS.c.operation_id.in_(lost)).values(reserved_request=None)
            )
    return rows


def wakeup_owners(
    session: Session, operation_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, tuple[str, str, int]]:
    """Per operation: (provider, tenant, priority), what places its wake-up in the broker
    (tasks/provider/wakeup_backlog.py). One read by primary key for a sweep's whole batch."""
    if not operation_ids:
        return {}
    c = OPERATIONS.c
    rows = session.execute(
        select(c.operation_id, c.provider, c.tenant, c.priority).where(
            c.operation_id.in_(list(operation_ids))
        )
    )
    return {op_id: (provider, tenant, priority) for op_id, provider, tenant, priority in rows}


def own_partition(operation_id: uuid.UUID) -> Any:
    """The condition that keeps a read of one operation's events in its partition (0023):
    the partition key from its row, so Postgres prunes the other partitions as it runs."""
    created = select(OPERATIONS.c.created_at).where(OPERATIONS.c.operation_id == operation_id)
    return EVENTS.c.operation_created_at == created.scalar_subquery()


def _chained(row: EventRow) -> ChainedEvent:
    draft = EventDraft(
        kind=EventKind(row.kind),
        actor=row.actor,
        at=row.at,
        from_state=row.from_state,
        to_state=row.to_state,
        cause=row.cause,
        delay_source=row.delay_source,
        http_status=row.http_status,
        provider_request_id=row.provider_request_id,
        excerpt=row.excerpt,
    )
    return ChainedEvent(
        operation_id=str(row.operation_id),
        seq=row.seq,
        draft=draft,
        prev_hash=row.prev_hash,
        hash=row.hash,
        row_digest=row.row_digest,
    )


def entered_at(session: Session, operation_id: uuid.UUID, state: OperationState) -> datetime | None:
    """When the operation last entered ``state`` (its event's time); None if it never did."""
    return session.scalar(
        select(func.max(EventRow.at))
        .where(EventRow.operation_id == operation_id, own_partition(operation_id))
        .where(EventRow.to_state == state.value)
    )


def events_for(session: Session, operation_id: uuid.UUID) -> list[ChainedEvent]:
    rows = session.scalars(
        select(EventRow)
        .where(EventRow.operation_id == operation_id, own_partition(operation_id))
        .order_by(EventRow.seq)
    )
    return [_chained(r) for r in rows]


def stored_events(session: Session, operation_id: uuid.UUID) -> list[StoredEvent]:
    """The history as stored, every hashed field verbatim: what verify reads.

    Unlike ``events_for`` it needs no known kind, so an edited row is reported, not raised.
    """
    found = session.execute(
        select(EVENTS)
        .where(EVENTS.c.operation_id == operation_id, own_partition(operation_id))
        .order_by(EVENTS.c.seq)
    )
    return [
        StoredEvent(
            seq=ev.seq,
            fields=recorded_fields(dict(ev._mapping)),
            prev_hash=ev.prev_hash,
            hash=ev.hash,
            row_digest=ev.row_digest,
        )
        for ev in found
    ]


# A verify that keeps meeting new writes between its reads gives up and says so.
_VERIFY_READS = 5


def verify(
    session: Session, operation_id: uuid.UUID, *, archived: Sequence[StoredEvent] = ()
) -> list[ChainProblem]:
    """Prove an operation's history and what it vouches for; [] when all holds.

    ``archived``: the events the live table no longer holds (read from the operation's
    archived segment, tasks/history_archive.py), proven with the live ones after them.

    Every hash recomputed; the head matching the row; an empty history refused;
    the live row's bound facts against the digest its head event recorded; the
    stored result bytes against their sha256 and that against the chain.
    Needs only SELECT: the row's version is read again after the events and the
    result, and a write that landed in between makes it read everything again.
    Cannot detect a consistent rewrite of the chain with its head: see history.
    """
    for _ in range(_VERIFY_READS):
        found = session.execute(_LOAD.where(OPERATIONS.c.operation_id == operation_id)).first()
        if found is None:
            return [ChainProblem(seq=0, problem="no such operation")]
        row = found._mapping
        events = [*archived, *stored_events(session, operation_id)]
        result = session.execute(
            select(
                RESULTS.c.content, RESULTS.c.sha256, RESULTS.c.size_bytes, RESULTS.c.location
            ).where(RESULTS.c.operation_id == operation_id)
        ).first()
        version = session.scalar(
            select(TIMERS.c.version).where(TIMERS.c.operation_id == operation_id)
        )
        if version == row["version"]:
            break
    else:
        return [ChainProblem(seq=0, problem=f"written {_VERIFY_READS} times while verifying")]
    problems = verify_chain(
        str(operation_id),
        events,
        head_seq=row["event_count"],
        head_hash=row["last_event_hash"],
        row={name: row[name] for name in ROW_FACTS},
    )
    problems += check_result(
        events,
        content=result.content if result is not None else None,
        sha256=result.sha256 if result is not None else None,
        size_bytes=result.size_bytes if result is not None else None,
        location=result.location if result is not None else None,
    )
    return problems


def heads(session: Session) -> Iterator[tuple[uuid.UUID, int, str]]:
    """Every operation's (id, event count, head hash) as its row holds them, streamed by id."""
    rows = session.execute(
        select(TIMERS.c.operation_id, TIMERS.c.event_count, TIMERS.c.last_event_hash)
        .order_by(TIMERS.c.operation_id)
        .execution_options(yield_per=1000)
    )
    yield from ((op_id, count, head) for op_id, count, head in rows)


def check_head(
    session: Session,
    operation_id: uuid.UUID,
    seq: int,
    head_hash: str,
    *,
    archived: Sequence[StoredEvent] = (),
) -> list[ChainProblem]:
    """Verify an operation against a head exported earlier (``heads``).

    History only grows, so the live chain must still hold the exported event
    ``seq`` with ``head_hash``; events appended since are fine. Also runs ``verify``.
    """
    problems = verify(session, operation_id, archived=archived)
    if problems and problems[0].problem == "no such operation":
        return [ChainProblem(seq=0, problem="disappeared: no such operation")]
    kept = {ev.seq: ev.hash for ev in archived}
    if seq == 0:
        live: str | None = GENESIS_HASH
    elif seq in kept:
        live = kept[seq]
    else:
        live = session.scalar(
            select(EVENTS.c.hash)
            .where(EVENTS.c.operation_id == operation_id, own_partition(operation_id))
            .where(EVENTS.c.seq == seq)
        )
    if live is None:
        problems.append(
            ChainProblem(
                seq=seq, problem=f"head changed: the history no longer reaches event {seq}"
            )
        )
    elif live != head_hash:
        problems.append(
            ChainProblem(seq=seq, problem="head changed: this event's hash is not the exported one")
        )
    return problems


def intent_traceparent(session: Session, operation_id: uuid.UUID) -> str | None:
    """The submission span's traceparent the intent event recorded (tracing on), if any."""
    found = session.scalar(
        select(EventRow.excerpt["traceparent"].astext).where(
            EventRow.operation_id == operation_id, EventRow.seq == 1, own_partition(operation_id)
        )
    )
    return str(found) if found is not None else None
