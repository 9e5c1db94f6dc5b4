"""Filler rows for scripts/bench_scale.py: operations, their timers and their events, loaded
with COPY into a freshly migrated jobwarden database.

The COPY column lists come from the SQLAlchemy tables (jobwarden/models/persistence/
tables.py), so the load follows the schema: a new nullable column is loaded as NULL, and a
new NOT NULL column stops the load naming the column until it gets one line in
``OPERATION_FILLERS`` or ``EVENT_FILLERS`` (for example ``operation_created_at`` on
operation_events: ``lambda op, seq: op.created``).

The rows look like real ones (states, counters, deadlines, event kinds in a plausible
order, 64-hex hashes) but their hash chains do not verify: ``prev_hash``, ``hash``,
``row_digest`` and ``last_event_hash`` come from a pool of random digests, because
computing fifty million real chain links would measure Python, not Postgres.
``jobwarden verify`` on a preloaded database reports every filler operation broken.

Loading the way pg_restore does: secondary indexes and unique constraints are dropped
and rebuilt after the COPY (kept: primary keys and foreign keys), triggers and foreign
key checks are off for the session (``session_replication_role = replica``; the rows
are consistent by construction), and each table is truncated and copied with FREEZE in
one transaction, so the pages arrive frozen and all-visible as a vacuumed production
table's are. Then VACUUM (ANALYZE) and a CHECKPOINT, so no load work spills into the
measurement.
"""

from __future__ import annotations

import random
import secrets
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import psycopg
from sqlalchemy import Table

from jobwarden.models.persistence.tables import HOT_COLUMNS, EventRow, OperationRow, TimerRow
from jobwarden.models.states import OperationState as S

FILLER_TENANT = "filler"
# How ended operations ended, in proportion: most succeed.
ENDINGS = (S.succeeded,) * 16 + (S.failed, S.failed, S.cancelled, S.expired)
DIGESTS = [secrets.token_hex(32) for _ in range(4096)]
NULL = "\\N"


@dataclass(frozen=True, slots=True)
class FillerOp:
    """One filler operation as the fillers see it."""

    n: int
    id: uuid.UUID
    state: S
    created: datetime
    events: int  # how many event rows it has (its event_count)
    active: bool

    def at(self, seq: int) -> datetime:
        """When its event ``seq`` happened: a few seconds after its creation, then every
        few minutes (a poll)."""
        return self.created + timedelta(seconds=2 * min(seq, 3) + 240 * max(seq - 3, 0))

    def digest(self, seq: int) -> str:
        return DIGESTS[(self.n * 31 + seq) % len(DIGESTS)]

    @property
    def polls(self) -> int:
        return max(self.events - 4, 0)


def _kind(op: FillerOp, seq: int) -> str:
    if seq == 1:
        return "intent_recorded"
    if seq == 2:
        return "create_sent"
    if seq == 3:
        return "create_accepted"
    if seq == op.events and not op.active:
        return "result_accepted" if op.state is S.succeeded else "decision"
    return "polled"


def _states(op: FillerOp, seq: int) -> tuple[str | None, str | None]:
    if seq == 1:
        return None, S.create_pending.value
    if seq == 3:
        return S.create_pending.value, S.accepted.value
    if seq == op.events and not op.active:
        return S.observing.value, op.state.value
    return S.observing.value, S.observing.value


def _null(op: FillerOp) -> str:
    return NULL


def _null_event(op: FillerOp, seq: int) -> str:
    return NULL


def _json(value: str) -> str:
    return value  # the fillers' JSON holds no tab, newline or backslash: COPY text as is


