"""Archived history: an operation's events as a JSON Lines segment, and which months of
history may leave the database.

Pure. ``operation_events`` is partitioned by the month its operation was created in
(migration 0023), so an operation's whole history lives in one partition. A partition
may be archived (each operation's history written to the result store as a segment)
and then dropped whole once its month is older than the retention and every operation
in it ended before the cutoff; ``archive_refusal`` says why not, naming an operation.

A segment holds one event per line, every field the hash covers verbatim (as the store
reads it back), so ``verification.verify_chain`` proves it against the operations row's
head exactly as it proves live rows. ``decode_segment`` never trusts what it reads: a
line it cannot read is a ``SegmentError`` naming the line.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from jobwarden.models.history.chain import (
    EVENT_FIELDS,
    ChainedEvent,
    EventDraft,
    EventKind,
    StoredEvent,
)
from jobwarden.models.states import TERMINAL, OperationState

PARTITION_PREFIX: Final = "operation_events_"
DEFAULT_PARTITION: Final = "operation_events_default"
# Partitions made ahead of need (this month and the next two): a write is never routed
# to the DEFAULT partition while the maintenance step runs at least monthly.
MONTHS_AHEAD: Final = 2
_LINE_KEYS: Final = frozenset({"operation_id", "seq", "prev_hash", "hash", "row_digest", "fields"})


class SegmentError(ValueError):
    """A segment that is not what ``encode_segment`` writes; says which line and why."""


def month_start(at: datetime) -> datetime:
    """The first instant (UTC) of the month holding ``at``: its partition's lower bound."""
    utc = at.astimezone(UTC)
    return datetime(utc.year, utc.month, 1, tzinfo=UTC)


def next_month(start: datetime) -> datetime:
    return datetime(start.year + start.month // 12, start.month % 12 + 1, 1, tzinfo=UTC)


def partition_name(at: datetime) -> str:
    """``operation_events_YYYYMM`` for the month (UTC) holding ``at``."""
    start = month_start(at)
    return f"{PARTITION_PREFIX}{start.year:04d}{start.month:02d}"


def months_ahead(now: datetime) -> list[datetime]:
    """The months whose partitions should exist by now: this one and MONTHS_AHEAD more."""
    months = [month_start(now)]
    for _ in range(MONTHS_AHEAD):
        months.append(next_month(months[-1]))
    return months


@dataclass(frozen=True, slots=True, kw_only=True)
class Partition:
    name: str
    low: datetime | None  # None for the DEFAULT partition
    high: datetime | None
    rows: int


@dataclass(frozen=True, slots=True, kw_only=True)
class HeldOperation:
    """An operation whose history a partition holds, as its row says now."""

    operation_id: uuid.UUID
    state: str
    updated_at: datetime
    event_count: int
    last_event_hash: str


def due_for_archive(partition: Partition, cutoff: datetime) -> bool:
    """A month partition whose whole range lies before ``cutoff`` (never the DEFAULT one)."""
    return partition.high is not None and partition.high <= cutoff


def archive_refusal(partition: str, held: Iterable[HeldOperation], cutoff: datetime) -> str | None:
    """Why ``partition`` may not be archived yet (naming one operation), or None.

    Every operation in it must have ended (a terminal state) and been last written
    before ``cutoff``: a history that may still grow stays in the database.
    """
    for op in held:
        if OperationState(op.state) not in TERMINAL:
            return (
                f"partition {partition} holds operation {op.operation_id}, which has not "
                f"ended (state {op.state})"
            )
        if op.updated_at > cutoff:
            return (
                f"partition {partition} holds operation {op.operation_id}, last written "
                f"{op.updated_at.astimezone(UTC).isoformat()}, after the cutoff "
                f"{cutoff.astimezone(UTC).isoformat()}"
            )
    return None


def retention_cutoff(now: datetime, retention_days: float) -> datetime:
    return now - timedelta(days=retention_days)


def segment_key(partition: str, operation_id: uuid.UUID, event_count: int) -> str:
    """Where a segment goes in the result store; the count makes every object immutable
    (a history that grew after archiving is archived again under a new key)."""
    return f"history/{partition}/{operation_id}-{event_count}.jsonl"


def encode_segment(operation_id: str, events: Sequence[StoredEvent]) -> bytes:
    """One line per event, keys sorted: the same events always give the same bytes."""
    lines = [
        json.dumps(
            {
                "operation_id": operation_id,
                "seq": ev.seq,
                "prev_hash": ev.prev_hash,
                "hash": ev.hash,
                "row_digest": ev.row_digest,
                "fields": dict(ev.fields),
            },
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
            allow_nan=False,
        )
        for ev in events
    ]
    return "".join(line + "\n" for line in lines).encode()


def decode_segment(operation_id: str, data: bytes) -> list[StoredEvent]:
    """The events a segment holds, in its order; ``SegmentError`` naming the first bad line."""
    try:
        text = data.decode()
    except UnicodeDecodeError as exc:
        raise SegmentError(f"segment is not UTF-8 (byte {exc.start})") from None
    if text and not text.endswith("\n"):
        raise SegmentError("segment does not end with a newline: it was cut short")
    # Split on "\n" only: str.splitlines would also split inside strings on the other
    # line boundaries (U+2028, \x1c ...), which JSON leaves unescaped.
    lines = text.split("\n")[:-1] if text else []
    return [_event(operation_id, n, line) for n, line in enumerate(lines, 1)]


def _event(operation_id: str, number: int, line: str) -> StoredEvent:
    try:
        value: Any = json.loads(line)
    except ValueError as exc:
        raise SegmentError(f"segment line {number}: not JSON ({exc})") from None
    if not isinstance(value, dict) or set(value) != _LINE_KEYS:
        raise SegmentError(f"segment line {number}: not an event line")
    if value["operation_id"] != operation_id:
        raise SegmentError(
            f"segment line {number}: an event of {value['operation_id']}, not {operation_id}"
        )
    fields = value["fields"]
    texts = (value["prev_hash"], value["hash"])
    if (
        type(value["seq"]) is not int
        or not all(isinstance(t, str) for t in texts)
        or not (value["row_digest"] is None or isinstance(value["row_digest"], str))
        or not isinstance(fields, dict)
        or set(fields) != set(EVENT_FIELDS)
    ):
        raise SegmentError(f"segment line {number}: a field is missing or of the wrong type")
    return StoredEvent(
        seq=value["seq"],
        fields=fields,
        prev_hash=value["prev_hash"],
        hash=value["hash"],
        row_digest=value["row_digest"],
    )


def as_chained(operation_id: str, ev: StoredEvent) -> ChainedEvent | None:
    """An archived event as the story reads events; None for one whose kind is unknown
    (it can only have been altered before it was archived: verify names it)."""
    fields = ev.fields
    try:
        kind = EventKind(fields["kind"])
        at = datetime.fromisoformat(str(fields["at"]))
    except ValueError:
        return None
    draft = EventDraft(
        kind=kind,
        actor=str(fields["actor"]),
        at=at,
        from_state=fields["from_state"],
        to_state=fields["to_state"],
        cause=fields["cause"],
        delay_source=fields["delay_source"],
        http_status=fields["http_status"],
        provider_request_id=fields["provider_request_id"],
        excerpt=fields["excerpt"],
    )
    return ChainedEvent(
        operation_id=operation_id,
        seq=ev.seq,
        draft=draft,
        prev_hash=ev.prev_hash,
        hash=ev.hash,
        row_digest=ev.row_digest,
    )
