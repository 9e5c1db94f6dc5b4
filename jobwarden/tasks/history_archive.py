"""Archiving old history (the shell): months of ended operations written to the result
store as verifiable segments, their partitions then detached and dropped whole.

One run (``jobwarden archive``, or the beat task): create the coming months' partitions;
then, for each month partition older than the retention, refuse it (naming an operation)
if an operation in it has not ended before the cutoff, else write each operation's
history as a segment (models/history/archive.py), record it in ``archived_histories``
(one commit per operation), and finally detach and drop the partition. Rows are never
deleted: a partition leaves whole, after every history in it is in the store.

Crash-safe and idempotent: a segment's key carries its event count, so re-writing it
writes the same bytes; an operation whose recorded segment already covers its history
is skipped once that segment is read back intact (a missing or altered one is written
again); the partition stays attached until the last step, which re-checks, under
the detach's lock, that every history in it is covered. A run killed anywhere leaves
the partition attached, and the next run completes it.

Reading an archived history back (``jobwarden verify``): ``archived_events`` returns the
segment's events when the live table no longer starts the chain, after checking the
segment's size and sha256 against the row that recorded it.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from sqlalchemy.exc import DBAPIError

from jobwarden.config.celery_app import app
from jobwarden.models.errors import JobwardenError, ResultMissingError
from jobwarden.models.history.archive import (
    SegmentError,
    archive_refusal,
    decode_segment,
    due_for_archive,
    encode_segment,
    retention_cutoff,
    segment_key,
)
from jobwarden.models.history.chain import StoredEvent
from jobwarden.models.persistence import history_store, store
from jobwarden.models.persistence.db import transaction
from jobwarden.models.persistence.history_store import ArchivedHistory
from jobwarden.models.results.objects import StoredObject, mismatch
from jobwarden.observability.logs import get_logger
from jobwarden.tasks.results.store import ResultStore
from jobwarden.tasks.runtime import Runtime, current, utcnow

log = get_logger("jobwarden.history")

# The detach waits this long for its lock, then gives up for this run (see detach_and_drop).
LOCK_TIMEOUT: Final = "2s"
# A fault point: (name, scope) -> None; a no-op unless tests arm it (tasks/faults.py).
Fault = Callable[[str, str], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionOutcome:
    partition: str
    outcome: str  # archived (and dropped), refused, failed
    detail: str
    operations: int = 0
    rows: int = 0


def no_fault(name: str, scope: str) -> None:
    return None


def archive(
    url: str,
    results: ResultStore,
    *,
    now: datetime,
    retention_days: float,
    fault: Fault = no_fault,
) -> list[PartitionOutcome]:
    """One archiving run; an outcome per month partition older than the retention.

    A partition that cannot go now (an operation not ended, a lock not granted, the
    store down) is reported and left attached; the others still go.
    """
    with transaction(url) as session:
        for problem in history_store.ensure_partitions(session, now, lock_timeout=LOCK_TIMEOUT):
            log.warning("history_partition_not_created", problem=problem)
    cutoff = retention_cutoff(now, retention_days)
    with transaction(url) as session:
        due = [p for p in history_store.partitions(session) if due_for_archive(p, cutoff)]
    run = _Run(url=url, results=results, now=now, cutoff=cutoff, fault=fault)
    outcomes: list[PartitionOutcome] = []
    for partition in due:
        try:
            outcome = _archive_partition(run, partition.name)
        except (JobwardenError, DBAPIError) as exc:
            detail = str(exc.orig if isinstance(exc, DBAPIError) else exc).splitlines()[0]
            outcome = PartitionOutcome(partition=partition.name, outcome="failed", detail=detail)
        log.info(
            "history_partition_" + outcome.outcome,
            partition=outcome.partition,
            detail=outcome.detail,
            operations=outcome.operations,
            rows=outcome.rows,
        )
        outcomes.append(outcome)
    return outcomes


@dataclass(frozen=True, slots=True, kw_only=True)
class _Run:
    url: str
    results: ResultStore
    now: datetime
    cutoff: datetime
    fault: Fault


def _archive_partition(run: _Run, partition: str) -> PartitionOutcome:
    with transaction(run.url) as session:
        held = history_store.held_operations(session, partition)
    refusal = archive_refusal(partition, held, run.cutoff)
    if refusal is not None:
        return PartitionOutcome(partition=partition, outcome="refused", detail=refusal)
    written = 0
    for op in held:
        with transaction(run.url) as session:
            done = history_store.archived(session, op.operation_id)
        if done is not None and done.event_count == op.event_count and _still_there(run, done):
            continue  # an earlier run archived it whole, and its segment is intact
        with transaction(run.url) as session:
            events = store.stored_events(session, op.operation_id)
        data = encode_segment(str(op.operation_id), events)
        key = segment_key(partition, op.operation_id, len(events))
        stored = run.results.put_stream(key, iter((data,)), max_bytes=len(data))
        with transaction(run.url) as session:
            history_store.record_archived(
                session,
                ArchivedHistory(
                    operation_id=op.operation_id,
                    partition=partition,
                    location=stored.location,
                    sha256=stored.sha256,
                    size_bytes=stored.size,
                    event_count=events[-1].seq if events else 0,
                    head_hash=events[-1].hash if events else "",
                    archived_at=run.now,
                ),
            )
        written += 1
        run.fault("archive_after_segment", partition)
    run.fault("archive_before_drop", partition)
    with transaction(run.url) as session:
        rows = history_store.detach_and_drop(session, partition, lock_timeout=LOCK_TIMEOUT)
    return PartitionOutcome(
        partition=partition,
        outcome="archived",
        detail=f"{len(held)} histories in the result store ({written} written now); "
        f"partition detached and dropped",
        operations=len(held),
        rows=rows,
    )


def maintain(rt: Runtime) -> list[PartitionOutcome]:
    """Beat's run: the coming months' partitions always; archiving only when
    JOBWARDEN_HISTORY_RETENTION_DAYS is set (an operator opts in to moving history out)."""
    settings = rt.settings
    if settings.history_retention_days is None:
        with transaction(settings.database_url) as session:
            problems = history_store.ensure_partitions(session, utcnow(), lock_timeout=LOCK_TIMEOUT)
        for problem in problems:
            log.warning("history_partition_not_created", problem=problem)
        return []
    return archive(
        settings.database_url,
        rt.result_store,
        now=utcnow(),
        retention_days=settings.history_retention_days,
    )


@app.task(name="jobwarden.history", acks_late=True, reject_on_worker_lost=True)
def history() -> int:
    """Beat's entry (jobwarden-history): returns how many months were archived."""
    return sum(o.outcome == "archived" for o in maintain(current()))