# Per operation: its text value in COPY's text format. NULL for nullable columns not named.
OPERATION_FILLERS: dict[str, Callable[[FillerOp], str]] = {
    "operation_id": lambda op: str(op.id),
    "tenant": lambda op: FILLER_TENANT,
    "provider": lambda op: "sandbox",
    "idempotency_key": lambda op: f"filler-{op.n}",
    "provider_token": lambda op: op.id.hex,
    "request_fingerprint": lambda op: op.digest(0),
    "method": lambda op: "POST",
    "route": lambda op: "/v1/jobs",
    "command": lambda op: _json(f'{{"kind": "export", "n": {op.n}}}'),
    "remote_job_id": lambda op: f"filler-job-{op.n}",
    "status_url": lambda op: f"http://127.0.0.1:9/v1/jobs/filler-job-{op.n}",
    "state": lambda op: op.state.value,
    "priority": lambda op: "0",
    "version": lambda op: str(op.events),
    "trace_id": lambda op: op.id.hex,
    "requested_by": lambda op: "filler",
    "authorized_by": lambda op: "filler",
    "created_at": lambda op: op.created.isoformat(),
    "accepted_at": lambda op: op.at(3).isoformat(),
    "create_deadline": lambda op: (op.created + timedelta(minutes=15)).isoformat(),
    "result_deadline": lambda op: (op.created + timedelta(days=60)).isoformat(),
    "create_attempts": lambda op: "1",
    "status_requests_used": lambda op: str(op.polls),
    "max_status_requests": lambda op: str(max(10000, op.polls)),
    "transport_failures_used": lambda op: "0",
    "max_transport_failures": lambda op: "20",
    "consecutive_rate_limited": lambda op: "0",
    "poll_attempt": lambda op: str(op.polls),
    "extensions_used": lambda op: "0",
    "step_failures": lambda op: "0",
    "result_fetch_attempts": lambda op: "1" if op.state is S.succeeded else "0",
    "first_sent_at": lambda op: op.at(2).isoformat(),
    "last_remote_state": lambda op: "running" if op.active else op.state.value,
    "last_http_status": lambda op: "200",
    "event_count": lambda op: str(op.events),
    "last_event_hash": lambda op: op.digest(op.events),
    "updated_at": lambda op: op.at(op.events).isoformat(),
    "state_since": lambda op: op.at(op.events if not op.active else 3).isoformat(),
}

# The active ones wait far in the future, so no sweeper or worker ever claims them.
PARKED_UNTIL = datetime.now(UTC) + timedelta(days=365)
TIMER_FILLERS: dict[str, Callable[[FillerOp], str]] = {
    "operation_id": lambda op: str(op.id),
    "next_poll_at": lambda op: (
        (PARKED_UNTIL + timedelta(seconds=op.n)).isoformat() if op.active else NULL
    ),
    # What a poll changes lives in the hot row (0033): filled as the operation row was.
    **{name: fill for name, fill in OPERATION_FILLERS.items() if name in HOT_COLUMNS},
}

# Per event: (operation, seq) to its text value in COPY's text format.
EVENT_FILLERS: dict[str, Callable[[FillerOp, int], str]] = {
    "operation_id": lambda op, seq: str(op.id),
    "seq": lambda op, seq: str(seq),
    # The partition key (migration 0023): the operation's created_at on each of its events.
    "operation_created_at": lambda op, seq: op.created.isoformat(),
    "actor": lambda op, seq: "worker",
    "at": lambda op, seq: op.at(seq).isoformat(),
    "from_state": lambda op, seq: _states(op, seq)[0] or NULL,
    "to_state": lambda op, seq: _states(op, seq)[1] or NULL,
    "kind": _kind,
    "delay_source": lambda op, seq: "local_backoff" if _kind(op, seq) == "polled" else NULL,
    "http_status": lambda op, seq: "200" if seq > 1 else NULL,
    "provider_request_id": lambda op, seq: f"req-{op.n}-{seq}" if seq > 1 else NULL,
    "excerpt": lambda op, seq: _json('{"status": "running", "progress": 40}') if seq > 3 else NULL,
    "row_digest": lambda op, seq: op.digest(-seq),
    "prev_hash": lambda op, seq: op.digest(seq - 1),
    "hash": lambda op, seq: op.digest(seq),
}


