"""The per-operation event chain: drafting, hashing and verification.

Each event's hash covers the previous hash and every recorded field in
RFC 8785 canonical form, so editing, deleting or reordering any event breaks
every later hash.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import rfc8785

GENESIS_HASH = "0" * 64


class EventKind(StrEnum):
    intent_recorded = "intent_recorded"  # the operation row was committed
    approval_requested = "approval_requested"  # waits for a human approval
    approved = "approved"  # a human approved the fingerprint
    create_sent = "create_sent"  # a create request is about to leave (counter committed)
    create_accepted = "create_accepted"  # the provider answered with a remote job
    create_replayed = "create_replayed"  # the provider replayed an earlier create for our token
    create_ambiguous = "create_ambiguous"  # the create outcome is unknown
    create_refused = "create_refused"  # the provider refused the create; nothing was created
    reconcile_sent = "reconcile_sent"  # asking what became of the token
    reconciled = "reconciled"  # the provider told us what became of the token
    poll_sent = "poll_sent"  # a status request is about to leave (counter committed)
    observed = "observed"  # what a provider response said
    decision = "decision"  # what we decided, with the source of the next delay
    cancel_requested = "cancel_requested"  # somebody asked us to cancel
    cancel_sent = "cancel_sent"  # the cancel request is about to leave
    cancel_confirmed = "cancel_confirmed"  # the provider reports the job cancelled
    result_fetch_sent = "result_fetch_sent"  # the result download is about to leave
    result_collected = "result_collected"  # result stored and validated
    result_rejected = "result_rejected"  # result unavailable or failed validation
    escalated = "escalated"  # automation stopped with a reason and options
    human_decision = "human_decision"  # a human picked an option
    webhook_received = "webhook_received"  # a verified webhook observation


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


def _utc_iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat(timespec="microseconds")


def event_hash(operation_id: str, seq: int, draft: EventDraft, prev_hash: str) -> str:
    material = {
        "operation_id": operation_id,
        "seq": seq,
        "prev_hash": prev_hash,
        "kind": draft.kind.value,
        "actor": draft.actor,
        "at": _utc_iso(draft.at),
        "from_state": draft.from_state,
        "to_state": draft.to_state,
        "cause": draft.cause,
        "delay_source": draft.delay_source,
        "http_status": draft.http_status,
        "provider_request_id": draft.provider_request_id,
        "excerpt": draft.excerpt,
    }
    encoded = rfc8785.dumps(material)  # type: ignore[arg-type]  # JSON values by construction
    return hashlib.sha256(encoded).hexdigest()


def chain(
    operation_id: str, drafts: Iterable[EventDraft], *, last_seq: int, last_hash: str
) -> list[ChainedEvent]:
    """Number and hash drafts after an operation's current chain head."""
    out: list[ChainedEvent] = []
    seq, prev = last_seq, last_hash
    for draft in drafts:
        seq += 1
        # Postgres keeps microseconds; truncating here keeps stored and hashed times equal.
        normalised = replace(draft, at=draft.at.astimezone(UTC))
        digest = event_hash(operation_id, seq, normalised, prev)
        out.append(
            ChainedEvent(
                operation_id=operation_id, seq=seq, draft=normalised, prev_hash=prev, hash=digest
            )
        )
        prev = digest
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainProblem:
    seq: int
    problem: str


def verify_chain(
    operation_id: str, events: Sequence[ChainedEvent], *, head_seq: int, head_hash: str
) -> list[ChainProblem]:
    """Recompute every hash; report gaps, edits and a head that does not match the row."""
    problems: list[ChainProblem] = []
    prev = GENESIS_HASH
    expected_seq = 1
    for ev in events:
        if ev.seq != expected_seq:
            problems.append(ChainProblem(seq=ev.seq, problem=f"expected seq {expected_seq}"))
        if ev.prev_hash != prev:
            problems.append(ChainProblem(seq=ev.seq, problem="prev_hash does not match"))
        if event_hash(operation_id, ev.seq, ev.draft, ev.prev_hash) != ev.hash:
            problems.append(ChainProblem(seq=ev.seq, problem="hash does not match contents"))
        prev = ev.hash
        expected_seq = ev.seq + 1
    if (events[-1].seq if events else 0) != head_seq or prev != head_hash:
        problems.append(
            ChainProblem(seq=head_seq, problem="chain head does not match the operation row")
        )
    return problems