def _still_there(run: _Run, done: ArchivedHistory) -> bool:
    """Whether a segment an earlier run wrote is still in the store, unaltered: rows leave
    the database only while their segment is readable (a missing one is written again)."""
    expected = StoredObject(location=done.location, sha256=done.sha256, size=done.size_bytes)
    problem = run.results.verify(expected)
    if problem is not None:
        log.warning("history_segment_rewritten", problem=problem)
    return problem is None


def first_live_seq(url: str, operation_id: uuid.UUID) -> int | None:
    """The first event of the operation still in operation_events; None when none is."""
    with transaction(url) as session:
        return history_store.first_live_seq(session, operation_id)


def archived_events(
    url: str, store_url: str, operation_id: uuid.UUID
) -> tuple[ArchivedHistory | None, list[StoredEvent], list[str]]:
    """(the archive row, the archived events the live table lacks, problems).

    Nothing archived (one primary-key read), or the live table still starting the
    chain: no events, no problems, and the result store is not opened. Otherwise the
    segment is read from the store ``store_url`` names (bounded by its recorded size),
    checked against its recorded size and sha256, and decoded; a missing, altered or
    unreadable segment (or a store that fails) is a problem naming its location, with
    no events.
    """
    with transaction(url) as session:
        done = history_store.archived(session, operation_id)
    first_live = first_live_seq(url, operation_id) if done is not None else None
    if done is None or first_live == 1:
        return done, [], []
    expected = StoredObject(location=done.location, sha256=done.sha256, size=done.size_bytes)
    try:
        results = ResultStore.from_url(store_url)
        data = b"".join(results.read(done.location, 0, done.size_bytes + 1))
    except ResultMissingError:
        return done, [], [f"archived history segment {mismatch(expected, size=None, sha256=None)}"]
    except JobwardenError as exc:
        return done, [], [f"archived history segment {done.location}: {exc}"]
    wrong = mismatch(expected, size=len(data), sha256=hashlib.sha256(data).hexdigest())
    if wrong is not None:
        return done, [], [f"archived history segment {wrong}"]
    try:
        events = decode_segment(str(operation_id), data)
    except SegmentError as exc:
        return done, [], [f"archived history segment {done.location}: {exc}"]
    return done, [e for e in events if first_live is None or e.seq < first_live], []


def partition_listing(url: str) -> list[tuple[str, str, int, str]]:
    """(partition, range, rows, state) for every partition, then every dropped month."""
    with transaction(url) as session:
        live = history_store.partitions(session)
        counts = history_store.archived_counts(session)
    lines: list[tuple[str, str, int, str]] = []
    for p in live:
        if p.low is None or p.high is None:
            span = "default"
            state = "holds rows of months that had no partition" if p.rows else "empty"
        else:
            span = f"{p.low.astimezone(UTC):%Y-%m-%d} .. {p.high.astimezone(UTC):%Y-%m-%d}"
            archived = counts.pop(p.name, 0)
            state = f"attached, {archived} histories archived" if archived else "attached"
        lines.append((p.name, span, p.rows, state))
    for name, n in sorted(counts.items()):
        lines.append((name, "", 0, f"dropped, {n} histories in the result store"))
    return lines