def _columns(table: Table, fillers: dict[str, Any], skip: frozenset[str]) -> list[str]:
    """The table's columns to COPY; a NOT NULL column without a filler stops the load."""
    missing = [
        c.name
        for c in table.columns
        if c.name not in fillers and c.name not in skip and not c.nullable
    ]
    if missing:
        raise SystemExit(
            f"{table.name}: NOT NULL column(s) {missing} have no filler in"
            " scripts/_scale_preload.py: add one line each"
        )
    return [c.name for c in table.columns if c.name not in skip]


@dataclass(frozen=True, slots=True)
class Shape:
    operations: int
    active: int
    events: int


def filler_ops(shape: Shape, seed: int, now: datetime) -> Iterator[FillerOp]:
    """The operations, oldest first: the active ones are the newest tenth (or ``active``).

    Each has events // operations events (at least one, its intent),
    the first events % operations one more.
    """
    rng = random.Random(seed)
    base, extra = divmod(shape.events, shape.operations)
    start = now - timedelta(days=30)
    step = timedelta(days=30) / shape.operations
    for n in range(shape.operations):
        active = n >= shape.operations - shape.active
        yield FillerOp(
            n=n,
            id=uuid.UUID(int=rng.getrandbits(128), version=4),
            state=S.observing if active else ENDINGS[n % len(ENDINGS)],
            created=start + step * n,
            events=max(1, base + (1 if n < extra else 0)),
            active=active,
        )


def _secondary(conn: psycopg.Connection[Any], table: str) -> list[tuple[str, str]]:
    """(drop, create) statements of ``table``'s unique constraints and non-key indexes."""
    out = []
    for name, definition in conn.execute(
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint"
        " WHERE conrelid = %s::regclass AND contype IN ('u', 'x')",
        (table,),
    ).fetchall():
        out.append(
            (
                f'ALTER TABLE {table} DROP CONSTRAINT "{name}"',
                f'ALTER TABLE {table} ADD CONSTRAINT "{name}" {definition}',
            )
        )
    for name, definition in conn.execute(
        "SELECT indexrelid::regclass::text, pg_get_indexdef(indexrelid) FROM pg_index"
        " WHERE indrelid = %s::regclass AND NOT indisprimary AND indexrelid NOT IN"
        " (SELECT conindid FROM pg_constraint WHERE conrelid = %s::regclass)",
        (table, table),
    ).fetchall():
        # A partitioned table's index reads "ON ONLY t"; built on the parent it covers all.
        out.append((f"DROP INDEX {name}", definition.replace(" ON ONLY ", " ON ")))
    return out


@dataclass(frozen=True, slots=True)
class Loaded:
    seconds_copy: float
    seconds_indexes: float
    seconds_vacuum: float
    database_bytes: int
    rows: dict[str, int]

    @property
    def seconds(self) -> float:
        return self.seconds_copy + self.seconds_indexes + self.seconds_vacuum


def _copy(
    conn: psycopg.Connection[Any],
    table: str,
    columns: list[str],
    lines: Iterator[str],
    freeze: bool,
) -> int:
    names = ", ".join(f'"{c}"' for c in columns)
    options = " WITH (FREEZE)" if freeze else ""
    rows = 0
    chunk: list[str] = []
    with conn.cursor().copy(f"COPY {table} ({names}) FROM STDIN{options}") as copy:
        for line in lines:
            chunk.append(line)
            if len(chunk) >= 5000:
                copy.write("".join(chunk))
                rows += len(chunk)
                chunk.clear()
        copy.write("".join(chunk))
        rows += len(chunk)
    return rows


