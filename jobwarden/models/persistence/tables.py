"""Postgres tables: operations (one wide row per operation) beside its narrow hot row
(operation_timers: the timer, the counters and the version every write is fenced by),
and operation_events (append-only, hash-chained per operation)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    Text,
    UniqueConstraint,
    literal_column,
    select,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from jobwarden.models.states import (
    AUTOMATION_STOPPED,
    TERMINAL,
    WAITING_FOR_ROOM,
    OperationState,
)

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_name)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s",
    "pk": "pk_%(table_name)s",
}

STATE_VALUES = ", ".join(f"'{s.value}'" for s in OperationState)
# Rows a worker or the sweeper may still act on: the partial index covers only these.
# A queued row has no timer: only a hand-over (tasks/concurrency.py) moves it on.
ACTIVE_STATES = [
    s
    for s in OperationState
    if s not in TERMINAL and s not in AUTOMATION_STOPPED and s not in WAITING_FOR_ROOM
]
ACTIVE_STATE_VALUES = ", ".join(f"'{s.value}'" for s in ACTIVE_STATES)
TERMINAL_STATE_VALUES = ", ".join(f"'{s.value}'" for s in sorted(TERMINAL))


# The operation's columns that live in its hot row (operation_timers, tables.TimerRow):
# the timer (0021) and everything an ordinary poll changes (0033), read with the row.
HOT_COLUMNS: frozenset[str] = frozenset(
    {
        "next_poll_at",
        "dispatched_at",
        "version",
        "updated_at",
        "event_count",
        "last_event_hash",
        "last_event_kind",
        "status_requests_used",
        "max_status_requests",
        "reserved_request",
        "transport_failures_used",
        "consecutive_rate_limited",
        "poll_attempt",
        "poll_not_before",
        "last_remote_state",
        "last_http_status",
        "progress",
        "estimated_finish",
    }
)

# Percent of each operations page filled by inserts: a 1-2 KiB row leaves room for the
# new version a colder write (a state change, a stop) makes, so it lands on the same page
# (a HOT update). A poll that waits writes only the hot row (TimerRow, 0033).
OPERATIONS_FILLFACTOR = 70

# What the escalations list shows: stopped automation, and operations awaiting approval.
NEEDS_A_HUMAN = tuple(sorted(AUTOMATION_STOPPED | {OperationState.awaiting_approval}))
# The HTTP API's keyset lists (models/persistence/query_store.py, migration 0010): each
# filter walks an index in (created_at, operation_id) order within one tenant; partial
# where rows are few.
QUERY_INDEXES = (
    Index("ix_operations_tenant_created", "tenant", "created_at", "operation_id"),
    Index("ix_operations_tenant_state", "tenant", "state", "created_at", "operation_id"),
    Index("ix_operations_tenant_provider", "tenant", "provider", "created_at", "operation_id"),
    Index(
        "ix_operations_tenant_remote_job",
        "tenant",
        "remote_job_id",
        postgresql_where=text("remote_job_id IS NOT NULL"),
    ),
    Index(
        "ix_operations_tenant_reason",
        "tenant",
        "escalation_reason",
        "created_at",
        "operation_id",
        postgresql_where=text("escalation_reason IS NOT NULL"),
    ),
    Index(
        "ix_operations_needs_a_human",
        "tenant",
        "state_since",
        "operation_id",
        postgresql_where=text(f"state IN ({', '.join(repr(s.value) for s in NEEDS_A_HUMAN)})"),
    ),
)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


TZ = DateTime(timezone=True)


class OperationRow(Base):
    __tablename__ = "operations"
    __table_args__ = (
        CheckConstraint(f"state IN ({STATE_VALUES})", name="state_known"),
        CheckConstraint("priority BETWEEN -10 AND 10", name="priority_bounded"),
        # Invariant 1 at the database: past approval, every operation names who authorized it.
        CheckConstraint(
            "authorized_by IS NOT NULL "
            "OR state IN ('awaiting_approval', 'abandoned', 'queued', 'approval_expired')",
            name="authorized_before_create",
        ),
        CheckConstraint(
            "(concurrency_key IS NULL AND concurrency_limit IS NULL) "
            "OR (concurrency_key IS NOT NULL AND concurrency_limit >= 1)",
            name="concurrency_limit_with_key",
        ),
        CheckConstraint(
            "polling_mode IS NULL OR polling_mode IN ('status_monitor', 'location', 'resource')",
            name="polling_mode_known",
        ),
        UniqueConstraint("tenant", "idempotency_key", name="uq_operations_tenant_key"),
        UniqueConstraint("provider_token", name="uq_operations_provider_token"),
        Index(
            "uq_operations_source_event",
            "tenant",
            "provider",
            "source_event_id",
            unique=True,
            postgresql_where=text("source_event_id IS NOT NULL"),
        ),
        # A verified webhook names its remote job: find the operation without a scan (0009).
        Index(
            "ix_operations_provider_remote_job",
            "provider",
            "remote_job_id",
            postgresql_where=text("remote_job_id IS NOT NULL"),
        ),
        # A key's unfinished operations in submission order: the admission's count and the
        # hand-over's queue (0011); finished ones drop out, so the index stays small.
        Index(
            "ix_operations_concurrency_key",
            "tenant",
            "concurrency_key",
            "created_at",
            "operation_id",
            postgresql_where=text(
                f"concurrency_key IS NOT NULL AND state NOT IN ({TERMINAL_STATE_VALUES})"
            ),
        ),
        *QUERY_INDEXES,
        # The operations a pause parked: what its resume wakes (0030).
        Index("ix_operations_held_by", "held_by", postgresql_where=text("held_by IS NOT NULL")),
        # A parent's follow-ups (0029): the family view and the amount rule's sum under the
        # parent's lock; the column never changes, so a poll's update stays HOT.
        Index(
            "ix_operations_follows",
            "follows",
            "follow_up_kind",
            postgresql_where=text("follows IS NOT NULL"),
        ),
        CheckConstraint(
            "(follows IS NULL AND follow_up_kind IS NULL AND follow_up_amount IS NULL) "
            "OR (follows IS NOT NULL AND follow_up_kind IS NOT NULL)",
            name="follow_up_kind_with_parent",
        ),
        # Room on each page for the row's next version: a poll's update stays on its page
        # (HOT), so old versions are pruned without touching any index (0021).
        {"postgresql_with": {"fillfactor": OPERATIONS_FILLFACTOR}},
    )

    operation_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(200))
    provider: Mapped[str] = mapped_column(String(200))
    idempotency_key: Mapped[str] = mapped_column(String(255))
    source_event_id: Mapped[str | None] = mapped_column(String(255))
    provider_token: Mapped[str] = mapped_column(String(100))
    request_fingerprint: Mapped[str] = mapped_column(String(64))
    method: Mapped[str] = mapped_column(String(10))
    route: Mapped[str] = mapped_column(String(500))
    command: Mapped[dict[str, Any]] = mapped_column(JSONB)
    remote_job_id: Mapped[str | None] = mapped_column(String(500))
    status_url: Mapped[str | None] = mapped_column(Text)
    state: Mapped[str] = mapped_column(String(40))
    trace_id: Mapped[str] = mapped_column(String(32))
    requested_by: Mapped[str] = mapped_column(String(200))
    authorized_by: Mapped[str | None] = mapped_column(String(200))
    approval_expires_at: Mapped[datetime | None] = mapped_column(TZ)
    created_at: Mapped[datetime] = mapped_column(TZ)
    accepted_at: Mapped[datetime | None] = mapped_column(TZ)
    create_deadline: Mapped[datetime] = mapped_column(TZ)
    result_deadline: Mapped[datetime] = mapped_column(TZ)
    cancel_deadline: Mapped[datetime | None] = mapped_column(TZ)
    # How long a cancel may take to be confirmed, when the submission overrides the contract.
    cancel_window_seconds: Mapped[float | None] = mapped_column(Float)
    create_attempts: Mapped[int] = mapped_column(Integer, default=0)
    max_transport_failures: Mapped[int] = mapped_column(Integer)
    extensions_used: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # Steps that crashed on this operation (committed): bounds a step that keeps failing.
    step_failures: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # Result collection's own bounds: downloads sent, and when collection must be done.
    result_fetch_attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    collect_deadline: Mapped[datetime | None] = mapped_column(TZ)
    # When the first create was claimed: sent again as is on every retry (companion
    # headers such as Repeatability-First-Sent must not change between attempts).
    first_sent_at: Mapped[datetime | None] = mapped_column(TZ)
    # The business's own deadline (0012), separate from the provider job's: NULL for none.
    business_deadline: Mapped[datetime | None] = mapped_column(TZ)
    # What the operation must not share with more than concurrency_limit others (0011).
    concurrency_key: Mapped[str | None] = mapped_column(String(200))
    concurrency_limit: Mapped[int | None] = mapped_column(Integer)
    # conventions.Monitor under an Azure convention (0013); NULL otherwise.
    polling_mode: Mapped[str | None] = mapped_column(String(20))
    # A person's resubmission (0016): the operation this one replaces, and its replacement.
    resubmit_of: Mapped[uuid.UUID | None] = mapped_column(
        UUID(as_uuid=True), ForeignKey("operations.operation_id")
    )
    resubmitted_as: Mapped[uuid.UUID | None] = mapped_column(
        UUID(as_uuid=True), ForeignKey("operations.operation_id")
    )
    # A job that ended leaving resources (0019): how it ended, while [cleanup] runs, and
    # the deadline of the cleanup's confirmation.
    ended_as: Mapped[str | None] = mapped_column(String(30))
    cleanup_deadline: Mapped[datetime | None] = mapped_column(TZ)
    # The digest of the create request the approval bound (0025): sent only while equal.
    approved_request_digest: Mapped[str | None] = mapped_column(String(64))
    # Its turn among its tenant's requests waiting for the rate limit, -10..10 (0031).
    priority: Mapped[int] = mapped_column(SmallInteger, server_default="0")
    # A follow-up operation (0029): its parent, as what it follows it, and the amount it
    # requests under the kind's amount rule (whole minor units). Fixed at intake.
    follows: Mapped[uuid.UUID | None] = mapped_column(
        UUID(as_uuid=True), ForeignKey("operations.operation_id")
    )
    follow_up_kind: Mapped[str | None] = mapped_column(String(40))
    follow_up_amount: Mapped[int | None] = mapped_column(BigInteger)
    escalation_reason: Mapped[str | None] = mapped_column(String(60))
    escalation_detail: Mapped[str | None] = mapped_column(Text)
    cancel_requested_by: Mapped[str | None] = mapped_column(String(200))
    cancel_reason: Mapped[str | None] = mapped_column(Text)
    result_reference: Mapped[str | None] = mapped_column(Text)
    validation_summary: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    # When the row entered its state (0021): the escalations list's order. Unlike
    # updated_at it does not move on a poll, so indexing it keeps polls HOT updates.
    state_since: Mapped[datetime | None] = mapped_column(TZ)
    # The contract text the operation was created under (0026, invariant 16), kept in
    # provider_contracts: it is polled, cancelled and collected under that text until a
    # person moves it. NULL: created before contracts were pinned (the current one holds).
    contract_digest: Mapped[str | None] = mapped_column(
        String(64), ForeignKey("provider_contracts.digest")
    )
    # The pause that parked it (0030, models/humans/pauses.py): a resume wakes exactly these.
    held_by: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    # Who allowed a cancel requested during a pause to be sent before the resume (0030).
    cancel_during_pause_by: Mapped[str | None] = mapped_column(String(200))


class ProviderContractRow(Base):
    """A provider contract's text by its sha256 (0026): written once, at the first intake
    under it (or a move to it), and never changed; what pinned operations are read under
    (models/contracts/pins.py)."""

    __tablename__ = "provider_contracts"

    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    provider: Mapped[str] = mapped_column(String(200))
    text: Mapped[str] = mapped_column(Text)
    first_seen: Mapped[datetime] = mapped_column(TZ)


class EventRow(Base):
    """One event of an operation's history (0023: partitioned by month of the operation's
    creation, so a whole history lives in one partition; see models/persistence/
    history_store.py for archiving a month and dropping its partition)."""

    __tablename__ = "operation_events"
    __table_args__ = (
        # BRIN: the metrics' recent window reads event_id ranges, and an append writes a
        # BRIN index only to widen a summarised range (a btree cost every poll an entry).
        Index("ix_operation_events_event_id", "event_id", postgresql_using="brin"),
        {"postgresql_partition_by": "RANGE (operation_created_at)"},
    )

    event_id: Mapped[int] = mapped_column(
        BigInteger, server_default=text("nextval('operation_events_event_id_seq'::regclass)")
    )
    # The primary key is the one index an event insert writes: (operation, seq) is unique
    # because an operation has one created_at, which every partition's key must include.
    # References the hot row (0034), which the poll's statement has just updated: a check
    # against the wide row locked a row the poll does not write, on every poll.
    operation_id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), ForeignKey("operation_timers.operation_id"), primary_key=True
    )
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    # The operation's created_at: the partition key, the same on each of its events.
    operation_created_at: Mapped[datetime] = mapped_column(TZ, primary_key=True)
    actor: Mapped[str] = mapped_column(String(200))
    at: Mapped[datetime] = mapped_column(TZ)
    from_state: Mapped[str | None] = mapped_column(String(40))
    to_state: Mapped[str | None] = mapped_column(String(40))
    kind: Mapped[str] = mapped_column(String(40))
    cause: Mapped[str | None] = mapped_column(Text)
    delay_source: Mapped[str | None] = mapped_column(String(40))
    http_status: Mapped[int | None] = mapped_column(Integer)
    provider_request_id: Mapped[str | None] = mapped_column(String(200))
    excerpt: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    # Digest of the operations row this event produced (bound into the chain by verify).
    row_digest: Mapped[str | None] = mapped_column(String(64))
    prev_hash: Mapped[str] = mapped_column(String(64))
    hash: Mapped[str] = mapped_column(String(64))


class TimerRow(Base):
    """The operation's hot row: its timer and every column an ordinary poll changes (0033).

    0021 moved the timer here so that a poll changed no indexed column of the wide
    operations row; a poll still rewrote that whole row (1.5 KB of tuple). Now what a
    poll changes lives here: the version, the chain head, the counters and the last
    reading. A poll writes this narrow row and its events and leaves the operations row
    alone; a write that changes a colder column (a state, a stop's reason, a remote job
    id) updates that row too, in the same statement.

    ``version`` here is THE version: every writer compares-and-sets it (models/
    persistence/store.py), so the fence is one row whichever rows a write touches.
    The budget's checks live here with the counters they bound (a CHECK sees one row),
    which is why ``max_status_requests``, changed only by an extension, moved too.
    The due claim reads it (FOR UPDATE SKIP LOCKED) joined to the operation's state.
    Every operation has its hot row from the start (intake inserts both).
    """

    __tablename__ = "operation_timers"
    __table_args__ = (
        # The sweeper's due claim: only rows with a timer are indexed (an ended or stopped
        # operation has none), so the index holds the active operations and no more.
        Index(
            "ix_operation_timers_due",
            "next_poll_at",
            postgresql_where=text("next_poll_at IS NOT NULL"),
        ),
        CheckConstraint("version >= 1", name="version_positive"),
        CheckConstraint("status_requests_used >= 0", name="status_requests_used_nonneg"),
        CheckConstraint(
            "status_requests_used <= max_status_requests", name="status_requests_within_budget"
        ),
        CheckConstraint(
            "reserved_request IS NULL OR reserved_request BETWEEN 1 AND status_requests_used",
            name="reserved_request_counted",
        ),
    )

    operation_id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True),
        ForeignKey("operations.operation_id", ondelete="CASCADE"),
        primary_key=True,
    )
    next_poll_at: Mapped[datetime | None] = mapped_column(TZ)
    # When a wake-up message for next_poll_at was last handed to the broker; the sweeper
    # re-sends only when that message is overdue, so a lost message is recovered.
    dispatched_at: Mapped[datetime | None] = mapped_column(TZ)
    version: Mapped[int] = mapped_column(BigInteger, default=1)
    updated_at: Mapped[datetime] = mapped_column(TZ)
    # The chain head, and the newest event's kind (0028: a load reads it here, not from
    # the partitioned history).
    event_count: Mapped[int] = mapped_column(Integer, default=0)
    last_event_hash: Mapped[str] = mapped_column(String(64))
    last_event_kind: Mapped[str | None] = mapped_column(String(40))
    status_requests_used: Mapped[int] = mapped_column(Integer, default=0)
    max_status_requests: Mapped[int] = mapped_column(Integer)
    # The status request the last decision reserved (already in status_requests_used): the
    # next poll sends it without a claim commit of its own. NULL when none is reserved.
    reserved_request: Mapped[int | None] = mapped_column(Integer)
    transport_failures_used: Mapped[int] = mapped_column(Integer, default=0)
    consecutive_rate_limited: Mapped[int] = mapped_column(Integer, default=0)
    poll_attempt: Mapped[int] = mapped_column(Integer, default=0)
    # The provider asked not to be polled before this (Retry-After or a poll hint).
    poll_not_before: Mapped[datetime | None] = mapped_column(TZ)
    last_remote_state: Mapped[str | None] = mapped_column(String(200))
    last_http_status: Mapped[int | None] = mapped_column(Integer)
    progress: Mapped[float | None] = mapped_column(Float)
    # The finish the last status reading implied (0027).
    estimated_finish: Mapped[datetime | None] = mapped_column(TZ)


class ResultRow(Base):
    """A collected result's integrity data, written once, and where its bytes are: in the
    result store (``location``), or inline when small (``content``, 0018)."""

    __tablename__ = "operation_results"
    __table_args__ = (
        CheckConstraint("content IS NOT NULL OR location IS NOT NULL", name="bytes_somewhere"),
    )

    operation_id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), ForeignKey("operations.operation_id"), primary_key=True
    )
    content: Mapped[bytes | None] = mapped_column(LargeBinary)
    # The object's URL in the result store (file://… or s3://…); NULL when inline.
    location: Mapped[str | None] = mapped_column(Text)
    content_type: Mapped[str | None] = mapped_column(String(200))
    sha256: Mapped[str] = mapped_column(String(64))
    size_bytes: Mapped[int] = mapped_column(BigInteger)  # 0018: results past 2 GiB
    record_count: Mapped[int | None] = mapped_column(BigInteger)
    failed_items: Mapped[list[Any] | None] = mapped_column(JSONB)
    collected_at: Mapped[datetime] = mapped_column(TZ)


# An operation as a snapshot reads it: the row and its hot row (operation_timers, 0021
# and 0033), which every operation has.
_OPERATIONS = OperationRow.__table__
_TIMERS = TimerRow.__table__
HOT_SELECTED: Any = tuple(_TIMERS.c[name] for name in sorted(HOT_COLUMNS))
HOT_JOIN: Any = _OPERATIONS.join(_TIMERS, _TIMERS.c.operation_id == _OPERATIONS.c.operation_id)
# The active pause covering the operation (models/humans/holds.py) rides on the same
# SELECT: a probe of the partial index of active pauses, which is empty but in an incident.
# The ordered lookup runs only once a plain EXISTS finds an active pause of the provider:
# its sort was a fifth of the load's Postgres time on every poll (issue 37, measured).
HOLD: Any = literal_column(
    "CASE WHEN EXISTS (SELECT 1 FROM pauses a WHERE a.resumed_at IS NULL "
    "AND a.provider = operations.provider) THEN "
    "(SELECT jsonb_build_object('pause_id', p.pause_id, 'author', p.author, "
    "'reason', p.reason, 'started_at', p.started_at, "
    # A breaker's half-open probe (0032): read only when a pause is found, so it costs
    # nothing outside an incident.
    "'probe', (SELECT b.probe_operation_id FROM breaker_incidents b "
    "WHERE b.pause_id = p.pause_id AND b.state = 'probing')) FROM pauses p "
    "WHERE p.resumed_at IS NULL AND p.provider = operations.provider "
    "AND (p.tenant IS NULL OR p.tenant = operations.tenant) "
    "AND (p.operation_id IS NULL OR p.operation_id = operations.operation_id) "
    "ORDER BY p.started_at, p.pause_id LIMIT 1) END"
).label("hold")
OPERATION_WITH_TIMER = select(_OPERATIONS, *HOT_SELECTED).select_from(HOT_JOIN)


class ArchivedHistoryRow(Base):
    """Where an operation's archived history is (0023): a JSON Lines segment in the result
    store, its sha256 and size, and the chain head it reaches, written before the
    partition that held the events is dropped (models/persistence/history_store.py)."""

    __tablename__ = "archived_histories"
    __table_args__ = (Index("ix_archived_histories_partition", "partition"),)

    operation_id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), ForeignKey("operations.operation_id"), primary_key=True
    )
    partition: Mapped[str] = mapped_column(String(63))  # the partition the events were in
    location: Mapped[str] = mapped_column(Text)  # the segment's URL in the result store
    sha256: Mapped[str] = mapped_column(String(64))
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    event_count: Mapped[int] = mapped_column(Integer)
    head_hash: Mapped[str] = mapped_column(String(64))
    archived_at: Mapped[datetime] = mapped_column(TZ)
