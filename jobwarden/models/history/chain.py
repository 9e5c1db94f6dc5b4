"""The per-operation event chain: the event kinds, drafting and hashing.

Pure. Each event's hash covers the previous hash and every recorded field in
canonical form (``hash_form``), so editing, deleting or reordering any event
breaks every later hash. The last event of every write also commits to a digest
of the operations row that write produced (``row_facts.row_digest``), so the
live row can be checked against its chain, and the ``result_collected`` event
records the sha256 of the stored result bytes. ``verification`` proves a chain.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Final

from jobwarden.models.history.hash_form import canonical, legacy_canonical, utc_iso

GENESIS_HASH = "0" * 64


class EventKind(StrEnum):
    intent_recorded = "intent_recorded"  # the operation row was committed
    approval_requested = "approval_requested"  # waits for a human approval
    approved = "approved"  # a human approved the fingerprint
    approval_recorded = "approval_recorded"  # one of two approvers approved; one more must
    # The create to send is not the one approved (its digest differs): nothing was sent.
    approval_stale = "approval_stale"
    create_sent = "create_sent"  # a create request is about to leave (counter committed)
    create_accepted = "create_accepted"  # the provider answered with a remote job
    create_replayed = "create_replayed"  # the provider replayed an earlier create for our token
    create_ambiguous = "create_ambiguous"  # the create outcome is unknown
    create_refused = "create_refused"  # refused for good (a 4xx); nothing was created
    create_rate_limited = "create_rate_limited"  # a 429: nothing created; same token, later
    reconcile_sent = "reconcile_sent"  # asking what became of the token
    reconciled = "reconciled"  # the provider told us what became of the token
    poll_sent = "poll_sent"  # a status request is about to leave (counter committed)
    observed = "observed"  # what a provider response said
    polled = "polled"  # a status request answered: what it said and the decision to wait
    decision = "decision"  # what we decided, with the source of the next delay
    cancel_requested = "cancel_requested"  # somebody asked us to cancel
    cancel_sent = "cancel_sent"  # the cancel request is about to leave
    cancel_confirmed = "cancel_confirmed"  # the provider reports the job cancelled
    cleanup_sent = "cleanup_sent"  # the one cleanup call is about to leave
    cleanup_check_sent = "cleanup_check_sent"  # a read of whether the resources are gone
    cleanup_confirmed = "cleanup_confirmed"  # the provider confirmed they are gone
    result_fetch_sent = "result_fetch_sent"  # the result download is about to leave
    result_collected = "result_collected"  # result stored and validated
    failed_items_collected = "failed_items_collected"  # the failed-items file, stored, counted
    result_page_collected = "result_page_collected"  # one page of a paged result, held
    result_rejected = "result_rejected"  # result unavailable or failed validation
    result_accepted = "result_accepted"  # a person accepted a result that failed validation
    result_integrity_failed = "result_integrity_failed"  # stored bytes no longer match the digest
    escalated = "escalated"  # automation stopped with a reason and options
    human_decision = "human_decision"  # a human picked an option
    resubmitted = "resubmitted"  # a person resubmitted it: a new operation replaces it
    webhook_received = "webhook_received"  # a verified webhook observation
    admitted = "admitted"  # a queued operation's concurrency key had room: it starts
    key_handed_over = "key_handed_over"  # an ended holder's concurrency key went to the next
    paused = "paused"  # a pause parked it: nothing is sent until the pause is resumed
    resumed = "resumed"  # its pause was resumed: the next request's time, spread by the rate
    follow_up_started = "follow_up_started"  # a follow-up operation of it was started


@dataclass(frozen=True, slots=True, kw_only=True)
class EventDraft:
    """An event before it is chained; the store assigns seq, prev_hash and hash."""

    kind: EventKind
    actor: str
    at: datetime
    from_state: str | None = None
    to_state: str | None = None
    cause: str | None = None
    delay_source: str | None = None
    http_status: int | None = None
    provider_request_id: str | None = None
    excerpt: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainedEvent:
    operation_id: str
    seq: int
    draft: EventDraft
    prev_hash: str
    hash: str
    # Set on the last event of a write: the digest of the operations row it produced.
    row_digest: str | None = None

    def stored(self) -> StoredEvent:
        return StoredEvent(
            seq=self.seq,
            fields=draft_fields(self.draft),
            prev_hash=self.prev_hash,
            hash=self.hash,
            row_digest=self.row_digest,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredEvent:
    """An event as read back: its hashed fields verbatim (a tampered kind need not be known)."""

    seq: int
    fields: Mapping[str, Any]
    prev_hash: str
    hash: str
    row_digest: str | None = None


# What an event's hash covers besides its operation, seq, prev_hash and row digest.
EVENT_FIELDS: Final = (
    "kind",
    "actor",
    "at",
    "from_state",
    "to_state",
    "cause",
    "delay_source",
    "http_status",
    "provider_request_id",
    "excerpt",
)


def recorded_fields(values: Mapping[str, Any]) -> dict[str, Any]:
    """The hashed fields of an event, from a draft or a stored row, as the hash reads them."""
    fields = {name: values[name] for name in EVENT_FIELDS}
    fields["at"] = utc_iso(fields["at"])
    return fields


def draft_fields(draft: EventDraft) -> dict[str, Any]:
    values = {name: getattr(draft, name) for name in EVENT_FIELDS}
    values["kind"] = draft.kind.value
    return recorded_fields(values)


def stored_hash(operation_id: str, ev: StoredEvent, *, legacy: bool = False) -> str:
    """The hash ``ev`` should carry; ``legacy`` reads it as hashed before numbers were tagged.

    Raises what ``canonical`` (or ``legacy_canonical``) raises for fields JSON cannot hold.
    """
    material = {
        "operation_id": operation_id,
        "seq": ev.seq,
        "prev_hash": ev.prev_hash,
        **ev.fields,
    }
    if ev.row_digest is not None:
        # Absent, not null, when there is none: events written before row digests hash as then.
        material["row_digest"] = ev.row_digest
    encoded = legacy_canonical(material) if legacy else canonical(material)
    return hashlib.sha256(encoded).hexdigest()


def event_hash(
    operation_id: str,
    seq: int,
    draft: EventDraft,
    prev_hash: str,
    row_digest: str | None = None,
) -> str:
    pending = StoredEvent(
        seq=seq, fields=draft_fields(draft), prev_hash=prev_hash, hash="", row_digest=row_digest
    )
    return stored_hash(operation_id, pending)


def chain(
    operation_id: str,
    drafts: Iterable[EventDraft],
    *,
    last_seq: int,
    last_hash: str,
    row_digest: str | None = None,
) -> list[ChainedEvent]:
    """Number and hash drafts after an operation's current chain head.

    ``row_digest`` (the digest of the row this write produces) goes to the last event.
    """
    pending = list(drafts)
    out: list[ChainedEvent] = []
    seq, prev = last_seq, last_hash
    for i, draft in enumerate(pending):
        seq += 1
        # Postgres keeps microseconds; truncating here keeps stored and hashed times equal.
        normalised = replace(draft, at=draft.at.astimezone(UTC))
        digest = row_digest if i == len(pending) - 1 else None
        ev_hash = event_hash(operation_id, seq, normalised, prev, digest)
        out.append(
            ChainedEvent(
                operation_id=operation_id,
                seq=seq,
                draft=normalised,
                prev_hash=prev,
                hash=ev_hash,
                row_digest=digest,
            )
        )
        prev = ev_hash
    return out