def copied_columns() -> tuple[list[str], list[str], list[str]]:
    """The operations, timers and events columns the preload copies; SystemExit naming
    any NOT NULL column without a filler (tests/unit/test_scale_preload.py runs it, so a
    new column fails the suite rather than a long benchmark's first minute)."""
    operations = OperationRow.__table__
    timers = TimerRow.__table__
    events = EventRow.__table__
    assert isinstance(operations, Table)
    assert isinstance(timers, Table)
    assert isinstance(events, Table)
    return (
        _columns(operations, OPERATION_FILLERS, frozenset()),
        _columns(timers, TIMER_FILLERS, frozenset()),
        # The event id comes from its sequence, as it does for a real event.
        _columns(events, EVENT_FILLERS, frozenset({"event_id"})),
    )


def preload(
    dsn: str, shape: Shape, *, seed: int = 23, log: Callable[[str], None] = print
) -> Loaded:
    """Load ``shape`` filler rows into the migrated, empty jobwarden database at ``dsn``."""
    rows_of = (OperationRow, TimerRow, EventRow)
    operations, timers, events = (cast(Table, row.__table__) for row in rows_of)
    op_cols, timer_cols, event_cols = copied_columns()
    op_fill = [OPERATION_FILLERS.get(c, _null) for c in op_cols]
    timer_fill = [TIMER_FILLERS.get(c, _null) for c in timer_cols]
    event_fill = [EVENT_FILLERS.get(c, _null_event) for c in event_cols]
    tables = [operations.name, timers.name, events.name]
    now = datetime.now(UTC).replace(microsecond=0)
    started = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET maintenance_work_mem = '1GB'")
        conn.execute("SET session_replication_role = replica")
        kinds: dict[str, str] = dict(
            conn.execute(
                "SELECT relname, relkind FROM pg_class WHERE relname = ANY(%s)", (tables,)
            ).fetchall()
        )
        if kinds[events.name] == "p":
            # The fillers were created over the last 30 days: each of those months gets its
            # partition, as the migration and beat's maintenance make them for real ones.
            conn.execute(
                "SELECT jobwarden_add_history_partition(m) FROM generate_series("
                "date_trunc('month', %s::timestamptz - interval '31 days'), %s, "
                "interval '1 month') m",
                (now, now),
            )
        rebuild = [pair for t in tables for pair in _secondary(conn, t)]
        for drop, _ in rebuild:
            conn.execute(drop)
        rows: dict[str, int] = {}
        with conn.transaction():
            # FREEZE needs the table emptied in this transaction; a partitioned one cannot.
            conn.execute(f"TRUNCATE {', '.join(tables)} CASCADE")
            rows[operations.name] = _copy(
                conn,
                operations.name,
                op_cols,
                ("\t".join(f(op) for f in op_fill) + "\n" for op in filler_ops(shape, seed, now)),
                kinds[operations.name] == "r",
            )
            log(f"  {operations.name}: {rows[operations.name]:,} rows")
            rows[timers.name] = _copy(
                conn,
                timers.name,
                timer_cols,
                (
                    "\t".join(f(op) for f in timer_fill) + "\n"
                    for op in filler_ops(shape, seed, now)
                ),
                kinds[timers.name] == "r",
            )
            rows[events.name] = _copy(
                conn,
                events.name,
                event_cols,
                (
                    "\t".join(f(op, seq) for f in event_fill) + "\n"
                    for op in filler_ops(shape, seed, now)
                    for seq in range(1, op.events + 1)
                ),
                kinds[events.name] == "r",
            )
            log(f"  {events.name}: {rows[events.name]:,} rows")
        copied = time.perf_counter()
        log(f"  COPY took {copied - started:.0f} s; rebuilding {len(rebuild)} indexes")
        for _, create in rebuild:
            conn.execute(create)
        indexed = time.perf_counter()
        conn.execute("SET session_replication_role = origin")
        conn.execute(f"VACUUM (ANALYZE) {', '.join(tables)}")
        conn.execute("CHECKPOINT")  # the load's dirty pages are written now, not mid-run
        done = time.perf_counter()
        size = int(conn.execute("SELECT pg_database_size(current_database())").fetchone()[0])  # type: ignore[index]
    return Loaded(copied - started, indexed - copied, done - indexed, size, rows)
